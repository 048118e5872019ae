"""Who is timed, and the proof that each computes its problem (problems.py, checks.py).

    name          kind  what
    int8nax-gemm      raw   int8nax.int8_matmul on the backend int8nax picks
    cider-raw     raw   cider's int8_matmul_int32 (Apple M5)
    cublaslt-int8 raw   cuBLASLt int8 GEMM called directly, with a workspace and its heuristic
                        (the real CUDA anchor; int8nax.bench.peers.cublaslt)
    torch-int8    raw   torch._int_mm: cuBLASLt without workspace, i.e. torch's path, an
                        Ampere kernel on the H200 (kept for history)
    int8nax-full      full  int8nax.w8a8_linear
    cider-full    full  cider's per-channel W8A8 linear (Apple M5)
    mlx-fp16      full  mx.matmul in float16 (what W8A8 must beat)
    mlx-q8        full  mx.quantized_matmul, 8-bit affine, group 64 (weight-only W8A16:
                        the baseline cider reports against)
    numpy-sgemm   full  numpy float32 matmul of the same shape (the CPU's BLAS: the yardstick
                        of the CPU backend and of machine-wide drift on a CPU box)
    mlx-floor     floor one MLX custom kernel (mx.fast.cuda_kernel / metal_kernel, the way int8nax's
                        kernels reach MLX) that copies a[0, 0] into a [1, 1] output: what any
                        call through MLX costs, whatever its kernel does (GPU backends only)

A contender prepared for a shape is a Prepared: data on the device and evaluated, checked
once before it is timed (`ready`). A contender that cannot run here raises Unavailable with
the reason; one whose output is wrong raises MismatchError.

CONTENDERS is the one list of contenders: the asv suite's classes (benchmarks/bench_gemm.py for
the raw ones, bench_linear.py for the full ones: benchmarks.common.contender_classes), `int8nax
compare` and the site's comparison page (int8nax.commands.site.comparison) all read it. Adding a
peer: its adapter (peers/), its prepare function here and one CONTENDERS entry, which names its
asv class and benchmarks (asv_class, stem) and how its problem is held (fmt, the roofline's bytes).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import zlib

import mlx.core as mx
import numpy as np

from .. import api, backends
from ..reference import to_numpy
from . import checks
from .peers import Unavailable
from .peers import cider as cider_peer
from .peers import torch_int
from .problems import CPU_SHAPES, Shape, linear_problem, raw_expected, raw_problem, w8a8_expected, w8a8_weights

__all__ = ["Unavailable", "Prepared", "Format", "Contender", "CONTENDERS", "SUITE", "get", "describe", "kernel_id"]


@dataclass(frozen=True)
class Prepared:
    """A contender ready to time.

    call(after)  enqueue one call whose input depends on `after` (the previous call's output,
                 or None) and return its output, lazily where the library is lazy
    sync(out)    block until `out` is computed
    check(out)   raise MismatchError unless `out` answers the problem
    lazy         whether call() only builds a graph (MLX) rather than computing
    detail       what exactly runs (backend, library version)
    kernel       for int8nax's own contenders, the backend's describe() of this shape: the
                 kernel and plan that run (e.g. "cuda tma-ws-cooperative 128x256 splits=1");
                 "" for peers, whose detail says what they run
    """

    call: Callable[[object], object]
    sync: Callable[[object], None]
    check: Callable[[object], None]
    detail: str
    lazy: bool = True
    kernel: str = ""

    def run(self):
        """One call, blocking: the output."""
        out = self.call(None)
        self.sync(out)
        return out

    def chain(self, calls: int):
        """`calls` dependent calls, one block at the end: the last output."""
        out = None
        for _ in range(calls):
            out = self.call(out)
        self.sync(out)
        return out

    def build(self, calls: int) -> list:
        """`calls` lazy calls on the prepared inputs, nothing evaluated: their (unevaluated)
        outputs. Independent calls, so that the figure is the call's own host cost: a chain
        would add the link's build (a compiled call of its own, several µs on the H200), and
        nothing runs anyway."""
        if not self.lazy:
            raise Unavailable("host build time applies only to lazy contenders (MLX ops on a GPU "
                              "backend); this one computes when called")
        return [self.call(None) for _ in range(calls)]


@dataclass(frozen=True)
class Format:
    """How a contender's problem is held: the arithmetic's number format (a key of a machine's
    ceilings, bench.machines), bytes per element of A [M, K], of B [N, K] (weights, including their
    scales) and of the output [M, N], and whether it computes on the host CPU."""

    arithmetic: str
    a: float
    b: float
    out: float
    on_host: bool = False
    b_per_row: float = 0.0  # bytes per weight row on top of b per element (W8A8's float32 scale)

    def bytes_moved(self, m: int, k: int, n: int) -> float:
        """A + B + output, each read or written once."""
        return self.a * m * k + self.b * n * k + self.b_per_row * n + self.out * m * n


@dataclass(frozen=True)
class Contender:
    name: str
    kind: str  # "raw" (int8 x int8 -> int32), "full" (float in, float out) or "floor" (no problem)
    summary: str
    _prepare: Callable[[Shape, "str | None"], Prepared]
    slow_on_cpu: str = ""
    """Why this contender measures only problems.CPU_SHAPES where MLX runs on the CPU ("" = all)."""
    asv_class: str = ""
    """Its class in the asv suite (a contender of SUITE); the class's name is part of every
    benchmark's name, so it never changes once published."""
    stem: str = ""
    """Its asv benchmarks: time_<stem>, time_<stem>_chain and track_<stem>_tops (published names:
    they never change)."""
    fmt: Format | None = None
    """How its problem is held (the site's roofline)."""
    m5_only: bool = False
    """Runs only on an Apple M5 (a Metal library): the site says so where no machine has reported it."""

    @property
    def peer(self) -> bool:
        """Someone else's implementation (or a baseline): the others are compared to it. int8nax's
        own contenders are the ones OPS maps to int8nax's functions."""
        return self.name not in OPS

    def prepare(self, m: int, k: int, n: int, backend: str | None = None) -> Prepared:
        """Data on the device and evaluated, nothing run yet; raises Unavailable.
        `backend` is the int8nax backend the int8nax contenders run on (default: int8nax's
        own choice); the peers ignore it."""
        return self._prepare((m, k, n), backend)

    def ready(self, m: int, k: int, n: int, backend: str | None = None) -> Prepared:
        """prepare(), then run once and check the output: a contender that passes is timed."""
        prepared = self.prepare(m, k, n, backend)
        prepared.check(prepared.run())
        return prepared


