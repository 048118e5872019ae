// int8nax W8A8 GEMM on NAX with the dequantization fused into the epilogue:
//   y[m, n] = acc[m, n] * s_x[m] * s_w[n] (+ bias[n]),  acc = sum_k q[m, k] * w[n, k] (int32)
//
// Built by int8nax/backends/metal.py with mx.fast.metal_kernel: the part above the
// "kernel body" line goes into `header` (after nax_gemm.metal), the part below is `source`.
//   inputs   q int8 [M, K] (activations quantized by quantize_rows.metal), w int8 [N, K],
//            s_x float32 [M], s_w float32 [N], bias float32 [N] (a [1] placeholder when
//            HAS_BIAS is false), params int32 [5] = (M, N, K, swizzle_log, tiles_m)
//   output   y OutT [M, N] (float16, bfloat16 or float32)
//   template BM, BN, BK, WM, WN, FM, FN, FK, SIMD, OutT, HAS_BIAS
//
// Accuracy: Metal has no double, yet the result must be within 1 ulp of the float64 value.
// The scale product is kept as an exact pair (fma two-product), acc is split into a 24-bit
// head and an exact small tail, and the head product's rounding error is recovered by fma:
// the float32 result then carries one rounding plus a relative error below 2^-44, so it is
// within 1 ulp of the exact value, and so is its conversion to half or bfloat. The argument
// is written out in docs/metal.md; int8nax/nax_emulator.py models it in numpy.

namespace int8nax {

struct FloatPair {
  float hi;
  float lo;
};

// a * b = hi + lo exactly (fma recovers the rounding error), unless a * b under- or overflows.
inline FloatPair two_prod(const float a, const float b) {
  const float hi = a * b;
  return {hi, fma(a, b, -hi)};
}

// a + b = hi + lo exactly (Knuth's branch-free two-sum).
inline FloatPair two_sum(const float a, const float b) {
  const float s = a + b;
  const float b_virtual = s - a;
  const float a_virtual = s - b_virtual;
  return {s, (a - a_virtual) + (b - b_virtual)};
}

template <bool HAS_BIAS>
inline float dequantize(const int acc, const float sx, const float sw, const float bias) {
  const FloatPair s = two_prod(sx, sw);         // the scale product, exactly
  const float a_hi = float(acc);                // acc rounded to 24 bits ...
  const float a_lo = float(acc - int(a_hi));    // ... and the exact rest: |a_lo| <= 2^6
  const FloatPair p = two_prod(a_hi, s.hi);     // the leading product and its exact error
  if (!isfinite(p.hi)) {
    return HAS_BIAS ? p.hi + bias : p.hi;       // a NaN row stays NaN, an overflow stays inf
  }
  // The remaining terms of (a_hi + a_lo)(s.hi + s.lo) - p.hi, each below 2^-23 |p.hi|.
  const float tail = fma(a_hi, s.lo, fma(a_lo, s.hi, a_lo * s.lo)) + p.lo;
  if (!HAS_BIAS) {
    return p.hi + tail;
  }
  const FloatPair q = two_sum(p.hi, bias);
  return q.hi + (q.lo + tail);
}

template <typename OutT, bool HAS_BIAS, typename PtrSx, typename PtrSw, typename PtrBias>
struct DequantStore {
  PtrSx s_x;
  PtrSw s_w;
  PtrBias bias;
  device OutT* y;
  int N;
  void operator()(const int m, const int n, const int acc) const {
    float b = 0.0f;
    if constexpr (HAS_BIAS) {
      b = bias[n];  // without a bias, `bias` is a one-element placeholder and is never read
    }
    y[ulong(m) * ulong(N) + ulong(n)] = OutT(dequantize<HAS_BIAS>(acc, s_x[m], s_w[n], b));
  }
};

}  // namespace int8nax

// ==== kernel body ====
const int8nax::DequantStore<OutT, HAS_BIAS, decltype(s_x), decltype(s_w), decltype(bias)> epilogue{
    s_x, s_w, bias, y, params[int8nax::PARAM_N]};
int8nax::nax_gemm<BM, BN, BK, WM, WN, FM, FN, FK, SIMD>(
    q, w, params, threadgroup_position_in_grid.xy, simdgroup_index_in_threadgroup, epilogue);
