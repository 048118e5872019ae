// What the warp-specialised persistent TMA kernels share: the producer, the start (maps,
// barriers, register hand-over) and the consumers' own loads for bases the TMA cannot take.
#pragma once

#include "../common.cuh"
#include "../ptx/mbarrier.cuh"
#include "../ptx/tma.cuh"
#include "../tile/smem.cuh"
#include "../tile/scheduler.cuh"

namespace int8nax {

// The producer of the persistent kernels (one thread): every K block of the block's units u =
// blockIdx.x, + gridDim.x, ... in order into the ring of STAGES slots, each fill of a slot after
// the consumers released the one before.
template <int BM, int BN, int STAGES>
__device__ __forceinline__ void ws_produce(int M, int N, int K, int splits, int group, int units, uint32_t base,
                                           uint32_t full, uint32_t empty, const uint8_t* map_a,
                                           const uint8_t* map_b) {
  constexpr int BK = 128;
  constexpr int A_BYTES = BM * BK;
  constexpr int STAGE_BYTES = (BM + BN) * BK;
  int it = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x) {
    const WsUnit w = ws_unit<BM, BN>(u, M, N, K, splits, group);
    for (int j = 0; j < w.kbs; ++j, ++it) {
      const int slot = it % STAGES;
      // The fill number it / STAGES of a slot waits for the release of the previous one
      // (parity 1 passes at once on a fresh barrier).
      mbar_wait<true>(empty + 8 * slot, ((it / STAGES) & 1) ^ 1);
      const uint32_t s = base + slot * STAGE_BYTES;
      const uint32_t bar = full + 8 * slot;
      const int k = (w.kb0 + j) * BK;
      mbar_arrive_expect_tx(bar, STAGE_BYTES);
      tma_load_2d(s, map_a, k, w.m0, bar);
      tma_load_2d(s + A_BYTES, map_b, k, w.n0, bar);
    }
  }
}

// The start the persistent kernels share. Shared memory from `base`: STAGES stages, STAGES full
// barriers (one arrival: the producer's expect_tx), STAGES empty barriers and EXTRA more barriers
// (CONSUMER_WARPS arrivals each), the 256-byte map scratch at `scratch`. Warp 0 builds the
// operand maps when the TMA can take the bases (`tma`); then warpgroup 0 hands its registers to
// the consumers and its thread 0 runs the producer. Returns false in warpgroup 0 (which should
// return), true in the two consumer warpgroups.
template <int BM, int BN, int STAGES, int CONSUMER_WARPS, int EXTRA>
__device__ __forceinline__ bool persistent_start(const int8_t* a, const int8_t* b, int M, int N, int K, int splits,
                                                 int group, int units, bool tma, uint32_t base, uint32_t scratch,
                                                 uint8_t* map_a) {
  const int tid = threadIdx.x;
  const uint32_t full = base + STAGES * (BM + BN) * 128;
  const uint32_t empty = full + 8 * STAGES;
  if (tma && tid < 32) {
    build_operand_maps(map_a, scratch, a, b, M, N, K, BM, BN);
  }
  if (tid == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);
      mbar_init(empty + 8 * s, CONSUMER_WARPS);
    }
    for (int e = 0; e < EXTRA; ++e) {
      mbar_init(empty + 8 * (STAGES + e), CONSUMER_WARPS);
    }
    mbar_fence_init();
  }
  __syncthreads();
  if ((tid >> 7) == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (tma && tid == 0) {
      ws_produce<BM, BN, STAGES>(M, N, K, splits, group, units, base, full, empty, map_a, map_a + 128);
    }
    return false;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  return true;
}

// The persistent kernels' path for a base the TMA cannot take (not 16-byte aligned; MLX passes
// offset views): the THREADS consumer threads (ctid = 0 .. THREADS - 1) load K block kb of the
// BM x BN unit at (m0, n0) into `stage` themselves, by cp.async or byte-wise, and meet at named
// barrier `bar` once all of it is visible to the wgmma. Exact and slow: no plan is made for it.
template <int BM, int BN, int THREADS>
__device__ __forceinline__ void consumers_load_k_block(uint32_t stage, const int8_t* a, const int8_t* b, int M, int N,
                                                       int K, int m0, int n0, int kb, int ctid, int bar) {
  constexpr int BK = 128;
  const bool fast_a = (K & 15) == 0 && (reinterpret_cast<unsigned long long>(a) & 15ull) == 0;
  const bool fast_b = (K & 15) == 0 && (reinterpret_cast<unsigned long long>(b) & 15ull) == 0;
  load_tile<BM, THREADS>(stage, a, M, K, m0, kb * BK, fast_a, ctid);
  load_tile<BN, THREADS>(stage + BM * BK, b, N, K, n0, kb * BK, fast_b, ctid);
  cp_async_commit();
  cp_async_wait<0>();
  fence_proxy_async();
  named_sync(bar, THREADS);
}

}  // namespace int8nax
