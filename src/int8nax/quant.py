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

Tiny activation rows (absmax below 127 * 2**-126 ~ 1.5e-36)
    s is then subnormal (or, for absmax below ~1.8e-43, the smallest subnormal) and
    1 / s overflows float32 (to inf, or to a reciprocal far too coarse). Such rows
    are computed as if float32 had no lower exponent limit:
        k = 0 if s >= 2**-126 else 64
        q[m, k] = clip(round_half_away((x[m, k] * 2**k) * fl(1 / (s[m] * 2**k))), -127, 127)
    Both scalings by 2**64 are exact (x and s are at most 127 * 2**-126, far from
    overflow, and s * 2**64 is a normal number), so x * 2**k and s * 2**k are the
    row's values in a wider exponent range and the formula is cider's x * (1 / s)
    there. k = 0 for every normal scale, so every row whose scale is normal (every
    float16 row, and every float32/bfloat16 row with absmax >= ~1.5e-36) is
    bit-identical to cider's x * (1 / s). Example: [1e-37, 1e-38, 0, 5e-39] in
    float32 has s = 7.874e-40 (subnormal) and codes [127, 13, 0, 6].

Dequantization (W8A8 epilogue)
    y[m, n] = acc[m, n] * s_x[m] * s_w[n] (+ bias[n]), acc the exact int32 product.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

QMAX = 127
"""Largest magnitude of a quantized value: symmetric, so -128 never appears."""

FLT_MIN = np.float32(2.0**-126)
"""Smallest normal float32: a scale below it is subnormal and its reciprocal is not usable."""

TINY_SHIFT = 64
"""k of the tiny-row rule: rows with a subnormal scale are scaled by 2**TINY_SHIFT."""


def tiny_row_factor(scale: np.ndarray) -> np.ndarray:
    """float32 [R]: 2**TINY_SHIFT where the row scale is subnormal (tiny-row rule), else 1.

    NaN scales (rows with NaN/inf) get 1.
    """
    return np.where(scale < FLT_MIN, np.float32(2.0**TINY_SHIFT), np.float32(1)).astype(np.float32)


def row_scales(x32: np.ndarray) -> np.ndarray:
    """Per-row symmetric scale absmax/127 of a float32 [R, K] array, float32 [R].

    An all-zero (or empty) row gets 1 so that it quantizes to zeros, never NaN.
    A row holding NaN/inf gets NaN.
    """
    rows = x32.shape[0]
    if x32.shape[1] == 0:
        return np.ones(rows, dtype=np.float32)
    # NaN propagates; a signalling NaN (float16 NaNs from MLX arrive as such) would make numpy
    # warn "invalid value", which is no news for a row already known to be bad.
    with np.errstate(invalid="ignore"):
        absmax = np.max(np.abs(x32), axis=1)
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
    up = tiny_row_factor(scale)  # exact powers of two: see "Tiny activation rows" above
    inv = np.float32(1) / (np.where(bad, np.float32(1), scale) * up)
    if (up != 1).any():
        x32 = x32 * up[:, None]  # exact: |x| <= 127 * 2**-126 in these rows
    # NaN/inf rows give NaN/inf products here (zeroed below): no warning is due.
    with np.errstate(invalid="ignore", over="ignore"):
        q = round_half_away(x32 * inv[:, None])
    q = np.clip(q, -QMAX, QMAX, out=q)
    q[bad] = 0
    return q, scale


def quantize_activations_np(x32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_rows_f32 with int8 codes: (int8 [R, K], float32 [R])."""
    q, scale = quantize_rows_f32(x32)
    return q.astype(np.int8), scale


WEIGHT_BLOCK_BYTES = 1 << 20
"""Rows of a weight are quantized in blocks of about this many float32 bytes: each block's
passes (abs, max, divide, round, clip, cast) then run in the CPU's cache, not through memory."""


def quantize_weight_np(w: np.ndarray, threads: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-output-channel weight quantization of float [N, K] -> (int8 [N, K], float32 [N]).

    w is rounded to float32 first (a float32 w is used as it is). Rows are quantized in blocks
    (WEIGHT_BLOCK_BYTES) on `threads` threads (default: the CPUs, at most 16; numpy lets go of
    the GIL), each element with the same float32 operations whatever the block: the result does
    not depend on the blocking or the threads."""
    n, k = w.shape
    q = np.empty((n, k), dtype=np.int8)
    scale = np.empty(n, dtype=np.float32)
    rows = max(1, WEIGHT_BLOCK_BYTES // (4 * max(k, 1)))

    def block(r0: int) -> None:
        w32 = np.asarray(w[r0:r0 + rows], dtype=np.float32)
        s = row_scales(w32)
        with np.errstate(invalid="ignore"):  # a NaN row (callers refuse them) stays quiet, its cast too
            v = w32 / s[:, None]
            np.round(v, out=v)
            np.clip(v, -QMAX, QMAX, out=v)
            q[r0:r0 + rows] = v
        scale[r0:r0 + rows] = s

    starts = range(0, n, rows)
    threads = min(threads or os.cpu_count() or 1, 16, len(starts))
    if threads <= 1:
        for r0 in starts:
            block(r0)
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(block, starts))
    return q, scale
