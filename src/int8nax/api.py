"""The public functions: validate, handle the degenerate cases once, dispatch to a backend.

Gradients are defined here, once for every backend, with mx.custom_function (a backend's
forward may leave MLX's graph, as the CPU backend's numpy path does):

- w8a8_linear: the straight-through estimator for the activation quantization, so the layer
  differentiates as the dequantized float layer y = x @ W_deq.T + bias with
  W_deq = w_int8 * scale_w[:, None]: dx = dy @ W_deq, dbias = sum of dy over the rows.
  The int8 weights and their scales get zero gradients (they are not trainable).
- swiglu_w8a8_linear: the derivative of its two steps (MLX's of swiglu, then w8a8_linear's).
- int8_matmul and quantize_activations have integer outputs and no useful gradient: asking
  for one (mx.grad, mx.vjp, mx.jvp through them) raises a ValueError, never silent zeros.

A custom function costs 3-4 µs of host time per call on the CPU box (a fake lazy backend timed),
more than a GPU backend's own part, and matters only when a transformation traces the call: a
gradient reaches an op only through arrays a transformation made (tracers). So a call whose
arguments _untraced finds free of tracers goes straight to the backend; the others take the
custom functions. The common call (mx.arrays of a valid non-empty problem, the backend left to
int8nax) is also checked inline; every other call takes the checked path, which raises the
documented errors.

Threads: every public function may be called from any number of threads at once (the
concurrency test, tests/test_threads.py, runs 8). MLX (0.32) gives each thread its own streams,
so an unevaluated array made on one thread must be evaluated there before another uses it (the
CPU backend names such an argument in its error).

State kept across calls, none of it per shape: the refusing custom functions, one per backend
(at most 3); the W8A8 and SwiGLU W8A8 gradients', each with and without a bias; the tracer
check's compiled identity, one per live thread (int8nax.per_thread), holding MLX's traces of it per input
signature (dtypes and ndims: a handful); the scale arrays whose values were checked (at most
1024, by identity, each going with its array: _CheckedScales). The CPU backend keeps one prepared weight per live
weight array (backends.cpu.PreparedWeights) and nothing per shape.
"""

from __future__ import annotations

import threading
import weakref
from functools import lru_cache

import mlx.core as mx
import numpy as np

from . import backends, quant
from .per_thread import compile_per_thread
from ._checks import (
    FLOAT_DTYPES,
    MAX_K,
    as_mx,
    backend_env_set,
    check_backend,
    check_dtype,
    check_finite_rows,
    check_float32_range,
    check_k,
    check_ndim,
    check_same_k,
    check_scale_values,
    check_vector,
)

B_LAYOUTS = ("nk", "kn")

# The common call's inline checks (module globals: no attribute lookups on mx per call).
_ARRAY = mx.array
_INT8 = mx.int8
_FLOAT32 = mx.float32
_FLOATS = frozenset(FLOAT_DTYPES)


# --- whether a transformation traces a call ---------------------------------------------------

class _Ran(threading.local):
    ran = False
    mark = ()
    """This thread's compiled _mark, as _mark_if_traced.slot() (empty until the first call)."""


_RAN = _Ran()


def _mark(*arrays):
    _RAN.ran = True
    return arrays[0]


# MLX runs a compiled function's Python body only to trace it: at the first call for a
# signature (dtypes and ndims: shapeless) and whenever an input is a tracer (an array of an
# mx.grad, mx.vjp, mx.jvp, mx.vmap or mx.compile trace; MLX 0.32 compile.cpp); every other
# call replays the recorded graph (here: no op, the output is the first input), 1-2 µs on the
# CPU box. Checked once per process (_may_skip_custom) and by tests/test_host_path.py.
# Compiled once per thread (per_thread): MLX keeps compiled traces per OS thread and a trace
# made from Python holds a Python object, which one shared mx.compile object would leave to
# the C++ thread-exit destructors of every calling thread; freeing it there takes the GIL,
# which aborts the process (exit 134) when the interpreter is finalizing by then.
_mark_if_traced = compile_per_thread(_mark, shapeless=True)


def _untraced(*arrays) -> bool:
    """True when no argument is a tracer, so that no transformation can see this call; False
    when one may be (or at the first call of a signature, or with compilation disabled)."""
    ran = _RAN
    ran.ran = False
    try:
        mark = ran.mark[0]
    except IndexError:
        ran.mark = _mark_if_traced.slot()
        mark = ran.mark[0]
    mark(*arrays)
    return not ran.ran


