"""Quantization math shared by every backend, in numpy.

These functions are the definition of int8nax's numerics: the CPU backend runs
them directly, the GPU kernels reproduce them bit for bit, and the tests and
benchmarks compare against them.

Weights (offline, per output channel)
    s[n] = max_k |w[n, k]| / 127          (float32; an all-zero row gets s = 1)
    q[n, k] = clip(round_half_even(w[n, k] / s[n]), -127, 127)

Activations (every call, per token = per row)
    s[m] = max_k |x[m, k]| / 127          (float32; an all-zero row gets s = 1)
    q[m, k] = clip(round_half_away(x[m, k] * (1 / s[m])), -127, 127)
    The reciprocal-then-multiply and the rounding mode are cider's
    (quantize_per_token in cider's w8a8_quantize.metal): a GPU's round() rounds
    half away from zero. A row holding NaN or +-inf gets s = NaN and q = 0, so
    its outputs are NaN and no other row is touched.

Dequantization (W8A8 epilogue)
    y[m, n] = acc[m, n] * s_x[m] * s_w[n] (+ bias[n]), acc the exact int32 product.
"""

from __future__ import annotations

import numpy as np

QMAX = 127
"""Largest magnitude of a quantized value: symmetric, so -128 never appears."""


def row_scales(x32: np.ndarray) -> np.ndarray:
    """Per-row symmetric scale absmax/127 of a float32 [R, K] array, float32 [R].

    An all-zero (or empty) row gets 1 so that it quantizes to zeros, never NaN.
    A row holding NaN/inf gets NaN.
    """
    rows = x32.shape[0]
    if x32.shape[1] == 0:
        return np.ones(rows, dtype=np.float32)
    absmax = np.max(np.abs(x32), axis=1)  # NaN propagates
    scale = (absmax / np.float32(QMAX)).astype(np.float32)
    scale[scale == 0] = 1
    scale[~np.isfinite(scale)] = np.nan
    return scale


def round_half_away(v: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest integer, ties away from zero (Metal/CUDA round()).

    np.rint rounds ties to even; the tie that went toward zero is moved one step out.
    v - rint(v) is exact for |v| < 2**23, so ties are found exactly (the shortcut
    floor(|v| + 0.5) is wrong in float32: 0.49999997 + 0.5 rounds up to 1.0).
    """
    r = np.rint(v)
    d = v - r
    r += (d == 0.5) & (v > 0)
    r -= (d == -0.5) & (v < 0)
    return r


def quantize_rows_f32(x32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-token activation quantization of float32 [R, K].

    Returns (q, s): q float32 [R, K] holding integers in [-127, 127] (float32 so
    that the CPU GEMM can use it directly), s float32 [R].
    """
    scale = row_scales(x32)
    bad = np.isnan(scale)
    inv = np.float32(1) / np.where(bad, np.float32(1), scale)
    with np.errstate(invalid="ignore"):
        q = round_half_away(x32 * inv[:, None])
    q = np.clip(q, -QMAX, QMAX, out=q)
    q[bad] = 0
    return q, scale


def quantize_activations_np(x32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_rows_f32 with int8 codes: (int8 [R, K], float32 [R])."""
    q, scale = quantize_rows_f32(x32)
    return q.astype(np.int8), scale


def quantize_weight_np(w32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel weight quantization of float32 [N, K] -> (int8 [N, K], float32 [N])."""
    scale = row_scales(w32)
    q = np.clip(np.round(w32 / scale[:, None]), -QMAX, QMAX).astype(np.int8)
    return q, scale
