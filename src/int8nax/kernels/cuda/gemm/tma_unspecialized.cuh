// The TMA GEMM without warp specialisation (sm_90a): the cp.async GEMM's grid (one block per output
// tile and K split; plans from backends/cuda/plans/grid.py, tma_plan), WM warpgroups that all compute,
// STAGES stages loaded AHEAD ahead; thread 0 issues two cp.async.bulk.tensor.2d per stage,
// completion on a "full" mbarrier with expect_tx; a __syncthreads per K block frees the slot that
// is refilled. A base the TMA cannot take runs the cp.async main loop instead (same grid, same
// tile, its byte-wise loads).
//
// Tensor maps: cuda_kernel passes no by-value CUtensorMap, so each block encodes the maps of A
// and B itself (tensormap.replace on a zeroed 128-byte shared buffer), publishes them to its
// 256-byte slot of the uint8 output `maps` and acquires them before the first TMA
// (a sequence verified on the H200 with a minimal kernel).
// The maps use the 128-byte swizzle, so every stage holds the layout of ptx/wgmma.cuh's
// sw128_descriptor (16-byte chunk j of row r at chunk j ^ (r % 8); stages 1024-byte aligned).
// Boxes are 128 bytes (one swizzle row) x the tile's rows; rows and columns past the matrix are
// zero-filled by the TMA and still count toward complete_tx.
// Requirements: K % 16 == 0 (the row stride of a map must be a multiple of 16 bytes) and bases
// on 16-byte boundaries (a map's global address must be). A row-contiguous view that starts
// inside its buffer can break the second (MLX passes such views without a copy): gemm_tma_unspecialized
// then runs the cp.async kernel's main loop instead (same grid, same tile, its byte-wise loads);
// the persistent kernels' consumers load their own K blocks one at a time instead.
#pragma once

#include "cpasync.cuh"
#include "../ptx/mbarrier.cuh"
#include "../ptx/tma.cuh"
#include "../quant/act_pack.cuh"

namespace int8nax {

// Shared memory: STAGES x (BM + BN) x 128 bytes (1024-aligned), then STAGES full barriers, then
// 2 x 128 bytes of map scratch (cuda_plans.CudaTileConfig.tma_shared_bytes).

// The main loop on TMA loads: acc (zeroed here) = tile t over its K blocks; every wgmma has
// completed on return. Both bases must be 16-byte aligned.
template <int BM, int BN, int BK, int WM, int STAGES, int AHEAD>
__device__ __forceinline__ void tma_mainloop(const int8_t* a, const int8_t* b, int M, int N, int K,
                                             const TileCoords& t, uint8_t* maps, int (&acc)[BN / 2]) {
  static_assert(BK == 128, "the 128-byte swizzle needs K tiles of 128 int8");
  static_assert(BM == 64 * WM, "a warpgroup covers 64 rows (wgmma m64)");
  // As in gemm_cpasync: AHEAD = STAGES - 2 keeps one wgmma batch in flight across the barrier,
  // AHEAD = STAGES - 1 one more stage of loads instead.
  constexpr int INFLIGHT = STAGES - 1 - AHEAD;
  static_assert(AHEAD >= 1 && (INFLIGHT == 0 || INFLIGHT == 1), "AHEAD must be STAGES - 1 or STAGES - 2");
  constexpr int A_BYTES = BM * BK;
  constexpr int STAGE_BYTES = (BM + BN) * BK;

  const int tid = threadIdx.x;
  const uint32_t base = aligned_smem_base();
  const uint32_t full = base + STAGES * STAGE_BYTES;
  const uint32_t scratch = full + ((STAGES * 8 + 127) & ~127);
  const size_t block = blockIdx.x + static_cast<size_t>(gridDim.x) * (blockIdx.y + static_cast<size_t>(gridDim.y) * blockIdx.z);
  uint8_t* map_a = maps + block * 256;
  uint8_t* map_b = map_a + 128;

  // Warp 0 builds and acquires both maps; thread 0 (in warp 0) is the only one issuing TMA.
  if (tid < 32) {
    build_operand_maps(map_a, scratch, a, b, M, N, K, BM, BN);
  }
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
    }
    mbar_fence_init();
  }
  __syncthreads();

  auto issue = [&](int slot, int kb) {
    const uint32_t s = base + slot * STAGE_BYTES;
    const uint32_t bar = full + 8 * slot;
    mbar_arrive_expect_tx(bar, STAGE_BYTES);
    tma_load_2d(s, map_a, kb * BK, t.m0, bar);
    tma_load_2d(s + A_BYTES, map_b, kb * BK, t.n0, bar);
  };

  if (tid == 0) {
    for (int s = 0; s < AHEAD && s < t.kbs; ++s) {
      issue(s, t.kb0 + s);
    }
  }

  zero_accumulators(acc);
  const int warpgroup = tid >> 7;
  for (int i = 0; i < t.kbs; ++i) {
    const int slot = i % STAGES;
    mbar_wait(full + 8 * slot, (i / STAGES) & 1);
    // Every thread has passed wgmma_wait<INFLIGHT> of iteration i - 1, so batch
    // i + AHEAD - STAGES has finished reading slot (i + AHEAD) % STAGES: it can be refilled.
    __syncthreads();
    const int next = i + AHEAD;
    if (tid == 0 && next < t.kbs) {
      issue(next % STAGES, t.kb0 + next);
    }
    const uint32_t stage = base + slot * STAGE_BYTES;
    wgmma_k_block<BN>(acc, stage + warpgroup * 64 * BK, stage + A_BYTES);
    wgmma_wait<INFLIGHT>();
  }
  wgmma_wait<0>();
  fence_registers(acc);
}

template <int BM, int BN, int BK, int WM, int STAGES, int AHEAD, int CHUNK, class Epilogue>
__device__ __forceinline__ void gemm_tma_unspecialized(const int8_t* a, const int8_t* b, int M, int N, int K, uint8_t* maps,
                                                const Epilogue& epi) {
  const TileCoords t = tile_coords<BM, BN, BK>(M, N, K);
  if (t.filler) {
    return;
  }
  int acc[BN / 2];
  if (bases_tma_aligned(a, b)) {
    tma_mainloop<BM, BN, BK, WM, STAGES, AHEAD>(a, b, M, N, K, t, maps, acc);
  } else {
    // Uniform over the grid; this kernel's shared memory holds gemm_cpasync's stages.
    cpasync_mainloop<BM, BN, BK, WM, STAGES, AHEAD>(a, b, M, N, K, t, acc);
  }
  store_accumulators<BN, CHUNK>(acc, t.m0 + (threadIdx.x >> 7) * 64, t.n0, epi);
}

}  // namespace int8nax
