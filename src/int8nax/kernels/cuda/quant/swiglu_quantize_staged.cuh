// The SwiGLU quantization of quant/swiglu_quantize.cuh with rows staged in shared memory, so that a
// row's loads overlap the previous row's arithmetic.
//
// Why: quantize_swiglu_rows gives each block one row: it loads the row (2H values), then computes
// h (MLX's sigmoid: an exp and an IEEE reciprocal; two rounded products) and the codes, about 35
// instructions a value, then stores; the SM's other block is in the same phases at the same
// time. Its time is then the sum of the two, not the larger: at 4096 tokens of Qwen2.5-7B on the
// H200, 0.161 ms a layer, where the 388 MB it moves take ~0.08 ms at HBM speed and its
// arithmetic ~0.08 ms over every scheduler.
//
// Here `gridDim.x` persistent blocks take rows blockIdx.x, blockIdx.x + gridDim.x, ...; a row's
// g and u (contiguous in y, 2H values) are copied by cp.async into one of two buffers of
// dynamic shared memory while the block quantizes the row in the other one. The row code is
// quant/quantize.cuh's quantize_row_at over quant/swiglu_quantize.cuh's row source of h = swiglu(g, u), reading
// shared memory, with its functors: the same values, the same codes and scales bit for bit.
// The launch (THREADS, HELD, STAGE_BYTES = both buffers' bytes) is backends/cuda/plans/quant.py's
// cuda_swiglu_staged_launch, which takes only rows that fit one buffer and THREADS x HELD
// groups; other rows (and bases off 16 bytes) are quantized here straight from y, one after the
// other, as quantize_swiglu_rows does.
#pragma once

#include "../common.cuh"
#include "../ptx/cpasync.cuh"
#include "quantize.cuh"
#include "act_pack.cuh"
// MLX's binary_ops.cuh comes through swiglu_quantize.cuh only: it has no include guard.
#include "swiglu_quantize.cuh"

namespace int8nax {

// Every thread issues its 16-byte copies of one row (`bytes`, a multiple of 16) and commits them
// as one group.
template <int THREADS>
__device__ __forceinline__ void stage_row(const void* src, uint32_t dst, int bytes) {
  const uint4* from = reinterpret_cast<const uint4*>(src);
  for (int c = threadIdx.x; c < bytes / 16; c += THREADS) {
    cp_async_16(dst + 16u * static_cast<uint32_t>(c), from + c, 16);
  }
  cp_async_commit();
}

// y [M, 2H] (T: __half or __nv_bfloat16; float works, though the dispatch never stages it) ->
// q int8 [M, H], scale float [M] of h = silu(y[:, :H]) * y[:, H:]; rows blockIdx.x + i * gridDim.x.
template <typename T, int THREADS, int HELD, int STAGE_BYTES>
__device__ void quantize_swiglu_rows_staged(const T* y, int H, int M, int8_t* q, float* scale) {
  __shared__ uint32_t slots[THREADS / 32];
  const size_t row_values = 2 * static_cast<size_t>(H);
  const int row_bytes = static_cast<int>(row_values * sizeof(T));
  const bool vec = (H & 7) == 0 && (reinterpret_cast<unsigned long long>(y) & 15) == 0 &&
                   (reinterpret_cast<unsigned long long>(q) & 7) == 0;
  const bool staged = vec && 2 * row_bytes <= STAGE_BYTES && H <= 8 * THREADS * HELD;
  if (!staged) {
    for (int r = blockIdx.x; r < M; r += gridDim.x) {
      const T* gr = y + static_cast<size_t>(r) * row_values;
      quantize_row_at<T, THREADS, HELD>(SwigluRow<T>{gr, gr + H}, H, vec, q + static_cast<size_t>(r) * H, scale, r,
                                     slots);
      __syncthreads();  // slots are reused by the next row
    }
    return;
  }
  // buffer b (0 or 1) starts b * row_bytes into the dynamic shared memory
  const T* buffers = reinterpret_cast<const T*>(dynamic_smem);
  const uint32_t base = smem_address(dynamic_smem);
  int r = blockIdx.x;
  if (r >= M) {
    return;
  }
  stage_row<THREADS>(y + static_cast<size_t>(r) * row_values, base, row_bytes);
  for (int i = 0; r < M; ++i, r += gridDim.x) {
    const int next = r + gridDim.x;
    const int b = i & 1;
    if (next < M) {
      // buffer 1 - b held row i - 1, which every thread finished before the last barrier
      stage_row<THREADS>(y + static_cast<size_t>(next) * row_values, base + (1 - b) * row_bytes, row_bytes);
      cp_async_wait<1>();  // this thread's copies of row r have landed (row next's may not)
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // ... and every other thread's
    const T* g = buffers + b * row_values;
    quantize_row_at<T, THREADS, HELD>(SwigluRow<T, true>{g, g + H}, H, true, q + static_cast<size_t>(r) * H, scale, r,
                                   slots);
    __syncthreads();  // every thread is done with this buffer (and with slots) before it is refilled
  }
}

}  // namespace int8nax
