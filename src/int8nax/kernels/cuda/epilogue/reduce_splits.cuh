// The split-K reduction: sums a [splits, M, N] int32 workspace through an epilogue.
#pragma once

#include "../common.cuh"
#include "epilogue.cuh"
#include "../quant/act_pack.cuh"

namespace int8nax {

// Sums the splits of an int32 [splits, M, N] workspace and hands each sum to the epilogue
// (StoreInt32 for the raw GEMM, DequantStore for W8A8). Four neighbours per step when a row
// holds whole groups of four, so the workspace is read 16 bytes at a time.
template <class Epilogue>
__device__ void reduce_splits(const int32_t* ws, int splits, int M, int N, const Epilogue& epi) {
  const size_t total = static_cast<size_t>(M) * N;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if ((N & 3) == 0) {
    for (size_t i = first; i < total / 4; i += stride) {
      int4 sum = make_int4(0, 0, 0, 0);
      for (int z = 0; z < splits; ++z) {
        const int4 v = reinterpret_cast<const int4*>(ws + z * total)[i];
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      const int row = static_cast<int>(4 * i / N);
      const int col = static_cast<int>(4 * i % N);
      const float f = epi.row_factor(row);
      bool exact = !epi.fast_ok(row, col, 1, 4);
      if (!exact) {
        const auto c0 = epi.cols(col);
        const auto c2 = epi.cols(col + 2);
        exact = epi.store2_fast(row, col, sum.x, sum.y, f, c0) | epi.store2_fast(row, col + 2, sum.z, sum.w, f, c2);
      }
      if (exact) {
        epi.store2(row, col, sum.x, sum.y, f);
        epi.store2(row, col + 2, sum.z, sum.w, f);
      }
    }
    return;
  }
  for (size_t i = first; i < total; i += stride) {
    int sum = 0;
    for (int z = 0; z < splits; ++z) {
      sum += ws[z * total + i];
    }
    const int row = static_cast<int>(i / N);
    epi.store1(row, static_cast<int>(i % N), sum, epi.row_factor(row));
  }
}

}  // namespace int8nax
