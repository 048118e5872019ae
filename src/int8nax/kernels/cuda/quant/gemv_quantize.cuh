// The GEMV's activations quantized inside it (gemm/gemv_w8a8.cuh, gemv_w8a8_x).
//
// For decode the quantization kernel costs as much as a third of the GEMM and one more graph node.
// Here every block quantizes x itself: its warps find the rows' scales (quant/codes.cuh's RowScale from
// the rows' absolute maxima, as the quantization kernel computes them), then the main loop turns
// each lane's 16 values of rows g and g + 8 into codes (code_of, codes8) in place of loading codes.
// The codes and scales are the quantization kernel's bit for bit, so y is the two-kernel path's.
// Each block reads x twice (from L2 or L1): worth it while x is small against the weight
// (backends/cuda/plans/gemv.py, gemv_x_ok).
#pragma once

#include "../common.cuh"
#include "../ptx/mma_sync.cuh"
#include "../tile/gemv_fragments.cuh"
#include "groups.cuh"
#include "codes.cuh"

namespace int8nax {

namespace gemv {

struct RowScales {
  float s[MAX_M];
  float up[MAX_M];
  float inv[MAX_M];
  int bad[MAX_M];
};

// The scales of rows [0, M) of x [M, K], warp j taking rows j, j + WARPS, ...; VEC: K % 8 == 0 and
// x 16-byte aligned (8-value groups by 16-byte loads).
template <typename T, int WARPS, bool VEC>
__device__ __forceinline__ void row_scales(const T* x, int M, int K, RowScales& rs) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int m = warp; m < M; m += WARPS) {
    const T* xr = x + static_cast<size_t>(m) * K;
    uint32_t amax = 0u;
    if (VEC) {
      uint32_t acc = 0u;
#pragma unroll 4
      for (int i = lane; i < K / 8; i += 32) {
        uint32_t v[Group<T>::WORDS];
        load_group(xr + 8 * i, v);
        Group<T>::fold(acc, v);
      }
      amax = Group<T>::float_bits(acc);
    } else {
      for (int k = lane; k < K; k += 32) {
        amax = max(amax, abs_bits(to_float(xr[k])));
      }
    }
    amax = warp_max(amax);
    if (lane == 0) {
      const RowScale r(amax);
      rs.s[m] = r.s;
      rs.up[m] = r.up;
      rs.inv[m] = r.inv;
      rs.bad[m] = r.bad;
    }
  }
}

// Activation bytes made from x: the codes of rows g and g + 8 at a step (zero past M or K, and in a
// row that holds NaN or inf). FAST: K % 16 == 0 and x 16-byte aligned.
template <typename T, bool FAST>
struct QuantizedA {
  const T* lo;
  const T* hi;
  bool has_lo;
  bool has_hi;
  float up_lo, inv_lo, up_hi, inv_hi;

  // Row xr's 16 codes from k, of which `valid` lie inside; up != 1: a tiny row (TINY codes).
  static __device__ __forceinline__ Bytes16 codes(const T* xr, int k, int valid, float up, float inv) {
    Bytes16 r = {{0u, 0u, 0u, 0u}};
    if (valid <= 0) {
      return r;
    }
    if (FAST) {
      uint32_t v0[Group<T>::WORDS];
      uint32_t v1[Group<T>::WORDS];
      load_group(xr + k, v0);
      load_group(xr + k + 8, v1);
      const auto f0 = [&](int i) { return Group<T>::value(v0, i); };
      const auto f1 = [&](int i) { return Group<T>::value(v1, i); };
      const uint2 c0 = up != 1.0f ? codes8<true>(f0, up, inv) : codes8<false>(f0, up, inv);
      const uint2 c1 = up != 1.0f ? codes8<true>(f1, up, inv) : codes8<false>(f1, up, inv);
      r.w[0] = c0.x, r.w[1] = c0.y, r.w[2] = c1.x, r.w[3] = c1.y;
      return r;
    }
    const int n = valid < 16 ? valid : 16;
    for (int i = 0; i < n; ++i) {
      const float v = to_float(xr[k + i]);
      const int c = up != 1.0f ? code_of<true>(v, up, inv) : code_of<false>(v, up, inv);
      r.w[i >> 2] |= static_cast<uint32_t>(c & 0xff) << (8 * (i & 3));
    }
    return r;
  }

  __device__ __forceinline__ void load(int k, int valid, Bytes16& a_lo, Bytes16& a_hi) const {
    a_lo = codes(lo, k, has_lo ? valid : 0, up_lo, inv_lo);
    a_hi = codes(hi, k, has_hi ? valid : 0, up_hi, inv_hi);
  }
};

}  // namespace gemv

}  // namespace int8nax
