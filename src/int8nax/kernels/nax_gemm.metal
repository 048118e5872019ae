// int8nax NAX GEMM core (Apple M5, Metal 4): the tile walk shared by the int8 -> int32 GEMM
// (int8_gemm.metal) and the W8A8 GEMM (w8a8_gemm.metal).
//
// Global-scope code: int8nax/backends/metal.py puts it into the `header` of every GEMM built
// with mx.fast.metal_kernel. Every tile constant is a template parameter that comes from
// int8nax/tiling.py (NaxTileConfig.template()); this file holds no tile size of its own, and
// int8nax/nax_emulator.py walks the same grid, masks and K loop with the same constants.
//
// Walk, per threadgroup (BM x BN output tile, WM x WN simdgroups of SM x SN = BM/WM x BN/WN):
//   - decode the swizzled tile; threadgroups past the last M tile only pad the grid and leave;
//   - K in whole BK blocks, one threadgroup barrier per block (keeps the simdgroups in step so
//     that the A and B rows they share stay in cache), then one last partial block for the K
//     remainder, whose loads are masked to k < K;
//   - every load is masked to the matrix (m < M for A, n < N for B): zero-filled, never read;
//   - a simdgroup whose sub-tile lies wholly outside C does no work but meets every barrier;
//   - stores are masked to m < M, n < N, so each element of C is written exactly once.

#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>

using namespace metal;

