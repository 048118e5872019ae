// A row's scale and codes from its absolute maximum (int8nax/quant.py, bit for bit; the rules are
// quant/quantize.cuh's opening comment): the block's maximum of the ordered bits, the scale with
// its tiny-row rule, and the rounding of a value to its int8 code. Shared by every kernel that
// quantizes x, so that their codes and scales are one function of the row.
#pragma once

#include "../common.cuh"
#include "groups.cuh"

namespace int8nax {

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

}  // namespace int8nax
