"""Input contract of the public API: every bad input becomes a TypeError or
ValueError that names the function, the argument, what was expected and what came.

Backends receive only arguments that passed these checks, as mx.arrays.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

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
    np.dtype(np.float64): mx.float32,  # MLX has no float64 on GPUs; checked before conversion
    np.dtype(np.bool_): mx.bool_,
}


def dtype_name(dtype) -> str:
    return str(dtype).replace("mlx.core.", "")


def as_mx(value, name: str, func: str) -> mx.array:
    """Accept an mx.array or a numpy array; anything else is a TypeError."""
    if isinstance(value, mx.array):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype not in _NP_TO_MX or value.dtype == np.float64:
            raise TypeError(
                f"{func}: '{name}' has numpy dtype {value.dtype}, which int8nax does not take; "
                "expected int8, float16 or float32"
            )
        return mx.array(value)
    raise TypeError(
        f"{func}: '{name}' must be an mlx.core.array or numpy.ndarray, got {type(value).__name__}"
    )


def check_dtype(arr: mx.array, name: str, func: str, allowed) -> None:
    if arr.dtype not in allowed:
        want = " or ".join(dtype_name(d) for d in allowed)
        raise TypeError(f"{func}: '{name}' must have dtype {want}, got {dtype_name(arr.dtype)}")


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
