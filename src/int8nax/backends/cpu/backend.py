"""CPU backend: exact int8 GEMM on the CPU's int8 units where a check proves it exact,
float32 BLAS everywhere else.

The product runs on one of the GEMM engines of cpu_engines, chosen once per process:
onnxruntime's MatMulInteger (VNNI/AMX on x86-64, dot-product instructions on arm64) when
it is installed (the `cpu` extra) and passes cpu_check's exactness check here, else numpy
float32 BLAS on K blocks (exact by construction). int8nax.info() says which runs and why.

Environment (read once, at the first use of the CPU backend):
- INT8NAX_CPU_GEMM=auto|onnx|numpy: the engine (auto: onnx when it can run, else numpy);
  a named engine that cannot run makes the CPU backend unavailable, with the reason.
- INT8NAX_CPU_THREADS=N: threads of the onnx engine's products and of W8A8's
  quantization passes (default: one per core).
- INT8NAX_CPU_PREPARE=0: prepare no weights (read at every w8a8_linear call).

W8A8 quantizes with cpu_quant (bit-identical to int8nax.quant, fewer passes) and
dequantizes in float32 where that stays within 1 ulp, in float64 otherwise. Weights of
w8a8_linear are prepared once per engine and weight array (see PreparedWeights);
int8_matmul prepares nothing and keeps no state.

State, bounded: one prepared weight per live weight array (an entry goes with its array), the
engine choice and check results (one per engine), one worker pool for the quantization passes
(as many threads as INT8NAX_CPU_THREADS or the cores); nothing is kept per shape.
"""

from __future__ import annotations

import os
import threading
import weakref

import mlx.core as mx
import numpy as np

from . import engines as cpu_engines, graph as cpu_graph, quant as cpu_quant
from ..base import Backend, Probe, refused_by_trace

ENGINE_WORDS = {"onnx": "onnxruntime MatMulInteger", "numpy": f"numpy float32 BLAS, K blocks of {cpu_engines.K_BLOCK}"}
"""How describe() names each engine of cpu_engines in the benchmark record."""

PREPARE_ENV_VAR = "INT8NAX_CPU_PREPARE"
"""Set to 0 to prepare no weights: every w8a8_linear call then runs the stateless product."""


def _int8_numpy(arr: mx.array) -> np.ndarray:
    """Zero-copy numpy view of an int8 MLX CPU array (any strides)."""
    return np.asarray(arr)


def _int32_mx(c: np.ndarray) -> mx.array:
    """mx.array of an int32 result; a transposed view stays a (free) MLX transpose."""
    if not c.flags.c_contiguous and c.T.flags.c_contiguous:
        return mx.array(c.T).T
    return mx.array(c)


def _prepares(engine) -> bool:
    """Whether w8a8_linear prepares the weights it sees again (the engine can, and
    INT8NAX_CPU_PREPARE is not 0)."""
    return engine.prepares and os.environ.get(PREPARE_ENV_VAR, "1") != "0"


def serving_engine():
    """The GEMM engine serving this process; RuntimeError with the reason if none can."""
    selection = cpu_engines.select()
    if selection.engine is None:
        raise RuntimeError(f"cpu backend: {selection.reason}")
    return selection.engine


