// Shared-memory tiles: the 128-byte swizzle layout, the cp.async / byte-wise tile loader and the
// aligned base of the dynamic shared memory.
#pragma once

#include "../common.cuh"
#include "../ptx/cpasync.cuh"

namespace int8nax {

// ---- the shared-memory tile layout ----
//
// A tile of ROWS x 128 int8 (K-contiguous rows of 128 bytes) is stored row after row; inside each
// row the eight 16-byte chunks are permuted by chunk ^ (row % 8). This is the wgmma "128-byte
// swizzle" layout (the hardware applies the same XOR to address bits [4:6] from bits [7:9], so
// the tile must start on a 1024-byte boundary), and it makes both the cp.async writes and the
// tensor-core reads free of bank conflicts.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// 16 bytes of row `row` from column `k` on, zero past the matrix, with byte loads: the path for
// a K that is not a multiple of 16 or a base pointer that is not 16-byte aligned.
__device__ __forceinline__ void load_chunk_bytewise(uint32_t dst, const int8_t* src, int rows, int K,
                                                    int row, int k) {
  uint32_t w[4] = {0u, 0u, 0u, 0u};
  if (row < rows) {
    const uint8_t* p = reinterpret_cast<const uint8_t*>(src) + static_cast<size_t>(row) * K;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      if (k + j < K) {
        w[j >> 2] |= static_cast<uint32_t>(p[k + j]) << ((j & 3) * 8);
      }
    }
  }
  st_shared_16(dst, w[0], w[1], w[2], w[3]);
}

// Loads rows [row0, row0 + ROWS) x bytes [k0, k0 + 128) of a row-major int8 [rows, K] matrix into
// a swizzled shared tile at `dst`, THREADS threads cooperating (consecutive threads take
// consecutive 16-byte chunks, so each warp reads four whole 128-byte row pieces).
// `fast`: K % 16 == 0 and 16-byte aligned base, so each chunk is either wholly inside or wholly
// outside the matrix and cp.async can copy it.
template <int ROWS, int THREADS>
__device__ __forceinline__ void load_tile(uint32_t dst, const int8_t* src, int rows, int K, int row0,
                                          int k0, bool fast, int tid) {
  constexpr int CHUNKS = ROWS * 8;
#pragma unroll
  for (int i = 0; i < (CHUNKS + THREADS - 1) / THREADS; ++i) {
    const int idx = tid + i * THREADS;
    if (CHUNKS % THREADS == 0 || idx < CHUNKS) {
      const int r = idx >> 3;
      const int c = idx & 7;
      const int row = row0 + r;
      const int k = k0 + c * 16;
      const uint32_t d = dst + swizzled_offset(r, c);
      if (fast) {
        const bool inside = row < rows && k < K;
        const int8_t* p = inside ? src + static_cast<size_t>(row) * K + k : src;
        cp_async_16(d, p, inside ? 16 : 0);
      } else {
        load_chunk_bytewise(d, src, rows, K, row, k);
      }
    }
  }
}

// The dynamic shared memory's first 1024-byte aligned address: the 128-byte swizzle is a
// function of the address bits.
__device__ __forceinline__ uint32_t aligned_smem_base() {
  return (smem_address(dynamic_smem) + 1023u) & ~1023u;
}

}  // namespace int8nax