def _detects_tracers() -> bool:
    """Whether _untraced says False inside every transformation and True outside, with this
    MLX: the fast path is taken only if so (an MLX that replayed compiled graphs for tracers
    would otherwise lose the custom functions' gradients)."""
    seen = []

    def f(x):
        seen.append(_untraced(x))
        return x.sum()

    try:
        x = mx.zeros((2,), dtype=mx.float32)
        _untraced(x)  # the first call of the signature traces
        outside = _untraced(x)
        mx.grad(f)(x)
        mx.vjp(f, [x], [mx.array(1.0)])
        mx.jvp(f, [x], [x])
        mx.vmap(f)(mx.zeros((3, 2), dtype=mx.float32))
        mx.compile(f)(x)
    except Exception:  # noqa: BLE001 - any surprise means: do not rely on it
        return False
    return outside and seen == [False] * 5


_DETECTS: list[bool] = []
"""_detects_tracers()'s answer, asked at the first call that could use it (not at import: it
runs MLX transformations, which would start the GPU when the package is only imported)."""


_DETECTS_LOCK = threading.Lock()


def _detects() -> bool:
    """_detects_tracers()'s answer, asked once per process."""
    if not _DETECTS:
        with _DETECTS_LOCK:  # threads arriving together: one asks, the others wait for it
            if not _DETECTS:
                _DETECTS.append(_detects_tracers())
    return _DETECTS[0]


def _may_skip_custom(*arrays) -> bool:
    """Whether a valid call may go straight to the backend: this MLX lets _untraced tell traced
    calls apart, and no argument is a tracer."""
    return (_DETECTS[0] if _DETECTS else _detects()) and _untraced(*arrays)


def _untraceable(func: str, impl: backends.Backend, call):
    """call() with MLX's refusal to evaluate inside mx.compile/mx.vmap (what a backend computing
    its inputs outside the graph would meet there; the CPU backend's own graph path avoids it)
    turned into a message naming the function and the way out."""
    try:
        return call()
    except ValueError as exc:
        _reraise_untraceable(func, impl, exc)


def _reraise_untraceable(func: str, impl: backends.Backend, exc: ValueError):
    """Raise `exc`, or for MLX's refusal the message _untraceable gives (called in an except)."""
    if not backends.refused_by_trace(exc):
        raise exc
    raise ValueError(
        f"{func}: the {impl.name} backend evaluated its inputs outside MLX's graph inside mx.compile "
        "or mx.vmap, which MLX refuses; call it outside the compiled/vmapped function"
    ) from exc


# MLX (0.32) gives every thread its own streams and evaluates an array only on a thread that
# holds the stream its graph was built on: an unevaluated array made on one thread and passed
# to int8nax on another fails wherever it is evaluated, with MLX's "There is no Stream(cpu, 0)
# in current thread". The CPU backend evaluates its inputs during the call; the message then
# names the argument and the way out.
_FOREIGN_STREAM = "in current thread"


def _reraise_foreign(func: str, exc: RuntimeError, named) -> None:
    """Raise `exc`, or for MLX's refusal to evaluate another thread's graph a RuntimeError
    naming the argument (called in an except; `named`: (name, array or None) pairs)."""
    if _FOREIGN_STREAM not in str(exc):
        raise exc
    culprit = None
    for name, arr in named:
        try:
            if arr is not None:
                mx.eval(arr)
        except RuntimeError:
            culprit = name
            break
    what = f"'{culprit}' is" if culprit else "an input is"
    raise RuntimeError(
        f"{func}: {what} an unevaluated mx.array made on another thread, and MLX evaluates a graph "
        f"only on the thread that built it ({exc}); call mx.eval on it in that thread before "
        "passing it to another"
    ) from exc


def _no_gradient(func: str, why: str):
    def refuse(*_args):
        raise ValueError(f"{func} has no gradient: {why}")

    return refuse


# The refusing custom functions hand the backend its inputs behind mx.stop_gradient: mx.jvp
# asks every primitive that depends on a primal for a tangent, in graph order, so a custom
# kernel (no jvp) inside the body would raise MLX's "[Primitive::jvp] Not implemented for
# CustomKernel" before the refusal below could name the function (see _forward_inputs).
_cut = mx.stop_gradient


@lru_cache(maxsize=None)
def _int8_matmul_fn(impl: backends.Backend):
    # the backend's method is looked up per call (tests patch backends)
    f = mx.custom_function(
        lambda a, b: _untraceable("int8_matmul", impl, lambda: impl.int8_matmul(_cut(a), _cut(b))))
    why = ("its inputs and output are integers (int8 x int8 -> exact int32); for a trainable "
           "layer use w8a8_linear or int8nax.nn.W8A8Linear, whose gradient is straight-through")
    f.vjp(_no_gradient("int8_matmul", why))
    f.jvp(_no_gradient("int8_matmul", why))
    return f


