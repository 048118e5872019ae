// int8nax W8A8 decode (M <= MV_MAX_M): y[M, N] = W8A8(x[M, K], w[N, K]) in one launch that
// takes the float activations directly and quantizes them in registers, with the numbers of
// the two-launch path (quantize_rows.metal, then the dequantizing GEMM) bit for bit:
//   - each simdgroup takes each row's absmax and NaN/inf flag from the magnitude bits over the
//     whole row (every lane ends with the row's), and the row's scale by row_scale
//     (quantize_core.metal): the scale quantize_rows.metal writes, as the same bits;
//   - each element's code is code_of(its bits, the row's scale): the code quantize_rows.metal
//     stores, so the int32 sums are the same;
//   - the store is DequantStore (dequantize.metal) with those scales: the same epilogue.
// Like cider's decode kernel (w8a8_int8_mv.metal: float activations, 8 weight bytes a lane per
// step, 2 simdgroups x 4 columns), but with the W8A8 numbers rather than float activations:
// decode and prefill round alike (the W8A8 contract of docs/numerics.md holds at every M).
//
// Walk: a threadgroup of MV_SG simdgroups owns MV_SG * MV_ROWS consecutive columns n (rows of
// w); each simdgroup owns MV_ROWS of them and all M rows of x. Lane L reads MV_PIECE contiguous
// weight bytes (and the matching x elements) at k = k0 + L * MV_PIECE of each row, k0 stepping
// by SIMD * MV_PIECE: a simdgroup reads SIMD * MV_PIECE contiguous bytes of each weight row per
// step, each byte once. Masked to k < K, m < M and n < N (rows past the edge read nothing).
// Products are summed exactly in int32 per lane, then across the simdgroup (simd_sum of ints is
// exact), and lane r * MV_MAX_M + m stores (m, n0 + r), so each element of y is written once.
// No barrier, no threadgroup memory. int8nax/nax_emulator.py (emulate_w8a8_decode) walks the
// same lanes and steps.
//
// Built by int8nax/backends/metal/backend.py with mx.fast.metal_kernel: the part above the
// "kernel body" line goes into `header` (after float_bits.metal, quantize_core.metal and
// dequantize.metal), the part below is `source`.
//   inputs   x float16 | bfloat16 | float32 [..., K] (row-contiguous, M rows of any rank: read as
//            [M, K] from `params`), w int8 [N, K], s_w float32 [N],
//            bias OutT [N] (a float32 [1] placeholder when HAS_BIAS is false),
//            params int32 [5] = (M, N, K, 0, 1) (tiling.metal_decode_dispatch)
//            (inputs of fewer than 8 elements arrive as `const constant T*`)
//   output   y OutT [..., N] in x's leading dims (x's dtype; written as [M, N])
//   template OutT, HAS_BIAS, MV_ROWS, MV_SG, MV_MAX_M, SIMD, MV_PIECE, QMAX, TINY

#define INT8NAX_UNROLL _Pragma("clang loop unroll(full)")
#define INT8NAX_NO_UNROLL _Pragma("clang loop unroll(disable)")

