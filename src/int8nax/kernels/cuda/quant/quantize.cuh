// Per-token activation quantization (int8nax/quant.py, bit for bit).
//
//   s[m] = max_k |x[m, k]| / 127 in float32 (1 for an all-zero row, NaN for a row with NaN/inf)
//   q[m, k] = clamp(roundf((x[m, k] * 2^k) * (1.0f / (s[m] * 2^k))), -127, 127)   (0 in a NaN/inf row)
//   with k = 0 when s[m] >= 2^-126 (then this is x * (1 / s), bit for bit) and k = 64 for a
//   subnormal s[m], whose reciprocal would overflow: both scalings by 2^64 are exact, so the
//   codes are x * (1 / s) as if float32 had no exponent limit (int8nax.quant's spec; example:
//   [1e-37, 1e-38, 0, 5e-39] -> [127, 13, 0, 6]).
// NVRTC's defaults keep IEEE division and no fast-math, which the scale needs; the codes' rounding
// (half away from zero, as roundf) is written out below without roundf's extra conversion.
//
// One block of THREADS threads per row. Rows of whole 8-value groups on 16-byte boundaries (the
// vector path) that fit in THREADS * HELD groups are held in registers: every thread issues all
// its 16-byte loads at once (groups threadIdx.x + j * THREADS, j < HELD), so the whole row is in
// flight, then the block reduces the absolute maximum and quantizes from the registers, and the
// row is read once. Longer rows and rows off the vector path are read twice (for the scale, then
// for the codes), 16 bytes at a time where the vector path allows, else one value at a time.
// The row functions read the values through a row source (PlainRow: x as stored), so that
// kernels whose values are computed on the way (quant/swiglu_quantize.cuh) share this code and its bits.
// The launch (THREADS, HELD) is backends/cuda/plans.py's cuda_quant_launch.
#pragma once

#include "../common.cuh"
#include "act_pack.cuh"

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

// ---- the block's maximum ----

__device__ __forceinline__ uint32_t warp_max(uint32_t v) {
#if __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
  }
  return v;
#endif
}