# --- MLX contenders ------------------------------------------------------------------------

def _evaluated(*arrays: mx.array) -> tuple[mx.array, ...]:
    mx.eval(*arrays)
    return arrays


@mx.compile
def _link(x: mx.array, prev: mx.array) -> mx.array:
    # compiled: the slice, multiply, cast and add fuse into one elementwise kernel (uncompiled
    # they are 3-4 graph nodes per call, which dominate a chain at small M on the H200)
    return x + (prev[:, :1] * 0).astype(x.dtype)


def _after(x: mx.array, prev) -> mx.array:
    """x, made from `prev` (the previous call's output) by one elementwise pass: the link of a
    dependent chain. The values are x's (it adds 0 times one column of prev), but the data
    edge forces the GPU to finish the previous call first. mx.depends would be free, but on
    MLX's CUDA backend it orders nothing on the device (two dependent 150 µs kernels finish in
    235 µs with it on the H200), so a chain built with it would flatter."""
    return x if prev is None else _link(x, prev)


def _mlx(op: Callable[[mx.array], mx.array], first: mx.array, check, detail: str, lazy: bool = True,
         kernel: str = "") -> Prepared:
    """A Prepared for an MLX op whose first input `first` carries the chain dependency.
    `lazy` is False for an op that computes when called (int8nax's CPU backend, in numpy)."""
    return Prepared(lambda prev: op(_after(first, prev)), mx.eval, check, detail, lazy, kernel)


def _int8nax_backend(backend: str | None) -> tuple[str, str]:
    """(backend name, detail) of the backend the int8nax contenders run on."""
    try:
        name, why = backends.choose(backend)
    except (RuntimeError, ValueError) as exc:
        raise Unavailable(str(exc)) from None
    return name, f"int8nax backend {name} ({why})"


OPS = {"int8nax-gemm": "int8_matmul", "int8nax-full": "w8a8_linear"}
"""The int8nax operation each of int8nax's contenders calls (the op of Backend.describe)."""


