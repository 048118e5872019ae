"""The public functions: validate, handle the degenerate cases once, dispatch to a backend."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from . import backends, quant
from ._checks import (
    FLOAT_DTYPES,
    as_mx,
    check_dtype,
    check_k,
    check_ndim,
    check_same_k,
    check_vector,
)

B_LAYOUTS = ("nk", "kn")


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
    """
    func = "int8_matmul"
    a = as_mx(a, "a", func)
    b = as_mx(b, "b", func)
    check_dtype(a, "a", func, (mx.int8,))
    check_dtype(b, "b", func, (mx.int8,))
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
    impl = backends.resolve(backend)
    if m == 0 or n == 0 or k == 0:
        return mx.zeros((m, n), dtype=mx.int32)
    return impl.int8_matmul(a, b)


def quantize_weight_int8(w):
    """Per-output-channel symmetric int8 quantization of a weight matrix (offline, on the CPU).

    Args:
        w: float [N, K] weights (numpy array of any float dtype, or mx.array), one
           output channel per row, as in nn.Linear.

    Returns:
        (w_int8 [N, K] int8, scale [N] float32) with w ~= w_int8 * scale[:, None];
        numpy arrays for numpy input, mx.arrays for mx.array input.
        scale = absmax/127 per row (1 for an all-zero row), codes rounded half to
        even and clipped to [-127, 127].

    Raises:
        ValueError if w holds NaN or inf (a scale for it would be meaningless).
    """
    func = "quantize_weight_int8"
    was_mx = isinstance(w, mx.array)
    if was_mx:
        check_dtype(w, "w", func, FLOAT_DTYPES)
        w32 = np.asarray(w.astype(mx.float32))
    elif isinstance(w, np.ndarray):
        if w.dtype.kind != "f":
            raise TypeError(f"{func}: 'w' must be a floating-point array, got numpy dtype {w.dtype}")
        w32 = w.astype(np.float32)
    else:
        raise TypeError(f"{func}: 'w' must be an mlx.core.array or numpy.ndarray, got {type(w).__name__}")
    if w32.ndim != 2:
        raise ValueError(f"{func}: 'w' must be 2-D [N, K], got {w32.ndim}-D with shape {w32.shape}")
    if not np.isfinite(w32).all():
        bad = int(np.argwhere(~np.isfinite(w32))[0][0])
        raise ValueError(f"{func}: 'w' must be finite, but row {bad} holds NaN or inf")
    q, scale = quant.quantize_weight_np(w32)
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
        A row holding NaN or inf gets scale NaN and q = 0.
    """
    func = "quantize_activations"
    x = as_mx(x, "x", func)
    check_dtype(x, "x", func, FLOAT_DTYPES)
    if x.ndim < 1:
        raise ValueError(f"{func}: 'x' must be at least 1-D [..., K], got a scalar")
    impl = backends.resolve(backend)
    rows, lead = _rows(x)
    if rows.shape[0] == 0 or rows.shape[1] == 0:
        q = mx.zeros(rows.shape, dtype=mx.int8)
        s = mx.ones((rows.shape[0],), dtype=mx.float32)
    else:
        q, s = impl.quantize_activations(rows)
    return q.reshape(*lead, x.shape[-1]), s.reshape(lead)


def w8a8_linear(x, w_int8, scale_w, bias=None, *, backend: str | None = None) -> mx.array:
    """W8A8 linear layer: y = dequant(quant(x) @ w_int8.T) (+ bias), int8nax's equivalent of
    cider's perchannel_linear.

    Args:
        x: float16 | bfloat16 | float32 [..., K] activations, quantized per token on the fly.
        w_int8: int8 [N, K] weights from quantize_weight_int8.
        scale_w: float32 [N] per-output-channel weight scales.
        bias: optional float [N].

    Returns:
        [..., N] in x's dtype: y = acc * scale_x[m] * scale_w[n] + bias[n], with acc the
        exact int32 product; within 1 ulp of the same expression in float64.
        Rows of x holding NaN or inf give all-NaN output rows; other rows are unaffected.
        Results beyond the output dtype's range become inf.
    """
    func = "w8a8_linear"
    x = as_mx(x, "x", func)
    w = as_mx(w_int8, "w_int8", func)
    scale_w = as_mx(scale_w, "scale_w", func)
    check_dtype(x, "x", func, FLOAT_DTYPES)
    check_dtype(w, "w_int8", func, (mx.int8,))
    check_dtype(scale_w, "scale_w", func, (mx.float32,))
    if x.ndim < 1:
        raise ValueError(f"{func}: 'x' must be at least 1-D [..., K], got a scalar")
    check_ndim(w, "w_int8", func, 2, "[N, K]")
    n, k = w.shape
    check_same_k(x.shape[-1], "x", k, "w_int8", func)
    check_k(k, func)
    check_vector(scale_w, "scale_w", func, n, "one scale per output channel")
    if bias is not None:
        bias = as_mx(bias, "bias", func)
        check_dtype(bias, "bias", func, FLOAT_DTYPES)
        check_vector(bias, "bias", func, n, "one value per output channel")
    impl = backends.resolve(backend)
    rows, lead = _rows(x)
    m = rows.shape[0]
    if m == 0 or n == 0 or k == 0:
        # quant(x) of an empty row is 0, so y is the bias (or 0).
        y = mx.zeros((m, n), dtype=x.dtype)
        if bias is not None and m > 0:
            y = y + bias.astype(x.dtype)
    else:
        y = impl.w8a8_linear(rows, w, scale_w, bias)
    return y.reshape(*lead, n)