@lru_cache(maxsize=None)
def _quantize_fn(impl: backends.Backend):
    f = mx.custom_function(
        lambda x: _untraceable("quantize_activations", impl, lambda: impl.quantize_activations(_cut(x))))
    why = ("rounding to int8 codes has zero derivative almost everywhere; for a trainable "
           "layer use w8a8_linear, whose gradient is straight-through")
    f.vjp(_no_gradient("quantize_activations", why))
    f.jvp(_no_gradient("quantize_activations", why))
    return f


def _dequantized_weight(w: mx.array, scale_w: mx.array) -> mx.array:
    """float32 [N, K] = w_int8 * scale_w[:, None]: the float weight the layer stands for."""
    return w.astype(mx.float32) * scale_w[:, None]


def _ste_dx(dy: mx.array, w: mx.array, scale_w: mx.array, dtype) -> mx.array:
    """The straight-through vjp of W8A8's input: dy [M, N] @ W_deq [N, K] in float32, in `dtype`."""
    return (dy.astype(mx.float32) @ _dequantized_weight(w, scale_w)).astype(dtype)


def _ste_db(dy: mx.array, dtype) -> mx.array:
    """The bias's vjp: dy [M, N] summed over the rows in float32, in `dtype`."""
    return dy.astype(mx.float32).sum(axis=0).astype(dtype)


def _ste_dy(dx: mx.array, w: mx.array, scale_w: mx.array, db, dtype) -> mx.array:
    """The straight-through jvp: dx [M, K] @ W_deq.T (+ db) in float32, in `dtype`."""
    dy = dx.astype(mx.float32) @ _dequantized_weight(w, scale_w).T
    return (dy if db is None else dy + db.astype(mx.float32)).astype(dtype)


@lru_cache(maxsize=None)
def _w8a8_grad(has_bias: bool):
    """mx.custom_function(x, w, s, [b,] y) -> y with the straight-through gradient (module
    docstring). The forward `y` is computed by the backend before this is called, outside the
    custom function, because MLX hands a custom function's body new array objects for its
    inputs: a backend that keeps per-weight state (the CPU backend's prepared weights, keyed
    by the array) would never see the caller's weight there. `y` comes in behind
    mx.stop_gradient, so only this vjp/jvp defines the derivative."""
    f = mx.custom_function(lambda *args: args[-1])

    @f.vjp
    def vjp(primals, cotangent, _output):
        x, w, s = primals[:3]
        grads = [_ste_dx(cotangent, w, s, x.dtype), mx.zeros_like(w), mx.zeros_like(s)]
        if has_bias:
            grads.append(_ste_db(cotangent, primals[3].dtype))
        return (*grads, mx.zeros_like(primals[-1]))

    @f.jvp
    def jvp(primals, tangents):
        x, w, s = primals[:3]
        return (_ste_dy(tangents[0], w, s, tangents[3] if has_bias else None, x.dtype),)

    return f


@lru_cache(maxsize=None)
def _swiglu_grad(has_bias: bool):
    """As _w8a8_grad for swiglu_w8a8_linear(gate_up, w, s, [b,] y) -> y: the derivative of the
    composition w8a8_linear(swiglu(gate, up)), with h's by MLX's own vjp/jvp of swiglu."""
    f = mx.custom_function(lambda *args: args[-1])

    @f.vjp
    def vjp(primals, cotangent, _output):
        gate_up, w, s = primals[:3]
        k = gate_up.shape[-1] // 2
        gate, up = gate_up[:, :k], gate_up[:, k:]
        _, (d_gate, d_up) = mx.vjp(backends.swiglu, [gate, up], [_ste_dx(cotangent, w, s, gate_up.dtype)])
        grads = [mx.concatenate([d_gate, d_up], axis=-1), mx.zeros_like(w), mx.zeros_like(s)]
        if has_bias:
            grads.append(_ste_db(cotangent, primals[3].dtype))
        return (*grads, mx.zeros_like(primals[-1]))

    @f.jvp
    def jvp(primals, tangents):
        gate_up, w, s = primals[:3]
        k = gate_up.shape[-1] // 2
        _, (dh,) = mx.jvp(backends.swiglu, [gate_up[:, :k], gate_up[:, k:]], [tangents[0][:, :k], tangents[0][:, k:]])
        return (_ste_dy(dh, w, s, tangents[3] if has_bias else None, gate_up.dtype),)

    return f


