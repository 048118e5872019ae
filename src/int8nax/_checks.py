"""Input contract of the public API: every bad input becomes a TypeError or
ValueError that names the function, the argument, what was expected and what came.

Backends receive only arguments that passed these checks, as mx.arrays.
"""

from __future__ import annotations

import os

import mlx.core as mx
import numpy as np

from .backends import ENV_VAR, canonical
from .backends import env_set as backend_env_set

MAX_K = 131071
"""Largest K whose int32 accumulation cannot overflow: |sum| <= K * 128 * 128 < 2**31."""

FLOAT_DTYPES = (mx.float16, mx.bfloat16, mx.float32)

_NP_TO_MX = {
    np.dtype(np.int8): mx.int8,
    np.dtype(np.uint8): mx.uint8,
    np.dtype(np.int16): mx.int16,
    np.dtype(np.int32): mx.int32,
    np.dtype(np.int64): mx.int64,
    np.dtype(np.float16): mx.float16,
    np.dtype(np.float32): mx.float32,
    np.dtype(np.bool_): mx.bool_,
}
# float64 is not here: MLX has no float64 on GPUs, so only arguments that say so take it
# (a bias, rounded to float32 once; quantize_weight_int8's offline weights).

FLOAT32_MAX = float(np.finfo(np.float32).max)

BACKEND_NAMES = "'auto', 'cpu', 'cuda' or 'metal' (alias 'nax')"
BACKEND_CHOICES = BACKEND_NAMES + ", or None"


def dtype_name(dtype) -> str:
    return str(dtype).replace("mlx.core.", "")


def _want(allowed) -> str:
    return " or ".join(dtype_name(d) for d in allowed)


def numpy_to_mx(value: np.ndarray) -> mx.array:
    """mx.array of a numpy array of a dtype MLX knows, whatever its strides or byte order.

    MLX refuses negative strides (np.flip, x[::-1]) and non-native byte order; those get a
    contiguous native copy first, which is exact.
    """
    if not value.dtype.isnative:
        value = value.astype(value.dtype.newbyteorder("="))
    if any(st < 0 for st in value.strides):
        value = np.ascontiguousarray(value)
    return mx.array(value)


def as_mx(value, name: str, func: str, allowed=None, float64_to_float32: bool = False) -> mx.array:
    """Accept an mx.array or a numpy array (any strides); anything else is a TypeError.

    allowed: the mx dtypes this argument takes, checked before conversion so that a numpy
    argument's message names its numpy dtype. float64_to_float32: a float64 array (numpy, or
    mx on the CPU) is accepted and rounded to float32 once; finite values beyond float32's
    range are a ValueError rather than a silent inf.
    """
    if isinstance(value, mx.array):
        if float64_to_float32 and value.dtype == mx.float64:
            return _float64_to_float32(np.asarray(value), name, func)
        if allowed is not None:
            check_dtype(value, name, func, allowed)
        return value
    if isinstance(value, np.ndarray):
        key = value.dtype.newbyteorder("=") if value.dtype.byteorder not in "=|" else value.dtype
        if float64_to_float32 and key == np.float64:
            return _float64_to_float32(value, name, func)
        target = _NP_TO_MX.get(key)
        if allowed is not None and (target is None or target not in allowed):
            raise TypeError(f"{func}: '{name}' must have dtype {_want(allowed)}, got numpy dtype {value.dtype}")
        if target is None:
            raise TypeError(f"{func}: '{name}' has numpy dtype {value.dtype}, which MLX cannot hold")
        return numpy_to_mx(value)
    raise TypeError(
        f"{func}: '{name}' must be an mlx.core.array or numpy.ndarray, got {type(value).__name__}"
    )


def _float64_to_float32(value: np.ndarray, name: str, func: str) -> mx.array:
    check_float32_range(value, name, func)
    return mx.array(np.ascontiguousarray(value, dtype=np.float32))


