// W8A8 dequantization of an int32 accumulator into float32, float16 or bfloat16, within 1 ulp of
// the float64 model.
#pragma once

#include "../common.cuh"

namespace int8nax {

// ---- W8A8 dequantization in float32: y = acc * s_x * s_w (+ bias), within 1 ulp ----
//
// No double (the FP64 conversions made the fused GEMM 16-26% slower than the int32 one) and no
// int->float conversion instruction (16 per clock per SM on Hopper, against 128 for FFMA):
//  * acc = a.hi + a.lo exactly, a.hi = acc rounded to float: the two 16-bit halves of acc become
//    exact floats by the magic-number trick, one fma rounds their sum, Fast2Sum recovers the rest;
//  * s_x * s_w = s.hi + s.lo exactly (fma two-product), where it neither under- nor overflows;
//  * a.hi * s.hi = p.hi + p.lo exactly; the other cross terms, each below 2^-23 |y|, are summed
//    by two fma (a.lo * s.lo < 2^-48 |y| is dropped); the bias joins by an exact two-sum.
// The float32 result then carries one rounding plus an error below 2^-44 |acc * s_x * s_w|,
// which is below 2^-36 of the result unless the bias cancels most of the product; then
// (rarely) combine_cancelled sums every term exactly. So y is within 1 ulp of the float64
// model; its conversion to float16/bfloat16 adds one more rounding of the nearly exact float32
// value, still within 1 ulp of the model.
// A scale product outside [2^-100, 2^90] (a subnormal s_x, a bfloat16 row near 1e36) or a
// non-finite or zero scale takes dequantize_wide: the same arithmetic on the mantissas
// (frexpf), the bias scaled to meet them, and one ldexpf at the end, so no intermediate
// under- or overflows and inf appears only where the rounded result exceeds float32.

struct FloatPair {
  float hi;
  float lo;
};

// a * b = hi + lo exactly, unless a * b under- or overflows.
__device__ __forceinline__ FloatPair two_prod(float a, float b) {
  const float hi = __fmul_rn(a, b);
  return {hi, __fmaf_rn(a, b, -hi)};
}

// a + b = hi + lo exactly (Knuth's branch-free two-sum; the intrinsics forbid reassociation).
__device__ __forceinline__ FloatPair two_sum(float a, float b) {
  const float s = __fadd_rn(a, b);
  const float bv = __fsub_rn(s, a);
  const float av = __fsub_rn(s, bv);
  return {s, __fadd_rn(__fsub_rn(a, av), __fsub_rn(b, bv))};
}

// v = 65536 h + l exactly, both halves exact floats (h in [-2^15, 2^15), l in [0, 2^16)), by the
// magic-number trick: no conversion instruction.
struct IntHalves {
  float h;
  float l;
};

__device__ __forceinline__ IntHalves int_halves(int v) {
  // 0x4B400000 = 1.5 * 2^23: adding |j| < 2^22 to its bits gives the float 1.5 * 2^23 + j.
  return {__fsub_rn(__int_as_float(0x4B400000 + (v >> 16)), 12582912.0f),
          __fsub_rn(__int_as_float(0x4B000000 | (v & 0xFFFF)), 8388608.0f)};
}

// v rounded to float32 (to nearest even): one fma rounds 65536 h + l = v.
__device__ __forceinline__ float round_int(int v) {
  const IntHalves p = int_halves(v);
  return __fmaf_rn(p.h, 65536.0f, p.l);
}

// acc = hi + lo exactly with hi = acc rounded to float32 (|lo| <= 64), in six integer/float
// operations and no conversion instruction.
__device__ __forceinline__ FloatPair split_int(int v) {
  const IntHalves p = int_halves(v);
  const float hi = __fmaf_rn(p.h, 65536.0f, p.l);                  // one rounding of 65536 h + l = v
  return {hi, __fsub_rn(p.l, __fmaf_rn(p.h, -65536.0f, hi))};     // Fast2Sum (|65536 h| > l or h = 0)
}

// a * s + b after cancellation (|a * s + b| < 2^-8 |a * s|), where the fast sum's error could
// exceed half an ulp of the small result: every cross term as an exact pair, summed by a
// cascade of two-sums (Ogita-Rump-Oishi Sum2), so the error is one rounding plus 2^-60 |a * s|.
__device__ __noinline__ float combine_cancelled(FloatPair a, FloatPair s, FloatPair p, FloatPair q) {
  const FloatPair t1 = two_prod(a.hi, s.lo);
  const FloatPair t2 = two_prod(a.lo, s.hi);
  const float terms[7] = {q.lo, p.lo, t1.hi, t2.hi, t1.lo, t2.lo, __fmul_rn(a.lo, s.lo)};
  float sum = q.hi;
  float err = 0.0f;
#pragma unroll
  for (int i = 0; i < 7; ++i) {
    const FloatPair r = two_sum(sum, terms[i]);
    sum = r.hi;
    err = __fadd_rn(err, r.lo);
  }
  return __fadd_rn(sum, err);
}

// a * s (+ b): a and s exact pairs with |a.lo| <= 2^-24 |a.hi|, |s.lo| <= 2^-24 |s.hi|.
template <bool HAS_BIAS>
__device__ __forceinline__ float combine(FloatPair a, FloatPair s, float b) {
  const FloatPair p = two_prod(a.hi, s.hi);
  const float tail = __fmaf_rn(a.hi, s.lo, __fmaf_rn(a.lo, s.hi, p.lo));
  if (!HAS_BIAS) {
    return __fadd_rn(p.hi, tail);
  }
  const FloatPair q = two_sum(p.hi, b);
  if (isinf(q.hi)) {
    return q.hi;  // q.lo would be NaN; the exact value overflows as well
  }
  if (fabsf(q.hi) < 0x1p-8f * fabsf(p.hi)) {
    return combine_cancelled(a, s, p, q);  // rare: the bias cancels most of the product
  }
  return __fadd_rn(q.hi, __fadd_rn(q.lo, tail));
}

// The rare scales (see above): exponents apart, one ldexpf at the end.
template <bool HAS_BIAS>
__device__ __noinline__ float dequantize_wide(int acc, float sx, float sw, float b) {
  if (!isfinite(sx) || !isfinite(sw) || acc == 0 || sx == 0.0f || sw == 0.0f) {
    // NaN, inf or an exact zero product: what float64 gives (0 * finite = 0, NaN/inf propagate).
    const float y = (isfinite(sx) && isfinite(sw)) ? 0.0f : __fmul_rn(__fmul_rn(static_cast<float>(acc), sx), sw);
    return HAS_BIAS ? __fadd_rn(y, b) : y;
  }
  if (HAS_BIAS && !isfinite(b)) {
    return b;  // a finite product plus inf or NaN
  }
  int ex;
  int ew;
  const float fx = frexpf(sx, &ex);  // |fx|, |fw| in [1/2, 1), exact also for subnormal scales
  const float fw = frexpf(sw, &ew);
  const int e = ex + ew;
  // |acc * fx * fw| in [1/4, 2^31): nothing below can under- or overflow.
  const FloatPair s = two_prod(fx, fw);
  const FloatPair a = split_int(acc);
  float r;
  if (HAS_BIAS && b != 0.0f) {
    int eb;
    frexpf(b, &eb);
    if (eb - e > 64) {
      return b;  // |acc s_x s_w| < 2^(31 + e) < 2^-32 |b|: below half an ulp of b
    }
    // Exponent >= -200 - e ... <= 64: scaled exactly, or (far below the product) to zero.
    const float bs = eb - e < -200 ? 0.0f : ldexpf(b, -e);
    r = combine<true>(a, s, bs);
  } else {
    r = combine<false>(a, s, 0.0f);
  }
  return ldexpf(r, e);  // exact, or the one rounding into float32's subnormals, or inf
}

template <bool HAS_BIAS>
__device__ __forceinline__ float dequantize(int acc, float sx, float sw, float b) {
  const FloatPair s = two_prod(sx, sw);
  const float mag = fabsf(s.hi);
  if (!(mag >= 0x1p-100f && mag <= 0x1p90f)) {  // also NaN
    return dequantize_wide<HAS_BIAS>(acc, sx, sw, b);
  }
  return combine<HAS_BIAS>(split_int(acc), s, b);
}

// The common case without a branch: y as dequantize computes it when the scale product is in
// [2^-100, 2^90], the bias does not cancel most of the product and nothing overflows; `rare`
// says that one of these fails and y must come from dequantize instead.
template <bool HAS_BIAS>
__device__ __forceinline__ float dequantize_fast(int acc, float sx, float sw, float b, bool& rare) {
  const FloatPair s = two_prod(sx, sw);
  const float mag = fabsf(s.hi);
  const FloatPair a = split_int(acc);
  const FloatPair p = two_prod(a.hi, s.hi);
  const float tail = __fmaf_rn(a.hi, s.lo, __fmaf_rn(a.lo, s.hi, p.lo));
  const bool in_range = (mag >= 0x1p-100f) & (mag <= 0x1p90f);  // false for NaN
  if (!HAS_BIAS) {
    rare = !in_range;
    return __fadd_rn(p.hi, tail);
  }
  const FloatPair q = two_sum(p.hi, b);
  const float aq = fabsf(q.hi);
  rare = !(in_range & (aq >= 0x1p-8f * fabsf(p.hi)) & (aq < __int_as_float(0x7f800000)));
  return __fadd_rn(q.hi, __fadd_rn(q.lo, tail));
}

// ---- W8A8 into float16 / bfloat16 (DequantStore's NARROW path): float32 without the full EFTs ----
//
// The 1-ulp contract is in the output type's ulps, and float32 has 13 (bfloat16: 16) bits to
// spare: a float32 y32 with |y32 - y| below 2^-14 |y| rounds to the same value of the output type
// as the float64 model, or to its neighbour (both types' steps exceed 2^-11 |y|, resp. 2^-8 |y|).
//  * No bias: y32 = fl(fl(acc) * fl(s_x * s_w)), three roundings: |y32 - y| < 2^-22 |y|.
//  * Bias: a product rounded before the bias is added would leave an error of 2^-24 |acc s_x s_w|,
//    which a cancelling bias makes large against y, and in typical layers the bias cancels that
//    closely for a fraction of a percent of the values (dequantize_fast sends those to the exact
//    path). So acc = a.hi + a.lo (split_int) and s_x s_w = s.hi + s.lo (two_prod) stay exact,
//    u = fl(a.hi * s.hi + b) is one fma, the small terms v = a.lo s.hi + a.hi s.lo go in one fma
//    (a.lo s.lo < 2^-48 |acc s_x s_w| is dropped) and y32 = fl(u + v): |y32 - y| < 2^-23 |y| +
//    2^-45 |acc s_x s_w|, below 2^-16 |y| unless |y32| < 2^-28 |b| (rare: the exact path).
// `rare` also sends to the exact path (dequantize) a |y32| at or past the output's largest
// finite value (NaN and inf included), where rounding decides overflow, and for bfloat16, whose
// range is float32's, a scale product below 2^-100 (the bounds above need it normal and its
// two_prod exact). A float16 output needs no such check: such a product is below 2^31 * 2^-100,
// and its error far below float16's smallest step (2^-24).
template <typename TOut>
struct NarrowOutput {
  static constexpr bool narrow = false;  // float32: the output's ulps are float32's (dequantize_fast)
  static constexpr float max_abs = 0.0f;
  static constexpr float min_scale = 0.0f;
};

template <>
struct NarrowOutput<__half> {
  static constexpr bool narrow = true;
  static constexpr float max_abs = 65504.0f;   // float16's largest finite value
  static constexpr float min_scale = 0.0f;
};

template <>
struct NarrowOutput<__nv_bfloat16> {
  static constexpr bool narrow = true;
  static constexpr float max_abs = 0x1p127f;   // below bfloat16's largest finite value
  static constexpr float min_scale = 0x1p-100f;
};

template <typename TOut, bool HAS_BIAS>
__device__ __forceinline__ float dequantize_narrow(int acc, float sx, float sw, float b, bool& rare) {
  float y;
  float s;
  if (HAS_BIAS) {
    const FloatPair sp = two_prod(sx, sw);
    const FloatPair a = split_int(acc);
    const float u = __fmaf_rn(a.hi, sp.hi, b);
    const float v = __fmaf_rn(a.lo, sp.hi, __fmul_rn(a.hi, sp.lo));
    y = __fadd_rn(u, v);
    s = sp.hi;
  } else {
    s = __fmul_rn(sx, sw);
    y = __fmul_rn(round_int(acc), s);
  }
  const float ay = fabsf(y);
  bool ok = ay < NarrowOutput<TOut>::max_abs;  // false for NaN and inf
  if (NarrowOutput<TOut>::min_scale > 0.0f) {
    ok = ok & (fabsf(s) >= NarrowOutput<TOut>::min_scale);
  }
  if (HAS_BIAS) {
    ok = ok & (ay >= __fmul_rn(0x1p-28f, fabsf(b)));
  }
  rare = !ok;
  return y;
}

__device__ __forceinline__ void store_rounded(float* p, float y) {
  *p = y;
}
__device__ __forceinline__ void store_rounded(__half* p, float y) {
  *p = __float2half_rn(y);
}
__device__ __forceinline__ void store_rounded(__nv_bfloat16* p, float y) {
  *p = __float2bfloat16_rn(y);
}
// Two neighbours in one store (p aligned to twice the element size).
__device__ __forceinline__ void store_rounded2(float* p, float y0, float y1) {
  *reinterpret_cast<float2*>(p) = make_float2(y0, y1);
}
__device__ __forceinline__ void store_rounded2(__half* p, float y0, float y1) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(y0, y1);
}
__device__ __forceinline__ void store_rounded2(__nv_bfloat16* p, float y0, float y1) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(y0, y1);
}

}  // namespace int8nax
