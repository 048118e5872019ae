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
//
// Every epilogue has row_factor(row) (read once per accumulator row: s_x[row] for W8A8);
// store2(row, col, v0, v1, factor) / store1(row, col, v, factor), exact anywhere (bounds
// checked); and for the interior of a tile (fast_ok) cols(col), the column factors of a pair
// (s_w and bias for W8A8; nothing for int32), and store2_fast(row, col, v0, v1, factor, cols),
// branch-free, which returns true when its pair needs the exact store2 after all (rare W8A8
// scales or cancellation). The GEMMs run store2_fast over a whole interior tile first and store2
// over it only if some pair asked: a branch or call per element serialised them (the fused W8A8
// GEMM ran 1.83x the int32 one at 8192^3, ncu, 2026-12-01). They load the column factors of
// several pairs before storing any: a load the compiler must keep behind a store to `out` (which
// might alias s_w) waits a whole L2 round trip, once per pair when each pair loads its own.

// int32 [M, N] results. With split-K (gridDim.z > 1) split z writes its partial sums to slice z
// of a [splits, M, N] workspace, summed afterwards by reduce_splits (plain stores: no atomics,
// no zero-filled output).
struct StoreInt32 {
  int32_t* out;
  int M;
  int N;

  __device__ __forceinline__ float row_factor(int) const {
    return 0.0f;
  }

  __device__ __forceinline__ int32_t* at(int row, int col) const {
    return out + (static_cast<size_t>(blockIdx.z) * M + row) * N + col;
  }

  // Whether rows [r0, r0 + rows) x cols [c0, c0 + cols) lie inside and pairs can be stored whole.
  __device__ __forceinline__ bool fast_ok(int r0, int c0, int rows, int cols) const {
    return r0 + rows <= M && c0 + cols <= N && (N & 1) == 0;
  }

  struct Cols {};

  __device__ __forceinline__ Cols cols(int) const {
    return Cols{};
  }

  // A pair known to be inside (fast_ok): one 8-byte store; integers never need the exact pass.
  __device__ __forceinline__ bool store2_fast(int row, int col, int v0, int v1, float, Cols) const {
    *reinterpret_cast<int2*>(at(row, col)) = make_int2(v0, v1);
    return false;
  }

  __device__ __forceinline__ void store1(int row, int col, int v, float) const {
    *at(row, col) = v;
  }

  __device__ __forceinline__ void store2(int row, int col, int v0, int v1, float f) const {
    if (row >= M || col >= N) {
      return;
    }
    if (col + 1 < N && (N & 1) == 0) {
      store2_fast(row, col, v0, v1, f, Cols{});
      return;
    }
    store1(row, col, v0, f);
    if (col + 1 < N) {
      store1(row, col + 1, v1, f);
    }
  }
};

// ---- W8A8 dequantization in float32: y = acc * s_x * s_w (+ bias), within 1 ulp ----
//
// No double (the FP64 conversions made the fused GEMM 16-26% slower than the int32 one) and no
// int->float conversion instruction (16 per clock per SM on Hopper, against 128 for FFMA):
//  * acc = a.hi + a.lo exactly, a.hi = acc rounded to float: the two 16-bit halves of acc become
//    exact floats by the magic-number trick, one fma rounds their sum, Fast2Sum recovers the rest;
//  * s_x * s_w = s.hi + s.lo exactly (fma two-product), where it neither under- nor overflows;
//  * a.hi * s.hi = p.hi + p.lo exactly; the other cross terms, each below 2^-23 |y|, are summed
//    by two fma (a.lo * s.lo < 2^-48 |y| is dropped); the bias joins by an exact two-sum.
// The float32 result then carries one rounding plus an error below 2^-44 |acc * s_x * s_w|,
// which is below 2^-36 of the result unless the bias cancels most of the product; then
// (rarely) combine_cancelled sums every term exactly. So y is within 1 ulp of the float64
// model; its conversion to float16/bfloat16 adds one more rounding of the nearly exact float32
// value, still within 1 ulp of the model.
// A scale product outside [2^-100, 2^90] (a subnormal s_x, a bfloat16 row near 1e36) or a
// non-finite or zero scale takes dequantize_wide: the same arithmetic on the mantissas
// (frexpf), the bias scaled to meet them, and one ldexpf at the end, so no intermediate
// under- or overflows and inf appears only where the rounded result exceeds float32.

