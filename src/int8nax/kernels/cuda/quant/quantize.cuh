// Per-token activation quantization (int8nax/quant.py, bit for bit).
//
//   s[m] = max_k |x[m, k]| / 127 in float32 (1 for an all-zero row, NaN for a row with NaN/inf)
//   q[m, k] = clamp(roundf((x[m, k] * 2^k) * (1.0f / (s[m] * 2^k))), -127, 127)   (0 in a NaN/inf row)
//   with k = 0 when s[m] >= 2^-126 (then this is x * (1 / s), bit for bit) and k = 64 for a
//   subnormal s[m], whose reciprocal would overflow: both scalings by 2^64 are exact, so the
//   codes are x * (1 / s) as if float32 had no exponent limit (int8nax.quant's spec; example:
//   [1e-37, 1e-38, 0, 5e-39] -> [127, 13, 0, 6]).
// NVRTC's defaults keep IEEE division and no fast-math, which the scale needs; the codes' rounding
// (half away from zero, as roundf) is written out (quant/codes.cuh, code_of) without roundf's
// extra conversion.
//
// One block of THREADS threads per row. Rows of whole 8-value groups on 16-byte boundaries (the
// vector path) that fit in THREADS * HELD groups are held in registers: every thread issues all
// its 16-byte loads at once (groups threadIdx.x + j * THREADS, j < HELD), so the whole row is in
// flight, then the block reduces the absolute maximum and quantizes from the registers, and the
// row is read once. Longer rows and rows off the vector path are read twice (for the scale, then
// for the codes), 16 bytes at a time where the vector path allows, else one value at a time.
// The row functions read the values through a row source (PlainRow: x as stored), so that
// kernels whose values are computed on the way (quant/swiglu_quantize.cuh) share this code and its bits.
// The group loads and the ordered-bits maximum are quant/groups.cuh's, the scale and codes
// quant/codes.cuh's. The launch (THREADS, HELD) is backends/cuda/plans/quant.py's cuda_quant_launch.
#pragma once

#include "../common.cuh"
#include "act_pack.cuh"
#include "groups.cuh"
#include "codes.cuh"

namespace int8nax {

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