def _forward_inputs(impl: backends.Backend, x, w, scale_w, bias) -> tuple:
    """The forward's inputs, cut from the caller's graph by mx.stop_gradient: MLX's mx.jvp asks
    every primitive that depends on a primal for a tangent, even one whose output reaches the
    result only behind stop_gradient, and a custom kernel has none ("[Primitive::jvp] Not
    implemented for CustomKernel" on the H200, 2026-12-01). A backend that keys state by the
    weight array (weights_by_identity) gets the caller's weights; it computes outside MLX's
    graph anyway."""
    cut = mx.stop_gradient
    if impl.weights_by_identity:
        return cut(x), w, scale_w, bias
    return cut(x), cut(w), cut(scale_w), None if bias is None else cut(bias)


def int8_matmul(a, b, *, b_layout: str = "nk", backend: str | None = None) -> mx.array:
    """Exact int8 matrix product with int32 output.

    Args:
        a: int8 [M, K] (mx.array or numpy array; any strides).
        b: int8 [N, K] with ``b_layout="nk"`` (weights as rows: the nn.Linear and
           cider layout), or int8 [K, N] with ``b_layout="kn"``.
        b_layout: "nk" (default) or "kn".
        backend: "cpu", "cuda", "metal" (alias "nax") or "auto"; default: the
           INT8NAX_BACKEND environment variable, else auto (follow MLX's device).

    Returns:
        int32 [M, N] with out[m, n] = sum_k a[m, k] * b[n, k], bit-exact. -128 is a
        legal input value. K is limited to 131071 so that int32 cannot overflow.

    Not differentiable: mx.grad/mx.vjp/mx.jvp through it raise a ValueError.
    """
    # The common call, checked inline: what the checked path would accept and not special-case.
    if backend is None and type(a) is _ARRAY and type(b) is _ARRAY and b_layout == "nk":
        sa, sb = a.shape, b.shape
        if (len(sa) == 2 and len(sb) == 2 and a.dtype == _INT8 and b.dtype == _INT8 and sa[1] == sb[1]
                and 0 < sa[1] <= MAX_K and sa[0] and sb[0] and not backend_env_set()):
            return _int8_matmul_call(backends.resolve(None), a, b)
    return _int8_matmul_checked(a, b, b_layout, backend)


def _resolve(backend, func: str):
    """backends.resolve(backend), its refusal (an unknown or unavailable backend, by argument or
    INT8NAX_BACKEND) led by the public function's name, as every other usage error is."""
    try:
        return backends.resolve(backend)
    except (RuntimeError, ValueError) as exc:
        raise type(exc)(f"{func}: {exc}") from None


def _int8_matmul_call(impl: backends.Backend, a: mx.array, b: mx.array) -> mx.array:
    """int32 [M, N] of a valid, non-empty problem; refusing gradients."""
    try:
        if _may_skip_custom(a, b):
            try:
                return impl.int8_matmul(a, b)
            except ValueError as exc:
                _reraise_untraceable("int8_matmul", impl, exc)
        return _int8_matmul_fn(impl)(a, b)
    except RuntimeError as exc:
        _reraise_foreign("int8_matmul", exc, (("a", a), ("b", b)))


def _int8_matmul_checked(a, b, b_layout, backend) -> mx.array:
    func = "int8_matmul"
    check_backend(backend, func)
    a = as_mx(a, "a", func, (mx.int8,))
    b = as_mx(b, "b", func, (mx.int8,))
    check_ndim(a, "a", func, 2, "[M, K]")
    if b_layout not in B_LAYOUTS:
        raise ValueError(f"{func}: 'b_layout' must be one of {B_LAYOUTS}, got {b_layout!r}")
    check_ndim(b, "b", func, 2, "[N, K]" if b_layout == "nk" else "[K, N]")
    if b_layout == "kn":
        b = b.T
    m, k = a.shape
    n = b.shape[0]
    check_same_k(k, "a", b.shape[1], "b", func)
    check_k(k, func)
    impl = _resolve(backend, func)
    if m == 0 or n == 0 or k == 0:
        return mx.zeros((m, n), dtype=mx.int32)
    return _int8_matmul_call(impl, a, b)


