// A warpgroup's wgmma accumulators (the m64nN register layout) through an epilogue, interior
// tiles branch-free.
#pragma once

#include "../common.cuh"
#include "epilogue.cuh"

namespace int8nax {

// Column groups j0 .. j0 + C - 1 (those below WIDTH / 8) of store_accumulators on the fast path:
// the groups' column factors first, then their pairs; a pair that asks for the exact path sets
// `exact`.
// in0 / in1: whether the thread's rows `row` and `row + 8` are below M (their pairs are skipped
// otherwise).
template <int WIDTH, int C, class Epilogue>
__device__ __forceinline__ void store_groups_fast(const int (&acc)[WIDTH / 2], int j0, int row, int col, float f0,
                                                  float f1, bool in0, bool in1, const Epilogue& epi, bool& exact) {
  constexpr int GROUPS = WIDTH / 8;
  typename Epilogue::Cols cf[C];
#pragma unroll
  for (int i = 0; i < C; ++i) {
    if (j0 + i < GROUPS) {
      cf[i] = epi.cols(col + 8 * (j0 + i));
    }
  }
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int j = j0 + i;
    if (j < GROUPS) {
      if (in0) {
        exact |= epi.store2_fast(row, col + 8 * j, acc[4 * j], acc[4 * j + 1], f0, cf[i]);
      }
      if (in1) {
        exact |= epi.store2_fast(row + 8, col + 8 * j, acc[4 * j + 2], acc[4 * j + 3], f1, cf[i]);
      }
    }
  }
}

// The same groups on the exact path (bounds checked).
template <int WIDTH, int C, class Epilogue>
__device__ __forceinline__ void store_groups_exact(const int (&acc)[WIDTH / 2], int j0, int row, int col, float f0,
                                                   float f1, const Epilogue& epi) {
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int j = j0 + i;
    if (j < WIDTH / 8) {
      epi.store2(row, col + 8 * j, acc[4 * j], acc[4 * j + 1], f0);
      epi.store2(row + 8, col + 8 * j, acc[4 * j + 2], acc[4 * j + 3], f1);
    }
  }
}

// Stores one warpgroup's m64 x WIDTH accumulators (the wgmma m64nN layout: warp w of the
// warpgroup holds rows 16w .. 16w + 15; for each 8-column group j, lane l holds (row l/4, cols
// 8j + 2(l%4) + {0,1}) in acc[4j], acc[4j+1] and the same columns 8 rows lower in acc[4j+2],
// acc[4j+3])
// for output rows r0 .. r0 + 63 and columns c0 .. c0 + WIDTH - 1 through the epilogue.
// CHUNK: column groups (8 columns) whose factors are loaded before their stores (the kernel's
// template argument, cuda_plans.epilogue_chunk).
// CHUNK_EXACT: each chunk's exact path right after the chunk's fast stores (edge tiles: in their
// place), instead of the thread's whole share after every chunk. An accumulator then lives only
// until its chunk is stored, and each chunk's code ends at a (rarely taken) branch, which bounds
// what ptxas interleaves. gemm_tma_ws_cooperative's W8A8 epilogue needs this to fit its 232 registers
// (setmaxnreg): with the whole-share pass ptxas kept up to 228 registers live over the fast
// stores and spilled loop state wherever a consumer is 128 or 256 columns wide (nvcc and NVRTC
// 13.0, sm_90a).
template <int WIDTH, int CHUNK, bool CHUNK_EXACT = false, class Epilogue>
__device__ __forceinline__ void store_accumulators(const int (&acc)[WIDTH / 2], int r0, int c0, const Epilogue& epi) {
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.x >> 5) & 3;
  const int row = r0 + warp * 16 + (lane >> 2);
  const int col = c0 + 2 * (lane & 3);
  const float f0 = epi.row_factor(row);
  const float f1 = epi.row_factor(row + 8);
  // Tiles whose columns lie inside (cols_ok): every pair of a row below M on the branch-free path
  // first, then (rarely) the exact path for the thread's whole share (CHUNK_EXACT: the chunk's)
  // when one pair asked for it; tiles at the right edge (or wholly below M): the exact path,
  // bounds checked (epilogue/epilogue.cuh, "epilogues"). Rows are checked pair by pair, not per
  // tile: the exact path runs one element at a time, and a bottom-edge tile on it (every M not a
  // multiple of 64, as mlx-lm's 2047-row prefill chunks) was the last block's tail: W8A8 at
  // 2047 x 4096 x 4096 took 1.28x its time at 2048 on the TMA kernel's 128 x 256 tiles (H100).
  // Column factors are loaded CHUNK groups of 8 columns at a time, before the chunk's stores
  // (epilogue/epilogue.cuh, "epilogues": one L2 round trip per chunk instead of per group).
  constexpr int GROUPS = WIDTH / 8;
  constexpr int C = GROUPS < CHUNK ? GROUPS : CHUNK;
  const bool in0 = row < epi.M;
  const bool in1 = row + 8 < epi.M;
  bool exact = r0 >= epi.M || !epi.cols_ok(c0, WIDTH);
  if (CHUNK_EXACT) {
#pragma unroll
    for (int j0 = 0; j0 < GROUPS; j0 += C) {
      bool rare = exact;
      if (!exact) {
        store_groups_fast<WIDTH, C>(acc, j0, row, col, f0, f1, in0, in1, epi, rare);
      }
      if (rare) {
        store_groups_exact<WIDTH, C>(acc, j0, row, col, f0, f1, epi);
      }
    }
    return;
  }
  if (!exact) {
#pragma unroll
    for (int j0 = 0; j0 < GROUPS; j0 += C) {
      store_groups_fast<WIDTH, C>(acc, j0, row, col, f0, f1, in0, in1, epi, exact);
    }
  }
  if (exact) {
    store_groups_exact<WIDTH, GROUPS>(acc, 0, row, col, f0, f1, epi);
  }
}

}  // namespace int8nax
