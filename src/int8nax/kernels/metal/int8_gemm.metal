// int8nax int8 x int8 -> int32 GEMM: C[M, N] = A[M, K] @ B[N, K]^T, exact.
//
// Built by int8nax/backends/metal/backend.py with mx.fast.metal_kernel: the part above the
// "kernel body" line goes into `header` (after the schedule: nax_gemm.metal, or gemv.metal
// for M <= tiling.METAL_MV_MAX_M), the part below is `source`.
//   inputs   a int8 [M, K], b int8 [N, K] (row-contiguous), params int32 [5] =
//            (M, N, K, swizzle_log, tiles_m) from tiling.metal_gemm_dispatch
//            (inputs of fewer than 8 elements arrive as `const constant T*`: the core's
//            pointer types are template parameters, so either address space works)
//   output   c int32 [M, N]
//   template the schedule's: BM, BN, BK, WM, WN, SK, FM, FN, FK, SIMD, ROW_PIECE, RELAXED
//            (tiling.NaxTileConfig.template()) and MLX_LAYOUT (the load path, metal_source.py)
//            for nax_gemm.metal; MV_ROWS, MV_SG, MV_MAX_M, SIMD, ROW_PIECE
//            (tiling.metal_gemv_dispatch) for gemv.metal

namespace int8nax {

// Epilogue of the raw GEMM: the exact int32 sum, stored as it is.
struct StoreInt32 {
  device int32_t* c;
  int N;
  void operator()(const int m, const int n, const int acc) const thread {
    c[ulong(m) * ulong(N) + ulong(n)] = acc;
  }
};

}  // namespace int8nax

// ==== kernel body ====
const int8nax::StoreInt32 epilogue{c, params[int8nax::PARAM_N]};
INT8NAX_GEMM_SCHEDULE(
    a, b, params, threadgroup_position_in_grid.xy, simdgroup_index_in_threadgroup,
    thread_index_in_simdgroup, epilogue);
