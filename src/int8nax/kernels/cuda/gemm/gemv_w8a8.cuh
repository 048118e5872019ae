// int8nax CUDA kernels: the small-M (decode) W8A8 GEMM, y [M, N] = dequant(q [M, K] . w [N, K]^T)
// for M <= 16, streaming the int8 weight once at memory speed.
//
// At M <= 16 a GEMM is a weight stream: N x K bytes read once, 2 x 16 x N x K operations, far
// below the tensor cores' rate. So the kernel is shaped for loads, not for tiles:
//  * a block owns 8 x NT rows of w (NT tiles of mma.m16n8k32's eight columns) and its WARPS warps
//    split K between them (warp j takes the 64-byte steps j, j + WARPS, ...), so that even a
//    narrow N (3584: 224 blocks of 16 rows) puts every SM to work and many loads in flight;
//  * each lane reads its share of a step with 16-byte loads: 16 bytes of one w row, and 16 bytes of
//    the two activation rows it holds in the mma (the activation is small and stays in cache);
//  * a warp holds only UNROLL steps of loads in registers, so with AHEAD > 0 it also asks L2 for the
//    step AHEAD of its own steps later (prefetch.global.L2) each time it loads one: more of the weight
//    in flight from DRAM than registers hold, without more registers (AHEAD = 0: no prefetch);
//  * mma.sync.m16n8k32.s8 (sm_80+) multiplies the M <= 16 activation rows by 8 weight rows, with
//    exact int32 accumulation, twice per 64-byte step. A lane's 16 loaded bytes are not in the order
//    the instruction's fragments name: the kernel lets each mma see a permutation of K, the same
//    one for both operands (k_of, tile/gemv_fragments.cuh), which leaves every dot product unchanged;
//  * the warps' partial sums meet in shared memory, and each output goes through the epilogue's
//    store1 (DequantStore::value, epilogue/epilogue.cuh): the same function of (acc, s_x, s_w,
//    bias) as every other W8A8 path, hence the same bits as the tiled GEMMs for the same epilogue.
//
// The index arithmetic (tile/gemv_fragments.cuh) is plain C++, which tests/test_gemv_w8a8.py
// compiles on the host against the PTX ISA's definition of the mma fragments; the loads and the mma
// are ptx/mma_sync.cuh's, x's quantization inside the kernel (gemv_w8a8_x) quant/gemv_quantize.cuh's.
#pragma once

#ifdef __CUDACC__  // the kernels' needs; the index arithmetic needs nothing
#include "../common.cuh"
#include "../epilogue/dequantize.cuh"
#include "../epilogue/epilogue.cuh"
#include "../ptx/mma_sync.cuh"
#include "../quant/act_pack.cuh"
#include "../quant/gemv_quantize.cuh"
#endif
#include "../tile/gemv_fragments.cuh"