def quantize_weight_int8(w):
    """Per-output-channel symmetric int8 quantization of a weight matrix (offline, on the CPU).

    Args:
        w: float [N, K] weights (numpy array of any float dtype, or an mx.array of
           float16/bfloat16/float32/float64), one output channel per row, as in nn.Linear.
           Wider dtypes are rounded to float32 first (once).

    Returns:
        (w_int8 [N, K] int8, scale [N] float32) with w ~= w_int8 * scale[:, None];
        numpy arrays for numpy input, mx.arrays for mx.array input.
        scale = absmax/127 per row (1 for an all-zero row), codes rounded half to
        even and clipped to [-127, 127].

    Raises:
        TypeError for a non-float w; ValueError if w is not 2-D, holds NaN or inf (a scale
        for it would be meaningless), or finite values beyond float32's range.
    """
    func = "quantize_weight_int8"
    was_mx = isinstance(w, mx.array)
    if was_mx:
        check_dtype(w, "w", func, FLOAT_DTYPES + (mx.float64,))
        wide = np.asarray(w if w.dtype == mx.float64 else w.astype(mx.float32))
    elif isinstance(w, np.ndarray):
        if w.dtype.kind != "f":
            raise TypeError(
                f"{func}: 'w' must be a floating-point array (float16, float32, float64, ...), "
                f"got numpy dtype {w.dtype}"
            )
        wide = w
    else:
        raise TypeError(f"{func}: 'w' must be an mlx.core.array or numpy.ndarray, got {type(w).__name__}")
    if wide.ndim != 2:
        raise ValueError(f"{func}: 'w' must be 2-D [N, K], got {wide.ndim}-D with shape {wide.shape}")
    if wide.dtype.itemsize > 4:  # only a wider type can hold finite values float32 cannot
        check_finite_rows(wide, "w", func)
        check_float32_range(wide, "w", func)
    q, scale = quant.quantize_weight_np(wide)
    bad = np.flatnonzero(np.isnan(scale))  # rows holding NaN or inf (quant.row_scales)
    if bad.size:
        check_finite_rows(wide[bad[0]:bad[0] + 1], "w", func, first_row=int(bad[0]))
    if was_mx:
        return mx.array(q), mx.array(scale)
    return q, scale


def _rows(x: mx.array) -> tuple[mx.array, tuple[int, ...]]:
    """Flatten [..., K] to [rows, K]; returns the leading shape to restore."""
    lead = tuple(x.shape[:-1])
    rows = 1
    for d in lead:
        rows *= d
    return x.reshape(rows, x.shape[-1]), lead


def quantize_activations(x, *, backend: str | None = None) -> tuple[mx.array, mx.array]:
    """Per-token symmetric int8 quantization, cider's math (see int8nax.quant).

    Args:
        x: float16 | bfloat16 | float32 [..., K].

    Returns:
        (q int8 [..., K], scale float32 [...]) with x ~= q * scale[..., None].
        A row holding NaN or inf gets scale NaN and q = 0. A row with a subnormal scale
        (absmax < 127 * 2**-126) follows int8nax.quant's tiny-row rule; a row whose scale
        underflows to 0 (absmax below ~8.9e-44) quantizes like an all-zero row (scale 1).

    Not differentiable: mx.grad/mx.vjp/mx.jvp through it raise a ValueError.
    """
    func = "quantize_activations"
    check_backend(backend, func)
    x = as_mx(x, "x", func, FLOAT_DTYPES)
    if x.ndim < 1:
        raise ValueError(f"{func}: 'x' must be at least 1-D [..., K], got a scalar")
    impl = _resolve(backend, func)
    rows, lead = (x, None) if x.ndim == 2 else _rows(x)
    if rows.shape[0] == 0 or rows.shape[1] == 0:
        q = mx.zeros(rows.shape, dtype=mx.int8)
        s = mx.ones((rows.shape[0],), dtype=mx.float32)
    else:
        try:
            if _may_skip_custom(rows):
                try:
                    q, s = impl.quantize_activations(rows)
                except ValueError as exc:
                    _reraise_untraceable("quantize_activations", impl, exc)
            else:
                q, s = _quantize_fn(impl)(rows)
        except RuntimeError as exc:
            _reraise_foreign("quantize_activations", exc, (("x", rows),))
    if lead is None:
        return q, s
    return q.reshape(*lead, x.shape[-1]), s.reshape(lead)


class _CheckedScales:
    """Scale arrays whose values passed check_scale_values, by identity: the common call asks
    here (a dict lookup and a weak reference, ~0.1 µs) instead of reading the values, which on
    a GPU is a synchronisation. An entry goes with its array (weak reference) and at most LIMIT
    are kept, the oldest forgotten first; a forgotten array is checked again at its next use.
    An array changed in place (scale_w[i] = v keeps the object) is not checked again."""

    LIMIT = 1024

    def __init__(self):
        self._refs: dict[int, weakref.ref] = {}
        # Re-entrant: a weak reference's callback (drop) can run in this thread while it
        # holds the lock (an array freed by a garbage collection inside add).
        self._lock = threading.RLock()

    def seen(self, scale: mx.array) -> bool:
        ref = self._refs.get(id(scale))
        return ref is not None and ref() is scale

    def add(self, scale: mx.array) -> None:
        key = id(scale)

        def drop(ref, key=key, refs=self._refs, lock=self._lock):
            with lock:
                if refs.get(key) is ref:
                    del refs[key]

        ref = weakref.ref(scale, drop)
        with self._lock:
            refs = self._refs
            refs.pop(key, None)
            while len(refs) >= self.LIMIT:
                del refs[next(iter(refs))]
            refs[key] = ref

    def __len__(self) -> int:
        return len(self._refs)