def describe(name: str, shape: Shape, backend: str | None = None) -> str:
    """What int8nax's contender `name` runs at `shape` on `backend` (default: int8nax's own
    choice), in the backend's words (Backend.describe): e.g. "cpu onnxruntime MatMulInteger".
    int8nax-full's problem is float16 x without a bias (problems.linear_problem). Raises
    Unavailable when that backend cannot run here, ValueError for a peer's name."""
    if name not in OPS:
        raise ValueError(f"describe: {name!r} is not one of int8nax's contenders ({', '.join(OPS)})")
    chosen, _ = _int8nax_backend(backend)
    m, k, n = shape
    return backends.get(chosen).describe(OPS[name], m, n, k, bias=False, dtype=mx.float16)


def hopper_description(name: str, shape: Shape) -> str:
    """What int8nax's contender `name` runs at `shape` on a Hopper GPU of cuda_choice.DEFAULT_SMS SMs
    (the H100 SXM and the H200 both have 132), as that GPU's record says it (describe there),
    computed here without one: how a site on any machine puts a GPU record's kernel ids into words."""
    if name not in OPS:
        raise ValueError(f"hopper_description: {name!r} is not one of int8nax's contenders ({', '.join(OPS)})")
    from ..backends.cuda import choice as cuda_choice

    m, k, n = shape
    return backends.get("cuda").describe(OPS[name], m, n, k, bias=False, dtype=mx.float16, sms=cuda_choice.DEFAULT_SMS)


def kernel_id(description: str) -> int:
    """A number that stands for a kernel description in the asv record (benchmarks/bench_kernel.py),
    where results must be numbers: CRC-32 of its UTF-8 bytes, the same in every process and on every
    machine. Equal descriptions give equal ids; a change of id between two commits is a change of
    kernel (two different descriptions share an id with probability 2**-32)."""
    return zlib.crc32(description.encode("utf-8"))


def _nax_gemm(shape: Shape, backend: str | None) -> Prepared:
    name, detail = _int8nax_backend(backend)
    ran = describe("int8nax-gemm", shape, backend)
    a, b = _evaluated(*(mx.array(v) for v in raw_problem(*shape)))
    return _mlx(lambda a_: api.int8_matmul(a_, b, backend=backend), a,
                lambda out: checks.check_exact("int8nax-gemm", shape, out, raw_expected(*shape)),
                f"{ran}; {detail}", lazy=name != "cpu", kernel=ran)


def _nax_full(shape: Shape, backend: str | None) -> Prepared:
    name, detail = _int8nax_backend(backend)
    ran = describe("int8nax-full", shape, backend)
    x, = _evaluated(mx.array(linear_problem(*shape)[0]))
    w, s_w = _evaluated(*(mx.array(v) for v in w8a8_weights(*shape)))
    return _mlx(lambda x_: api.w8a8_linear(x_, w, s_w, backend=backend), x,
                lambda out: checks.check_ulp("int8nax-full", shape, out, w8a8_expected(*shape)),
                f"{ran}; {detail}", lazy=name != "cpu", kernel=ran)


def _cider_raw(shape: Shape, backend: str | None = None) -> Prepared:
    cider = cider_peer.load()
    a_np, b_np = raw_problem(*shape)
    a, = _evaluated(mx.array(a_np))
    b = cider.matmul_weights(b_np)
    return _mlx(lambda a_: cider.int8_matmul(a_, b), a,
                lambda out: checks.check_exact("cider-raw", shape, out, raw_expected(*shape)), cider.describe())


def _cider_full(shape: Shape, backend: str | None = None) -> Prepared:
    cider = cider_peer.load()
    x, = _evaluated(mx.array(linear_problem(*shape)[0]))
    w_np, s_np = w8a8_weights(*shape)
    w = cider.linear_weights(w_np)
    s_w, = _evaluated(mx.array(s_np))
    return _mlx(lambda x_: cider.linear(x_, w, s_w), x,
                lambda out: checks.check_ulp("cider-full", shape, out, w8a8_expected(*shape)), cider.describe())


def _mlx_fp16(shape: Shape, backend: str | None = None) -> Prepared:
    x_np, w_np = linear_problem(*shape)
    w16_np = w_np.astype(np.float16)
    x, w16 = _evaluated(mx.array(x_np), mx.array(w16_np))
    w_t = w16.T  # a transposed view: MLX's GEMMs take it without a copy
    return _mlx(lambda x_: mx.matmul(x_, w_t), x,
                lambda out: checks.check_float_baseline("mlx-fp16", shape, out, x_np, w16_np),
                f"mx.matmul float16 on {mx.default_device()}")


Q8 = {"group_size": 64, "bits": 8}
"""MLX's weight-only 8-bit format as cider's README benchmarks it (affine, group 64)."""


