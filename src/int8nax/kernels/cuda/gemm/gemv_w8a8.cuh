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
//  * mma.sync.m16n8k32.s8 (sm_80+) multiplies the M <= 16 activation rows by 8 weight rows, with
//    exact int32 accumulation, twice per 64-byte step. A lane's 16 loaded bytes are not in the order
//    the instruction's fragments name: the kernel lets each mma see a permutation of K, the same
//    one for both operands (gemv_k_of below), which leaves every dot product unchanged;
//  * the warps' partial sums meet in shared memory, and each output goes through the epilogue's
//    store1 (DequantStore::value, epilogue/epilogue.cuh): the same function of (acc, s_x, s_w,
//    bias) as every other W8A8 path, hence the same bits as the tiled GEMMs for the same epilogue.
//
// The index arithmetic is plain C++ (GEMV_HD functions), which tests/test_gemv_w8a8.py compiles on
// the host against the PTX ISA's definition of the mma fragments.
#pragma once

#ifdef __CUDACC__  // the kernels' needs; the index arithmetic below them needs nothing
#include "../common.cuh"
#include "../epilogue/dequantize.cuh"
#include "../epilogue/epilogue.cuh"
#include "../quant/quantize.cuh"
#include "../quant/act_pack.cuh"
#endif

#ifndef GEMV_HD
#define GEMV_HD __host__ __device__ __forceinline__
#endif

namespace int8nax {
namespace gemv {

constexpr int STEP = 64;      // bytes of K per warp step: four lanes x 16 bytes per row
constexpr int ROWS = 8;       // w rows per mma (its N)
constexpr int MAX_M = 16;     // activation rows per mma (its M)

// mma.m16n8k32's lane roles (PTX ISA, "Matrix fragments for mma.m16n8k32"): groupID and
// threadID_in_group.
GEMV_HD int lane_group(int lane) {
  return lane >> 2;
}
GEMV_HD int lane_quad(int lane) {
  return lane & 3;
}

// The K offset (within a step) of byte `byte` (0..15) of the 16 a lane loads: [16 t, 16 t + 16).
GEMV_HD int lane_k(int lane, int byte) {
  return 16 * lane_quad(lane) + byte;
}

// Which of a lane's loaded 32-bit words feed mma `half` (0 or 1) as its fragment registers. The
// instruction reads, in lane (g, t), A's row g and g + 8 at logical k 4t..4t+3 (a0, a1) and
// 16+4t..16+4t+3 (a2, a3), B's column g at the same two k ranges (b0, b1). Words 2 half and
// 2 half + 1 of the lane's 16 bytes take those places in both operands, so mma `half` sees
// logical k 4t + i as physical 16t + 8 half + i and 16 + 4t + i as 16t + 8 half + 4 + i: one
// permutation of K for A and B alike (gemv_k_of).
GEMV_HD int fragment_word(int half, int reg) {  // reg 0 (k 4t..) or 1 (k 16+4t..)
  return 2 * half + reg;
}

// The physical K offset within a step that mma `half` reads as logical k (0..31) in quad t's
// lanes: what the host test checks to be a bijection onto the step's 64 bytes.
GEMV_HD int k_of(int half, int logical_k) {
  const int quad = (logical_k & 15) >> 2;  // the lane quad that holds it
  const int reg = logical_k >> 4;
  return 16 * quad + 4 * fragment_word(half, reg) + (logical_k & 3);
}

// Row (activation row m) and column (w row within the 8) of accumulator register j (0..3) of a
// lane: c0, c1 at row g, columns 2t, 2t + 1; c2, c3 at row g + 8.
GEMV_HD int acc_row(int lane, int j) {
  return lane_group(lane) + (j >= 2 ? 8 : 0);
}
GEMV_HD int acc_col(int lane, int j) {
  return 2 * lane_quad(lane) + (j & 1);
}

// Steps of warp `warp` among `warps`: k0 = (warp + i * warps) * STEP for i < warp_steps.
GEMV_HD int steps(int K) {
  return (K + STEP - 1) / STEP;
}

}  // namespace gemv

#ifdef __CUDACC__

namespace gemv {

struct Bytes16 {
  uint32_t w[4];
};

// 16 bytes at p, of which the first `valid` are inside the row (at most 16 are read); the rest
// read as zero. FAST: p is 16-byte aligned and valid is a multiple of 16 (K % 16 == 0 and aligned
// bases, uniform over the launch). STREAM: a weight, read once: no L1 allocation, so that the
// activation keeps the cache.
template <bool STREAM, bool FAST>
__device__ __forceinline__ Bytes16 load16(const int8_t* p, int valid) {
  Bytes16 r = {{0u, 0u, 0u, 0u}};
  if (FAST) {
    if (valid > 0) {
      if (STREAM) {
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
            : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3])
            : "l"(p));
      } else {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
        r.w[0] = v.x, r.w[1] = v.y, r.w[2] = v.z, r.w[3] = v.w;
      }
    }
    return r;
  }
  const int n = valid < 16 ? valid : 16;
  for (int i = 0; i < n; ++i) {
    r.w[i >> 2] |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * (i & 3));
  }
  return r;
}