def check_finite_rows(value: np.ndarray, name: str, func: str, first_row: int = 0) -> None:
    """ValueError naming the first NaN or inf of a 2-D array (its rows counted from first_row)."""
    finite = np.isfinite(value)
    if not finite.all():
        row, col = (int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(f"{func}: '{name}' must be finite, but row {row + first_row} holds "
                         f"{float(value[row, col])!r} (at column {col})")


def check_float32_range(value: np.ndarray, name: str, func: str) -> None:
    """ValueError if a float array holds finite values that float32 cannot hold (|v| > FLT_MAX)."""
    with np.errstate(invalid="ignore"):
        beyond = np.isfinite(value) & (np.abs(value) > FLOAT32_MAX)
    if beyond.any():
        where = tuple(int(i) for i in np.argwhere(beyond)[0])
        raise ValueError(
            f"{func}: '{name}' holds finite values beyond float32 range (|v| <= {FLOAT32_MAX:.8g}), "
            f"first {float(value[where])!r} at index {list(where)}"
        )


def check_backend(backend, func: str) -> None:
    """The `backend=` argument: None or a backend name; a bad name is a ValueError naming func."""
    if backend is None and not backend_env_set():
        return  # the common call: nothing to check
    if backend is None:
        env = os.environ.get(ENV_VAR)
        if env:
            try:
                canonical(env)
            except ValueError:
                raise ValueError(
                    f"{func}: unknown backend {env!r} in the environment variable "
                    f"{ENV_VAR} (used when 'backend' is None); expected one of {BACKEND_NAMES}"
                ) from None
        return
    if not isinstance(backend, str):
        hint = ""
        if isinstance(backend, (mx.Device, mx.DeviceType)):
            hint = " (an MLX device is not a backend: pass backend='cpu', or set MLX's default device)"
        raise TypeError(
            f"{func}: 'backend' must be a str, one of {BACKEND_CHOICES}; got {type(backend).__name__} "
            f"{backend!r}{hint}"
        )
    try:
        canonical(backend)
    except ValueError:
        raise ValueError(
            f"{func}: unknown backend {backend!r} for 'backend'; expected one of {BACKEND_CHOICES}"
        ) from None


def check_dtype(arr: mx.array, name: str, func: str, allowed) -> None:
    if arr.dtype not in allowed:
        raise TypeError(f"{func}: '{name}' must have dtype {_want(allowed)}, got {dtype_name(arr.dtype)}")


def check_float_dtype(dtype, name: str, func: str) -> None:
    """An argument that names a floating dtype (not an array's): one of FLOAT_DTYPES."""
    if not isinstance(dtype, mx.Dtype):
        raise TypeError(f"{func}: '{name}' must be an mlx dtype ({_want(FLOAT_DTYPES)}), "
                        f"got {type(dtype).__name__} {dtype!r}")
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"{func}: '{name}' must be {_want(FLOAT_DTYPES)}, got {dtype_name(dtype)}")


def check_ndim(arr: mx.array, name: str, func: str, ndim: int, what: str) -> None:
    if arr.ndim != ndim:
        raise ValueError(
            f"{func}: '{name}' must be {ndim}-D {what}, got {arr.ndim}-D with shape {tuple(arr.shape)}"
        )


def check_k(k: int, func: str) -> None:
    if k > MAX_K:
        raise ValueError(
            f"{func}: K = {k} could overflow int32 accumulation (|sum| can reach K*16384); "
            f"expected K <= {MAX_K}"
        )


def check_same_k(k_a: int, name_a: str, k_b: int, name_b: str, func: str) -> None:
    if k_a != k_b:
        raise ValueError(
            f"{func}: K mismatch: '{name_a}' has K = {k_a} but '{name_b}' has K = {k_b}"
        )


def check_vector(arr: mx.array, name: str, func: str, length: int, what: str) -> None:
    if arr.ndim != 1 or arr.shape[0] != length:
        raise ValueError(
            f"{func}: '{name}' must have shape ({length},) ({what}), got {tuple(arr.shape)}"
        )


SCALE_RULE = ("positive and finite (quantize_weight_int8 gives absmax/127 per row, 1 for an all-zero row; "
              "an all-zero row is zero codes with any positive scale)")
"""What a weight scale must be, in the words of every message that refuses one (docs/numerics.md)."""


def check_scale_values(scale: mx.array, name: str, func: str) -> None:
    """ValueError unless every value of the float32 scale vector is positive and finite.

    Zero, negative, NaN and inf scales are refused: quantize_weight_int8 never makes them, and a
    zero or negative scale would put the kernels' exactness argument (a positive factor per
    output channel, docs/numerics.md) outside what is tested. Reads the values: on a GPU one
    synchronisation (callers check each scale array once, not per call)."""
    if mx.all(mx.isfinite(scale) & (scale > 0)).item():
        return
    values = np.array(scale.astype(mx.float32))
    with np.errstate(invalid="ignore"):
        bad = int(np.argmax(~(np.isfinite(values) & (values > 0))))
    raise ValueError(f"{func}: '{name}' must be {SCALE_RULE}; got {float(values[bad])!r} at index {bad}")