namespace int8nax {

// Positions of the run-time scalars in the `params` input (tiling.METAL_GEMM_PARAMS).
enum GemmParam { PARAM_M, PARAM_N, PARAM_K, PARAM_SWIZZLE_LOG, PARAM_TILES_M };

// The MMA unit: matmul2d on cooperative operands. Left: an FM x FK fragment of A (rows m,
// columns k). Right: an FN x FK fragment of B, which is stored [N, K] (weights as rows), hence
// transpose_right. Destination: FM x FN int32, accumulated in place (multiply_accumulate).
// relaxed_precision stays off: integer products are exact, and nothing else is wanted.
template <int FM, int FN, int FK>
constexpr mpp::tensor_ops::matmul2d_descriptor nax_descriptor() {
  return mpp::tensor_ops::matmul2d_descriptor(
      FM, FN, FK, /*transpose_left=*/false, /*transpose_right=*/true,
      /*relaxed_precision=*/false, mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
}

// Where this lane's cooperative-tensor elements sit in their fragment. The lane layout of int8
// cooperative tensors is not published, so it is asked of the tensor itself once per kernel:
// get_multidimensional_index(i)[0] is the column (the contiguous dimension), [1] the row.
// Elements the tensor marks invalid (or beyond its capacity) are never loaded or stored.
template <int ELEMS>
struct FragCoords {
  short row[ELEMS];
  short col[ELEMS];
  bool ok[ELEMS];
};

template <int ELEMS, typename CoopTensor>
inline FragCoords<ELEMS> coords_of(thread CoopTensor& ct) {
  FragCoords<ELEMS> f;
  const int capacity = int(ct.get_capacity());
  for (int i = 0; i < ELEMS; ++i) {
    f.ok[i] = i < capacity && ct.is_valid_element(i);
    const auto idx = ct.get_multidimensional_index(f.ok[i] ? i : 0);
    f.col[i] = f.ok[i] ? short(idx[0]) : short(0);
    f.row[i] = f.ok[i] ? short(idx[1]) : short(0);
  }
  return f;
}

// One simdgroup's SM x SN block of C: TM x TN destination fragments of int32, accumulated over
// K one FK-deep step at a time.
template <int SM, int SN, int FM, int FN, int FK, int SIMD, typename PtrA, typename PtrB>
struct NaxSubtile {
  static constexpr int TM = SM / FM;
  static constexpr int TN = SN / FN;
  static constexpr int A_ELEMS = FM * FK / SIMD;  // cooperative-tensor elements per lane
  static constexpr int B_ELEMS = FN * FK / SIMD;
  static constexpr int C_ELEMS = FM * FN / SIMD;
  static_assert(SM % FM == 0 && SN % FN == 0, "a sub-tile is made of whole fragments");

  PtrA a;  // int8 [M, K], row-major
  PtrB b;  // int8 [N, K], row-major
  int M, N, K;
  int m0, n0;  // first row and column of C this simdgroup owns
  FragCoords<A_ELEMS> ca;  // (row m, col k)
  FragCoords<B_ELEMS> cb;  // (row n, col k)
  FragCoords<C_ELEMS> cc;  // (row m, col n)
  int acc[TM][TN][C_ELEMS];

  void init() {
    constexpr auto desc = nax_descriptor<FM, FN, FK>();
    mpp::tensor_ops::matmul2d<desc, execution_simdgroup> mma;
    auto ct_a = mma.template get_left_input_cooperative_tensor<int8_t, int8_t, int32_t>();
    auto ct_b = mma.template get_right_input_cooperative_tensor<int8_t, int8_t, int32_t>();
    auto ct_c = mma.template get_destination_cooperative_tensor<
        remove_addrspace_t<decltype(ct_a)>, remove_addrspace_t<decltype(ct_b)>, int32_t>();
    ca = coords_of<A_ELEMS>(ct_a);
    cb = coords_of<B_ELEMS>(ct_b);
    cc = coords_of<C_ELEMS>(ct_c);
    for (int tm = 0; tm < TM; ++tm)
      for (int tn = 0; tn < TN; ++tn)
        for (int i = 0; i < C_ELEMS; ++i)
          acc[tm][tn][i] = 0;
  }

  // Columns k0 .. k0+FK-1 of A and B. MASK_K: this step may run past K (the remainder block).
  template <bool MASK_K>
  void k_step(const int k0) {
    int8_t av[TM][A_ELEMS];
    int8_t bv[TN][B_ELEMS];
    for (int tm = 0; tm < TM; ++tm) {
      for (int i = 0; i < A_ELEMS; ++i) {
        const int m = m0 + tm * FM + ca.row[i];
        const int k = k0 + ca.col[i];
        av[tm][i] = (ca.ok[i] && m < M && (!MASK_K || k < K)) ? a[ulong(m) * ulong(K) + ulong(k)] : int8_t(0);
      }
    }
    for (int tn = 0; tn < TN; ++tn) {
      for (int i = 0; i < B_ELEMS; ++i) {
        const int n = n0 + tn * FN + cb.row[i];
        const int k = k0 + cb.col[i];
        bv[tn][i] = (cb.ok[i] && n < N && (!MASK_K || k < K)) ? b[ulong(n) * ulong(K) + ulong(k)] : int8_t(0);
      }
    }
    constexpr auto desc = nax_descriptor<FM, FN, FK>();
    mpp::tensor_ops::matmul2d<desc, execution_simdgroup> mma;
    for (int tm = 0; tm < TM; ++tm) {
      for (int tn = 0; tn < TN; ++tn) {
        auto ct_a = mma.template get_left_input_cooperative_tensor<int8_t, int8_t, int32_t>();
        auto ct_b = mma.template get_right_input_cooperative_tensor<int8_t, int8_t, int32_t>();
        auto ct_c = mma.template get_destination_cooperative_tensor<
            remove_addrspace_t<decltype(ct_a)>, remove_addrspace_t<decltype(ct_b)>, int32_t>();
        for (int i = 0; i < A_ELEMS; ++i)
          if (ca.ok[i]) ct_a[i] = av[tm][i];
        for (int i = 0; i < B_ELEMS; ++i)
          if (cb.ok[i]) ct_b[i] = bv[tn][i];
        for (int i = 0; i < C_ELEMS; ++i)
          if (cc.ok[i]) ct_c[i] = acc[tm][tn][i];
        mma.run(ct_a, ct_b, ct_c);
        for (int i = 0; i < C_ELEMS; ++i)
          if (cc.ok[i]) acc[tm][tn][i] = ct_c[i];
      }
    }
  }

  // Hands every owned element of C inside the matrix to the epilogue, once: epilogue(m, n, acc).
  template <typename Epilogue>
  void store(thread const Epilogue& epilogue) const {
    for (int tm = 0; tm < TM; ++tm) {
      for (int tn = 0; tn < TN; ++tn) {
        for (int i = 0; i < C_ELEMS; ++i) {
          const int m = m0 + tm * FM + cc.row[i];
          const int n = n0 + tn * FN + cc.col[i];
          if (cc.ok[i] && m < M && n < N) epilogue(m, n, acc[tm][tn][i]);
        }
      }
    }
  }
};

// One threadgroup's share of C = A @ B^T. `params` holds M, N, K, swizzle_log and tiles_m
// (tiling.metal_gemm_dispatch), `tg` is threadgroup_position_in_grid.xy and `sg`
// simdgroup_index_in_threadgroup.
template <int BM, int BN, int BK, int WM, int WN, int FM, int FN, int FK, int SIMD,
          typename PtrA, typename PtrB, typename PtrParams, typename Epilogue>
inline void nax_gemm(PtrA a, PtrB b, PtrParams params, const uint2 tg, const uint sg,
                     thread const Epilogue& epilogue) {
  static_assert(BK % FK == 0, "a K block is made of whole fragments");
  const int M = params[PARAM_M];
  const int N = params[PARAM_N];
  const int K = params[PARAM_K];
  const int swizzle_log = params[PARAM_SWIZZLE_LOG];
  const int tiles_m = params[PARAM_TILES_M];
  const int tile_m = (int(tg.y) << swizzle_log) + (int(tg.x) & ((1 << swizzle_log) - 1));
  const int tile_n = int(tg.x) >> swizzle_log;
  if (tile_m >= tiles_m) {
    return;  // grid padding: the whole threadgroup leaves, so no barrier waits for it
  }

  NaxSubtile<BM / WM, BN / WN, FM, FN, FK, SIMD, PtrA, PtrB> sub;
  sub.a = a;
  sub.b = b;
  sub.M = M;
  sub.N = N;
  sub.K = K;
  sub.m0 = tile_m * BM + int(sg) / WN * (BM / WM);
  sub.n0 = tile_n * BN + int(sg) % WN * (BN / WN);
  sub.init();
  const bool active = sub.m0 < M && sub.n0 < N;  // owns at least one element of C

  const int k_full = K / BK * BK;  // K covered by whole blocks: no K mask there
  for (int kb = 0; kb < k_full; kb += BK) {
    threadgroup_barrier(mem_flags::mem_none);
    if (active) {
      for (int k0 = kb; k0 < kb + BK; k0 += FK) sub.template k_step<false>(k0);
    }
  }
  if (k_full < K) {
    threadgroup_barrier(mem_flags::mem_none);
    if (active) {
      for (int k0 = k_full; k0 < K; k0 += FK) sub.template k_step<true>(k0);
    }
  }
  if (active) sub.store(epilogue);
}

}  // namespace int8nax