// d += A (16 x 32, rows) . B (32 x 8, columns), s8 inputs, exact s32 accumulation.
__device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

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

// The warp's share of the K steps: acc[t] += A [rows g, g + 8] . w [row n0 + 8 t + g] over its
// steps (warp, warp + WARPS, ...), UNROLL steps' loads issued before their mma; A: CodesA, or
// QuantizedA (the codes made from x on the way).
template <int NT, int WARPS, int UNROLL, bool FAST, class ASource>
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
// (gridDim.x = ceil(N / (8 NT)), blockDim.x = 32 WARPS). The epilogue: DequantStore (W8A8) or
// StoreInt32 (their store1 and row_factor only).
template <int NT, int WARPS, int UNROLL, class Epilogue>
__device__ void gemv_w8a8(const int8_t* q, const int8_t* w, int M, int N, int K, const Epilogue& epi) {
  using namespace gemv;
  const int g = lane_group(threadIdx.x & 31);
  const int n0 = blockIdx.x * (ROWS * NT);
  const int8_t* w_row[NT];
  bool has_row[NT];
  weight_rows<NT>(w, N, K, n0, g, w_row, has_row);
  int acc[NT][4] = {};
  const int8_t* lo = q + static_cast<size_t>(g) * K;
  const int8_t* hi = q + static_cast<size_t>(g + 8) * K;
  const bool fast = ((reinterpret_cast<unsigned long long>(q) | reinterpret_cast<unsigned long long>(w)) & 15) == 0 &&
                    (K & 15) == 0;
  if (fast) {
    warp_steps<NT, WARPS, UNROLL, true>(CodesA<true>{lo, hi, g < M, g + 8 < M}, w_row, has_row, K, acc);
  } else {
    warp_steps<NT, WARPS, UNROLL, false>(CodesA<false>{lo, hi, g < M, g + 8 < M}, w_row, has_row, K, acc);
  }
  store_sums<NT, WARPS>(acc, M, N, n0, epi);
}

// ---- the same with the quantization fused: y = epi(quant(x) [M, K] . w [N, K]^T) ----
//
// For decode the quantization kernel costs as much as a third of the GEMM and one more graph node.
// Here every block quantizes x itself: its warps find the rows' scales (quant/quantize.cuh's RowScale from
// the rows' absolute maxima, as the quantization kernel computes them), then the main loop turns
// each lane's 16 values of rows g and g + 8 into codes (code_of, codes8) in place of loading codes.
// The codes and scales are the quantization kernel's bit for bit, so y is the two-kernel path's.
// Each block reads x twice (from L2 or L1): worth it while x is small against the weight
// (backends/cuda/plans.py, gemv_x_ok).

namespace gemv {

struct RowScales {
  float s[MAX_M];
  float up[MAX_M];
  float inv[MAX_M];
  int bad[MAX_M];
};

// The scales of rows [0, M) of x [M, K], warp j taking rows j, j + WARPS, ...; VEC: K % 8 == 0 and
// x 16-byte aligned (8-value groups by 16-byte loads).
template <typename T, int WARPS, bool VEC>
__device__ __forceinline__ void row_scales(const T* x, int M, int K, RowScales& rs) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int m = warp; m < M; m += WARPS) {
    const T* xr = x + static_cast<size_t>(m) * K;
    uint32_t amax = 0u;
    if (VEC) {
      uint32_t acc = 0u;
#pragma unroll 4
      for (int i = lane; i < K / 8; i += 32) {
        uint32_t v[Group<T>::WORDS];
        load_group(xr + 8 * i, v);
        Group<T>::fold(acc, v);
      }
      amax = Group<T>::float_bits(acc);
    } else {
      for (int k = lane; k < K; k += 32) {
        amax = max(amax, abs_bits(to_float(xr[k])));
      }
    }
    amax = warp_max(amax);
    if (lane == 0) {
      const RowScale r(amax);
      rs.s[m] = r.s;
      rs.up[m] = r.up;
      rs.inv[m] = r.inv;
      rs.bad[m] = r.bad;
    }
  }
}

