// int8nax small-M GEMM (M <= MV_MAX_M, decode): C[M, N] = A[M, K] @ B[N, K]^T without the
// matrix units. A 32-row NAX tile would carry 31 padding rows at M = 1; here every thread does
// useful work, and B, the bulk of the traffic, is read once for all M rows.
//
// Global-scope code: int8nax/backends/metal/source.py puts it into the `header` of the
// small-M kernels, in place of nax_gemm.metal; the bodies (int8_gemm.metal, w8a8_gemm.metal)
// and their epilogues are the same. Every constant is a template parameter from
// int8nax/tiling.py (metal_gemv_dispatch); int8nax/nax_emulator.py (emulate_gemv) walks the
// same threadgroups, lanes, masks and K steps.
//
// Walk: a threadgroup of MV_SG simdgroups owns MV_SG * MV_ROWS consecutive columns n (rows of
// B); each simdgroup owns MV_ROWS of them and all M rows of A. Lane L reads ROW_PIECE
// contiguous bytes at k = k0 + L * ROW_PIECE of each row, k0 stepping by SIMD * ROW_PIECE (a
// simdgroup reads SIMD * ROW_PIECE contiguous bytes per row per step), masked to k < K, m < M
// and n < N (rows past the edge read nothing). Products are summed exactly in int32 per lane,
// then across the simdgroup (simd_sum of ints is exact), and lane r * MV_MAX_M + m hands
// (m, n0 + r) to the epilogue, so each element of C is written once. No barrier, no
// threadgroup memory.

#include <metal_stdlib>

using namespace metal;

#define INT8NAX_UNROLL _Pragma("clang loop unroll(full)")
#define INT8NAX_NO_UNROLL _Pragma("clang loop unroll(disable)")

namespace int8nax {

// Positions of the run-time scalars in the `params` input (tiling.METAL_GEMM_PARAMS; the
// swizzle entries are unused here).
enum GemmParam { PARAM_M, PARAM_N, PARAM_K, PARAM_SWIZZLE_LOG, PARAM_TILES_M };

template <int MV_ROWS, int MV_SG, int MV_MAX_M, int SIMD, int ROW_PIECE, typename PtrA, typename PtrB,
          typename PtrParams, typename Epilogue>
inline void gemv(PtrA a, PtrB b, PtrParams params, const uint2 tg, const uint sg, const uint lane,
                 thread const Epilogue& epilogue) {
  static_assert(MV_ROWS * MV_MAX_M <= SIMD, "one lane per output element of a simdgroup");
  const int M = params[PARAM_M];
  const int N = params[PARAM_N];
  const int K = params[PARAM_K];
  const int n0 = (int(tg.x) * MV_SG + int(sg)) * MV_ROWS;  // first column of this simdgroup
  if (n0 >= N) {
    return;  // no barrier anywhere: a simdgroup past the edge just leaves
  }
  int acc[MV_MAX_M][MV_ROWS];
  INT8NAX_UNROLL
  for (int m = 0; m < MV_MAX_M; ++m) {
    INT8NAX_UNROLL
    for (int r = 0; r < MV_ROWS; ++r) {
      acc[m][r] = 0;
    }
  }
  constexpr int STEP = SIMD * ROW_PIECE;
  INT8NAX_NO_UNROLL
  for (int k0 = int(lane) * ROW_PIECE; k0 < K; k0 += STEP) {
    const int k_left = K - k0;  // > 0: columns k0 .. k0 + min(k_left, ROW_PIECE) - 1 exist
    int av[MV_MAX_M][ROW_PIECE];
    INT8NAX_UNROLL
    for (int m = 0; m < MV_MAX_M; ++m) {
      const PtrA row = a + (ulong(min(m, M - 1)) * ulong(K) + ulong(k0));
      INT8NAX_UNROLL
      for (int j = 0; j < ROW_PIECE; ++j) {
        av[m][j] = (m < M && j < k_left) ? int(row[j]) : 0;
      }
    }
    INT8NAX_UNROLL
    for (int r = 0; r < MV_ROWS; ++r) {
      const bool row_ok = n0 + r < N;
      const PtrB row = b + (ulong(min(n0 + r, N - 1)) * ulong(K) + ulong(k0));
      INT8NAX_UNROLL
      for (int j = 0; j < ROW_PIECE; ++j) {
        const int bv = (row_ok && j < k_left) ? int(row[j]) : 0;
        INT8NAX_UNROLL
        for (int m = 0; m < MV_MAX_M; ++m) {
          acc[m][r] += av[m][j] * bv;
        }
      }
    }
  }
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

#define INT8NAX_GEMM_SCHEDULE int8nax::gemv<MV_ROWS, MV_SG, MV_MAX_M, SIMD, ROW_PIECE>
