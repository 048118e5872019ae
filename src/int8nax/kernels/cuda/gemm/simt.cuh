// The portable int8 GEMM (any GPU from sm_61 on) with __dp4a.
//
// The fallback where wgmma does not exist (everything but sm_90a), and a second, independent
// implementation the tests hold against the wgmma kernel. No tensor cores, so it is slow; it
// shares the tile decode, split-K and epilogues with gemm_cpasync.
//
// A block of WM x WN warps owns a BM x BN tile; each lane computes a 4 x 4 block of outputs.
#pragma once

#include "../common.cuh"
#include "../tile/scheduler.cuh"
#include "../epilogue/dequantize.cuh"
#include "../epilogue/epilogue.cuh"
#include "../quant/act_pack.cuh"

namespace int8nax {

// Four consecutive int8 of row `row` from column `k` on, packed little-endian, zero past the end.
__device__ __forceinline__ int load_word(const int8_t* src, int rows, int K, int row, int k) {
  uint32_t w = 0;
  if (row < rows) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(src) + static_cast<size_t>(row) * K;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (k + j < K) {
        w |= static_cast<uint32_t>(p[k + j]) << (8 * j);
      }
    }
  }
  return static_cast<int>(w);
}

template <int BM, int BN, int BK, int WM, int WN, class Epilogue>
__device__ __forceinline__ void gemm_simt(const int8_t* a, const int8_t* b, int M, int N, int K,
                                          const Epilogue& epi) {
  constexpr int THREADS = 32 * WM * WN;
  constexpr int WORDS = BK / 4;  // int32 words of K per tile row
  static_assert(BM == WM * 32 && BN == WN * 16, "each warp covers 32 x 16 outputs (8 x 4 lanes of 4 x 4)");
  static_assert(BK % 4 == 0, "K tiles are whole dp4a words");
  // +1 word of padding per row: the compute loop reads a column of words across rows.
  __shared__ int a_tile[BM][WORDS + 1];
  __shared__ int b_tile[BN][WORDS + 1];

  const TileCoords t = tile_coords<BM, BN, BK>(M, N, K);
  if (t.filler) {
    return;
  }
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int r_local = (warp / WN) * 32 + (lane >> 2) * 4;
  const int c_local = (warp % WN) * 16 + (lane & 3) * 4;

  int acc[4][4] = {};
  for (int kb = t.kb0; kb < t.kb0 + t.kbs; ++kb) {
    const int k0 = kb * BK;
    for (int i = tid; i < BM * WORDS; i += THREADS) {
      a_tile[i / WORDS][i % WORDS] = load_word(a, M, K, t.m0 + i / WORDS, k0 + 4 * (i % WORDS));
    }
    for (int i = tid; i < BN * WORDS; i += THREADS) {
      b_tile[i / WORDS][i % WORDS] = load_word(b, N, K, t.n0 + i / WORDS, k0 + 4 * (i % WORDS));
    }
    __syncthreads();
#pragma unroll
    for (int w = 0; w < WORDS; ++w) {
      int av[4];
      int bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        av[i] = a_tile[r_local + i][w];
        bv[i] = b_tile[c_local + i][w];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          acc[i][j] = __dp4a(av[i], bv[j], acc[i][j]);
        }
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = t.m0 + r_local + i;
    const float f = epi.row_factor(row);
    epi.store2(row, t.n0 + c_local, acc[i][0], acc[i][1], f);  // the exact path (a fallback kernel)
    epi.store2(row, t.n0 + c_local + 2, acc[i][2], acc[i][3], f);
  }
}

}  // namespace int8nax