// Activation bytes made from x: the codes of rows g and g + 8 at a step (zero past M or K, and in a
// row that holds NaN or inf). FAST: K % 16 == 0 and x 16-byte aligned.
template <typename T, bool FAST>
struct QuantizedA {
  const T* lo;
  const T* hi;
  bool has_lo;
  bool has_hi;
  float up_lo, inv_lo, up_hi, inv_hi;

  // Row xr's 16 codes from k, of which `valid` lie inside; up != 1: a tiny row (TINY codes).
  static __device__ __forceinline__ Bytes16 codes(const T* xr, int k, int valid, float up, float inv) {
    Bytes16 r = {{0u, 0u, 0u, 0u}};
    if (valid <= 0) {
      return r;
    }
    if (FAST) {
      uint32_t v0[Group<T>::WORDS];
      uint32_t v1[Group<T>::WORDS];
      load_group(xr + k, v0);
      load_group(xr + k + 8, v1);
      const auto f0 = [&](int i) { return Group<T>::value(v0, i); };
      const auto f1 = [&](int i) { return Group<T>::value(v1, i); };
      const uint2 c0 = up != 1.0f ? codes8<true>(f0, up, inv) : codes8<false>(f0, up, inv);
      const uint2 c1 = up != 1.0f ? codes8<true>(f1, up, inv) : codes8<false>(f1, up, inv);
      r.w[0] = c0.x, r.w[1] = c0.y, r.w[2] = c1.x, r.w[3] = c1.y;
      return r;
    }
    const int n = valid < 16 ? valid : 16;
    for (int i = 0; i < n; ++i) {
      const float v = to_float(xr[k + i]);
      const int c = up != 1.0f ? code_of<true>(v, up, inv) : code_of<false>(v, up, inv);
      r.w[i >> 2] |= static_cast<uint32_t>(c & 0xff) << (8 * (i & 3));
    }
    return r;
  }

  __device__ __forceinline__ void load(int k, int valid, Bytes16& a_lo, Bytes16& a_hi) const {
    a_lo = codes(lo, k, has_lo ? valid : 0, up_lo, inv_lo);
    a_hi = codes(hi, k, has_hi ? valid : 0, up_hi, inv_hi);
  }
};

}  // namespace gemv

// y [M, N] (T) = dequant(quant(x) [M, K] . w [N, K]^T) (+ bias) for M <= 16, x: float, __half or
// __nv_bfloat16, the bias in its own type (DequantStore); the launch of gemv_w8a8. PREFETCH steps of
// the block's weight rows go to L2 while the warps find the rows' scales.
template <typename T, int NT, int WARPS, int UNROLL, bool HAS_BIAS, bool NARROW, int PREFETCH = 2, typename TBias>
__device__ void gemv_w8a8_x(const T* x, const int8_t* w, int M, int N, int K, const float* scale_w, const TBias* bias,
                            T* y) {
  using namespace gemv;
  __shared__ RowScales rs;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane_group(lane);
  const int n0 = blockIdx.x * (ROWS * NT);
  const int8_t* w_row[NT];
  bool has_row[NT];
  weight_rows<NT>(w, N, K, n0, g, w_row, has_row);
#pragma unroll
  for (int u = 0; u < PREFETCH; ++u) {
    const int k = (warp + u * WARPS) * STEP + lane_k(lane, 0);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (has_row[t] && k < K) {
        asm volatile("prefetch.global.L2 [%0];\n" ::"l"(w_row[t] + k));
      }
    }
  }
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
    warp_steps<NT, WARPS, UNROLL, true>(QuantizedA<T, true>{lo, hi, lo_on, hi_on, up_lo, inv_lo, up_hi, inv_hi},
                                        w_row, has_row, K, acc);
  } else {
    warp_steps<NT, WARPS, UNROLL, false>(QuantizedA<T, false>{lo, hi, lo_on, hi_on, up_lo, inv_lo, up_hi, inv_hi},
                                         w_row, has_row, K, acc);
  }
  store_sums<NT, WARPS>(acc, M, N, n0, DequantStore<T, HAS_BIAS, NARROW, TBias>{y, rs.s, scale_w, bias, M, N});
}

#endif  // __CUDACC__

}  // namespace int8nax