struct FloatPair {
  float hi;
  float lo;
};

// a * b = hi + lo exactly, unless a * b under- or overflows.
__device__ __forceinline__ FloatPair two_prod(float a, float b) {
  const float hi = __fmul_rn(a, b);
  return {hi, __fmaf_rn(a, b, -hi)};
}

// a + b = hi + lo exactly (Knuth's branch-free two-sum; the intrinsics forbid reassociation).
__device__ __forceinline__ FloatPair two_sum(float a, float b) {
  const float s = __fadd_rn(a, b);
  const float bv = __fsub_rn(s, a);
  const float av = __fsub_rn(s, bv);
  return {s, __fadd_rn(__fsub_rn(a, av), __fsub_rn(b, bv))};
}

// v = 65536 h + l exactly, both halves exact floats (h in [-2^15, 2^15), l in [0, 2^16)), by the
// magic-number trick: no conversion instruction.
struct IntHalves {
  float h;
  float l;
};

__device__ __forceinline__ IntHalves int_halves(int v) {
  // 0x4B400000 = 1.5 * 2^23: adding |j| < 2^22 to its bits gives the float 1.5 * 2^23 + j.
  return {__fsub_rn(__int_as_float(0x4B400000 + (v >> 16)), 12582912.0f),
          __fsub_rn(__int_as_float(0x4B000000 | (v & 0xFFFF)), 8388608.0f)};
}

// v rounded to float32 (to nearest even): one fma rounds 65536 h + l = v.
__device__ __forceinline__ float round_int(int v) {
  const IntHalves p = int_halves(v);
  return __fmaf_rn(p.h, 65536.0f, p.l);
}

// acc = hi + lo exactly with hi = acc rounded to float32 (|lo| <= 64), in six integer/float
// operations and no conversion instruction.
__device__ __forceinline__ FloatPair split_int(int v) {
  const IntHalves p = int_halves(v);
  const float hi = __fmaf_rn(p.h, 65536.0f, p.l);                  // one rounding of 65536 h + l = v
  return {hi, __fsub_rn(p.l, __fmaf_rn(p.h, -65536.0f, hi))};     // Fast2Sum (|65536 h| > l or h = 0)
}

// a * s + b after cancellation (|a * s + b| < 2^-8 |a * s|), where the fast sum's error could
// exceed half an ulp of the small result: every cross term as an exact pair, summed by a
// cascade of two-sums (Ogita-Rump-Oishi Sum2), so the error is one rounding plus 2^-60 |a * s|.
__device__ __noinline__ float combine_cancelled(FloatPair a, FloatPair s, FloatPair p, FloatPair q) {
  const FloatPair t1 = two_prod(a.hi, s.lo);
  const FloatPair t2 = two_prod(a.lo, s.hi);
  const float terms[7] = {q.lo, p.lo, t1.hi, t2.hi, t1.lo, t2.lo, __fmul_rn(a.lo, s.lo)};
  float sum = q.hi;
  float err = 0.0f;
#pragma unroll
  for (int i = 0; i < 7; ++i) {
    const FloatPair r = two_sum(sum, terms[i]);
    sum = r.hi;
    err = __fadd_rn(err, r.lo);
  }
  return __fadd_rn(sum, err);
}

// a * s (+ b): a and s exact pairs with |a.lo| <= 2^-24 |a.hi|, |s.lo| <= 2^-24 |s.hi|.
template <bool HAS_BIAS>
__device__ __forceinline__ float combine(FloatPair a, FloatPair s, float b) {
  const FloatPair p = two_prod(a.hi, s.hi);
  const float tail = __fmaf_rn(a.hi, s.lo, __fmaf_rn(a.lo, s.hi, p.lo));
  if (!HAS_BIAS) {
    return __fadd_rn(p.hi, tail);
  }
  const FloatPair q = two_sum(p.hi, b);
  if (isinf(q.hi)) {
    return q.hi;  // q.lo would be NaN; the exact value overflows as well
  }
  if (fabsf(q.hi) < 0x1p-8f * fabsf(p.hi)) {
    return combine_cancelled(a, s, p, q);  // rare: the bias cancels most of the product
  }
  return __fadd_rn(q.hi, __fadd_rn(q.lo, tail));
}

