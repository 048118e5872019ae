"""The one small interface every backend implements.

The public API (int8nax.api) validates arguments, handles empty problems and
reshapes; a backend receives only well-formed, non-empty 2-D mx.arrays:

    a  int8 [M, K], b int8 [N, K]                      (K <= 131071)
    x  float16 | bfloat16 | float32 [M, K]
    w  int8 [N, K], scale_w float32 [N], bias None or float [N]
    gate_up  float16 | bfloat16 | float32 [M, 2K] (gate = columns [0, K), up = [K, 2K))
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..per_thread import compile_per_thread


def _swiglu(gate: mx.array, up: mx.array) -> mx.array:
    return nn.silu(gate) * up


swiglu = compile_per_thread(_swiglu, shapeless=True)
"""h = silu(gate) * up in the inputs' dtype, the graph of mlx-lm's `swiglu` (mx.compile(shapeless=True)
of nn.silu(gate) * up): MLX fuses it into one kernel whose every intermediate (sigmoid, the two
products) is rounded to that dtype, so this h has the bits of the one an mlx-lm MLP computes."""


def swiglu_of(gate_up: mx.array) -> mx.array:
    """swiglu of gate_up [..., 2K]'s halves (gate: columns [0, K), up: [K, 2K)), [..., K]."""
    k = gate_up.shape[-1] // 2
    return swiglu(gate_up[..., :k], gate_up[..., k:])


TRACE_REFUSAL = "function transformations like compile or vmap"
"""Part of the ValueError MLX (0.32) raises when something evaluates an array while mx.compile or
mx.vmap traces it: what a backend that computes outside the graph (numpy) meets there."""


def refused_by_trace(exc: BaseException) -> bool:
    """Whether `exc` is MLX's refusal to evaluate inside mx.compile / mx.vmap (TRACE_REFUSAL)."""
    return isinstance(exc, ValueError) and TRACE_REFUSAL in str(exc)


@dataclass(frozen=True)
class Probe:
    """Whether a backend can run here, and why (or why not), in words for int8nax.info()."""

    available: bool
    reason: str


