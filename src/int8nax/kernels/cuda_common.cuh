// int8nax CUDA kernels, part 1: PTX helpers, the swizzled shared-memory tile loader and the
// GEMM epilogues shared by every GEMM kernel.
//
// Everything lives in namespace int8nax and is called qualified from the kernel bodies: MLX
// places the bodies in namespace mlx::core::cu, whose own helpers would otherwise hide ours.
// Tile sizes arrive as template parameters (the body's constexprs, from int8nax/tiling.py).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/cstdint>

namespace int8nax {

// Dynamic shared memory of every kernel that asks for some (declared once for all of them).
extern __shared__ __align__(16) uint8_t dynamic_smem[];

__device__ __forceinline__ int ceil_div(int a, int b) {
  return (a + b - 1) / b;
}

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---- cp.async (Ampere+): 16-byte global -> shared copies that do not pass through registers ----

// Copies 16 bytes, or zero-fills the 16 bytes when src_bytes == 0 (out-of-bounds chunks).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

// Makes shared memory written by ordinary stores and cp.async visible to the async proxy (wgmma).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void st_shared_16(uint32_t dst, uint32_t w0, uint32_t w1, uint32_t w2,
                                             uint32_t w3) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w0), "r"(w1), "r"(w2),
               "r"(w3)
               : "memory");
}

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

// ---- which output tile and which K range a block owns ----

// The swizzled tile decode of int8nax.tiling.launch()/tile_of(): gridDim.x = tiles_n << s.
// Split z of gridDim.z owns K blocks [k_blocks * z / splits, k_blocks * (z + 1) / splits)
// (int8nax.tiling.split_ranges); a split may be empty when splits > k_blocks, and then still
// writes its (zero) partial sums.
struct TileCoords {
  int m0;
  int n0;
  int kb0;      // first K block (of BK) of this block's split
  int kbs;      // number of K blocks, >= 0
  bool filler;  // past the last M tile: the block only pads the swizzled grid
};

template <int BM, int BN, int BK>
__device__ __forceinline__ TileCoords tile_coords(int M, int N, int K) {
  const int tiles_n = ceil_div(N, BN);
  const int group = gridDim.x / tiles_n;  // 1 << swizzle_log
  const int s = __ffs(group) - 1;
  const int tile_m = (blockIdx.y << s) + (blockIdx.x & (group - 1));
  const int tile_n = blockIdx.x >> s;
  const int k_blocks = ceil_div(K, BK);
  const int kb0 = k_blocks * static_cast<int>(blockIdx.z) / static_cast<int>(gridDim.z);
  const int kb1 = k_blocks * static_cast<int>(blockIdx.z + 1) / static_cast<int>(gridDim.z);
  return TileCoords{tile_m * BM, tile_n * BN, kb0, kb1 - kb0, tile_m * BM >= M};
}

// ---- epilogues: what happens to a pair of int32 results (row, col) and (row, col + 1) ----

// int32 [M, N] results. With split-K (gridDim.z > 1) split z writes its partial sums to slice z
// of a [splits, M, N] workspace, summed afterwards by reduce_splits (plain stores: no atomics,
// no zero-filled output).
struct StoreInt32 {
  int32_t* out;
  int M;
  int N;

  __device__ __forceinline__ double row_factor(int) const {
    return 0.0;
  }

  __device__ __forceinline__ int32_t* at(int row, int col) const {
    return out + (static_cast<size_t>(blockIdx.z) * M + row) * N + col;
  }

  __device__ __forceinline__ void store1(int row, int col, int v, double) const {
    *at(row, col) = v;
  }

  __device__ __forceinline__ void store2(int row, int col, int v0, int v1, double) const {
    if (row >= M || col >= N) {
      return;
    }
    int32_t* p = at(row, col);
    if (col + 1 < N && (N & 1) == 0) {
      *reinterpret_cast<int2*>(p) = make_int2(v0, v1);
    } else {
      p[0] = v0;
      if (col + 1 < N) {
        p[1] = v1;
      }
    }
  }
};