namespace int8nax {

#ifdef __CUDACC__

namespace gemv {

// Activation bytes from int8 codes q [M, K]: rows g and g + 8 of a step (zero past M or K).
template <bool FAST>
struct CodesA {
  const int8_t* lo;
  const int8_t* hi;
  bool has_lo;
  bool has_hi;
  __device__ __forceinline__ void load(int k, int valid, Bytes16& a_lo, Bytes16& a_hi) const {
    a_lo = load16<false, FAST>(lo + k, has_lo ? valid : 0);
    a_hi = load16<false, FAST>(hi + k, has_hi ? valid : 0);
  }
};

// Asks L2 for this lane's 16 bytes of step s of the block's w rows (nothing past K or N).
template <int NT>
__device__ __forceinline__ void prefetch_step(const int8_t* const (&w_row)[NT], const bool (&has_row)[NT], int K,
                                              int s) {
  const int k = s * STEP + lane_k(threadIdx.x & 31, 0);
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (has_row[t] && k < K) {
      asm volatile("prefetch.global.L2 [%0];\n" ::"l"(w_row[t] + k));
    }
  }
}

// The first `count` of the warp's steps (warp, warp + WARPS, ...) asked of L2.
template <int NT, int WARPS>
__device__ __forceinline__ void prefetch_first(const int8_t* const (&w_row)[NT], const bool (&has_row)[NT], int K,
                                               int count) {
  const int warp = threadIdx.x >> 5;
  for (int u = 0; u < count; ++u) {
    prefetch_step<NT>(w_row, has_row, K, warp + u * WARPS);
  }
}

// The warp's share of the K steps: acc[t] += A [rows g, g + 8] . w [row n0 + 8 t + g] over its
// steps (warp, warp + WARPS, ...), UNROLL steps' loads issued before their mma, and with AHEAD > 0
// the step AHEAD of the warp's steps beyond each asked of L2 (the first AHEAD: prefetch_first, by
// the caller); A: CodesA, or QuantizedA (the codes made from x on the way).
template <int NT, int WARPS, int UNROLL, int AHEAD, bool FAST, class ASource>
__device__ __forceinline__ void warp_steps(const ASource& a_src, const int8_t* const (&w_row)[NT],
                                           const bool (&has_row)[NT], int K, int (&acc)[NT][4]) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int total = steps(K);
  for (int s0 = warp; s0 < total; s0 += WARPS * UNROLL) {
    Bytes16 a_lo[UNROLL];
    Bytes16 a_hi[UNROLL];
    Bytes16 b[UNROLL][NT];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int s = s0 + u * WARPS;
      const int k = s * STEP + lane_k(lane, 0);
      const int valid = s < total ? K - k : 0;
      if (AHEAD > 0 && s + AHEAD * WARPS < total) {
        prefetch_step<NT>(w_row, has_row, K, s + AHEAD * WARPS);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        b[u][t] = load16<true, FAST>(w_row[t] + k, has_row[t] ? valid : 0);
      }
      a_src.load(k, valid, a_lo[u], a_hi[u]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
#pragma unroll
      for (int t = 0; t < NT; ++t) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int w0 = fragment_word(half, 0);
          const int w1 = fragment_word(half, 1);
          mma_s8(acc[t], a_lo[u].w[w0], a_hi[u].w[w0], a_lo[u].w[w1], a_hi[u].w[w1], b[u][t].w[w0], b[u][t].w[w1]);
        }
      }
    }
  }
}

// The block's w rows: row n0 + 8 t + g of each tile t, and whether it exists.
template <int NT>
__device__ __forceinline__ void weight_rows(const int8_t* w, int N, int K, int n0, int g, const int8_t* (&w_row)[NT],
                                            bool (&has_row)[NT]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int n = n0 + t * ROWS + g;
    has_row[t] = n < N;
    w_row[t] = w + static_cast<size_t>(has_row[t] ? n : 0) * K;
  }
}

// The warps' accumulators summed in shared memory; each output through epi.store1.
template <int NT, int WARPS, class Epilogue>
__device__ __forceinline__ void store_sums(int (&acc)[NT][4], int M, int N, int n0, const Epilogue& epi) {
  __shared__ int partial[WARPS][NT][4][32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int t = 0; t < NT; ++t) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      partial[warp][t][j][lane] = acc[t][j];
    }
  }
  __syncthreads();
  // One output per (tile, register, lane) of a warp's accumulators: the sum over the warps.
  for (int e = threadIdx.x; e < NT * 4 * 32; e += WARPS * 32) {
    const int t = e / 128;
    const int j = (e / 32) & 3;
    const int l = e & 31;
    const int row = acc_row(l, j);
    const int col = n0 + t * ROWS + acc_col(l, j);
    if (row < M && col < N) {
      int sum = 0;
#pragma unroll
      for (int v = 0; v < WARPS; ++v) {
        sum += partial[v][t][j][l];
      }
      epi.store1(row, col, sum, epi.row_factor(row));
    }
  }
}

}  // namespace gemv