_SCALES = _CheckedScales()
_scale_seen = _SCALES.seen


def _check_scales(scale: mx.array, name: str, func: str) -> None:
    """check_scale_values(scale) once per scale array (_CheckedScales). Where a transformation
    refuses to evaluate it (a tracer of mx.compile or mx.vmap) the values cannot be read and
    are not checked; an unevaluated array of another thread is named as such."""
    if _scale_seen(scale):
        return
    try:
        check_scale_values(scale, name, func)
    except ValueError as exc:
        if backends.refused_by_trace(exc):
            return
        raise
    except RuntimeError as exc:
        _reraise_foreign(func, exc, ((name, scale),))
    _SCALES.add(scale)


def w8a8_linear(x, w_int8, scale_w, bias=None, *, backend: str | None = None) -> mx.array:
    """W8A8 linear layer: y = dequant(quant(x) @ w_int8.T) (+ bias), int8nax's equivalent of
    cider's perchannel_linear.

    Args:
        x: float16 | bfloat16 | float32 [..., K] activations, quantized per token on the fly.
        w_int8: int8 [N, K] weights from quantize_weight_int8.
        scale_w: float32 [N] per-output-channel weight scales.
        bias: optional float16 | bfloat16 | float32 [N]; a float64 bias (numpy's default
           dtype, e.g. np.zeros(N)) is rounded to float32 once, on the way in.

    Every array may be an mx.array or a numpy array of any strides (views such as
    x[::-1] or np.flip(w, 1) are copied to contiguous memory first, exactly).

    Returns:
        [..., N] in x's dtype: y = acc * scale_x[m] * scale_w[n] + bias[n], with acc the
        exact int32 product; within 1 ulp of the same expression in float64, for every
        finite input (tiny rows and rows near float32's maximum included).
        Rows of x holding NaN or inf give all-NaN output rows; other rows are unaffected.
        Results beyond the output dtype's range become inf.

    Gradient (mx.grad, mx.vjp, mx.jvp): straight-through for the activation quantization,
    i.e. that of the dequantized float layer: dx = dy @ (w_int8 * scale_w[:, None]) in
    x's dtype, dbias = dy summed over the rows; zero for w_int8 and scale_w.
    """
    return _linear(_W8A8, x, w_int8, scale_w, bias, backend)


def swiglu_w8a8_linear(gate_up, w_int8, scale_w, bias=None, *, backend: str | None = None) -> mx.array:
    """The down projection of a SwiGLU MLP on W8A8: w8a8_linear(silu(gate) * up, w_int8, scale_w, bias).

    Args:
        gate_up: float16 | bfloat16 | float32 [..., 2K]: gate = gate_up[..., :K] and
            up = gate_up[..., K:] side by side (what one W8A8 GEMM over the gate and up
            projections' concatenated weights gives: int8nax.nn's sibling groups).
        w_int8: int8 [N, K], scale_w: float32 [N], bias: optional float [N], as in w8a8_linear.

    Returns:
        [..., N] in gate_up's dtype, with the bits of w8a8_linear(h, w_int8, scale_w, bias) where
        h = nn.silu(gate) * up is computed as mlx-lm's `swiglu` computes it (mx.compile of
        nn.silu(gate) * up: sigmoid and both products rounded to gate_up's dtype). On CUDA with
        INT8NAX_CUDA_SWIGLU=fused one kernel computes h and quantizes it without writing h out;
        elsewhere h is computed, then quantized.

    Gradient: that of the composition (MLX's for swiglu, w8a8_linear's straight-through).
    """
    return _linear(_SWIGLU_W8A8, gate_up, w_int8, scale_w, bias, backend)


class _Linear:
    """What differs between w8a8_linear and swiglu_w8a8_linear around their backend calls: the
    name in messages, the input's name and width (K, or 2K for gate|up side by side), the backend
    method and the custom function that gives the gradient."""

    def __init__(self, func: str, x_name: str, x_shape: str, halves: int, method: str, grad):
        self.func, self.x_name, self.x_shape, self.halves = func, x_name, x_shape, halves
        self.method, self.grad = method, grad

    def check_width(self, width: int, k: int) -> None:
        if self.halves == 1:
            check_same_k(width, self.x_name, k, "w_int8", self.func)
        elif width != self.halves * k:
            raise ValueError(
                f"{self.func}: '{self.x_name}' must have last dimension 2K = {2 * k} (gate and up side by "
                f"side, K = {k} from 'w_int8' [N, K]), got last dimension {width}")


