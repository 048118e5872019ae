// The warp-specialised persistent TMA GEMM, ping-pong schedule (sm_90a): the cooperative kernel's
// producer and work units with each consumer warpgroup on whole 128 x BN tiles, the block's units
// alternating between the two, their main loops taking turns, so one's epilogue overlaps the
// other's main loop (cuBLASLt's kernels at 2048 x 4096^2 and 8192^3 are named for one warpgroup
// per 128 x 128 tile and launch 384 threads: this schedule).
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

// gemm_tma_ws_cooperative's producer and units, but each consumer warpgroup computes whole 128 x
// BN tiles (two m64 wgmma per k32 step, BN accumulators a thread) and the block's units alternate between
// the two: consumer c takes the block's units i = c, c + 2, ... (i counts u = blockIdx.x,
// + gridDim.x, ...). Their main loops take turns (the `turn` mbarrier pair: consumer c waits on
// turn[c], and arrives on turn[1 - c] once it has issued its last wgmma), so one consumer's
// epilogue can run while the other multiplies. The turns
// also keep each consumer within one phase of every stage barrier it waits on: a consumer starts
// waiting on its first stage only after the other has waited on all of its own.
// A base the TMA cannot take makes each consumer load its own K blocks into slot c
// (consumers_load_k_block). The epilogue of split z is epis(z), as in gemm_tma_ws_cooperative.
// Shared memory: STAGES x (128 + BN) x 128 bytes (1024-aligned), STAGES full + STAGES empty + 2
// turn barriers, 256 bytes of map scratch (cuda_plans.PersistentConfig.shared_bytes).

// The 8 wgmma (4 k32 steps x 2 m64 halves) of one K block of a 128-row tile, one commit group.
template <int WIDTH>
__device__ __forceinline__ void wgmma_k_block_128(int (&acc0)[WIDTH / 2], int (&acc1)[WIDTH / 2], uint32_t a_tile,
                                                  uint32_t b_tile) {
  fence_registers(acc0);
  fence_registers(acc1);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t db = sw128_descriptor(b_tile + kk * 32);
    wgmma_s8<WIDTH>(acc0, sw128_descriptor(a_tile + kk * 32), db);
    wgmma_s8<WIDTH>(acc1, sw128_descriptor(a_tile + 64 * 128 + kk * 32), db);
  }
  wgmma_commit();
  fence_registers(acc0);
  fence_registers(acc1);
}

template <int BN, int STAGES, int CHUNK, class Epilogues>
__device__ __forceinline__ void gemm_tma_ws_pingpong(const int8_t* a, const int8_t* b, int M, int N, int K,
                                            int splits, int group, uint8_t* maps, const Epilogues& epis) {
  constexpr int BM = 128;
  constexpr int BK = 128;
  static_assert(BN % 8 == 0 && BN >= 8 && BN <= 128, "wgmma N in 8..128 (two halves of BN/2 registers each)");
  static_assert(STAGES >= 2, "the fallback loads use slots 0 and 1");
  constexpr int A_BYTES = BM * BK;
  constexpr int STAGE_BYTES = (BM + BN) * BK;
  constexpr int CONSUMER_WARPS = 4;  // one consumer warpgroup multiplies (and releases) each stage

  const int units = ceil_div(M, BM) * ceil_div(N, BN) * splits;
  const int tid = threadIdx.x;
  const uint32_t base = aligned_smem_base();
  const uint32_t full = base + STAGES * STAGE_BYTES;
  const uint32_t empty = full + 8 * STAGES;
  const uint32_t turn = empty + 8 * STAGES;  // the 2 turn barriers follow the empty ones
  const uint32_t scratch = full + ((16 * STAGES + 16 + 127) & ~127);
  const bool tma = bases_tma_aligned(a, b);
  if (!persistent_start<BM, BN, STAGES, CONSUMER_WARPS, 2>(a, b, M, N, K, splits, group, units, tma, base, scratch,
                                                         maps + static_cast<size_t>(blockIdx.x) * 256)) {
    return;
  }
  const int c = (tid >> 7) - 1;
  int it = 0;    // the block's stage sequence: the K blocks of every unit before this one
  int mine = 0;  // units this consumer has taken
  for (int u = blockIdx.x, i = 0; u < units; u += gridDim.x, ++i) {
    const WsUnit w = ws_unit<BM, BN>(u, M, N, K, splits, group);
    if ((i & 1) != c) {
      it += w.kbs;
      continue;
    }
    int acc0[BN / 2];
    int acc1[BN / 2];
    zero_accumulators(acc0);
    zero_accumulators(acc1);
    if (tma) {
      if (c == 1 || mine > 0) {
        mbar_wait<true>(turn + 8 * c, (c == 1 ? mine : mine - 1) & 1);
      }
      for (int j = 0; j < w.kbs; ++j, ++it) {
        const int slot = it % STAGES;
        mbar_wait<true>(full + 8 * slot, (it / STAGES) & 1);
        const uint32_t stage = base + slot * STAGE_BYTES;
        wgmma_k_block_128<BN>(acc0, acc1, stage, stage + A_BYTES);
        wgmma_wait<1>();
        if (j > 0) {
          // Batch j - 1 has finished reading its slot: one arrival per warp of this consumer.
          warp_arrive(empty + 8 * ((it - 1) % STAGES));
        }
      }
      // The other consumer's turn: its first stage is the one after this unit's last.
      warp_arrive(turn + 8 * (1 - c));
      wgmma_wait<0>();
      fence_registers(acc0);
      fence_registers(acc1);
      if (w.kbs > 0) {
        warp_arrive(empty + 8 * ((it - 1) % STAGES));
      }
    } else {
      // This consumer loads its own K blocks into slot c (named barrier 1 + c).
      const uint32_t stage = base + c * STAGE_BYTES;
      for (int j = 0; j < w.kbs; ++j) {
        consumers_load_k_block<BM, BN, 128>(stage, a, b, M, N, K, w.m0, w.n0, w.kb0 + j, tid & 127, 1 + c);
        wgmma_k_block_128<BN>(acc0, acc1, stage, stage + A_BYTES);
        wgmma_wait<0>();
        fence_registers(acc0);
        fence_registers(acc1);
        named_sync(1 + c, 128);  // every wgmma has read the slot before it is refilled
      }
    }
    ++mine;
    const auto& epi = epis(w.z);
    store_accumulators<BN, CHUNK>(acc0, w.m0, w.n0, epi);
    store_accumulators<BN, CHUNK>(acc1, w.m0 + 64, w.n0, epi);
  }
}

}  // namespace int8nax