namespace int8nax {

// Positions of the run-time scalars in the `params` input (tiling.METAL_GEMM_PARAMS; the
// swizzle entries are unused here).
enum DecodeParam { DECODE_M, DECODE_N, DECODE_K };

template <typename OutT, bool HAS_BIAS, int MV_ROWS, int MV_SG, int MV_MAX_M, int SIMD, int MV_PIECE, int QMAX,
          int TINY, typename PtrX, typename PtrW, typename PtrSw, typename PtrBias, typename PtrParams>
inline void w8a8_decode(PtrX x, PtrW w, PtrSw s_w, PtrBias bias, device OutT* y, PtrParams params,
                        const uint2 tg, const uint sg, const uint lane) {
  static_assert(MV_ROWS * MV_MAX_M <= SIMD, "one lane per output element of a simdgroup");
  const int M = params[DECODE_M];
  const int N = params[DECODE_N];
  const int K = params[DECODE_K];
  const int n0 = (int(tg.x) * MV_SG + int(sg)) * MV_ROWS;  // first column of this simdgroup
  if (n0 >= N) {
    return;  // no barrier anywhere: a simdgroup past the edge just leaves
  }

  // Each row's scale, as quantize_rows.metal computes it (the max of the magnitude bits does not
  // depend on which thread saw which element).
  RowScale rs[MV_MAX_M];
  float sx[MV_MAX_M];
  INT8NAX_UNROLL
  for (int m = 0; m < MV_MAX_M; ++m) {
    uint amax = 0u;
    bool bad = false;
    if (m < M) {  // the same for every lane
      const PtrX row = x + ulong(m) * ulong(K);
      INT8NAX_NO_UNROLL
      for (int k = int(lane); k < K; k += SIMD) {
        const uint mag = f32_bits(row[k]) & F32_MAGNITUDE;
        bad = bad || mag >= F32_INF_BITS;
        amax = max(amax, mag);
      }
    }
    rs[m] = row_scale<QMAX, TINY>(simd_max(amax), simd_any(bad));
    sx[m] = scale_of(rs[m]);
  }

  int acc[MV_MAX_M][MV_ROWS];
  INT8NAX_UNROLL
  for (int m = 0; m < MV_MAX_M; ++m) {
    INT8NAX_UNROLL
    for (int r = 0; r < MV_ROWS; ++r) {
      acc[m][r] = 0;
    }
  }
  constexpr int STEP = SIMD * MV_PIECE;
  INT8NAX_NO_UNROLL
  for (int k0 = int(lane) * MV_PIECE; k0 < K; k0 += STEP) {
    const int k_left = K - k0;  // > 0: columns k0 .. k0 + min(k_left, MV_PIECE) - 1 exist
    int xq[MV_MAX_M][MV_PIECE];  // the codes quantize_rows.metal would store
    INT8NAX_UNROLL
    for (int m = 0; m < MV_MAX_M; ++m) {
      const PtrX row = x + (ulong(min(m, M - 1)) * ulong(K) + ulong(k0));
      INT8NAX_UNROLL
      for (int j = 0; j < MV_PIECE; ++j) {
        xq[m][j] = (m < M && j < k_left) ? code_of<QMAX>(f32_bits(row[j]), rs[m]) : 0;
      }
    }
    INT8NAX_UNROLL
    for (int r = 0; r < MV_ROWS; ++r) {
      const bool row_ok = n0 + r < N;
      const PtrW row = w + (ulong(min(n0 + r, N - 1)) * ulong(K) + ulong(k0));
      INT8NAX_UNROLL
      for (int j = 0; j < MV_PIECE; ++j) {
        const int wv = (row_ok && j < k_left) ? int(row[j]) : 0;
        INT8NAX_UNROLL
        for (int m = 0; m < MV_MAX_M; ++m) {
          acc[m][r] += xq[m][j] * wv;
        }
      }
    }
  }

  const thread float* sx_ptr = sx;
  const DequantStore<OutT, HAS_BIAS, const thread float*, PtrSw, PtrBias> epilogue{sx_ptr, s_w, bias, y, N};
  INT8NAX_UNROLL
  for (int m = 0; m < MV_MAX_M; ++m) {
    INT8NAX_UNROLL
    for (int r = 0; r < MV_ROWS; ++r) {
      const int sum = simd_sum(acc[m][r]);  // every lane takes part, so no lane may have left
      if (int(lane) == r * MV_MAX_M + m && m < M && n0 + r < N) {
        epilogue(m, n0 + r, sum);
      }
    }
  }
}

}  // namespace int8nax

// ==== kernel body ====
int8nax::w8a8_decode<OutT, HAS_BIAS, MV_ROWS, MV_SG, MV_MAX_M, SIMD, MV_PIECE, QMAX, TINY>(
    x, w, s_w, bias, y, params, threadgroup_position_in_grid.xy, simdgroup_index_in_threadgroup,
    thread_index_in_simdgroup);