def _mlx_q8(shape: Shape, backend: str | None = None) -> Prepared:
    _, k, _ = shape
    if k % Q8["group_size"]:
        raise Unavailable(f"mx.quantized_matmul with group size {Q8['group_size']} needs K to be a "
                          f"multiple of {Q8['group_size']}, got K = {k}")
    x_np, w_np = linear_problem(*shape)
    x, w16 = _evaluated(mx.array(x_np), mx.array(w_np.astype(np.float16)))
    wq, scales, biases = _evaluated(*mx.quantize(w16, **Q8))
    # The weights as the baseline holds them: the dequantized codes, exactly.
    w_held = to_numpy(mx.dequantize(wq, scales, biases, **Q8), np.float64)
    return _mlx(lambda x_: mx.quantized_matmul(x_, wq, scales, biases, transpose=True, **Q8), x,
                lambda out: checks.check_float_baseline("mlx-q8", shape, out, x_np, w_held),
                f"mx.quantized_matmul 8-bit affine group 64 on {mx.default_device()}")


_FLOOR_SOURCE = {
    "cuda": "if (threadIdx.x == 0 && blockIdx.x == 0) { out[0] = static_cast<int32_t>(a[0]); }",
    "metal": "if (thread_position_in_grid.x == 0) { out[0] = static_cast<int>(a[0]); }",
}


@lru_cache(maxsize=None)
def _floor_kernel(api_name: str):
    make = mx.fast.cuda_kernel if api_name == "cuda" else mx.fast.metal_kernel
    return make(name="int8nax_mlx_floor", input_names=["a"], output_names=["out"], source=_FLOOR_SOURCE[api_name])


def _mlx_floor(shape: Shape, backend: str | None = None) -> Prepared:
    if getattr(mx, "cuda", None) is not None and mx.cuda.is_available():
        api_name = "cuda"
    elif mx.metal.is_available():
        api_name = "metal"
    else:
        raise Unavailable("the MLX floor is one GPU custom kernel (mx.fast.cuda_kernel or metal_kernel); "
                          "MLX has no GPU here")
    a_np = raw_problem(*shape)[0]
    a, = _evaluated(mx.array(a_np))
    kernel = _floor_kernel(api_name)

    def op(a_):
        return kernel(inputs=[a_], output_shapes=[(1, 1)], output_dtypes=[mx.int32], grid=(32, 1, 1),
                      threadgroup=(32, 1, 1))[0]

    def check(out):
        got = int(np.array(out).reshape(-1)[0])
        if got != int(a_np[0, 0]):
            raise checks.MismatchError(f"mlx-floor at (M, K, N) = {shape}: wrote {got}, not a[0, 0] = {int(a_np[0, 0])}")

    return _mlx(op, a, check, f"one mx.fast.{api_name}_kernel call writing one int32 on {mx.default_device()}")


# --- contenders outside MLX ------------------------------------------------------------------

# The torch contenders need no link: kernels on one CUDA stream run one after the other, so
# their chain is already dependent in execution (and it spares them the link's pass, which
# favours the peer, never int8nax).

def _torch_int8(shape: Shape, backend: str | None = None) -> Prepared:
    call, sync, detail = torch_int.prepare_int_mm(*raw_problem(*shape))
    return Prepared(lambda prev: call(), lambda out: sync(),
                    lambda out: checks.check_exact("torch-int8", shape, out, raw_expected(*shape)),
                    detail, lazy=False)


def _cublaslt_int8(shape: Shape, backend: str | None = None) -> Prepared:
    try:
        from .peers import cublaslt
    except ImportError as exc:  # the module arrives with the CUDA work; absent means unavailable
        raise Unavailable(f"the cuBLASLt adapter cannot be imported: {exc}") from None
    gemm = cublaslt.prepare(*raw_problem(*shape))
    return Prepared(lambda prev: gemm.call(), lambda out: gemm.sync(),
                    lambda out: checks.check_exact("cublaslt-int8", shape, out, raw_expected(*shape)),
                    gemm.describe(), lazy=False)


