// PTX wrappers: wgmma's shared-memory descriptors, fences, commit and wait, and the 4 wgmma of
// one 128-byte K block.
#pragma once

#include "../common.cuh"
#include "wgmma_s8.cuh"

namespace int8nax {

// Shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle layout:
// start address >> 4 (bits 0-13), leading byte offset (unused for this layout, 1),
// stride byte offset = 1024 B between 8-row groups (bits 32-45), swizzle mode 1 = 128 B (bits 62-63).
__device__ __forceinline__ uint64_t sw128_descriptor(uint32_t smem_addr) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

template <int PENDING>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
}

// Keeps the compiler from moving accumulator reads/writes across the asynchronous wgmma.
template <int R>
__device__ __forceinline__ void fence_registers(int (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    asm volatile("" : "+r"(d[i])::"memory");
  }
}

template <int R>
__device__ __forceinline__ void zero_accumulators(int (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    d[i] = 0;
  }
}

// The 4 wgmma (k32 each) of one 128-byte K block: A rows from a_tile, B rows from b_tile.
template <int WIDTH>
__device__ __forceinline__ void wgmma_k_block(int (&acc)[WIDTH / 2], uint32_t a_tile, uint32_t b_tile) {
  fence_registers(acc);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    wgmma_s8<WIDTH>(acc, sw128_descriptor(a_tile + kk * 32), sw128_descriptor(b_tile + kk * 32));
  }
  wgmma_commit();
  fence_registers(acc);
}

}  // namespace int8nax
