"""The float32 arithmetic of the W8A8 kernels in numpy: dequantize_model is the epilogue
(dequantize.metal) line by line, quantize_model the per-token quantization (quantize_core.metal,
quantize_rows.metal), also as a GPU that flushes float32 subnormals would run it."""

from __future__ import annotations

import numpy as np

from .. import tiling
from ..quant import QMAX, round_half_away


def _fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 fma(a, b, c) modelled in float64. a * b is exact in float64 (24 + 24 bits); the
    sum then rounds twice (float64, float32), which can differ from a true fma only by one
    float32 ulp of the result, and never for the two-product uses (fma(a, b, -fl(a*b)) is exact
    in float64 and representable in float32)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


# IEEE binary32 fields, as w8a8_gemm.metal derives them from FLT_MANT_DIG and FLT_MAX_EXP.
_FRACTION_BITS = np.finfo(np.float32).nmant  # 23
_BIAS = np.finfo(np.float32).maxexp - 1  # 127
_MIN_EXP = np.finfo(np.float32).minexp  # -126
_EXP_MASK = 2 * np.finfo(np.float32).maxexp - 1


def _pow2(k) -> np.ndarray:
    """2^k in float32 from its bits (pow2), k clipped to the normal range the kernel passes."""
    k = np.clip(np.asarray(k, np.int64), _MIN_EXP, _BIAS)
    return ((k + _BIAS).astype(np.uint32) << np.uint32(_FRACTION_BITS)).view(np.float32)


