"""Exact references that tests and benchmarks check every backend against (numpy, CPU).

int8_matmul_ref is the int64 product; w8a8_linear_ref is the float64 model of
int8nax's W8A8 quantization (int8nax.quant) with no rounding after the integer
product, so a backend's output can be held to "within 1 ulp of the output dtype".
"""

from __future__ import annotations

import numpy as np

from . import quant


def to_numpy(arr, dtype=None) -> np.ndarray:
    """numpy copy of an mx.array or numpy array; bfloat16 is widened to float32."""
    import mlx.core as mx

    if isinstance(arr, mx.array):
        if arr.dtype == mx.bfloat16:
            arr = arr.astype(mx.float32)
        arr = np.array(arr)
    arr = np.asarray(arr)
    return arr.astype(dtype) if dtype is not None else arr


def exact_int_product(a, b) -> np.ndarray:
    """int64 [M, N] = a @ b.T for integer a [M, K], b [N, K], exactly.

    numpy's integer matmul has no BLAS path (~0.5 GOP/s), far too slow to check a
    benchmark-sized problem. float64 BLAS is exact here: every product and partial
    sum is an integer of magnitude <= K * max|a| * max|b|, and float64 holds every
    integer below 2**53 (int8 operands: any K < 2**39), whatever the summation order.
    Inputs outside that bound fall back to int64 arithmetic.
    """
    a64 = to_numpy(a, np.int64)
    b64 = to_numpy(b, np.int64)
    if a64.size == 0 or b64.size == 0:
        return a64 @ b64.T
    bound = int(np.abs(a64).max()) * int(np.abs(b64).max()) * a64.shape[1]
    if bound >= 2**53:
        return a64 @ b64.T
    return (a64.astype(np.float64) @ b64.astype(np.float64).T).astype(np.int64)


def int8_matmul_ref(a, b) -> np.ndarray:
    """int64 [M, N] = a @ b.T for int8 a [M, K], b [N, K]."""
    return exact_int_product(a, b)


def quantize_activations_ref(x) -> tuple[np.ndarray, np.ndarray]:
    """(int8 [M, K], float32 [M]) for float x [M, K] (any MLX float dtype)."""
    return quant.quantize_activations_np(to_numpy(x, np.float32))


def w8a8_linear_ref(x, w_int8, scale_w, bias=None) -> np.ndarray:
    """float64 [M, N] = (q_x @ w.T) * s_x[m] * s_w[n] (+ bias[n]).

    The bias is taken as int8nax.w8a8_linear takes it: float16/bfloat16/float32 exactly, a
    float64 bias rounded to float32 once. No rounding after that: float64 holds every
    product of an int32 and two float32 scales exactly enough (no overflow or underflow:
    2**31 * 2**128 * 2**128 and 2**-149 * 2**-149 are far inside its range).
    """
    q, s_x = quantize_activations_ref(x)
    acc = exact_int_product(q, w_int8)
    y = acc * s_x.astype(np.float64)[:, None] * to_numpy(scale_w, np.float64)[None, :]
    if bias is not None:
        with np.errstate(over="ignore"):  # the API refuses such a bias; here it becomes inf
            b32 = to_numpy(bias, np.float32)
        y = y + b32.astype(np.float64)[None, :]
    return y


# Mantissa bits and smallest normal exponent of each output dtype, for ulp bounds.
_FORMATS = {"float16": (10, -14), "bfloat16": (7, -126), "float32": (23, -126)}


def ulp(values: np.ndarray, dtype_name: str) -> np.ndarray:
    """Spacing of the floating-point format `dtype_name` at each of `values` (float64)."""
    mant, emin = _FORMATS[dtype_name]
    mag = np.abs(values.astype(np.float64))
    with np.errstate(divide="ignore"):
        exp = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    exp = np.maximum(exp, emin)
    return np.ldexp(1.0, (exp - mant).astype(np.int64))


def max_ulp_error(y, ref: np.ndarray, dtype_name: str) -> float:
    """Largest |y - ref| in ulps of `dtype_name` (0 for empty arrays).

    The ulp is taken at the larger of the two values, since a correctly rounded
    result may land in the next binade up.
    """
    got = to_numpy(y, np.float64)
    if ref.size == 0:
        return 0.0
    spacing = np.maximum(ulp(ref, dtype_name), ulp(got, dtype_name))
    return float(np.max(np.abs(got - ref) / spacing))