// Every thread gets the maximum of `v` over the block (one barrier; `slots` holds a word per warp).
template <int THREADS>
__device__ __forceinline__ uint32_t block_max(uint32_t v, uint32_t* slots) {
  v = warp_max(v);
  if constexpr (THREADS > 32) {
    const int lane = threadIdx.x & 31;
    if (lane == 0) {
      slots[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    v = warp_max(lane < THREADS / 32 ? slots[lane] : 0u);
  }
  return v;
}

// ---- scale and codes ----

// The row's scale and how its codes are computed, from the bits of its absolute maximum.
struct RowScale {
  float s;    // the scale written out
  float up;   // 1, or 2^64 for a subnormal scale
  float inv;  // 1 / (s * up)
  bool bad;   // the row holds NaN or inf: s = NaN, codes 0

  __device__ __forceinline__ explicit RowScale(uint32_t amax_bits) {
    bad = amax_bits >= FLOAT_INF_BITS;
    s = __uint_as_float(amax_bits) / 127.0f;
    if (s == 0.0f) {
      s = 1.0f;
    }
    if (bad) {
      s = __int_as_float(0x7fc00000);  // quiet NaN
    }
    // Tiny rows: s subnormal, 1 / s would be inf; scale x and s by 2^64 first (exact).
    up = s < 0x1p-126f ? 0x1p64f : 1.0f;
    inv = 1.0f / __fmul_rn(s, up);
  }
};

// The code of one value of a finite row: round half away from zero (as roundf), clamped to +-127.
// Rounding: for |v| < 2^23, adding 0.5 toward v's sign with round-toward-zero keeps the integer
// part of the exact sum, which the truncating conversion then takes (a round-to-nearest sum would
// carry 0.49999997 up to 1). Clamping: with a normal scale (TINY false), s = amax / 127 and
// inv = 1 / s are each within half an ulp, so |x * inv| <= 127 (1 + 2^-23) < 127.5 and the code
// is within +-127 unclamped (at most 127.0000077 over every float32 mantissa: tests/
// test_cuda_plan.py). A subnormal s carries a large relative error (v up to ~190), so TINY rows
// clamp v first, which commutes with the monotone rounding since +-127 are integers. TINY also
// scales x by up = 2^64 (exact); __fmul_rn: the products must not be fused or reordered.
template <bool TINY>
__device__ __forceinline__ int code_of(float x, float up, float inv) {
  float v;
  if constexpr (TINY) {
    v = fminf(fmaxf(__fmul_rn(__fmul_rn(x, up), inv), -127.0f), 127.0f);
  } else {
    v = __fmul_rn(x, inv);
  }
  return __float2int_rz(__fadd_rz(v, copysignf(0.5f, v)));
}

// Eight codes, packed little-endian into two words.
template <bool TINY, typename Value>
__device__ __forceinline__ uint2 codes8(const Value& value, float up, float inv) {
  int c[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    c[i] = code_of<TINY>(value(i), up, inv);
  }
  return make_uint2(__byte_perm(__byte_perm(c[0], c[1], 0x0040), __byte_perm(c[2], c[3], 0x0040), 0x5410),
                    __byte_perm(__byte_perm(c[4], c[5], 0x0040), __byte_perm(c[6], c[7], 0x0040), 0x5410));
}

// ---- where a row's values come from ----
//
// The row functions below read their values through a row source, so that a kernel whose values
// are computed from its inputs (quant/swiglu_quantize.cuh) quantizes them with this file's code, bit
// for bit, without writing them out first. A source `Row` for values of type T has
//   Row::Loaded          the registers of one 8-value group while its loads are in flight;
//   row.load(g, l)       issues the loads of group g (whole groups on 16-byte boundaries);
//   Row::finish(l)       makes l's values (after every load of the row is issued: the held path
//                        waits on memory here, not at each load);
//   Row::words(l)        the group's values as Group<T>'s words (after finish);
//   row.value(k)         value k as a float (rows off the vector path).
// PlainRow is x's row as stored: its loaded words are the values.

template <typename T>
struct PlainRow {
  using Loaded = uint32_t[Group<T>::WORDS];
  const T* xr;

  __device__ __forceinline__ void load(int g, Loaded& l) const {
    load_group(xr + 8 * g, l);
  }
  static __device__ __forceinline__ void finish(Loaded&) {}
  static __device__ __forceinline__ const uint32_t (&words(const Loaded& l))[Group<T>::WORDS] {
    return l;
  }
  __device__ __forceinline__ float value(int k) const {
    return to_float(xr[k]);
  }
};

// ---- the row held in registers ----

template <typename T, int THREADS, int HELD, bool TINY, typename Row>
__device__ __forceinline__ void store_held(const typename Row::Loaded (&w)[HELD], int groups, int8_t* qr,
                                           float up, float inv) {
#pragma unroll
  for (int j = 0; j < HELD; ++j) {
    const int g = threadIdx.x + j * THREADS;
    if (g < groups) {
      *reinterpret_cast<uint2*>(qr + 8 * g) =
          codes8<TINY>([&](int i) { return Group<T>::value(Row::words(w[j]), i); }, up, inv);
    }
  }
}

template <typename T, int THREADS, int HELD, typename Row>
__device__ __forceinline__ void quantize_held_row(const Row& row, int groups, int8_t* qr, float* scale,
                                                  uint32_t* slots) {
  typename Row::Loaded w[HELD];
  // All loads first: nothing below waits on memory until every one of them is issued.
#pragma unroll
  for (int j = 0; j < HELD; ++j) {
    const int g = threadIdx.x + j * THREADS;
    if (g < groups) {
      row.load(g, w[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < HELD; ++j) {
    if (static_cast<int>(threadIdx.x) + j * THREADS < groups) {
      Row::finish(w[j]);
    }
  }
  uint32_t acc = 0u;
#pragma unroll
  for (int j = 0; j < HELD; ++j) {
    if (static_cast<int>(threadIdx.x) + j * THREADS < groups) {
      Group<T>::fold(acc, Row::words(w[j]));
    }
  }
  const RowScale rs(block_max<THREADS>(Group<T>::float_bits(acc), slots));
  // The branches are uniform over the block (one row).
  if (rs.bad) {
#pragma unroll
    for (int j = 0; j < HELD; ++j) {
      const int g = threadIdx.x + j * THREADS;
      if (g < groups) {
        *reinterpret_cast<uint2*>(qr + 8 * g) = make_uint2(0u, 0u);
      }
    }
  } else if (rs.up != 1.0f) {
    store_held<T, THREADS, HELD, true, Row>(w, groups, qr, rs.up, rs.inv);
  } else {
    store_held<T, THREADS, HELD, false, Row>(w, groups, qr, rs.up, rs.inv);
  }
  if (threadIdx.x == 0) {
    *scale = rs.s;
  }
}

// ---- rows read twice: too long for the registers, or off the vector path ----

template <bool TINY, typename T, int THREADS, typename Row>
__device__ __forceinline__ void store_streamed(const Row& row, int K, int groups, int8_t* qr, float up, float inv) {
#pragma unroll 4
  for (int g = threadIdx.x; g < groups; g += THREADS) {
    typename Row::Loaded w;
    row.load(g, w);
    Row::finish(w);
    *reinterpret_cast<uint2*>(qr + 8 * g) =
        codes8<TINY>([&](int i) { return Group<T>::value(Row::words(w), i); }, up, inv);
  }
  for (int k = 8 * groups + threadIdx.x; k < K; k += THREADS) {
    qr[k] = static_cast<int8_t>(code_of<TINY>(row.value(k), up, inv));
  }
}

// `groups` 8-value groups on the vector path (0 when the row is off it), then single values.
template <typename T, int THREADS, typename Row>
__device__ __forceinline__ void quantize_streamed_row(const Row& row, int K, int groups, int8_t* qr, float* scale,
                                                      uint32_t* slots) {
  uint32_t acc = 0u;
#pragma unroll 4
  for (int g = threadIdx.x; g < groups; g += THREADS) {
    typename Row::Loaded w;
    row.load(g, w);
    Row::finish(w);
    Group<T>::fold(acc, Row::words(w));
  }
  uint32_t amax = Group<T>::float_bits(acc);
  for (int k = 8 * groups + threadIdx.x; k < K; k += THREADS) {
    amax = max(amax, abs_bits(row.value(k)));
  }
  const RowScale rs(block_max<THREADS>(amax, slots));
  if (rs.bad) {
    for (int k = threadIdx.x; k < K; k += THREADS) {
      qr[k] = 0;
    }
  } else if (rs.up != 1.0f) {
    store_streamed<true, T, THREADS>(row, K, groups, qr, rs.up, rs.inv);
  } else {
    store_streamed<false, T, THREADS>(row, K, groups, qr, rs.up, rs.inv);
  }
  if (threadIdx.x == 0) {
    *scale = rs.s;
  }
}

// One row of K values from `row` into qr and scale[index]; vec: the row is on the vector path
// (K % 8 == 0, the source's groups on 16-byte boundaries, qr on 8-byte ones); slots: a
// __shared__ word per warp (a block that quantizes several rows needs a barrier between two).
template <typename T, int THREADS, int HELD, typename Row>
__device__ __forceinline__ void quantize_row_at(const Row& row, int K, bool vec, int8_t* qr, float* scale, int index,
                                                uint32_t* slots) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, one block");
  static_assert(HELD >= 1, "at least one group a thread");
  const int groups = vec ? K / 8 : 0;
  if (vec && groups <= THREADS * HELD) {
    quantize_held_row<T, THREADS, HELD>(row, groups, qr, scale + index, slots);
  } else {
    quantize_streamed_row<T, THREADS>(row, K, groups, qr, scale + index, slots);
  }
}

// quantize_row_at for one block per row: the scale goes to scale[blockIdx.x].
template <typename T, int THREADS, int HELD, typename Row>
__device__ __forceinline__ void quantize_row(const Row& row, int K, bool vec, int8_t* qr, float* scale,
                                             uint32_t* slots) {
  quantize_row_at<T, THREADS, HELD>(row, K, vec, qr, scale, static_cast<int>(blockIdx.x), slots);
}

// x [M, K] (T: float, __half or __nv_bfloat16) -> q int8 [M, K], scale float [M]; block b = row b.
template <typename T, int THREADS, int HELD>
__device__ void quantize_rows(const T* x, int K, int8_t* q, float* scale) {
  __shared__ uint32_t slots[THREADS / 32];
  const int row = blockIdx.x;
  const T* xr = x + static_cast<size_t>(row) * K;
  int8_t* qr = q + static_cast<size_t>(row) * K;
  // Vector path: rows of whole 8-value groups on 16-byte boundaries (8-byte for the codes).
  const bool vec = (K & 7) == 0 && (reinterpret_cast<unsigned long long>(x) & 15) == 0 &&
                   (reinterpret_cast<unsigned long long>(q) & 7) == 0;
  quantize_row<T, THREADS, HELD>(PlainRow<T>{xr}, K, vec, qr, scale, slots);
}

}  // namespace int8nax