def _linear(op: _Linear, x, w_int8, scale_w, bias, backend) -> mx.array:
    """op's call (w8a8_linear or swiglu_w8a8_linear): mx.arrays that an inline test finds valid go
    straight to _linear_rows (no conversions or named checks: a few µs less a call), anything else
    through _linear_checked."""
    if (backend is None and type(x) is _ARRAY and type(w_int8) is _ARRAY and type(scale_w) is _ARRAY
            and (bias is None or type(bias) is _ARRAY)):
        xs, ws, ss = x.shape, w_int8.shape, scale_w.shape
        if (len(ws) == 2 and len(ss) == 1 and xs and xs[-1] == op.halves * ws[1] and ss[0] == ws[0] and ws[0]
                and 0 < ws[1] <= MAX_K and x.dtype in _FLOATS and w_int8.dtype == _INT8
                and scale_w.dtype == _FLOAT32 and _scale_seen(scale_w)
                and (bias is None or (bias.shape == ss and bias.dtype in _FLOATS))
                and 0 not in xs and not backend_env_set()):
            if len(xs) == 2:  # no reshapes (~0.5 µs each)
                return _linear_rows(op, backends.resolve(None), x, w_int8, scale_w, bias)
            y = _linear_rows(op, backends.resolve(None), x.reshape(-1, xs[-1]), w_int8, scale_w, bias)
            return y.reshape(xs[:-1] + (ws[0],))
    return _linear_checked(op, x, w_int8, scale_w, bias, backend)


def _linear_rows(op: _Linear, impl: backends.Backend, rows, w, scale_w, bias) -> mx.array:
    """y [M, N] of a valid, non-empty problem on 2-D rows: straight to the backend where no
    transformation can see the call, else with op's gradient."""
    call = getattr(impl, op.method)  # looked up per call: tests patch backends
    arrays = (rows, w, scale_w) if bias is None else (rows, w, scale_w, bias)
    try:
        if _may_skip_custom(*arrays):
            try:
                return call(rows, w, scale_w, bias)
            except ValueError as exc:
                _reraise_untraceable(op.func, impl, exc)
        y = _untraceable(op.func, impl, lambda: call(*_forward_inputs(impl, rows, w, scale_w, bias)))
    except RuntimeError as exc:
        _reraise_foreign(op.func, exc, ((op.x_name, rows), ("w_int8", w), ("scale_w", scale_w), ("bias", bias)))
    return op.grad(bias is not None)(*arrays, mx.stop_gradient(y))


def _linear_checked(op: _Linear, x, w_int8, scale_w, bias, backend) -> mx.array:
    """Every argument checked (errors name it), empty problems answered, then _linear_rows."""
    func = op.func
    check_backend(backend, func)
    x = as_mx(x, op.x_name, func, FLOAT_DTYPES)
    w = as_mx(w_int8, "w_int8", func, (mx.int8,))
    scale_w = as_mx(scale_w, "scale_w", func, (mx.float32,), float64_to_float32=True)
    if x.ndim < 1:
        raise ValueError(f"{func}: '{op.x_name}' must be at least 1-D {op.x_shape}, got a scalar")
    check_ndim(w, "w_int8", func, 2, "[N, K]")
    n, k = w.shape
    op.check_width(x.shape[-1], k)
    check_k(k, func)
    check_vector(scale_w, "scale_w", func, n, "one scale per output channel")
    _check_scales(scale_w, "scale_w", func)
    if bias is not None:
        bias = as_mx(bias, "bias", func, FLOAT_DTYPES, float64_to_float32=True)
        check_vector(bias, "bias", func, n, "one value per output channel")
    impl = _resolve(backend, func)
    rows, lead = _rows(x)
    m = rows.shape[0]
    if m == 0 or n == 0 or k == 0:
        # quant(x) of an empty row is 0, so y is the bias (or 0).
        y = mx.zeros((m, n), dtype=x.dtype)
        if bias is not None and m > 0:
            y = y + bias.astype(x.dtype)
    else:
        y = _linear_rows(op, impl, rows, w, scale_w, bias)
    return y.reshape(*lead, n)


_W8A8 = _Linear("w8a8_linear", "x", "[..., K]", 1, "w8a8_linear", _w8a8_grad)
_SWIGLU_W8A8 = _Linear("swiglu_w8a8_linear", "gate_up", "[..., 2K]", 2, "swiglu_w8a8_linear", _swiglu_grad)


# --- a linear's arrays checked once (int8nax.nn's layers and sibling groups) -----------------

def _nothing():
    return None