class Backend:
    """Base class of the CPU, CUDA and Metal backends."""

    name: str = ""
    weights_by_identity: bool = False
    """Whether the backend keeps per-weight state keyed by the weight array object (the CPU
    backend's prepared weights): int8nax.api then hands it the caller's own weight arrays."""

    def probe(self) -> Probe:
        raise NotImplementedError

    def int8_matmul(self, a: mx.array, b: mx.array) -> mx.array:
        """Exact int8 x int8 -> int32 [M, N] = a @ b.T."""
        raise NotImplementedError

    def quantize_activations(self, x: mx.array) -> tuple[mx.array, mx.array]:
        """Per-token quantization (int8nax.quant): (int8 [M, K], float32 [M])."""
        raise NotImplementedError

    def w8a8_linear(self, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        """dequant(quant(x) @ w.T) (+ bias) in x's dtype, [M, N]."""
        raise NotImplementedError

    def w8a8_linear_marked(self, x: mx.array, w: mx.array, scale_w: mx.array, bias):
        """For int8nax.nn's layers, x [..., K] with any leading dims: (y [..., N], maybe_traced),
        where the backend builds the call in one compiled step that also tells whether a
        transformation may trace it: maybe_traced is True where the step's Python body ran
        (BodyRan), which MLX does at the first call of a signature and for tracer inputs only.
        None where the backend has no such step (the default): the API then asks itself
        (int8nax.api.tracing._may_skip_custom, a compiled marker: ~1 µs more)."""
        return None

    w8a8_linear_graph = None
    """For int8nax.nn's layers, None (the default: a backend that computes during the call), or a
    backend's method (x, w, scale_w, bias) -> y [..., N] of x [..., K] with any leading dims as a
    lazy graph built directly on x (the graph w8a8_linear_marked's step compiles), for a tape to
    record and replay (int8nax.backends.tape), or None where it cannot give one for this call
    yet. The graph may depend on nothing but the shapes and dtypes of the arrays, this backend's
    settings (whose change calls tape.invalidate()) and MLX's default stream."""

    w8a8_mlp_marked = None
    """For int8nax.nn's SwiGLU MLPs, None (the default: the MLP takes its own call), or a backend's
    method taking a whole MLP in one step, (x, w_gate_up, scale_gate_up, bias_gate_up, w_down,
    scale_down, bias_down) -> (y, maybe_traced), or None where it cannot (then the own call):
    x [..., K], w_gate_up int8 [2H, K] (gate's rows, then up's), w_down int8 [N, H], their float32
    scales and biases (None or float), y [..., N] with the bits of the MLP's own three steps:
    g_u = w8a8_linear(x, w_gate_up, ...), h = swiglu(g_u[..., :H], g_u[..., H:]) in x's dtype,
    y = w8a8_linear(h, w_down, ...); maybe_traced as in w8a8_linear_marked. One step instead of
    three is host work saved at every decode step: one compiled replay for the MLP's launches and
    the SwiGLU between them, where the own call builds two replays, a split and the SwiGLU."""

    def swiglu_one_step(self) -> bool:
        """Whether swiglu_w8a8_linear is one kernel for h and its quantization here; where it is
        not, int8nax.nn's SwiGLU MLPs keep the model's own call (no gain, more host work)."""
        return False

    def swiglu_one_step_at(self, rows: int) -> bool:
        """swiglu_one_step for a gate_up of `rows` rows: where it is False, a SwiGLU MLP's call on
        that many tokens keeps the model's own call (and its tape). Here: swiglu_one_step()."""
        return self.swiglu_one_step()

    def swiglu_w8a8_linear(self, gate_up: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        """w8a8_linear(swiglu(gate, up), w, scale_w, bias) in gate_up's dtype, [M, N]: the two steps;
        a backend with one kernel for h's quantization overrides this with the same bits."""
        return self.w8a8_linear(swiglu_of(gate_up), w, scale_w, bias)

    def warm_up(self, layers, max_rows: int, dtype, *, jobs: int | None = None, progress=None) -> int:
        """Make ready every kernel the calls `layers` ((op, n, k, bias dtype or None): op
        "w8a8_linear", "swiglu_w8a8_linear" (k: the width of h) or "int8_matmul" on a weight
        [n, k]) launch for x of 1 .. max_rows rows in `dtype`, so that no kernel is compiled
        inside a later call; jobs: compiles at once; progress(done, total). Returns how many
        kernels this built. Here: nothing to build (the CPU backend compiles no kernel)."""
        return 0

    def describe(self, op: str, m: int, n: int, k: int, *, bias: bool = False, dtype=None) -> str:
        """What one call runs, in words recorded with each benchmark result.

        op is "int8_matmul" or "w8a8_linear"; (m, n, k) the problem; bias and dtype (the output
        dtype) matter to W8A8 only. The answer names the backend, the kernel variant and its plan,
        e.g. "cuda tma-ws-cooperative 128x256 splits=1" or "cpu onnxruntime", so a change of
        kernel between two commits shows in the record. It must not launch anything.
        """
        return self.name


def under_each_transformation(test):
    """[test(x) for x a tracer of mx.grad, mx.vjp, mx.jvp, mx.vmap and mx.compile in turn] (x float32
    [2], each transformation's own), or None where one raised: the tracer checks' self-test
    (int8nax.api.tracing, int8nax.backends.tape)."""
    seen = []

    def f(x):
        seen.append(test(x))
        return x.sum()

    try:
        x = mx.zeros((2,), dtype=mx.float32)
        mx.grad(f)(x)
        mx.vjp(f, [x], [mx.array(1.0)])
        mx.jvp(f, [x], [x])
        mx.vmap(f)(mx.zeros((3, 2), dtype=mx.float32))
        mx.compile(f)(x)
    except Exception:  # noqa: BLE001 - any surprise means: do not rely on the check
        return None
    return seen


class BodyRan(threading.local):
    """Per thread: whether a compiled entry point's Python body ran during the present call
    (Backend.w8a8_linear_marked). MLX replays a compiled function's recorded graph without
    running its body except at the first call of a signature and when an input is a tracer (an
    array of an mx.grad, mx.vjp, mx.jvp, mx.vmap or mx.compile trace), which
    int8nax.api.tracing._detects_tracers checks once per process."""

    ran = False
