// int8nax W8A8 dequantizing epilogue: y[m, n] = acc[m, n] * s_x[m] * s_w[n] (+ bias[n]),
// within 1 ulp of the float64 value, as the store of the W8A8 kernels (w8a8_gemm.metal on the
// NAX tile or the small-M walk, and w8a8_decode.metal).
//
// Global-scope code only: int8nax/backends/metal/source.py puts it into the `header` of those
// kernels, after float_bits.metal.
//
// Accuracy (the numerics spec): within 1 ulp of the float64 value for every finite input,
// without double. The usual case (both scales normal, their product between 2^-102 and 2^79)
// keeps the scale product as an exact pair (fma two-product), splits acc into a 24-bit head and
// an exact small tail and recovers the head product's rounding error by fma: one rounding plus
// a relative error below 2^-44. Every other finite case (a subnormal s_x from a tiny row, s_x
// near float32's max from bfloat16 activations near 1e36, a product out of range) goes through
// `dequantize_wide`: the scales are split exactly into integer significands and powers of two
// (from their bits, so no subnormal is ever flushed), the same error-free product is formed on
// the significands, and the power of two is applied at the end with a single rounding, so no
// intermediate overflows or underflows. docs/metal.md has the argument; nax_emulator models it.

namespace int8nax {

struct FloatPair {
  float hi;
  float lo;
};

// a * b = hi + lo exactly (fma recovers the rounding error), when the error is representable.
inline FloatPair two_prod(const float a, const float b) {
  const float hi = a * b;
  return {hi, fma(a, b, -hi)};
}

// a + b = hi + lo exactly (Knuth's branch-free two-sum), unless a + b overflows.
inline FloatPair two_sum(const float a, const float b) {
  const float s = a + b;
  const float b_virtual = s - a;
  const float a_virtual = s - b_virtual;
  return {s, (a - a_virtual) + (b - b_virtual)};
}

// x * 2^k for any finite x and int k, rounded once: the significand is brought to [1, 2)
// exactly, then one multiply lands it (exact when the result is normal, rounded once into the
// subnormals or to zero, inf when it overflows).
inline float scale2(const float x, const int k) {
  const Decoded d = decode(x);
  if (d.m == 0.0f) {
    return x;
  }
  const int h = exponent_of(d.m);
  const float m1 = d.m * pow2(-h);
  const int f = h + d.e + k;
  if (f > F32_BIAS) {
    return m1 * pow2(F32_BIAS) * pow2(min(f - F32_BIAS, F32_BIAS));
  }
  if (f >= F32_MIN_EXP) {
    return m1 * pow2(f);
  }
  return (m1 * pow2(F32_MIN_EXP)) * pow2(max(f - F32_MIN_EXP, F32_MIN_EXP));
}

// (p_hi + tail) + bias, with p_hi + bias formed exactly.
inline float add_bias(const float p_hi, const float tail, const float bias) {
  const FloatPair q = two_sum(p_hi, bias);
  if (!isfinite(q.hi)) {
    return q.hi;  // the rounded sum overflows: so does the exact one
  }
  return q.hi + (q.lo + tail);
}

// Every finite case the usual path cannot take: sx = mx 2^ex, sw = mw 2^ew with integer
// significands, acc * mx * mw formed as before (all terms integers below 2^80: no under- or
// overflow), and the powers of two applied once at the end. With a bias, both terms are first
// shifted so that the larger lies in [1, 2); a term that then underflows is below 2^-149 of
// the other and cannot matter.
template <bool HAS_BIAS>
inline float dequantize_wide(const int acc, const float a_hi, const float a_lo, const float sx,
                             const float sw, const float bias) {
  const Decoded dx = decode(sx);
  const Decoded dw = decode(sw);
  if (acc == 0 || dx.m == 0.0f || dw.m == 0.0f) {
    const float zero = a_hi * dx.m * dw.m;  // +-0 with the sign of acc * sx * sw
    return HAS_BIAS ? zero + bias : zero;
  }
  const FloatPair s = two_prod(dx.m, dw.m);
  const FloatPair p = two_prod(a_hi, s.hi);
  const float tail = fma(a_hi, s.lo, fma(a_lo, s.hi, a_lo * s.lo)) + p.lo;
  const int e = dx.e + dw.e;
  if (!HAS_BIAS || bias == 0.0f) {
    return scale2(p.hi + tail, e);
  }
  const Decoded db = decode(bias);
  const int g = max(e + exponent_of(p.hi), db.e + exponent_of(db.m));
  const float y = add_bias(scale2(p.hi, e - g), scale2(tail, e - g), scale2(db.m, db.e - g));
  return scale2(y, g);
}

template <bool HAS_BIAS>
inline float dequantize(const int acc, const float sx, const float sw, const float bias) {
  if (!isfinite(sx) || !isfinite(sw)) {
    const float y = float(acc) * sx * sw;  // a NaN row stays NaN (non-finite scales: IEEE)
    return HAS_BIAS ? y + bias : y;
  }
  if (HAS_BIAS && !isfinite(bias)) {
    return bias;  // a finite product does not change an infinite or NaN bias
  }
  const float a_hi = float(acc);              // acc rounded to 24 bits ...
  const float a_lo = float(acc - int(a_hi));  // ... and the exact rest: |a_lo| <= 2^6
  const FloatPair s = two_prod(sx, sw);       // the scale product, exactly (checked below)
  const float s_mag = fabs(s.hi);
  if (fabs(sx) >= FLT_MIN && fabs(sw) >= FLT_MIN && s_mag >= pow2(F32_MIN_EXP + FLT_MANT_DIG) &&
      s_mag <= pow2(F32_BIAS - 2 * FLT_MANT_DIG)) {
    const FloatPair p = two_prod(a_hi, s.hi);  // the leading product and its exact error
    // The remaining terms of (a_hi + a_lo)(s.hi + s.lo) - p.hi, each below 2^-23 |p.hi|.
    const float tail = fma(a_hi, s.lo, fma(a_lo, s.hi, a_lo * s.lo)) + p.lo;
    return HAS_BIAS ? add_bias(p.hi, tail, bias) : p.hi + tail;
  }
  return dequantize_wide<HAS_BIAS>(acc, a_hi, a_lo, sx, sw, bias);
}

template <typename OutT, bool HAS_BIAS, typename PtrSx, typename PtrSw, typename PtrBias>
struct DequantStore {
  PtrSx s_x;
  PtrSw s_w;
  PtrBias bias;
  device OutT* y;
  int N;
  void operator()(const int m, const int n, const int acc) const thread {
    float b = 0.0f;
    if constexpr (HAS_BIAS) {
      b = float(bias[n]);  // without a bias, `bias` is a one-element placeholder and is never read
    }
    y[ulong(m) * ulong(N) + ulong(n)] = OutT(dequantize<HAS_BIAS>(acc, s_x[m], s_w[n], b));
  }
};

}  // namespace int8nax