def _numpy_sgemm(shape: Shape, backend: str | None = None) -> Prepared:
    x_np, w_np = linear_problem(*shape)
    x32 = x_np.astype(np.float32)
    w_t = np.ascontiguousarray(w_np).T  # [K, N] view of row-major [N, K]: BLAS's "TN" call
    try:
        from threadpoolctl import threadpool_info

        blas = ", ".join(f"{i.get('internal_api')} {i.get('version')} ({i.get('architecture')}, "
                         f"{i.get('num_threads')} threads)" for i in threadpool_info() if i.get("user_api") == "blas")
    except ImportError:
        blas = "BLAS unknown (threadpoolctl not installed)"
    return Prepared(lambda prev: np.matmul(x32, w_t), lambda out: None,
                    lambda out: checks.check_float_baseline("numpy-sgemm", shape, out, x32, w_np),
                    f"numpy {np.__version__} float32 matmul: {blas}", lazy=False)


_MLX_CPU_SLOW = ("MLX's {} on the CPU runs at ~{} GFLOP/s on 2 cores: where MLX runs on the CPU "
                 "it measures only the small shapes")

_RAW = Format("int8", a=1, b=1, out=4)
_W8A8 = Format("int8", a=2, b=1, out=2, b_per_row=4)  # float16 x in, int8 codes + float32 scale per row

CONTENDERS: dict[str, Contender] = {c.name: c for c in (
    Contender("int8nax-gemm", "raw", "int8nax.int8_matmul: int8 x int8 -> exact int32", _nax_gemm,
              asv_class="Int8naxGemm", stem="int8nax_gemm", fmt=_RAW),
    Contender("cider-raw", "raw", "cider int8_matmul_int32 (Apple M5)", _cider_raw,
              asv_class="CiderRaw", stem="cider_raw", fmt=_RAW, m5_only=True),
    Contender("cublaslt-int8", "raw", "cuBLASLt int8 GEMM with workspace and heuristic (CUDA)", _cublaslt_int8,
              asv_class="CublasLtInt8", stem="cublaslt_int8", fmt=_RAW),
    Contender("torch-int8", "raw", "torch._int_mm, torch's cuBLASLt path without workspace (CUDA)", _torch_int8,
              asv_class="TorchInt8", stem="torch_int8", fmt=_RAW),
    Contender("int8nax-full", "full", "int8nax.w8a8_linear: per-token quantization + int8 GEMM + dequant", _nax_full,
              asv_class="Int8naxFull", stem="int8nax_full", fmt=_W8A8),
    Contender("cider-full", "full", "cider per-channel W8A8 linear (Apple M5)", _cider_full,
              asv_class="CiderFull", stem="cider_full", fmt=_W8A8, m5_only=True),
    Contender("mlx-fp16", "full", "mx.matmul float16 (dense baseline)", _mlx_fp16,
              _MLX_CPU_SLOW.format("float matmul", "4.5"),
              asv_class="MlxFp16", stem="mlx_fp16_matmul", fmt=Format("fp16", a=2, b=2, out=2)),
    # 8-bit codes plus a float16 scale and bias per group of 64 weights
    Contender("mlx-q8", "full", "mx.quantized_matmul 8-bit weight-only, group 64 (W8A16 baseline)", _mlx_q8,
              _MLX_CPU_SLOW.format("quantized_matmul", "0.05"),
              asv_class="MlxQ8", stem="mlx_q8_matmul", fmt=Format("fp16", a=2, b=1 + 4 / 64, out=2)),
    Contender("numpy-sgemm", "full", "numpy float32 matmul of the same shape (CPU BLAS yardstick)", _numpy_sgemm,
              asv_class="NumpySgemm", stem="numpy_sgemm", fmt=Format("fp32", a=4, b=4, out=4, on_host=True)),
    Contender("mlx-floor", "floor", "one trivial MLX custom kernel: MLX's own cost per call (GPU)", _mlx_floor),
)}
"""Every contender; the site's comparison page shows the suite's in this order."""


SUITE = tuple(name for name, c in CONTENDERS.items() if c.kind != "floor")
"""The contenders the asv suite times (benchmarks/): every one but the floor, which computes no
problem and so has no throughput to track; `int8nax compare` measures it next to the others."""


def skip_reason(name: str, shape: Shape) -> str | None:
    """Why contender `name` does not measure `shape` here (the reason alone: each caller names the
    shape as it shows it), or None when it does."""
    slow = CONTENDERS[name].slow_on_cpu
    if slow and shape not in CPU_SHAPES and mx.default_device() != mx.gpu:
        return slow
    return None


def get(name: str) -> Contender:
    try:
        return CONTENDERS[name]
    except KeyError:
        raise ValueError(f"unknown contender {name!r}; expected one of {', '.join(CONTENDERS)}") from None
