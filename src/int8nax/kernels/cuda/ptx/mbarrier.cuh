// PTX wrappers: mbarriers (init, arrive, expect_tx, wait with a deadlock trap) and named barriers.
#pragma once

#include "../common.cuh"

namespace int8nax {

// ---- mbarrier ----

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialised barriers visible to the other threads and to the async proxy (TMA).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Cycles after which a wait is taken for a deadlock (~2 s at 1.98 GHz; no legitimate wait comes
// near it): with TRAP the kernel traps, so a pipeline bug surfaces as a launch error, not as a
// hang. Only the warp-specialised kernels use it: in gemm_tma_unspecialized the trap path made ptxas
// inject a warpgroup.wait before the loop (C7517), serialising the wgmma.
constexpr long long MBAR_DEADLOCK_CYCLES = 1ll << 32;

// Blocks until the phase of parity `parity` of the barrier has completed.
template <bool TRAP = false>
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  if (!TRAP) {
    while (!mbar_try_wait(bar, parity)) {
    }
    return;
  }
  if (mbar_try_wait(bar, parity)) {
    return;
  }
  const long long start = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - start > MBAR_DEADLOCK_CYCLES) {
      asm volatile("trap;\n");
    }
  }
}

// `threads` threads meet at named barrier `id` (ids 1.. are free: __syncthreads uses 0).
__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// One arrival of the calling warp on `bar`, once all of its lanes got here.
__device__ __forceinline__ void warp_arrive(uint32_t bar) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    mbar_arrive(bar);
  }
}

}  // namespace int8nax