__device__ __forceinline__ void store_rounded(float* p, double y) {
  *p = __double2float_rn(y);
}
__device__ __forceinline__ void store_rounded(__half* p, double y) {
  *p = __double2half(y);
}
__device__ __forceinline__ void store_rounded(__nv_bfloat16* p, double y) {
  *p = __double2bfloat16(y);
}
// Two neighbours in one store (p aligned to twice the element size).
__device__ __forceinline__ void store_rounded2(float* p, double y0, double y1) {
  *reinterpret_cast<float2*>(p) = make_float2(__double2float_rn(y0), __double2float_rn(y1));
}
__device__ __forceinline__ void store_rounded2(__half* p, double y0, double y1) {
  *reinterpret_cast<__half2*>(p) = __halves2half2(__double2half(y0), __double2half(y1));
}
__device__ __forceinline__ void store_rounded2(__nv_bfloat16* p, double y0, double y1) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __halves2bfloat162(__double2bfloat16(y0), __double2bfloat16(y1));
}

// W8A8: y[m, n] = acc * s_x[m] * s_w[n] (+ bias[n]), evaluated in double in the reference's
// order and rounded once to TOut, so the result is within half an ulp of the float64 model.
template <typename TOut, bool HAS_BIAS>
struct DequantStore {
  TOut* out;
  const float* scale_x;
  const float* scale_w;
  const float* bias;
  int M;
  int N;

  __device__ __forceinline__ double row_factor(int row) const {
    return row < M ? static_cast<double>(scale_x[row]) : 0.0;
  }

  __device__ __forceinline__ double value(int col, int v, double sx) const {
    double y = static_cast<double>(v) * sx * static_cast<double>(scale_w[col]);
    if (HAS_BIAS) {
      y += static_cast<double>(bias[col]);
    }
    return y;
  }

  __device__ __forceinline__ void store1(int row, int col, int v, double sx) const {
    store_rounded(out + static_cast<size_t>(row) * N + col, value(col, v, sx));
  }

  __device__ __forceinline__ void store2(int row, int col, int v0, int v1, double sx) const {
    if (row >= M || col >= N) {
      return;
    }
    if (col + 1 < N && (N & 1) == 0) {
      store_rounded2(out + static_cast<size_t>(row) * N + col, value(col, v0, sx), value(col + 1, v1, sx));
      return;
    }
    store1(row, col, v0, sx);
    if (col + 1 < N) {
      store1(row, col + 1, v1, sx);
    }
  }
};

// Sums the splits of an int32 [splits, M, N] workspace and hands each sum to the epilogue
// (StoreInt32 for the raw GEMM, DequantStore for W8A8). Four neighbours per step when a row
// holds whole groups of four, so the workspace is read 16 bytes at a time.
template <class Epilogue>
__device__ void reduce_splits(const int32_t* ws, int splits, int M, int N, const Epilogue& epi) {
  const size_t total = static_cast<size_t>(M) * N;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if ((N & 3) == 0) {
    for (size_t i = first; i < total / 4; i += stride) {
      int4 sum = make_int4(0, 0, 0, 0);
      for (int z = 0; z < splits; ++z) {
        const int4 v = reinterpret_cast<const int4*>(ws + z * total)[i];
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      const int row = static_cast<int>(4 * i / N);
      const int col = static_cast<int>(4 * i % N);
      const double f = epi.row_factor(row);
      epi.store2(row, col, sum.x, sum.y, f);
      epi.store2(row, col + 2, sum.z, sum.w, f);
    }
    return;
  }
  for (size_t i = first; i < total; i += stride) {
    int sum = 0;
    for (int z = 0; z < splits; ++z) {
      sum += ws[z * total + i];
    }
    const int row = static_cast<int>(i / N);
    epi.store1(row, static_cast<int>(i % N), sum, epi.row_factor(row));
  }
}

// Number of SMs, counted by where blocks land: flags[smid] = 1 for every block of the launch.
__device__ __forceinline__ void mark_sm(int32_t* flags, int capacity) {
  if (threadIdx.x == 0) {
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
    if (smid < static_cast<uint32_t>(capacity)) {
      flags[smid] = 1;
    }
  }
}

}  // namespace int8nax
