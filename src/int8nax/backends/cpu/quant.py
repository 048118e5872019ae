"""Fast CPU quantization and dequantization for the W8A8 path (numpy, few passes).

int8nax.quant is the definition of the numerics; this module computes the same codes
and scales bit for bit in fewer passes over memory (tests/test_cpu_quant.py holds it to
that on random, tie, NaN/inf and tiny rows), and hands every row it does not treat
itself (NaN/inf rows, rows whose scale is below float32's smallest normal) to
quant.quantize_activations_np, so such rows follow the definition whatever it becomes.

Rounding half away from zero in one add and one truncation: for float32 v with
|v| < 2**22, trunc(v + copysign(0.5 - 2**-25, v)) equals round_half_away(v). Adding
exactly 0.5 is wrong for v = 0.5 - 2**-25 (the sum rounds up to 1.0); adding the float32
just below 0.5 sends true ties n + 0.5 to n + 1 (the sum n + 1 - 2**-25 rounds up, for
n = 0 by ties-to-even) and leaves every value below a tie below the next integer. Checked
on every float32 in [0, 128] (tests/test_cpu_quant.py samples it; docs/results/cpu.md
says how the exhaustive pass ran). A regular row's codes need no clip: |x| <= absmax
makes |x * fl(1/fl(absmax/127))| <= 127 * (1 + 2**-24)**3 < 127.5.

Dequantization y = acc * s_x[m] * s_w[n] (+ bias[n]) takes one of two routes:
- float32, for a float16/bfloat16 result without bias and with every s_x in
  [2**-126, 2**96]: each intermediate is a normal float32 (|acc| < 2**31), three roundings
  keep the value within 2**-22 relative, so the result is within 0.5 ulp + 2**-11 ulp of
  the float64 value; elements within 2**-12 of the dtype's largest value are redone from
  float64, so inf appears only where the float64 value rounds beyond the dtype.
- float64 otherwise (float32 out; a bias, which may cancel the product so that float32's
  error is many ulps of the small result; extreme scales): no intermediate can overflow or
  lose bits (|acc| < 2**31, float32 scales in [2**-149, 2**128)). The value is rounded once
  to float32 and then to float16/bfloat16; rounding twice differs from rounding once only
  where the float32 value is exactly halfway between two values of the output dtype (or,
  for float16, in its subnormal range), and those few elements are rounded from float64
  directly: the result is the correctly rounded float64 value.
float32 -> bfloat16 is MLX's conversion; float32 -> float16 is the engine's (see dequantize).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import mlx.core as mx
import numpy as np

from ... import quant

_BELOW_HALF = np.float32(0.5) - np.float32(2.0**-25)
_SMALLEST_NORMAL = np.float32(2.0**-126)


def to_float32(x: mx.array, widen_float16=None) -> np.ndarray:
    """numpy float32 [R, K] of an MLX float array. bfloat16 is widened by MLX (faster than
    numpy); float16 by widen_float16(numpy float16 array) when given (the onnx engine's,
    ~7x MLX's), else by MLX."""
    if x.dtype == mx.float16 and widen_float16 is not None:
        return widen_float16(np.ascontiguousarray(x))
    if x.dtype != mx.float32:
        x = x.astype(mx.float32)
    return np.asarray(x)


def quantize_rows(x32: np.ndarray, overwrite: bool = False, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per-token codes and scales of float32 [R, K]: (int8 [R, K], float32 [R]), bit-identical
    to quant.quantize_activations_np. overwrite=True lets it use x32 (C-contiguous, owned by
    the caller) as its work buffer, sparing an allocation of x32's size. threads > 1 splits
    large inputs into row blocks quantized on that many threads (rows are independent)."""
    rows, k = x32.shape
    if rows == 0 or k == 0:
        return quant.quantize_activations_np(x32)
    overwrite = overwrite and x32.flags.c_contiguous and x32.flags.writeable
    q = np.empty((rows, k), np.int8)
    scale = np.empty(rows, np.float32)
    in_row_blocks(rows, k, threads, lambda lo, hi: _quantize_block(x32[lo:hi], q[lo:hi], scale[lo:hi], overwrite))
    return q, scale


def _quantize_block(x32: np.ndarray, q: np.ndarray, scale: np.ndarray, overwrite: bool) -> None:
    """quantize_rows on one block of rows, into q and scale."""
    # max(max x, -min x) is max |x| without a temporary |x|; NaN propagates through both.
    absmax = np.maximum(x32.max(axis=1), -x32.min(axis=1))
    scale[:] = absmax / np.float32(quant.QMAX)
    scale[scale == 0] = 1
    regular = np.isfinite(scale) & (scale >= _SMALLEST_NORMAL)
    inv = np.float32(1) / np.where(regular, scale, np.float32(1))
    inv[~regular] = 0
    odd = np.flatnonzero(~regular)
    odd_rows = np.array(x32[odd]) if odd.size else None  # before x32 may be overwritten
    with np.errstate(invalid="ignore"):  # inf * 0 in rows handled below
        v = np.multiply(x32, inv[:, None], out=x32 if overwrite else None)
        # copysign(0.5 - 2**-25, v) from v's sign bit: integer passes, ~3x numpy's copysign.
        half = np.bitwise_and(v.view(np.uint32), np.uint32(0x80000000))
        half |= _BELOW_HALF.view(np.uint32)
        v += half.view(np.float32)
        np.copyto(q, v, casting="unsafe")  # float -> int8 truncates toward zero
    if odd.size:
        with np.errstate(all="ignore"):  # the definition's result, without its warnings
            q_odd, s_odd = quant.quantize_activations_np(odd_rows)
        q[odd] = q_odd
        scale[odd] = s_odd


_PARALLEL_MIN_ELEMENTS = 1 << 18
"""Below this many elements a second thread costs more than it saves."""
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def in_row_blocks(rows: int, cols: int, threads: int, work) -> None:
    """work(lo, hi) over [0, rows) in `threads` row blocks at once (numpy releases the GIL
    in its loops); one call when the array is small or threads <= 1."""
    blocks = min(threads, rows, max(1, rows * cols // _PARALLEL_MIN_ELEMENTS))
    if blocks <= 1:
        work(0, rows)
        return
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers < blocks:
            _pool = ThreadPoolExecutor(max_workers=blocks, thread_name_prefix="int8nax-cpu")
        pool = _pool
    edges = [rows * i // blocks for i in range(blocks + 1)]
    for future in [pool.submit(work, lo, hi) for lo, hi in zip(edges[:-1], edges[1:])]:
        future.result()


def _round_f64_to(y64: np.ndarray, dtype) -> np.ndarray:
    """Correctly rounded float16/bfloat16 values of float64 y64 (1-D), as float32."""
    if dtype == mx.float16:
        with np.errstate(over="ignore"):
            return y64.astype(np.float16).astype(np.float32)
    # bfloat16: round to odd into float32 (exact enough: 16 spare bits), then to nearest even.
    with np.errstate(over="ignore", invalid="ignore"):
        r = y64.astype(np.float32)
        back = r.astype(np.float64)
    bits = r.view(np.uint32).copy()
    inexact = back != y64
    even = (bits & 1) == 0
    fix = inexact & even & np.isfinite(back)
    # r is even and inexact: the odd neighbour on y64's side. Away from zero is +1 in the
    # magnitude bits, toward zero -1; r = +-inf from overflow needs no fix (beyond bfloat16 too).
    away = np.abs(y64) > np.abs(back)
    bits[fix & away] += 1
    bits[fix & ~away] -= 1
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16) << 16
    keep = ~np.isfinite(r)  # inf and NaN stay as they are
    rounded[keep] = r.view(np.uint32)[keep]
    return rounded.astype(np.uint32).view(np.float32)


def _fix_double_rounding(y32: np.ndarray, y64: np.ndarray, dtype) -> None:
    """Replace, in place, the float32 values whose rounding to `dtype` would differ from
    rounding y64 directly (see the module docstring)."""
    bits = y32.view(np.uint32)
    if dtype == mx.bfloat16:
        suspect = (bits & np.uint32(0xFFFF)) == np.uint32(0x8000)
    else:
        suspect = (bits & np.uint32(0x1FFF)) == np.uint32(0x1000)
        magnitude = bits & np.uint32(0x7FFFFFFF)
        magnitude -= np.uint32(1)  # zero wraps to 2**32 - 1: exact, not suspect
        suspect |= magnitude < np.uint32(0x38800000 - 1)  # below float16's smallest normal 2**-14
    where = np.flatnonzero(suspect)
    if where.size:
        y32.reshape(-1)[where] = _round_f64_to(y64.reshape(-1)[where], dtype)


_NEAR_MAX = {mx.float16: np.float32(65504 * (1 - 2**-12)), mx.bfloat16: np.float32(3.3895313892515355e38 * (1 - 2**-12))}


def _float32_is_enough(scale_x: np.ndarray) -> bool:
    """Whether float32 arithmetic gives a float16/bfloat16 product within 1 ulp: every
    intermediate normal and finite (|acc| < 2**31, so acc * s_x lies in [2**-126, 2**127]
    for acc != 0) and the final value within 3 float32 roundings (2**-22 relative, far
    below half an ulp of float16 or bfloat16)."""
    if scale_x.size == 0:
        return True
    lo, hi = scale_x.min(), scale_x.max()  # NaN makes both comparisons False
    return bool(lo >= _SMALLEST_NORMAL) and bool(hi <= np.float32(2.0**96))


def _dequantize_float32(acc, scale_x, scale_w, dtype, to_float16, transposed, threads) -> mx.array:
    """The float32 route of dequantize (no bias, float16/bfloat16 out, moderate s_x)."""
    # Work on the memory layout: rows of acc, or of acc.T when acc is a transposed view.
    a = acc.T if transposed else np.ascontiguousarray(acc)
    s_row, s_col = (scale_w, scale_x) if transposed else (scale_x, scale_w)
    y = np.empty(a.shape, np.float32)
    limit = _NEAR_MAX[dtype]

    def block(lo, hi):
        # int32 -> float32 inside the first multiply (one pass instead of a cast and a multiply).
        yb = y[lo:hi]
        with np.errstate(over="ignore"):  # a product past float32's range is recomputed below
            np.multiply(a[lo:hi], s_row[lo:hi, None], out=yb, dtype=np.float32, casting="unsafe")
            yb *= s_col[None, :]
        # Within 2**-22 of the dtype's largest value the last float32 rounding could send a
        # finite result to inf: those few elements are recomputed from float64. Two reductions
        # first (no temporary; fmax/fmin skip NaN, which would hide a large value from max/min).
        if np.fmax.reduce(yb, axis=None) >= limit or np.fmin.reduce(yb, axis=None) <= -limit:
            r, c = np.nonzero(np.abs(yb) >= limit)
            exact = a[lo:hi][r, c].astype(np.float64) * s_row[lo:hi][r].astype(np.float64) * s_col[c].astype(np.float64)
            yb[r, c] = _round_f64_to(exact, dtype)

    in_row_blocks(y.shape[0], y.shape[1], threads, block)
    if dtype == mx.float16:
        out = mx.array(to_float16(y))
    else:
        out = mx.array(y).astype(mx.bfloat16)
    return out.T if transposed else out


def _float16_numpy(y32: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # beyond float16: inf, as documented
        return y32.astype(np.float16)


def dequantize(acc: np.ndarray, scale_x: np.ndarray, scale_w: np.ndarray, bias, dtype,
               to_float16=_float16_numpy, threads: int = 1) -> mx.array:
    """y [M, N] = acc * scale_x[m] * scale_w[n] (+ bias[n]) in `dtype`, correctly rounded
    from float64.

    acc: int32 [M, N] (C-contiguous, or the transpose of a C-contiguous [N, M]); scale_x
    float32 [M]; scale_w float32 [N]; bias None or float [N] (numpy). to_float16: a
    round-to-nearest-even float32 -> float16 conversion of a C-contiguous array (numpy's by
    default; the onnx engine's is ~20x faster, and MLX's CPU one is as slow as numpy's).
    threads > 1 runs the float32 route's passes on that many threads, in row blocks.
    """
    transposed = not acc.flags.c_contiguous and acc.T.flags.c_contiguous
    if bias is None and dtype != mx.float32 and _float32_is_enough(scale_x):
        return _dequantize_float32(acc, scale_x, scale_w, dtype, to_float16, transposed, threads)
    sx = scale_x.astype(np.float64)
    sw = scale_w.astype(np.float64)
    if transposed:  # work on [N, M] in memory order, same arithmetic
        y64 = acc.T * sx[None, :]
        y64 *= sw[:, None]
        if bias is not None:
            y64 += bias.astype(np.float64)[:, None]
    else:
        y64 = np.ascontiguousarray(acc) * sx[:, None]
        y64 *= sw[None, :]
        if bias is not None:
            y64 += bias.astype(np.float64)[None, :]
    with np.errstate(over="ignore"):  # beyond float32: inf, as documented
        y32 = y64.astype(np.float32)
    if dtype != mx.float32:
        _fix_double_rounding(y32, y64, dtype)
    if dtype == mx.float16:
        out = mx.array(to_float16(y32))
    else:
        out = mx.array(y32)
        if dtype == mx.bfloat16:
            out = out.astype(mx.bfloat16)
    return out.T if transposed else out
