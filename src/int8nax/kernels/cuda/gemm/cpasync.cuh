// The cp.async GEMM (sm_90a): wgmma fed from shared memory that cp.async fills.
//
// C[M, N] = A[M, K] . B[N, K]^T, int8 in, exact int32 accumulation, epilogue in registers.
// A block owns a BM x BN output tile (BM = 64 * WM: WM warpgroups stacked along M, each issuing
// wgmma m64nBNk32 over the whole BN) and, with split-K, a range of K blocks of BK = 128 bytes.
//
// Pipeline (STAGES shared-memory stages, all threads load, all warpgroups compute):
//   iteration i:  wait for stage i's cp.async group; fence to the async proxy; barrier;
//                 start loading stage i + AHEAD into slot (i + AHEAD) % STAGES;
//                 issue the 4 wgmma of stage i; wait until at most INFLIGHT batches run.
// The slot loaded at iteration i was last read by wgmma batch i + AHEAD - STAGES, which every
// thread has waited for before the barrier iff INFLIGHT = STAGES - 1 - AHEAD (0 or 1): either
// one wgmma batch overlaps the next barrier (AHEAD = STAGES - 2), or one more stage of loads is
// in flight instead (AHEAD = STAGES - 1).
#pragma once

#include "../common.cuh"
#include "../ptx/cpasync.cuh"
#include "../tile/smem.cuh"
#include "../tile/scheduler.cuh"
#include "../epilogue/epilogue.cuh"
#include "../ptx/wgmma_s8.cuh"
#include "../ptx/wgmma.cuh"
#include "../epilogue/store_accumulators.cuh"
#include "../quant/act_pack.cuh"

namespace int8nax {

// The main loop: acc (zeroed here) = the block's tile t over its K blocks, loaded by cp.async;
// every wgmma has completed on return. Shared by gemm_cpasync and, for bases the TMA cannot take,
// gemm_tma_unspecialized.
template <int BM, int BN, int BK, int WM, int STAGES, int AHEAD>
__device__ __forceinline__ void cpasync_mainloop(const int8_t* a, const int8_t* b, int M, int N, int K,
                                              const TileCoords& t, int (&acc)[BN / 2]) {
  static_assert(BK == 128, "the 128-byte swizzle needs K tiles of 128 int8");
  static_assert(BM == 64 * WM, "a warpgroup covers 64 rows (wgmma m64)");
  static_assert(BN % 8 == 0 && BN >= 8 && BN <= 256, "wgmma N must be 8..256 in steps of 8");
  constexpr int INFLIGHT = STAGES - 1 - AHEAD;
  static_assert(AHEAD >= 1 && (INFLIGHT == 0 || INFLIGHT == 1), "AHEAD must be STAGES - 1 or STAGES - 2");
  constexpr int THREADS = 128 * WM;
  constexpr int A_BYTES = BM * BK;
  constexpr int STAGE_BYTES = (BM + BN) * BK;

  const int tid = threadIdx.x;
  const uint32_t base = aligned_smem_base();
  const bool fast = (K & 15) == 0 &&
                    ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)) & 15) == 0;

  auto load_stage = [&](int slot, int kb) {
    const uint32_t s = base + slot * STAGE_BYTES;
    load_tile<BM, THREADS>(s, a, M, K, t.m0, kb * BK, fast, tid);
    load_tile<BN, THREADS>(s + A_BYTES, b, N, K, t.n0, kb * BK, fast, tid);
  };

  zero_accumulators(acc);

#pragma unroll
  for (int s = 0; s < AHEAD; ++s) {
    if (s < t.kbs) {
      load_stage(s, t.kb0 + s);
    }
    cp_async_commit();  // always commit, so that group i is stage i
  }

  const int warpgroup = tid >> 7;
  for (int i = 0; i < t.kbs; ++i) {
    cp_async_wait<AHEAD - 1>();
    fence_proxy_async();
    __syncthreads();
    const int next = i + AHEAD;
    if (next < t.kbs) {
      load_stage(next % STAGES, t.kb0 + next);
    }
    cp_async_commit();

    const uint32_t stage = base + (i % STAGES) * STAGE_BYTES;
    wgmma_k_block<BN>(acc, stage + warpgroup * 64 * BK, stage + A_BYTES);
    wgmma_wait<INFLIGHT>();
  }
  wgmma_wait<0>();
  fence_registers(acc);
}

template <int BM, int BN, int BK, int WM, int STAGES, int AHEAD, int CHUNK, class Epilogue>
__device__ __forceinline__ void gemm_cpasync(const int8_t* a, const int8_t* b, int M, int N, int K,
                                          const Epilogue& epi) {
  const TileCoords t = tile_coords<BM, BN, BK>(M, N, K);
  if (t.filler) {
    return;
  }
  int acc[BN / 2];
  cpasync_mainloop<BM, BN, BK, WM, STAGES, AHEAD>(a, b, M, N, K, t, acc);
  store_accumulators<BN, CHUNK>(acc, t.m0 + (threadIdx.x >> 7) * 64, t.n0, epi);
}

}  // namespace int8nax
