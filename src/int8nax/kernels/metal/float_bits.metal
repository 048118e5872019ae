// int8nax float32 bit helpers: IEEE binary32 fields from the FLT_* macros, exact powers of two
// and exact (significand, exponent) splits computed with integer operations only, so that they
// give the same answer on a GPU that flushes float32 subnormals to zero as on one that keeps
// them (Metal documents neither; Apple GPUs expose no float-control setting).
//
// Global-scope code only: int8nax/backends/metal_source.py puts it into the `header` of the
// kernels that need it (quantize_rows.metal, w8a8_gemm.metal).

#include <metal_stdlib>

using namespace metal;

namespace int8nax {

// IEEE binary32 fields (FLT_MANT_DIG = 24, FLT_MAX_EXP = 128, FLT_MIN_EXP = -125).
constant constexpr const int F32_FRACTION_BITS = FLT_MANT_DIG - 1;          // stored fraction bits
constant constexpr const int F32_BIAS = FLT_MAX_EXP - 1;                    // exponent bias, max exponent
constant constexpr const int F32_MIN_EXP = FLT_MIN_EXP - 1;                 // exponent of FLT_MIN
constant constexpr const int F32_SUBNORMAL_EXP = F32_MIN_EXP - F32_FRACTION_BITS;  // weight of the last bit
constant constexpr const uint F32_EXP_MASK = uint(2 * FLT_MAX_EXP - 1);
constant constexpr const uint F32_HIDDEN = 1u << F32_FRACTION_BITS;
constant constexpr const uint F32_INF_BITS = F32_EXP_MASK << F32_FRACTION_BITS;  // and every NaN above
constant constexpr const uint F32_MAGNITUDE = F32_INF_BITS | (F32_HIDDEN - 1u);  // all but the sign

// 2^k, exact, for F32_MIN_EXP <= k <= F32_BIAS (built from its bits).
inline float pow2(const int k) {
  return as_type<float>(uint(k + F32_BIAS) << F32_FRACTION_BITS);
}

// The bits of a number exactly below 2^k (k a normal exponent): magnitudes compare as integers.
inline uint pow2_bits(const int k) {
  return uint(k + F32_BIAS) << F32_FRACTION_BITS;
}

// x = m * 2^e exactly, m an integer-valued float with |m| < 2^FLT_MANT_DIG and x's sign; from
// the bits (integer work only), so a subnormal x is split exactly. x finite.
struct Decoded {
  float m;
  int e;
};

inline Decoded decode_bits(const uint bits) {
  const uint biased = (bits >> F32_FRACTION_BITS) & F32_EXP_MASK;
  const uint significand = (bits & (F32_HIDDEN - 1u)) | (biased != 0u ? F32_HIDDEN : 0u);
  const int e = (biased != 0u ? int(biased) : 1) - F32_BIAS - F32_FRACTION_BITS;
  const float m = float(significand);  // exact: below 2^24
  return {(bits & ~F32_MAGNITUDE) != 0u ? -m : m, e};
}

inline Decoded decode(const float x) {
  return decode_bits(as_type<uint>(x));
}

// floor(log2 |x|) of a normal x.
inline int exponent_of(const float x) {
  return int((as_type<uint>(x) >> F32_FRACTION_BITS) & F32_EXP_MASK) - F32_BIAS;
}

// The float32 bits of an input element, without float arithmetic for the narrow types:
// bfloat16 is the top half of a float32; float16 values are all normal float32 numbers (its
// smallest subnormal is 2^-24), so the conversion cannot meet a float32 subnormal.
template <typename T>
inline uint f32_bits(const T v) {
  if constexpr (sizeof(T) == sizeof(float)) {
    return as_type<uint>(v);
  } else if constexpr (is_same_v<T, half>) {
    return as_type<uint>(float(v));
  } else {
    return uint(as_type<ushort>(v)) << ((sizeof(float) - sizeof(T)) * CHAR_BIT);
  }
}

}  // namespace int8nax
