// int8nax float32 bit helpers: IEEE binary32 fields from the FLT_* macros, exact powers of two
// and exact (significand, exponent) splits computed with integer operations only, so that they
// give the same answer on a GPU that flushes float32 subnormals to zero as on one that keeps
// them (Metal documents neither; Apple GPUs expose no float-control setting).
//
// Global-scope code only: int8nax/backends/metal/source.py puts it into the `header` of the
// kernels that need it (the quantizer, quantize_core.metal, and the W8A8 epilogue,
// dequantize.metal, with the kernels that include them).

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

// IEEE binary16 fields (HALF_MANT_DIG = 11, HALF_MAX_EXP = 16).
constant constexpr const int F16_FRACTION_BITS = HALF_MANT_DIG - 1;
constant constexpr const uint F16_EXP_MASK = uint(2 * HALF_MAX_EXP - 1);
constant constexpr const uint F16_HIDDEN = 1u << F16_FRACTION_BITS;
constant constexpr const int F16_TO_F32_BIAS = (FLT_MAX_EXP - 1) - (HALF_MAX_EXP - 1);
constant constexpr const int F16_TO_F32_SHIFT = F32_FRACTION_BITS - F16_FRACTION_BITS;

// The float32 bits of a float16's bits, exactly, with integer operations only (so a GPU that
// flushes subnormal halves in conversions cannot change a code): a subnormal half is
// normalized by shifting its fraction up to the hidden bit.
inline uint f32_bits_of_half(const ushort h) {
  const uint sign = uint(h >> (sizeof(half) * CHAR_BIT - 1)) << (sizeof(float) * CHAR_BIT - 1);
  const uint e = (uint(h) >> F16_FRACTION_BITS) & F16_EXP_MASK;
  uint f = uint(h) & (F16_HIDDEN - 1u);
  if (e == F16_EXP_MASK) {
    return sign | F32_INF_BITS | (f << F16_TO_F32_SHIFT);  // inf, NaN (payload kept)
  }
  if (e != 0u) {
    return sign | ((e + uint(F16_TO_F32_BIAS)) << F32_FRACTION_BITS) | (f << F16_TO_F32_SHIFT);
  }
  if (f == 0u) {
    return sign;
  }
  int shift = 0;
  while ((f & F16_HIDDEN) == 0u) {
    f <<= 1;
    ++shift;
  }
  const uint biased = uint(1 - shift + F16_TO_F32_BIAS);  // the half's 2^(1 - bias), normalized
  return sign | (biased << F32_FRACTION_BITS) | ((f & (F16_HIDDEN - 1u)) << F16_TO_F32_SHIFT);
}

// The float32 bits of an input element, without float arithmetic: float32 as it is, bfloat16
// as the top half of a float32, float16 converted on its bits.
template <typename T>
inline uint f32_bits(const T v) {
  if constexpr (sizeof(T) == sizeof(float)) {
    return as_type<uint>(v);
  } else if constexpr (is_same_v<T, half>) {
    return f32_bits_of_half(as_type<ushort>(v));
  } else {
    return uint(as_type<ushort>(v)) << ((sizeof(float) - sizeof(T)) * CHAR_BIT);
  }
}

}  // namespace int8nax
