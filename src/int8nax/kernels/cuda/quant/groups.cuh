// How the quantizers hold an 8-value group of x (16 bytes of float16 / bfloat16, 32 of float32)
// and fold it into a row's absolute maximum, kept as ordered bits (below). Shared by the
// quantization kernel (quant/quantize.cuh), the SwiGLU ones and the GEMV that quantizes x itself
// (quant/gemv_quantize.cuh), so that all of them see the same values and the same maximum.
#pragma once

#include "../common.cuh"

namespace int8nax {

// ---- the absolute maximum as ordered bits ----
//
// With the sign bit cleared, the bits of an IEEE value compare as unsigned integers in the order
// of the values, and every NaN compares above +inf. The row maximum is kept that way (as the
// float32 bits of |x|, or the 16-bit patterns of |x| for 2-byte types): an integer max, exact for
// subnormals, and a row holds NaN or inf exactly when its maximum's bits are >= those of +inf.

constexpr uint32_t FLOAT_INF_BITS = 0x7f800000u;

__device__ __forceinline__ uint32_t abs_bits(float v) {
  return __float_as_uint(v) & 0x7fffffffu;
}

// How one 8-value group of T is held: WORDS 32-bit words (one 16-byte load for 2-byte types, two
// for float), folded into a running maximum (`acc`, in the type's own bits) and turned into floats;
// get/set read and write value i in T itself (a kernel that computes in T, quant/swiglu_quantize.cuh).
template <typename T>
struct Group;

template <>
struct Group<float> {
  static constexpr int WORDS = 8;
  static __device__ __forceinline__ void fold(uint32_t& acc, const uint32_t (&w)[WORDS]) {
#pragma unroll
    for (int i = 0; i < WORDS; ++i) {
      acc = max(acc, w[i] & 0x7fffffffu);
    }
  }
  static __device__ __forceinline__ uint32_t float_bits(uint32_t acc) {
    return acc;
  }
  static __device__ __forceinline__ float value(const uint32_t (&w)[WORDS], int i) {
    return __uint_as_float(w[i]);
  }
  static __device__ __forceinline__ float get(const uint32_t (&w)[WORDS], int i) {
    return __uint_as_float(w[i]);
  }
  static __device__ __forceinline__ void set(uint32_t (&w)[WORDS], int i, float v) {
    w[i] = __float_as_uint(v);
  }
};

// float16 and bfloat16: two values a word, the maximum per 16-bit half (__vmaxu2), the two
// halves folded at the end; both conversions to float are exact (NaN stays NaN, inf stays inf).
template <typename T>
struct Group2Byte {
  static constexpr int WORDS = 4;
  static __device__ __forceinline__ void fold(uint32_t& acc, const uint32_t (&w)[WORDS]) {
#pragma unroll
    for (int i = 0; i < WORDS; ++i) {
      acc = __vmaxu2(acc, w[i] & 0x7fff7fffu);
    }
  }
  // Value i's 16 bits (little-endian halves of the words).
  static __device__ __forceinline__ unsigned short bits(const uint32_t (&w)[WORDS], int i) {
    return static_cast<unsigned short>(w[i >> 1] >> (16 * (i & 1)));
  }
  static __device__ __forceinline__ void set_bits(uint32_t (&w)[WORDS], int i, uint32_t b) {
    uint32_t& word = w[i >> 1];
    word = (i & 1) ? ((word & 0x0000ffffu) | (b << 16)) : ((word & 0xffff0000u) | b);
  }
};

template <>
struct Group<__half> : Group2Byte<__half> {
  static __device__ __forceinline__ uint32_t float_bits(uint32_t acc) {
    const unsigned short h = static_cast<unsigned short>(max(acc & 0xffffu, acc >> 16));
    return abs_bits(__half2float(__ushort_as_half(h)));
  }
  static __device__ __forceinline__ float value(const uint32_t (&w)[WORDS], int i) {
    return __half2float(get(w, i));
  }
  static __device__ __forceinline__ __half get(const uint32_t (&w)[WORDS], int i) {
    return __ushort_as_half(bits(w, i));
  }
  static __device__ __forceinline__ void set(uint32_t (&w)[WORDS], int i, __half v) {
    set_bits(w, i, __half_as_ushort(v));
  }
};

template <>
struct Group<__nv_bfloat16> : Group2Byte<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t float_bits(uint32_t acc) {
    return max(acc & 0xffffu, acc >> 16) << 16;  // bfloat16 is the top half of a float32
  }
  static __device__ __forceinline__ float value(const uint32_t (&w)[WORDS], int i) {
    return __uint_as_float((i & 1) ? (w[i >> 1] & 0xffff0000u) : (w[i >> 1] << 16));
  }
  static __device__ __forceinline__ __nv_bfloat16 get(const uint32_t (&w)[WORDS], int i) {
    return __ushort_as_bfloat16(bits(w, i));
  }
  static __device__ __forceinline__ void set(uint32_t (&w)[WORDS], int i, __nv_bfloat16 v) {
    set_bits(w, i, __bfloat16_as_ushort(v));
  }
};

template <typename T>
__device__ __forceinline__ void load_group(const T* p, uint32_t (&w)[Group<T>::WORDS]) {
#pragma unroll
  for (int i = 0; i < Group<T>::WORDS; i += 4) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i / 4);
    w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
  }
}

// The same from shared memory (a row a kernel staged there: quant/swiglu_quantize_staged.cuh); a generic
// load the compiler sees is shared.
template <typename T>
__device__ __forceinline__ void load_shared_group(const T* p, uint32_t (&w)[Group<T>::WORDS]) {
#pragma unroll
  for (int i = 0; i < Group<T>::WORDS; i += 4) {
    const uint4 v = reinterpret_cast<const uint4*>(p)[i / 4];
    w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
  }
}

}  // namespace int8nax