// The rare scales (see above): exponents apart, one ldexpf at the end.
template <bool HAS_BIAS>
__device__ __noinline__ float dequantize_wide(int acc, float sx, float sw, float b) {
  if (!isfinite(sx) || !isfinite(sw) || acc == 0 || sx == 0.0f || sw == 0.0f) {
    // NaN, inf or an exact zero product: what float64 gives (0 * finite = 0, NaN/inf propagate).
    const float y = (isfinite(sx) && isfinite(sw)) ? 0.0f : __fmul_rn(__fmul_rn(static_cast<float>(acc), sx), sw);
    return HAS_BIAS ? __fadd_rn(y, b) : y;
  }
  if (HAS_BIAS && !isfinite(b)) {
    return b;  // a finite product plus inf or NaN
  }
  int ex;
  int ew;
  const float fx = frexpf(sx, &ex);  // |fx|, |fw| in [1/2, 1), exact also for subnormal scales
  const float fw = frexpf(sw, &ew);
  const int e = ex + ew;
  // |acc * fx * fw| in [1/4, 2^31): nothing below can under- or overflow.
  const FloatPair s = two_prod(fx, fw);
  const FloatPair a = split_int(acc);
  float r;
  if (HAS_BIAS && b != 0.0f) {
    int eb;
    frexpf(b, &eb);
    if (eb - e > 64) {
      return b;  // |acc s_x s_w| < 2^(31 + e) < 2^-32 |b|: below half an ulp of b
    }
    // Exponent >= -200 - e ... <= 64: scaled exactly, or (far below the product) to zero.
    const float bs = eb - e < -200 ? 0.0f : ldexpf(b, -e);
    r = combine<true>(a, s, bs);
  } else {
    r = combine<false>(a, s, 0.0f);
  }
  return ldexpf(r, e);  // exact, or the one rounding into float32's subnormals, or inf
}

template <bool HAS_BIAS>
__device__ __forceinline__ float dequantize(int acc, float sx, float sw, float b) {
  const FloatPair s = two_prod(sx, sw);
  const float mag = fabsf(s.hi);
  if (!(mag >= 0x1p-100f && mag <= 0x1p90f)) {  // also NaN
    return dequantize_wide<HAS_BIAS>(acc, sx, sw, b);
  }
  return combine<HAS_BIAS>(split_int(acc), s, b);
}

// The common case without a branch: y as dequantize computes it when the scale product is in
// [2^-100, 2^90], the bias does not cancel most of the product and nothing overflows; `rare`
// says that one of these fails and y must come from dequantize instead.
template <bool HAS_BIAS>
__device__ __forceinline__ float dequantize_fast(int acc, float sx, float sw, float b, bool& rare) {
  const FloatPair s = two_prod(sx, sw);
  const float mag = fabsf(s.hi);
  const FloatPair a = split_int(acc);
  const FloatPair p = two_prod(a.hi, s.hi);
  const float tail = __fmaf_rn(a.hi, s.lo, __fmaf_rn(a.lo, s.hi, p.lo));
  const bool in_range = (mag >= 0x1p-100f) & (mag <= 0x1p90f);  // false for NaN
  if (!HAS_BIAS) {
    rare = !in_range;
    return __fadd_rn(p.hi, tail);
  }
  const FloatPair q = two_sum(p.hi, b);
  const float aq = fabsf(q.hi);
  rare = !(in_range & (aq >= 0x1p-8f * fabsf(p.hi)) & (aq < __int_as_float(0x7f800000)));
  return __fadd_rn(q.hi, __fadd_rn(q.lo, tail));
}

