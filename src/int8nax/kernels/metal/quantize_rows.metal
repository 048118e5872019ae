// int8nax per-token activation quantization, bit-for-bit int8nax.quant (cider's formula):
//   s[m] = max_k |x[m, k]| / QMAX   (float32; an all-zero row gets 1; a row with NaN/inf: NaN)
//   q[m, k] = clamp(round(x[m, k] * (1 / s[m])), -QMAX, QMAX)   (round: half away from zero)
// and q = 0 on a NaN/inf row, with int8nax.quant's tiny-row rule for rows whose scale is
// subnormal: q = round((x * 2^TINY) * (1 / (s * 2^TINY))).
//
// Nothing here depends on whether the GPU keeps or flushes float32 subnormals:
//   - the absmax, and the NaN/inf test, are taken on the magnitude bits (integers order like
//     the non-negative floats they encode);
//   - a scale that is subnormal or just above FLT_MIN (absmax below 2^(F32_MIN_EXP + bits of
//     QMAX)) is the integer quotient of absmax's significand by QMAX, rounded to nearest even on
//     the 2^F32_SUBNORMAL_EXP grid, which is float32's grid there: the correctly rounded
//     quotient, as its bits; above that the quotient is normal and precise::divide gives it;
//   - a row whose absmax is below 2^-TINY (every tiny row, and some rows with normal scales) is
//     scaled by 2^TINY exactly, from the bits of each value (decode_bits) and of the scale, so
//     every float operation then sees normal numbers; for a normal scale that scaling changes no
//     code (1 / (s 2^TINY) = (1 / s) 2^-TINY exactly, and x 2^TINY (1 / s) 2^-TINY rounds like
//     x (1 / s)); in the other rows a subnormal x has |x / s| < 2^-55 and its code is 0 whether
//     or not it is flushed.
// Divisions use precise::divide: plain `/` need not be correctly rounded even in safe math
// mode, and numpy's float32 division is.
//
// Built by int8nax/backends/metal.py with mx.fast.metal_kernel: the part above the
// "kernel body" line goes into `header` (after float_bits.metal), the part below is `source`.
//   inputs   x float16 | bfloat16 | float32 [M, K] (row-contiguous)
//   outputs  q int8 [M, K], s float32 [>= M] (entries past M are not written)
//   template QT (threads per row), SIMD, QMAX, TINY (tiling.metal_quant_dispatch)
//   launch   one threadgroup of QT threads per row: grid (QT, M, 1) threads

namespace int8nax {

// Bits needed for n: the quotient absmax / QMAX is below 2^(F32_MIN_EXP + 1) when absmax is
// below 2^(F32_MIN_EXP + bit_width(QMAX)), where the subnormal grid is float32's grid.
constexpr int bit_width(int n) {
  int b = 0;
  for (; n != 0; n >>= 1) {
    ++b;
  }
  return b;
}

// The float32 bits of absmax / qmax, correctly rounded, for absmax (bits) below
// 2^(F32_MIN_EXP + bit_width(qmax)): integer division on the 2^F32_SUBNORMAL_EXP grid.
inline uint small_quotient_bits(const uint absmax_bits, const uint qmax) {
  const Decoded d = decode_bits(absmax_bits);
  const ulong numerator = ulong(d.m) << uint(d.e - F32_SUBNORMAL_EXP);  // exact: d.e >= that grid
  const ulong q = numerator / qmax;
  const ulong twice_rest = 2 * (numerator - q * qmax);
  const bool up = twice_rest > qmax || (twice_rest == qmax && (q & 1) != 0);
  return uint(q + (up ? 1 : 0));  // 2^F32_FRACTION_BITS and above are FLT_MIN's bits onwards
}

// x * 2^k for x a float32's bits and k such that the result is normal: from the bits.
inline float scaled_up(const uint bits, const int k) {
  const Decoded d = decode_bits(bits);
  return d.m == 0.0f ? d.m : d.m * pow2(d.e + k);
}

template <int QT, int SIMD, int QMAX, int TINY, typename PtrX>
inline void quantize_row(PtrX x, device int8_t* q, device float* s, const int K, const uint row,
                         const uint tid, const uint sg, const uint lane,
                         threadgroup uint* part_max, threadgroup uint* part_bad) {
  constexpr int SIMDGROUPS = QT / SIMD;
  static_assert(QT % SIMD == 0, "whole simdgroups per row");
  // 2^TINY makes every tiny scale normal; rows above 2^-TINY have normal scales, and in them
  // a subnormal x has a code of 0.
  static_assert(TINY >= F32_FRACTION_BITS && TINY + bit_width(QMAX) + 1 <= -F32_MIN_EXP,
                "TINY out of the range where the tiny-row scaling changes no code");
  const ulong base = ulong(row) * ulong(K);

  // Absmax of the row as magnitude bits, and whether it holds NaN or inf.
  uint amax = 0u;
  bool bad = false;
  for (int k = int(tid); k < K; k += QT) {
    const uint mag = f32_bits(x[base + ulong(k)]) & F32_MAGNITUDE;
    bad = bad || mag >= F32_INF_BITS;
    amax = max(amax, mag);
  }
  amax = simd_max(amax);
  bad = simd_any(bad);
  if (lane == 0) {
    part_max[sg] = amax;
    part_bad[sg] = bad ? 1u : 0u;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint row_max = 0u;
  bool row_bad = false;
  for (int i = 0; i < SIMDGROUPS; ++i) {
    row_max = max(row_max, part_max[i]);
    row_bad = row_bad || part_bad[i] != 0u;
  }

  uint scale_bits = row_max < pow2_bits(F32_MIN_EXP + bit_width(QMAX))
                        ? small_quotient_bits(row_max, uint(QMAX))
                        : as_type<uint>(precise::divide(as_type<float>(row_max), float(QMAX)));
  if (scale_bits == 0u) {
    scale_bits = as_type<uint>(1.0f);  // an all-zero row quantizes to zeros, not NaN
  }
  // Rows below 2^-TINY are scaled by 2^TINY, values and scale alike (see the header).
  const bool tiny = row_max < pow2_bits(-TINY);
  const int shift = tiny ? TINY : 0;
  const float scale_up = tiny ? scaled_up(scale_bits, TINY) : as_type<float>(scale_bits);
  const float inv = precise::divide(1.0f, scale_up);
  for (int k = int(tid); k < K; k += QT) {
    const uint bits = f32_bits(x[base + ulong(k)]);
    const float v = shift != 0 ? scaled_up(bits, shift) : as_type<float>(bits);
    const float code = clamp(round(v * inv), -float(QMAX), float(QMAX));
    q[base + ulong(k)] = row_bad ? int8_t(0) : int8_t(code);
  }
  if (tid == 0) {
    s[row] = row_bad ? NAN : as_type<float>(scale_bits);
  }
}

}  // namespace int8nax

// ==== kernel body ====
threadgroup uint part_max[QT / SIMD];
threadgroup uint part_bad[QT / SIMD];
int8nax::quantize_row<QT, SIMD, QMAX, TINY>(
    x, q, s, x_shape[1], threadgroup_position_in_grid.y, thread_index_in_threadgroup,
    simdgroup_index_in_threadgroup, thread_index_in_simdgroup, part_max, part_bad);
