"""The public functions with integer outputs and no gradient: int8_matmul, quantize_weight_int8
(offline, on the CPU) and quantize_activations. The common int8_matmul call (mx.arrays of a
valid non-empty problem, the backend left to int8nax) is checked inline; every other call takes
the checked path, which raises the documented errors."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from .. import backends, quant
from .._checks import (
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
)
from .arguments import _ARRAY, _INT8, B_LAYOUTS, _rows
from .errors import _reraise_foreign, _reraise_untraceable, _resolve
from .gradients import _int8_matmul_fn, _quantize_fn
from .tracing import _may_skip_custom


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