// ---- W8A8 into float16 / bfloat16 (DequantStore's NARROW path): float32 without the full EFTs ----
//
// The 1-ulp contract is in the output type's ulps, and float32 has 13 (bfloat16: 16) bits to
// spare: a float32 y32 with |y32 - y| below 2^-14 |y| rounds to the same value of the output type
// as the float64 model, or to its neighbour (both types' steps exceed 2^-11 |y|, resp. 2^-8 |y|).
//  * No bias: y32 = fl(fl(acc) * fl(s_x * s_w)), three roundings: |y32 - y| < 2^-22 |y|.
//  * Bias: a product rounded before the bias is added would leave an error of 2^-24 |acc s_x s_w|,
//    which a cancelling bias makes large against y, and in typical layers the bias cancels that
//    closely for a fraction of a percent of the values (dequantize_fast sends those to the exact
//    path). So acc = a.hi + a.lo (split_int) and s_x s_w = s.hi + s.lo (two_prod) stay exact,
//    u = fl(a.hi * s.hi + b) is one fma, the small terms v = a.lo s.hi + a.hi s.lo go in one fma
//    (a.lo s.lo < 2^-48 |acc s_x s_w| is dropped) and y32 = fl(u + v): |y32 - y| < 2^-23 |y| +
//    2^-45 |acc s_x s_w|, below 2^-16 |y| unless |y32| < 2^-28 |b| (rare: the exact path).
// `rare` also sends to the exact path (dequantize) a |y32| at or past the output's largest
// finite value (NaN and inf included), where rounding decides overflow, and for bfloat16, whose
// range is float32's, a scale product below 2^-100 (the bounds above need it normal and its
// two_prod exact). A float16 output needs no such check: such a product is below 2^31 * 2^-100,
// and its error far below float16's smallest step (2^-24).
template <typename TOut>
struct NarrowOutput {
  static constexpr bool narrow = false;  // float32: the output's ulps are float32's (dequantize_fast)
  static constexpr float max_abs = 0.0f;
  static constexpr float min_scale = 0.0f;
};

template <>
struct NarrowOutput<__half> {
  static constexpr bool narrow = true;
  static constexpr float max_abs = 65504.0f;   // float16's largest finite value
  static constexpr float min_scale = 0.0f;
};

template <>
struct NarrowOutput<__nv_bfloat16> {
  static constexpr bool narrow = true;
  static constexpr float max_abs = 0x1p127f;   // below bfloat16's largest finite value
  static constexpr float min_scale = 0x1p-100f;
};

template <typename TOut, bool HAS_BIAS>
__device__ __forceinline__ float dequantize_narrow(int acc, float sx, float sw, float b, bool& rare) {
  float y;
  float s;
  if (HAS_BIAS) {
    const FloatPair sp = two_prod(sx, sw);
    const FloatPair a = split_int(acc);
    const float u = __fmaf_rn(a.hi, sp.hi, b);
    const float v = __fmaf_rn(a.lo, sp.hi, __fmul_rn(a.hi, sp.lo));
    y = __fadd_rn(u, v);
    s = sp.hi;
  } else {
    s = __fmul_rn(sx, sw);
    y = __fmul_rn(round_int(acc), s);
  }
  const float ay = fabsf(y);
  bool ok = ay < NarrowOutput<TOut>::max_abs;  // false for NaN and inf
  if (NarrowOutput<TOut>::min_scale > 0.0f) {
    ok = ok & (fabsf(s) >= NarrowOutput<TOut>::min_scale);
  }
  if (HAS_BIAS) {
    ok = ok & (ay >= __fmul_rn(0x1p-28f, fabsf(b)));
  }
  rare = !ok;
  return y;
}

__device__ __forceinline__ void store_rounded(float* p, float y) {
  *p = y;
}
__device__ __forceinline__ void store_rounded(__half* p, float y) {
  *p = __float2half_rn(y);
}
__device__ __forceinline__ void store_rounded(__nv_bfloat16* p, float y) {
  *p = __float2bfloat16_rn(y);
}
// Two neighbours in one store (p aligned to twice the element size).
__device__ __forceinline__ void store_rounded2(float* p, float y0, float y1) {
  *reinterpret_cast<float2*>(p) = make_float2(y0, y1);
}
__device__ __forceinline__ void store_rounded2(__half* p, float y0, float y1) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(y0, y1);
}
__device__ __forceinline__ void store_rounded2(__nv_bfloat16* p, float y0, float y1) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(y0, y1);
}

