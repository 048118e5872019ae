// The warp-specialised persistent TMA GEMM, cooperative schedule (sm_90a): 384 threads = a producer
// warpgroup (one thread issues the TMA, setmaxnreg.dec) + 2 consumer warpgroups (setmaxnreg.inc)
// that multiply from full/empty mbarrier pairs per stage, both on each tile; gridDim.x blocks walk
// the (tile, split) work units in a rasterised order (tile/scheduler.cuh, ws_unit).
#pragma once

#include "../common.cuh"
#include "../tile/smem.cuh"
#include "../tile/scheduler.cuh"
#include "../epilogue/dequantize.cuh"
#include "../epilogue/epilogue.cuh"
#include "../ptx/wgmma_s8.cuh"
#include "../ptx/wgmma.cuh"
#include "../epilogue/store_accumulators.cuh"
#include "../ptx/mbarrier.cuh"
#include "../ptx/tma.cuh"
#include "tma_ws_common.cuh"
#include "../quant/act_pack.cuh"

namespace int8nax {

// The work units and their order: tile/scheduler.cuh (ws_unit).
// BM = 128: consumer c owns rows 64c .. 64c + 63 over the whole BN; BM = 64: both own the 64 rows
// and consumer c the columns c BN/2 .. (c + 1) BN/2 - 1. Each consumer stores its share of a unit
// of split z through epis(z) (SplitInt32, SameEpilogue) while the producer already fills the
// stages of the block's next unit; CHUNK_EXACT is store_accumulators' (true for W8A8, whose
// epilogue would spill within the consumers' 232 registers otherwise; false for int32, whose
// pairs never ask for the exact path).
// Shared memory: STAGES x (BM + BN) x 128 bytes (1024-aligned), STAGES full + STAGES empty
// barriers, 2 x 128 bytes of map scratch (cuda_plans.PersistentConfig.shared_bytes).
// The body's launch bound (384 threads, 1 block) ends the header (backends/cuda/source.py,
// LAUNCH_BOUNDS). splits and group
// arrive as the shape of the launch's `plan` input (kernel arguments), not as data: a load from
// an array made on the host (managed memory) held up every warp's first instruction.

template <int BM, int BN, int STAGES, int CHUNK, bool CHUNK_EXACT, class Epilogues>
__device__ __forceinline__ void gemm_tma_ws_cooperative(const int8_t* a, const int8_t* b, int M, int N, int K,
                                            int splits, int group, uint8_t* maps, const Epilogues& epis) {
  static_assert(BM == 128 || BM == 64, "two consumer warpgroups: 2 x m64 rows, or 64 rows split along N");
  constexpr int BK = 128;
  constexpr int WIDTH = BM == 128 ? BN : BN / 2;  // columns per consumer warpgroup
  static_assert(WIDTH % 8 == 0 && WIDTH >= 8 && WIDTH <= 256, "wgmma N must be 8..256 in steps of 8");
  constexpr int A_BYTES = BM * BK;
  constexpr int STAGE_BYTES = (BM + BN) * BK;
  constexpr int CONSUMER_WARPS = 8;

  const int units = ceil_div(M, BM) * ceil_div(N, BN) * splits;
  const int tid = threadIdx.x;
  const uint32_t base = aligned_smem_base();
  const uint32_t full = base + STAGES * STAGE_BYTES;
  const uint32_t empty = full + 8 * STAGES;
  const uint32_t scratch = full + ((16 * STAGES + 127) & ~127);
  const bool tma = bases_tma_aligned(a, b);
  if (!persistent_start<BM, BN, STAGES, CONSUMER_WARPS, 0>(a, b, M, N, K, splits, group, units, tma, base, scratch,
                                                         maps + static_cast<size_t>(blockIdx.x) * 256)) {
    return;
  }
  const int c = (tid >> 7) - 1;
  if (!tma) {
    // Both consumers load each K block of their shared unit into slot 0 (named barrier 1).
    for (int u = blockIdx.x; u < units; u += gridDim.x) {
      const WsUnit w = ws_unit<BM, BN>(u, M, N, K, splits, group);
      int acc[WIDTH / 2];
      zero_accumulators(acc);
      for (int j = 0; j < w.kbs; ++j) {
        consumers_load_k_block<BM, BN, 256>(base, a, b, M, N, K, w.m0, w.n0, w.kb0 + j, tid - 128, 1);
        wgmma_k_block<WIDTH>(acc, base + (BM == 128 ? c * 64 * BK : 0), base + A_BYTES + (BM == 128 ? 0 : c * WIDTH * BK));
        wgmma_wait<0>();
        fence_registers(acc);
        named_sync(1, 256);  // every wgmma has read slot 0 before it is refilled
      }
      store_accumulators<WIDTH, CHUNK, CHUNK_EXACT>(acc, w.m0 + (BM == 128 ? c * 64 : 0),
                                                    w.n0 + (BM == 128 ? 0 : c * WIDTH), epis(w.z));
    }
    return;
  }
  const uint32_t a_off = BM == 128 ? c * 64 * BK : 0;
  const uint32_t b_off = A_BYTES + (BM == 128 ? 0 : c * WIDTH * BK);
  int it = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const WsUnit w = ws_unit<BM, BN>(u, M, N, K, splits, group);
    int acc[WIDTH / 2];
    zero_accumulators(acc);
    for (int j = 0; j < w.kbs; ++j, ++it) {
      const int slot = it % STAGES;
      mbar_wait<true>(full + 8 * slot, (it / STAGES) & 1);
      const uint32_t stage = base + slot * STAGE_BYTES;
      wgmma_k_block<WIDTH>(acc, stage + a_off, stage + b_off);
      wgmma_wait<1>();
      if (j > 0) {
        // Batch j - 1 has finished reading its slot: one arrival per consumer warp.
        warp_arrive(empty + 8 * ((it - 1) % STAGES));
      }
    }
    wgmma_wait<0>();
    fence_registers(acc);
    if (w.kbs > 0) {
      warp_arrive(empty + 8 * ((it - 1) % STAGES));
    }
    store_accumulators<WIDTH, CHUNK, CHUNK_EXACT>(acc, w.m0 + (BM == 128 ? c * 64 : 0),
                                                  w.n0 + (BM == 128 ? 0 : c * WIDTH), epis(w.z));
  }
}

}  // namespace int8nax