class BoundLinear:
    """An op of _Linear (bind makes w8a8_linear's) with its weight, scales and bias checked once,
    for a layer that calls it with the same arrays again and again (int8nax.nn): a call checks
    only its input (type, width, dtype, not empty, not traced) and goes to the backend.

    Made by bind(). The arrays are held, not copied: whoever swaps one (a layer's weight
    replaced) binds anew; an array changed in place (w[i] = v) is not checked again. Pickling
    or copying gives None (bind again from the copy's arrays). Thread-safe: nothing in it
    changes after bind().
    """

    __slots__ = ("op", "w", "scale_w", "bias", "backend", "width", "n", "method", "marked")

    def __init__(self, op: _Linear, w, scale_w, bias, backend):
        self.op, self.w, self.scale_w, self.bias, self.backend = op, w, scale_w, bias, backend
        self.width = op.halves * w.shape[1]
        self.n = w.shape[0]
        self.method = op.method
        # Backend.w8a8_linear_marked is W8A8's (swiglu takes the two checks), and its flag tells
        # traced calls apart only where _detects() (asked by bind() before: _may_skip_custom)
        self.marked = op is _W8A8 and _detects()

    def __reduce__(self):
        return (_nothing, ())

    def fast(self, x):
        """y [..., N] in x's dtype for x [..., width], or None where x needs the general path:
        not an mx.array, another width or dtype, an empty problem, a backend choice that cannot
        run (the bound backend, INT8NAX_BACKEND's or auto's: the general path says why), or x
        traced by a transformation (the gradient needs the custom function). The arrays of
        bind() are not tracers, so x is the only argument that can be one."""
        if type(x) is not _ARRAY:
            return None
        xs = x.shape
        if not xs or xs[-1] != self.width or x.dtype not in _FLOATS or 0 in xs:
            return None
        try:
            impl = backends.resolve(self.backend)  # INT8NAX_BACKEND read in there, answers kept
        except (RuntimeError, ValueError):
            return None
        entry = getattr(impl, "w8a8_linear_marked", None) if self.marked else None  # stand-ins may lack it
        if entry is not None:
            w, scale_w, bias = self.w, self.scale_w, self.bias
            try:
                marked = entry(x, w, scale_w, bias)
            except ValueError as exc:
                _reraise_untraceable(self.op.func, impl, exc)
            except RuntimeError as exc:
                op = self.op
                _reraise_foreign(op.func, exc, ((op.x_name, x), ("w_int8", w), ("scale_w", scale_w), ("bias", bias)))
            if marked is not None:
                y, maybe_traced = marked
                # the body ran: a signature's first call (y is right) or a tracer (y is dropped)
                return y if not maybe_traced or _may_skip_custom(x) else None
        if not _may_skip_custom(x):
            return None
        op = self.op
        call = getattr(impl, self.method)  # looked up per call: tests patch backends
        if len(xs) == 2:
            rows = x
        else:  # explicit sizes: reshape(-1, K) costs MLX ~0.15 µs more
            m = 1
            for d in xs[:-1]:
                m *= d
            rows = x.reshape(m, xs[-1])
        try:
            y = call(rows, self.w, self.scale_w, self.bias)
        except ValueError as exc:
            _reraise_untraceable(op.func, impl, exc)
        except RuntimeError as exc:
            _reraise_foreign(op.func, exc, ((op.x_name, rows), ("w_int8", self.w), ("scale_w", self.scale_w),
                                            ("bias", self.bias)))
        return y if len(xs) == 2 else y.reshape(xs[:-1] + (self.n,))


def bind(w, scale_w, bias=None, *, backend: str | None = None, func: str = "w8a8_linear",
         names: tuple[str, str, str] = ("w_int8", "scale_w", "bias")) -> BoundLinear | None:
    """The arrays of w8a8_linear checked once: w int8 [N, K],
    scale_w float32 [N] positive and finite, bias None or float16/bfloat16/float32 [N], all
    mx.arrays; errors name `func` and the arrays by `names`. None where an array is a tracer
    (inside a transformation: the call then takes the general path, which checks it there) or
    not an mx.array or of another dtype the general path converts (numpy, a float64 bias)."""
    arrays = (w, scale_w) if bias is None else (w, scale_w, bias)
    if any(type(a) is not _ARRAY for a in arrays):
        return None
    if w.dtype != _INT8 or scale_w.dtype != _FLOAT32 or (bias is not None and bias.dtype not in _FLOATS):
        return None
    wn, sn, bn = names
    check_ndim(w, wn, func, 2, "[N, K]")
    n, k = w.shape
    if n == 0 or k == 0:
        return None
    check_k(k, func)
    check_vector(scale_w, sn, func, n, "one scale per output channel")
    if bias is not None:
        check_vector(bias, bn, func, n, "one value per output channel")
    if not _may_skip_custom(*arrays):
        return None
    _check_scales(scale_w, sn, func)
    return BoundLinear(_W8A8, w, scale_w, bias, backend)