// W8A8: y[m, n] = dequantize(acc, s_x[m], s_w[n], bias[n]) rounded to TOut. NARROW: where TOut is
// float16 or bfloat16, dequantize_narrow on the branch-free path (dequantize_fast for float32) and
// first on the exact path (value()).
template <typename TOut, bool HAS_BIAS, bool NARROW = false>
struct DequantStore {
  TOut* out;
  const float* scale_x;
  const float* scale_w;
  const float* bias;
  int M;
  int N;

  __device__ __forceinline__ float row_factor(int row) const {
    return row < M ? scale_x[row] : 0.0f;
  }

  // The exact path's value. With NARROW it is dequantize_narrow's unless that reports `rare`, so
  // each output is the same function of its (acc, s_x, s_w, bias) on every path (fast or exact,
  // interior or edge, fused or in the reduction) and thus on every plan and batch size, as eft's is.
  __device__ __forceinline__ float value(int col, int v, float sx) const {
    const float sw = scale_w[col];
    const float b = HAS_BIAS ? bias[col] : 0.0f;
    if (NARROW && NarrowOutput<TOut>::narrow) {
      bool rare;
      const float y = dequantize_narrow<TOut, HAS_BIAS>(v, sx, sw, b, rare);
      if (!rare) {
        return y;
      }
    }
    return dequantize<HAS_BIAS>(v, sx, sw, b);
  }

  __device__ __forceinline__ void store1(int row, int col, int v, float sx) const {
    store_rounded(out + static_cast<size_t>(row) * N + col, value(col, v, sx));
  }

  __device__ __forceinline__ bool fast_ok(int r0, int c0, int rows, int cols) const {
    const unsigned long long ptrs =
        reinterpret_cast<unsigned long long>(scale_w) | (HAS_BIAS ? reinterpret_cast<unsigned long long>(bias) : 0ull);
    return r0 + rows <= M && c0 + cols <= N && (N & 1) == 0 && (ptrs & 7) == 0;
  }

  // s_w and bias of the pair (col, col + 1), two 8-byte loads (inside, fast_ok).
  struct Cols {
    float2 sw;
    float2 bias;
  };

  __device__ __forceinline__ Cols cols(int col) const {
    return Cols{*reinterpret_cast<const float2*>(scale_w + col),
                HAS_BIAS ? *reinterpret_cast<const float2*>(bias + col) : make_float2(0.0f, 0.0f)};
  }

  // A pair known to be inside (fast_ok), on the branch-free path; true: the pair needs the exact
  // path (store2), which overwrites what this stored.
  __device__ __forceinline__ bool store2_fast(int row, int col, int v0, int v1, float sx, const Cols& c) const {
    bool r0;
    bool r1;
    float y0;
    float y1;
    if (NARROW && NarrowOutput<TOut>::narrow) {
      y0 = dequantize_narrow<TOut, HAS_BIAS>(v0, sx, c.sw.x, c.bias.x, r0);
      y1 = dequantize_narrow<TOut, HAS_BIAS>(v1, sx, c.sw.y, c.bias.y, r1);
    } else {
      y0 = dequantize_fast<HAS_BIAS>(v0, sx, c.sw.x, c.bias.x, r0);
      y1 = dequantize_fast<HAS_BIAS>(v1, sx, c.sw.y, c.bias.y, r1);
    }
    store_rounded2(out + static_cast<size_t>(row) * N + col, y0, y1);
    return r0 | r1;
  }

  // The exact path for a pair anywhere (bounds checked, one element at a time).
  __device__ __forceinline__ void store2(int row, int col, int v0, int v1, float sx) const {
    if (row >= M || col >= N) {
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
      const float f = epi.row_factor(row);
      bool exact = !epi.fast_ok(row, col, 1, 4);
      if (!exact) {
        const auto c0 = epi.cols(col);
        const auto c2 = epi.cols(col + 2);
        exact = epi.store2_fast(row, col, sum.x, sum.y, f, c0) | epi.store2_fast(row, col + 2, sum.z, sum.w, f, c2);
      }
      if (exact) {
        epi.store2(row, col, sum.x, sum.y, f);
        epi.store2(row, col + 2, sum.z, sum.w, f);
      }
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