def _decode(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """decode(): x = m * 2^e, m an integer-valued float32 (exact, subnormals included)."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    biased = (bits >> np.uint32(_FRACTION_BITS)) & np.uint32(_EXP_MASK)
    hidden = np.uint32(1 << _FRACTION_BITS)
    sig = (bits & (hidden - np.uint32(1))) | np.where(biased != 0, hidden, np.uint32(0))
    e = np.where(biased != 0, biased.astype(np.int64), 1) - _BIAS - _FRACTION_BITS
    return np.copysign(sig.astype(np.float32), x).astype(np.float32), e


def _exponent_of(x: np.ndarray) -> np.ndarray:
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits >> np.uint32(_FRACTION_BITS)) & np.uint32(_EXP_MASK)).astype(np.int64) - _BIAS


def _scale2(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """scale2(): x * 2^k with one rounding, any finite x and integer k."""
    x = np.asarray(x, np.float32)
    m, e = _decode(x)
    zero = m == 0
    h = _exponent_of(np.where(zero, np.float32(1), m))
    m1 = (m * _pow2(-h)).astype(np.float32)
    f = h + e + np.asarray(k, np.int64)
    big = m1 * _pow2(_BIAS) * _pow2(np.minimum(f - _BIAS, _BIAS))
    mid = m1 * _pow2(f)
    small = (m1 * _pow2(_MIN_EXP)) * _pow2(np.maximum(f - _MIN_EXP, _MIN_EXP))
    out = np.where(f > _BIAS, big, np.where(f >= _MIN_EXP, mid, small))
    return np.where(zero, x, out).astype(np.float32)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    b_virtual = s - a
    a_virtual = s - b_virtual
    return s, (a - a_virtual) + (b - b_virtual)


def _add_bias(p_hi, tail, bias) -> np.ndarray:
    q_hi, q_lo = _two_sum(p_hi, bias)
    return np.where(np.isfinite(q_hi), q_hi + (q_lo + tail), q_hi).astype(np.float32)


def _tail(a_hi, a_lo, s_hi, s_lo):
    p_hi = a_hi * s_hi
    p_lo = _fma32(a_hi, s_hi, -p_hi)
    return p_hi, _fma32(a_hi, s_lo, _fma32(a_lo, s_hi, a_lo * s_lo)) + p_lo


def dequantize_model(acc, sx, sw, bias=None) -> np.ndarray:
    """float32 y = acc * sx * sw (+ bias) as dequantize.metal's dequantize() computes it: the
    usual path (normal scales, product in [2^-102, 2^79]) and dequantize_wide for every other
    finite input (integer significands, powers of two applied once at the end)."""
    f32 = np.float32
    acc = np.asarray(acc, dtype=np.int64)
    sx, sw = np.asarray(sx, dtype=f32), np.asarray(sw, dtype=f32)
    acc, sx, sw = np.broadcast_arrays(acc, sx, sw)
    has_bias = bias is not None
    b = np.broadcast_to(np.asarray(bias if has_bias else 0, dtype=f32), acc.shape)
    with np.errstate(all="ignore"):
        a_hi = acc.astype(f32)
        a_lo = (acc - a_hi.astype(np.int64)).astype(f32)
        # usual path
        s_hi = sx * sw
        s_lo = _fma32(sx, sw, -s_hi)
        p_hi, tail = _tail(a_hi, a_lo, s_hi, s_lo)
        usual = _add_bias(p_hi, tail, b) if has_bias else (p_hi + tail).astype(f32)
        tiny = f32(np.finfo(f32).tiny)
        take_usual = ((np.abs(sx) >= tiny) & (np.abs(sw) >= tiny) & (np.abs(s_hi) >= _pow2(_MIN_EXP + _FRACTION_BITS + 1))
                      & (np.abs(s_hi) <= _pow2(_BIAS - 2 * (_FRACTION_BITS + 1))))
        # dequantize_wide
        mx_, ex = _decode(np.where(np.isfinite(sx), sx, f32(1)))
        mw_, ew = _decode(np.where(np.isfinite(sw), sw, f32(1)))
        zero = (acc == 0) | (mx_ == 0) | (mw_ == 0)
        zero_val = a_hi * mx_ * mw_
        ws_hi = mx_ * mw_
        ws_lo = _fma32(mx_, mw_, -ws_hi)
        wp_hi, wtail = _tail(a_hi, a_lo, ws_hi, ws_lo)
        e = ex + ew
        no_bias_wide = _scale2(wp_hi + wtail, e)
        if has_bias:
            mb, eb = _decode(np.where(np.isfinite(b), b, f32(1)))
            g = np.maximum(e + _exponent_of(np.where(wp_hi == 0, f32(1), wp_hi)),
                           eb + _exponent_of(np.where(mb == 0, f32(1), mb)))
            y_s = _add_bias(_scale2(wp_hi, e - g), _scale2(wtail, e - g), _scale2(mb, eb - g))
            wide = np.where(b == 0, no_bias_wide, _scale2(y_s, g))
            wide = np.where(zero, zero_val + b, wide)
        else:
            wide = np.where(zero, zero_val, no_bias_wide)
        y = np.where(take_usual, usual, wide)
        # non-finite scales: IEEE; a non-finite bias is returned as it is
        special = (acc.astype(f32) * sx * sw).astype(f32)
        if has_bias:
            special = special + b
            y = np.where(np.isfinite(b), y, b)
        y = np.where(np.isfinite(sx) & np.isfinite(sw), y, special)
        return np.asarray(y, dtype=f32)


def _flushed(x: np.ndarray, flush: bool) -> np.ndarray:
    """x as an operand or result of a float operation on a GPU that flushes float32 subnormals."""
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0) * x, x).astype(np.float32) if flush else x


def _bit_width(n: int) -> int:
    return int(n).bit_length()


def quantize_model(x32: np.ndarray, flush_subnormals: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """quantize_rows.metal (row_scale and code_of of quantize_core.metal) on float32 [R, K]: (int8
    codes, float32 scales, int [R, K] how many times each code was written), with the kernel's thread partition (thread t of QT takes
    k = t, t + QT, ...) and its arithmetic: absmax on the magnitude bits, small scales as an
    integer quotient, rows below 2^-TINY scaled from their bits. flush_subnormals: every float
    operation reads and writes subnormals as zero, as a flushing GPU would (moves and bit casts
    do not)."""
    f32 = np.float32
    x32 = np.ascontiguousarray(x32, dtype=f32)
    rows, k_len = x32.shape
    d = tiling.metal_quant_dispatch(rows)
    qt, tiny_shift = d.threadgroup[0], dict(d.template)["TINY"]
    writes = np.zeros((rows, k_len), dtype=np.int64)
    for t in range(min(qt, k_len)):
        writes[:, t::qt] += 1
    inf_bits = np.uint32(_EXP_MASK << _FRACTION_BITS)
    mag_mask = inf_bits | np.uint32((1 << _FRACTION_BITS) - 1)
    bits = x32.view(np.uint32)
    mag = bits & mag_mask
    bad = (mag >= inf_bits).any(axis=1)
    amax = mag.max(axis=1, initial=np.uint32(0))

    def pow2_bits(k):
        return np.uint32((k + _BIAS) << _FRACTION_BITS)

    def decode_bits(b):
        biased = (b >> np.uint32(_FRACTION_BITS)) & np.uint32(_EXP_MASK)
        sig = (b & np.uint32((1 << _FRACTION_BITS) - 1)) | np.where(biased != 0, np.uint32(1 << _FRACTION_BITS), 0)
        e = np.where(biased != 0, biased.astype(np.int64), 1) - _BIAS - _FRACTION_BITS
        sign = np.where(b & ~mag_mask != 0, -1, 1)
        return (sign * sig.astype(np.int64)), e

    subnormal_exp = _MIN_EXP - _FRACTION_BITS
    small = amax < pow2_bits(_MIN_EXP + _bit_width(QMAX))
    m, e = decode_bits(amax)
    numer = np.where(small, m << np.clip(e - subnormal_exp, 0, 62), 0)
    q, rest = numer // QMAX, numer % QMAX
    up = (2 * rest > QMAX) | ((2 * rest == QMAX) & (q % 2 == 1))
    small_bits = (q + up).astype(np.uint32)
    with np.errstate(all="ignore"):
        big = (amax.view(f32) / f32(QMAX)).astype(f32)  # normal operands and result
    scale_bits = np.where(small, small_bits, big.view(np.uint32))
    scale_bits = np.where(scale_bits == 0, f32(1).view(np.uint32), scale_bits).astype(np.uint32)
    tiny = amax < pow2_bits(-tiny_shift)

    def scaled_up(b, k):
        mm, ee = decode_bits(b)
        with np.errstate(all="ignore"):  # rows that are not tiny: computed, then not taken
            return (mm.astype(f32) * _pow2(ee + k)).astype(f32)  # exact for tiny rows

    scale_up = np.where(tiny, scaled_up(scale_bits, tiny_shift), scale_bits.view(f32)).astype(f32)
    with np.errstate(all="ignore"):
        inv = (f32(1) / scale_up).astype(f32)
        v = np.where(tiny[:, None], scaled_up(bits, tiny_shift), _flushed(x32, flush_subnormals))
        prod = _flushed((v * inv[:, None]).astype(f32), flush_subnormals)
        codes = np.clip(round_half_away(prod), -QMAX, QMAX)
    codes[bad] = 0
    scale = scale_bits.view(f32).copy()
    scale[bad] = np.nan
    return codes.astype(np.int8), scale, writes