// y = epi(q [M, K] . w [N, K]^T) for M <= 16: one block of WARPS warps per 8 x NT rows of w
// (gridDim.x = ceil(N / (8 NT)), blockDim.x = 32 WARPS), AHEAD steps of prefetch (warp_steps). The
// epilogue: DequantStore (W8A8) or StoreInt32 (their store1 and row_factor only).
template <int NT, int WARPS, int UNROLL, int AHEAD, class Epilogue>
__device__ void gemv_w8a8(const int8_t* q, const int8_t* w, int M, int N, int K, const Epilogue& epi) {
  using namespace gemv;
  const int g = lane_group(threadIdx.x & 31);
  const int n0 = blockIdx.x * (ROWS * NT);
  const int8_t* w_row[NT];
  bool has_row[NT];
  weight_rows<NT>(w, N, K, n0, g, w_row, has_row);
  prefetch_first<NT, WARPS>(w_row, has_row, K, AHEAD);
  int acc[NT][4] = {};
  const int8_t* lo = q + static_cast<size_t>(g) * K;
  const int8_t* hi = q + static_cast<size_t>(g + 8) * K;
  const bool fast = ((reinterpret_cast<unsigned long long>(q) | reinterpret_cast<unsigned long long>(w)) & 15) == 0 &&
                    (K & 15) == 0;
  if (fast) {
    warp_steps<NT, WARPS, UNROLL, AHEAD, true>(CodesA<true>{lo, hi, g < M, g + 8 < M}, w_row, has_row, K, acc);
  } else {
    warp_steps<NT, WARPS, UNROLL, AHEAD, false>(CodesA<false>{lo, hi, g < M, g + 8 < M}, w_row, has_row, K, acc);
  }
  store_sums<NT, WARPS>(acc, M, N, n0, epi);
}

// ---- the same with the quantization fused: y = epi(quant(x) [M, K] . w [N, K]^T) ----
// (x's codes and scales: quant/gemv_quantize.cuh)

// y [M, N] (T) = dequant(quant(x) [M, K] . w [N, K]^T) (+ bias) for M <= 16, x: float, __half or
// __nv_bfloat16, the bias in its own type (DequantStore); the launch of gemv_w8a8. The first
// max(AHEAD, PREFETCH) of each warp's steps go to L2 while the warps find the rows' scales.
template <typename T, int NT, int WARPS, int UNROLL, int AHEAD, bool HAS_BIAS, bool NARROW, int PREFETCH = 2,
          typename TBias>
__device__ void gemv_w8a8_x(const T* x, const int8_t* w, int M, int N, int K, const float* scale_w, const TBias* bias,
                            T* y) {
  using namespace gemv;
  __shared__ RowScales rs;
  const int lane = threadIdx.x & 31;
  const int g = lane_group(lane);
  const int n0 = blockIdx.x * (ROWS * NT);
  const int8_t* w_row[NT];
  bool has_row[NT];
  weight_rows<NT>(w, N, K, n0, g, w_row, has_row);
  prefetch_first<NT, WARPS>(w_row, has_row, K, AHEAD > PREFETCH ? AHEAD : PREFETCH);
  const bool x_aligned = (reinterpret_cast<unsigned long long>(x) & 15) == 0;
  if (x_aligned && (K & 7) == 0) {
    row_scales<T, WARPS, true>(x, M, K, rs);
  } else {
    row_scales<T, WARPS, false>(x, M, K, rs);
  }
  __syncthreads();
  const bool has_lo = g < M;
  const bool has_hi = g + 8 < M;
  const T* lo = x + static_cast<size_t>(has_lo ? g : 0) * K;
  const T* hi = x + static_cast<size_t>(has_hi ? g + 8 : 0) * K;
  // A row that holds NaN or inf quantizes to zeros (its scale, NaN, makes its outputs NaN).
  const bool lo_on = has_lo && !rs.bad[has_lo ? g : 0];
  const bool hi_on = has_hi && !rs.bad[has_hi ? g + 8 : 0];
  const float up_lo = has_lo ? rs.up[g] : 1.0f, inv_lo = has_lo ? rs.inv[g] : 1.0f;
  const float up_hi = has_hi ? rs.up[g + 8] : 1.0f, inv_hi = has_hi ? rs.inv[g + 8] : 1.0f;
  int acc[NT][4] = {};
  const bool fast = x_aligned && ((reinterpret_cast<unsigned long long>(w) & 15) == 0) && (K & 15) == 0;
  if (fast) {
    warp_steps<NT, WARPS, UNROLL, AHEAD, true>(QuantizedA<T, true>{lo, hi, lo_on, hi_on, up_lo, inv_lo, up_hi, inv_hi},
                                        w_row, has_row, K, acc);
  } else {
    warp_steps<NT, WARPS, UNROLL, AHEAD, false>(QuantizedA<T, false>{lo, hi, lo_on, hi_on, up_lo, inv_lo, up_hi, inv_hi},
                                         w_row, has_row, K, acc);
  }
  store_sums<NT, WARPS>(acc, M, N, n0, DequantStore<T, HAS_BIAS, NARROW, TBias>{y, rs.s, scale_w, bias, M, N});
}

#endif  // __CUDACC__

}  // namespace int8nax