def gemm_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact a @ b.T, int32 [M, N], for int8 numpy a [M, K], b [N, K] (any strides), through
    the engine serving this process; the result may be a transposed view.

    The stateless product of the backend (int8_matmul) goes through this module-level name,
    which tests/test_asv.py rebinds to plant a slowdown.
    """
    return serving_engine().matmul(a, b)


class PreparedWeights:
    """Weights prepared for an engine, keyed by the identity of their mx.array.

    A weight is prepared at its second use as the same mx.array object (the first runs the
    stateless product), so that arrays made afresh for every call cost nothing. An entry lives as long as its mx.array (a weak reference removes it when the array is
    freed) and holds no reference to the array or its memory. MLX arrays are values:
    model.update / load_weights / quantize_linears put new arrays in place, which are
    prepared anew. An array changed in place with item assignment (w[i] = v) keeps its
    identity, so after that call forget(w) (or clear()) before its next use.

    Cost per weight [N, K] with the onnx engine: one transpose of N*K bytes and an
    onnxruntime session holding the packed weight, ~0.1 s and ~2x the weight's bytes for
    4096 x 4096, and the session's own intra-op thread pool (cores - 1 threads, idle between
    calls; onnxruntime's process-wide pool would impose itself on every other onnxruntime
    user of the process). The numpy engine prepares nothing.
    """

    def __init__(self):
        self._entries: dict[tuple[str, int], tuple[weakref.ref, object]] = {}
        # Re-entrant: dropping an entry can free an array whose weak-reference callback
        # (drop, below) takes the lock again in the same thread.
        self._lock = threading.RLock()

    def get(self, engine, w: mx.array):
        """The prepared weight, or None the first time this array is seen (the caller then
        runs the stateless product): an array passed once, such as the fresh mx.array the API
        makes of a numpy weight on every call, is never prepared."""
        key = (engine.name, id(w))
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and entry[0]() is w:
            if entry[1] is not None:
                return entry[1]
            prepared = engine.prepare(_int8_numpy(w))
        else:
            prepared = None

        def drop(_ref, key=key, entries=self._entries, lock=self._lock):
            with lock:
                current = entries.get(key)
                if current is not None and current[0] is _ref:
                    del entries[key]

        with self._lock:
            self._entries[key] = (weakref.ref(w, drop), prepared)
        return prepared

    def prepared_count(self) -> int:
        """How many weights are held prepared (not counting those seen once)."""
        with self._lock:
            return sum(1 for _, p in self._entries.values() if p is not None)

    def forget(self, w: mx.array) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[1] == id(w)]:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()



PREPARED = PreparedWeights()


def forget_prepared(w: mx.array | None = None) -> None:
    """Drop the prepared copy of weight w (all of them when w is None)."""
    if w is None:
        PREPARED.clear()
    else:
        PREPARED.forget(w)


def _outside_or_in_graph(outside, in_graph):
    """outside() (numpy and the engine, on evaluated inputs); where MLX refuses to evaluate the
    inputs because mx.compile or mx.vmap traces them, in_graph() (cpu_graph: the same numerics
    as MLX operations, which the trace records)."""
    try:
        return outside()
    except ValueError as exc:
        if not refused_by_trace(exc):
            raise
    return in_graph()


class CPUBackend(Backend):
    name = "cpu"
    weights_by_identity = True

    def probe(self) -> Probe:
        try:
            selection = cpu_engines.select()
        except ValueError as exc:  # a bad INT8NAX_CPU_GEMM: said here, raised on use
            return Probe(False, str(exc))
        return Probe(selection.engine is not None, selection.reason)

    def int8_matmul(self, a: mx.array, b: mx.array) -> mx.array:
        return _outside_or_in_graph(lambda: _int32_mx(gemm_exact(_int8_numpy(a), _int8_numpy(b))),
                                    lambda: cpu_graph.gemm_int32(a, b))

    def quantize_activations(self, x: mx.array) -> tuple[mx.array, mx.array]:
        def outside():
            q, scale = cpu_quant.quantize_rows(cpu_quant.to_float32(x, serving_engine().float32))
            return mx.array(q), mx.array(scale)

        return _outside_or_in_graph(outside, lambda: cpu_graph.quantize_rows(x))

    def describe(self, op: str, m: int, n: int, k: int, *, bias: bool = False, dtype=None) -> str:
        """Which engine serves the product, e.g. "cpu onnxruntime MatMulInteger" or "cpu numpy
        float32 BLAS, K blocks of 1024"; for W8A8, whether a weight used again runs prepared.
        The shape does not change the engine. "cpu unavailable: ..." when no engine can serve."""
        selection = cpu_engines.select()
        engine = selection.engine
        if engine is None:
            return f"cpu unavailable: {selection.reason}"
        text = f"cpu {ENGINE_WORDS.get(engine.name, engine.name)}"
        if op == "w8a8_linear" and _prepares(engine):
            text += ", weights prepared from their second use"
        return text

    def w8a8_linear(self, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        return _outside_or_in_graph(lambda: self._w8a8_outside(x, w, scale_w, bias),
                                    lambda: cpu_graph.w8a8_linear(x, w, scale_w, bias))

    def _w8a8_outside(self, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        engine = serving_engine()
        threads = getattr(engine, "threads", 0) or os.cpu_count() or 1
        # A float16/bfloat16 x is widened into a new array, which quantization may reuse.
        q, scale_x = cpu_quant.quantize_rows(cpu_quant.to_float32(x, engine.float32),
                                             overwrite=x.dtype != mx.float32, threads=threads)
        prepared = None
        if _prepares(engine):
            prepared = PREPARED.get(engine, w)
        if prepared is None:
            acc = gemm_exact(q, _int8_numpy(w))
        else:
            acc = engine.matmul_prepared(q, prepared)
        bias_np = None if bias is None else cpu_quant.to_float32(bias)
        return cpu_quant.dequantize(acc, scale_x, np.asarray(scale_w), bias_np, x.dtype, engine.float16, threads)


BACKEND = CPUBackend()
