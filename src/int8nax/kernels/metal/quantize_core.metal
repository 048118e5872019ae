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
// Global-scope code only: int8nax/backends/metal/source.py puts it into the `header` of the
// kernels that quantize (quantize_rows.metal, and w8a8_decode.metal, which quantizes in
// registers), after float_bits.metal. A row's scale comes from its absmax's bits (row_scale),
// each code from an element's bits and the row's scale (code_of): both kernels share them, so
// their codes and scales are the same bits.

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

// What a row's absmax (magnitude bits) and NaN/inf flag give: the scale's bits, and how each
// element is turned into its code (the tiny-row shift and the reciprocal).
struct RowScale {
  uint scale_bits;  // s = absmax / QMAX (1 for an all-zero row); NaN is written for a bad row
  int shift;        // TINY for a row below 2^-TINY, else 0
  float inv;        // 1 / (s * 2^shift), correctly rounded
  bool bad;         // the row holds NaN or inf: every code is 0 and s is NaN
};

template <int QMAX, int TINY>
inline RowScale row_scale(const uint row_max, const bool row_bad) {
  // 2^TINY makes every tiny scale normal; rows above 2^-TINY have normal scales, and in them
  // a subnormal x has a code of 0.
  static_assert(TINY >= F32_FRACTION_BITS && TINY + bit_width(QMAX) + 1 <= -F32_MIN_EXP,
                "TINY out of the range where the tiny-row scaling changes no code");
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
  return {scale_bits, shift, precise::divide(1.0f, scale_up), row_bad};
}

// The scale written for the row: NaN for a row with NaN or inf.
inline float scale_of(const RowScale rs) {
  return rs.bad ? NAN : as_type<float>(rs.scale_bits);
}

// The code of an element (its float32 bits) in a row of scale `rs`.
template <int QMAX>
inline int code_of(const uint bits, const RowScale rs) {
  const float v = rs.shift != 0 ? scaled_up(bits, rs.shift) : as_type<float>(bits);
  const float code = clamp(round(v * rs.inv), -float(QMAX), float(QMAX));
  return rs.bad ? 0 : int(code);
}

}  // namespace int8nax
