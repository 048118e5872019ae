"""The public W8A8 functions, w8a8_linear and swiglu_w8a8_linear, over one pipeline (_Linear):
the common call (mx.arrays of a valid non-empty problem, the backend left to int8nax) is checked
inline and goes to the backend, straight where no transformation traces it, else through the
custom function that gives its gradient; every other call takes the checked path, which raises
the documented errors."""

from __future__ import annotations

import mlx.core as mx

from .. import backends
from .._checks import (
    FLOAT_DTYPES,
    MAX_K,
    as_mx,
    backend_env_set,
    check_backend,
    check_k,
    check_ndim,
    check_same_k,
    check_vector,
)
from .arguments import _ARRAY, _FLOAT32, _FLOATS, _INT8, _check_scales, _rows, _scale_seen
from .errors import _reraise_foreign, _reraise_untraceable, _resolve, _untraceable
from .gradients import _forward_inputs, _swiglu_grad, _w8a8_grad
from .tracing import _may_skip_custom


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
