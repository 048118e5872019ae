// int8nax NAX GEMM core (Apple M5, Metal 4): the tile walk shared by the int8 -> int32 GEMM
// (int8_gemm.metal) and the W8A8 GEMM (w8a8_gemm.metal).
//
// Global-scope code: int8nax/backends/metal/backend.py puts it into the `header` of every GEMM built
// with mx.fast.metal_kernel. Every tile constant is a template parameter that comes from
// int8nax/tiling.py (NaxTileConfig.template()); this file holds no tile size of its own, and
// int8nax/nax_emulator.py walks the same grid, masks and K loop with the same constants.
//
// Walk, per threadgroup (BM x BN output tile, WM x WN simdgroups of SM x SN = BM/WM x BN/WN):
//   - decode the swizzled tile; threadgroups past the last M tile only pad the grid and leave;
//   - K in whole BK blocks, one threadgroup barrier per block (keeps the simdgroups in step so
//     that the A and B rows they share stay in cache), then one last partial block for the K
//     remainder, whose loads are masked to k < K;
//   - no load outside the matrix (m < M for A, n < N for B): masked off and zero-filled;
//   - a simdgroup whose sub-tile lies wholly outside C does no work but meets every barrier;
//   - stores are masked to m < M, n < N, so each element of C is written exactly once.
//
// Two load paths (template flag MLX_LAYOUT; metal.py tries the MLX-layout one first and keeps
// it if it passes the bit-exact first-use self-test, else the generic one):
//   - MlxLayoutSubtile: MLX's BaseNAXFrag lane layout, computed from the lane id. One row
//     pointer per fragment row, ROW_PIECE contiguous bytes per row piece at constant offsets,
//     pointers bumped along K, SK-wide inner steps (two K fragments, then the MMAs), and an
//     unmasked path for sub-tiles wholly inside C next to a masked one for the edges (the
//     branch is uniform across the simdgroup). Correct only if the int8 cooperative tensors
//     use that layout (cider's int8 kernels prove it on an M5 Pro), hence the self-test.
//   - GenericSubtile: asks each cooperative tensor where its elements sit
//     (get_multidimensional_index) and loads element by element: correct under any layout.
//
// Metal rules kept here (docs/metal.md, checked by tests/metal_lint.py): static data only in
// the `constant` address space, member functions qualified `thread` (Metal 4.1 makes `this`
// generic otherwise), decltype of a kernel parameter only inside remove_addrspace_t, ASCII.

#include <metal_stdlib>
#include <metal_tensor>
#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>

using namespace metal;

// Loop pragmas as MLX's steel/defines.h writes them: fragment and element loops index register
// arrays and cooperative tensors, which must be fully unrolled to stay in registers; K loops
// stay rolled so that register pressure does not grow with BK.
#define INT8NAX_UNROLL _Pragma("clang loop unroll(full)")
#define INT8NAX_NO_UNROLL _Pragma("clang loop unroll(disable)")

namespace int8nax {

// Positions of the run-time scalars in the `params` input (tiling.METAL_GEMM_PARAMS).
enum GemmParam { PARAM_M, PARAM_N, PARAM_K, PARAM_SWIZZLE_LOG, PARAM_TILES_M };

// ---------------------------------------------------------------------------------------------
// The generic path: coordinates asked of the cooperative tensors
// ---------------------------------------------------------------------------------------------

// Where this lane's elements of one cooperative tensor sit in their fragment:
// get_multidimensional_index(i)[0] is the column (the contiguous dimension), [1] the row.
// Elements the tensor marks invalid (or beyond its capacity) are never loaded or stored.
template <int ELEMS>
struct FragCoords {
  short row[ELEMS];
  short col[ELEMS];
  bool ok[ELEMS];

  template <typename CoopTensor>
  void fill(thread CoopTensor& ct) thread {
    const int capacity = int(ct.get_capacity());
    INT8NAX_UNROLL
    for (int i = 0; i < ELEMS; ++i) {
      ok[i] = i < capacity && ct.is_valid_element(i);
      const auto idx = ct.get_multidimensional_index(ok[i] ? i : 0);
      col[i] = ok[i] ? short(idx[0]) : short(0);
      row[i] = ok[i] ? short(idx[1]) : short(0);
    }
  }
};

// One simdgroup's SM x SN block of C: TM x TN destination fragments of int32, accumulated over
// K one FK-deep step at a time. Only the A and B coordinates stay live through the K loop; the
// destination's are asked again at the store.
template <int SM, int SN, int FM, int FN, int FK, int SIMD, bool RELAXED, typename PtrA, typename PtrB>
struct GenericSubtile {
  static constant constexpr const int TM = SM / FM;
  static constant constexpr const int TN = SN / FN;
  static constant constexpr const int A_ELEMS = FM * FK / SIMD;  // elements per lane
  static constant constexpr const int B_ELEMS = FN * FK / SIMD;
  static constant constexpr const int C_ELEMS = FM * FN / SIMD;
  static_assert(SM % FM == 0 && SN % FN == 0, "a sub-tile is made of whole fragments");

  PtrA a;  // int8 [M, K], row-major
  PtrB b;  // int8 [N, K], row-major
  int M, N, K;
  int m0, n0;  // first row and column of C this simdgroup owns
  FragCoords<A_ELEMS> ca;  // (row m, col k)
  FragCoords<B_ELEMS> cb;  // (row n, col k)
  int acc[TM][TN][C_ELEMS];

  void init(PtrA a_, PtrB b_, const int M_, const int N_, const int K_, const int m0_, const int n0_,
            const uint lane) thread {
    (void)lane;
    a = a_;
    b = b_;
    M = M_;
    N = N_;
    K = K_;
    m0 = m0_;
    n0 = n0_;
    constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(
        FM, FN, FK, false, true, RELAXED, mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
    mpp::tensor_ops::matmul2d<desc, execution_simdgroup> mma;
    auto ct_a = mma.template get_left_input_cooperative_tensor<int8_t, int8_t, int32_t>();
    auto ct_b = mma.template get_right_input_cooperative_tensor<int8_t, int8_t, int32_t>();
    ca.fill(ct_a);
    cb.fill(ct_b);
    INT8NAX_UNROLL
    for (int tm = 0; tm < TM; ++tm) {
      INT8NAX_UNROLL
      for (int tn = 0; tn < TN; ++tn) {
        INT8NAX_UNROLL
        for (int i = 0; i < C_ELEMS; ++i) {
          acc[tm][tn][i] = 0;
        }
      }
    }
  }

  // Columns k0 .. k0+FK-1 of A and B. MASK_K: this step may run past K (the remainder block).
  template <bool MASK_K>
  void k_step(const int k0) thread {
    int8_t av[TM][A_ELEMS];
    int8_t bv[TN][B_ELEMS];
    INT8NAX_UNROLL
    for (int tm = 0; tm < TM; ++tm) {
      INT8NAX_UNROLL
      for (int i = 0; i < A_ELEMS; ++i) {
        const int m = m0 + tm * FM + ca.row[i];
        const int k = k0 + ca.col[i];
        av[tm][i] = (ca.ok[i] && m < M && (!MASK_K || k < K)) ? a[ulong(m) * ulong(K) + ulong(k)] : int8_t(0);
      }
    }
    INT8NAX_UNROLL
    for (int tn = 0; tn < TN; ++tn) {
      INT8NAX_UNROLL
      for (int i = 0; i < B_ELEMS; ++i) {
        const int n = n0 + tn * FN + cb.row[i];
        const int k = k0 + cb.col[i];
        bv[tn][i] = (cb.ok[i] && n < N && (!MASK_K || k < K)) ? b[ulong(n) * ulong(K) + ulong(k)] : int8_t(0);
      }
    }
    constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(
        FM, FN, FK, false, true, RELAXED, mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
    mpp::tensor_ops::matmul2d<desc, execution_simdgroup> mma;
    INT8NAX_UNROLL
    for (int tm = 0; tm < TM; ++tm) {
      INT8NAX_UNROLL
      for (int tn = 0; tn < TN; ++tn) {
        auto ct_a = mma.template get_left_input_cooperative_tensor<int8_t, int8_t, int32_t>();
        auto ct_b = mma.template get_right_input_cooperative_tensor<int8_t, int8_t, int32_t>();
        auto ct_c = mma.template get_destination_cooperative_tensor<
            remove_addrspace_t<decltype(ct_a)>, remove_addrspace_t<decltype(ct_b)>, int32_t>();
        INT8NAX_UNROLL
        for (int i = 0; i < A_ELEMS; ++i) {
          if (ca.ok[i]) ct_a[i] = av[tm][i];
        }
        INT8NAX_UNROLL
        for (int i = 0; i < B_ELEMS; ++i) {
          if (cb.ok[i]) ct_b[i] = bv[tn][i];
        }
        INT8NAX_UNROLL
        for (int i = 0; i < C_ELEMS; ++i) {
          if (i < int(ct_c.get_capacity()) && ct_c.is_valid_element(i)) ct_c[i] = acc[tm][tn][i];
        }
        mma.run(ct_a, ct_b, ct_c);
        INT8NAX_UNROLL
        for (int i = 0; i < C_ELEMS; ++i) {
          if (i < int(ct_c.get_capacity()) && ct_c.is_valid_element(i)) acc[tm][tn][i] = ct_c[i];
        }
      }
    }
  }

  // K columns [k_lo, k_hi): a whole BK block (MASK_K false) or the remainder (MASK_K true).
  template <bool MASK_K>
  void k_range(const int k_lo, const int k_hi) thread {
    INT8NAX_NO_UNROLL
    for (int k0 = k_lo; k0 < k_hi; k0 += FK) {
      this->template k_step<MASK_K>(k0);
    }
  }

  // Hands every owned element of C inside the matrix to the epilogue, once: epilogue(m, n, acc).
  template <typename Epilogue>
  void store(thread const Epilogue& epilogue) const thread {
    constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(
        FM, FN, FK, false, true, RELAXED, mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
    mpp::tensor_ops::matmul2d<desc, execution_simdgroup> mma;
    auto ct_a = mma.template get_left_input_cooperative_tensor<int8_t, int8_t, int32_t>();
    auto ct_b = mma.template get_right_input_cooperative_tensor<int8_t, int8_t, int32_t>();
    auto ct_c = mma.template get_destination_cooperative_tensor<
        remove_addrspace_t<decltype(ct_a)>, remove_addrspace_t<decltype(ct_b)>, int32_t>();
    FragCoords<C_ELEMS> cc;  // (row m, col n), asked only now
    cc.fill(ct_c);
    INT8NAX_UNROLL
    for (int tm = 0; tm < TM; ++tm) {
      INT8NAX_UNROLL
      for (int tn = 0; tn < TN; ++tn) {
        INT8NAX_UNROLL
        for (int i = 0; i < C_ELEMS; ++i) {
          const int m = m0 + tm * FM + cc.row[i];
          const int n = n0 + tn * FN + cc.col[i];
          if (cc.ok[i] && m < M && n < N) epilogue(m, n, acc[tm][tn][i]);
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The MLX-layout path: lane coordinates from the lane id (MLX BaseNAXFrag, nax.h)
// ---------------------------------------------------------------------------------------------
//
// A 16 x 16 fragment (FM = FK = FN / 2) gives each lane 2 row pieces of ROW_PIECE contiguous
// elements: rows fm and fm + FM/2, columns fn .. fn + ROW_PIECE - 1, with
//   q = lane / ROW_PIECE, fm = (q & ROW_PIECE) | ((lane >> 1) & 3), fn = ((q & 2) | (lane & 1)) * ROW_PIECE
// (tiling.mlx_lane_base). The left operand is one such fragment of A (rows m, columns k); the
// right operand is two fragments of B side by side along n (elements 0-7 rows n, 8-15 rows
// n + FN/2, columns k); the destination is two fragments of C along n (elements 8-15 at
// columns n + FN/2). These are the pairings of MLX's BaseNAXFrag::mma and of cider's int8 GEMM.
template <int SM, int SN, int SK, int FM, int FN, int FK, int SIMD, int ROW_PIECE, bool RELAXED,
          typename PtrA, typename PtrB>
struct MlxLayoutSubtile {
  static constant constexpr const int TM = SM / FM;        // A fragments down the sub-tile
  static constant constexpr const int TN = SN / FN;        // MMA columns (B fragment pairs)
  static constant constexpr const int TK = SK / FK;        // K fragments per inner step
  static constant constexpr const int PIECES = FM * FK / SIMD / ROW_PIECE;  // row pieces per lane per fragment
  static constant constexpr const int ROW_JUMP = FM / PIECES;  // rows between the two pieces
  static constant constexpr const int PAIR = FN / FK;          // 16 x 16 fragments side by side in B and C
  static constant constexpr const int HALF_N = FK;             // n offset of the second fragment of a pair
  static constant constexpr const int FRAG = PIECES * ROW_PIECE;  // elements per lane per fragment
  static constant constexpr const int B_ROWS = PAIR * PIECES;  // row pointers per B pair
  static_assert(FM == FK && PAIR == 2 && PIECES == 2, "MLX's layout pairs 16 x 16 fragments of 2 row pieces");
  static_assert(FRAG * SIMD == FM * FK, "a fragment is PIECES x ROW_PIECE elements per lane");
  static_assert(SM % FM == 0 && SN % FN == 0 && SK % FK == 0, "whole fragments");

  PtrA a_row[TM][PIECES];  // start of this lane's row pieces in A, at the current K
  PtrB b_row[TN][B_ROWS];  // and in B (rows n of the pair: piece r of fragment h is h*2 + r)
  bool a_ok[TM][PIECES];   // the row exists (m < M); rows past the edge point at row M - 1
  bool b_ok[TN][B_ROWS];
  int M, N, K;
  int m0, n0;
  short fm, fn;            // the lane's first row and column in a 16 x 16 fragment
  bool interior;           // the whole SM x SN sub-tile lies inside C: no row masks
  int acc[TM][TN][PAIR * FRAG];

  void init(PtrA a, PtrB b, const int M_, const int N_, const int K_, const int m0_, const int n0_,
            const uint lane) thread {
    M = M_;
    N = N_;
    K = K_;
    m0 = m0_;
    n0 = n0_;
    const short l = short(lane);
    const short q = l / ROW_PIECE;
    fm = (q & ROW_PIECE) | ((l >> 1) & 3);
    fn = ((q & 2) | (l & 1)) * ROW_PIECE;
    interior = m0 + SM <= M && n0 + SN <= N;
    // One 64-bit row offset per row piece, computed once; K then advances by pointer bumps.
    INT8NAX_UNROLL
    for (int tm = 0; tm < TM; ++tm) {
      INT8NAX_UNROLL
      for (int r = 0; r < PIECES; ++r) {
        const int m = m0 + tm * FM + fm + r * ROW_JUMP;
        a_ok[tm][r] = m < M;
        a_row[tm][r] = a + (ulong(min(m, M - 1)) * ulong(K) + ulong(fn));
      }
    }
    INT8NAX_UNROLL
    for (int tn = 0; tn < TN; ++tn) {
      INT8NAX_UNROLL
      for (int h = 0; h < PAIR; ++h) {
        INT8NAX_UNROLL
        for (int r = 0; r < PIECES; ++r) {
          const int n = n0 + tn * FN + h * HALF_N + fm + r * ROW_JUMP;
          b_ok[tn][h * PIECES + r] = n < N;
          b_row[tn][h * PIECES + r] = b + (ulong(min(n, N - 1)) * ulong(K) + ulong(fn));
        }
      }
    }
    INT8NAX_UNROLL
    for (int tm = 0; tm < TM; ++tm) {
      INT8NAX_UNROLL
      for (int tn = 0; tn < TN; ++tn) {
        INT8NAX_UNROLL
        for (int i = 0; i < PAIR * FRAG; ++i) {
          acc[tm][tn][i] = 0;
        }
      }
    }
  }

  // One row piece: ROW_PIECE bytes at p[off ..], zero where masked. MASK_ROW: the row may lie
  // outside the matrix; MASK_K: columns k0 + off + j may reach K (k_left = K - k0 - off - fn).
  template <bool MASK_ROW, bool MASK_K, typename Ptr>
  static void load_piece(thread int8_t* dst, Ptr p, const int off, const bool row_ok, const int k_left) {
    INT8NAX_UNROLL
    for (int j = 0; j < ROW_PIECE; ++j) {
      const bool ok = (!MASK_ROW || row_ok) && (!MASK_K || j < k_left);
      dst[j] = ok ? p[off + j] : int8_t(0);
    }
  }

  // One SK-deep inner step at columns k0 (absolute, for the K mask) of A and B.
  template <bool MASK_ROWS, bool MASK_K>
  void step(const int k0) thread {
    int8_t av[TM][TK][FRAG];
    int8_t bv[TN][TK][PAIR * FRAG];
    INT8NAX_UNROLL
    for (int kk = 0; kk < TK; ++kk) {
      const int k_left = K - (k0 + kk * FK + fn);
      INT8NAX_UNROLL
      for (int tm = 0; tm < TM; ++tm) {
        INT8NAX_UNROLL
        for (int r = 0; r < PIECES; ++r) {
          load_piece<MASK_ROWS, MASK_K>(&av[tm][kk][r * ROW_PIECE], a_row[tm][r], kk * FK, a_ok[tm][r], k_left);
        }
      }
      INT8NAX_UNROLL
      for (int tn = 0; tn < TN; ++tn) {
        INT8NAX_UNROLL
        for (int p = 0; p < B_ROWS; ++p) {
          load_piece<MASK_ROWS, MASK_K>(&bv[tn][kk][p * ROW_PIECE], b_row[tn][p], kk * FK, b_ok[tn][p], k_left);
        }
      }
    }
    constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(
        FM, FN, FK, false, true, RELAXED, mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
    mpp::tensor_ops::matmul2d<desc, execution_simdgroup> mma;
    auto ct_a = mma.template get_left_input_cooperative_tensor<int8_t, int8_t, int32_t>();
    auto ct_b = mma.template get_right_input_cooperative_tensor<int8_t, int8_t, int32_t>();
    auto ct_c = mma.template get_destination_cooperative_tensor<
        remove_addrspace_t<decltype(ct_a)>, remove_addrspace_t<decltype(ct_b)>, int32_t>();
    INT8NAX_UNROLL
    for (int tm = 0; tm < TM; ++tm) {
      INT8NAX_UNROLL
      for (int tn = 0; tn < TN; ++tn) {
        INT8NAX_UNROLL
        for (int kk = 0; kk < TK; ++kk) {
          INT8NAX_UNROLL
          for (int i = 0; i < FRAG; ++i) {
            ct_a[i] = av[tm][kk][i];
          }
          INT8NAX_UNROLL
          for (int i = 0; i < PAIR * FRAG; ++i) {
            ct_b[i] = bv[tn][kk][i];
          }
          INT8NAX_UNROLL
          for (int i = 0; i < PAIR * FRAG; ++i) {
            ct_c[i] = acc[tm][tn][i];
          }
          mma.run(ct_a, ct_b, ct_c);
          INT8NAX_UNROLL
          for (int i = 0; i < PAIR * FRAG; ++i) {
            acc[tm][tn][i] = ct_c[i];
          }
        }
      }
    }
  }

  void advance(const int dk) thread {
    INT8NAX_UNROLL
    for (int tm = 0; tm < TM; ++tm) {
      INT8NAX_UNROLL
      for (int r = 0; r < PIECES; ++r) {
        a_row[tm][r] += dk;
      }
    }
    INT8NAX_UNROLL
    for (int tn = 0; tn < TN; ++tn) {
      INT8NAX_UNROLL
      for (int p = 0; p < B_ROWS; ++p) {
        b_row[tn][p] += dk;
      }
    }
  }

  template <bool MASK_ROWS, bool MASK_K>
  void steps(const int k_lo, const int k_hi) thread {
    INT8NAX_NO_UNROLL
    for (int k0 = k_lo; k0 < k_hi; k0 += SK) {
      volatile int compiler_barrier;  // MLX's scheduling fence: keeps one step's loads together
      this->template step<MASK_ROWS, MASK_K>(k0);
      // The remainder's last step may end past K: no bump there, nothing is read after it.
      if (!MASK_K || k0 + SK < k_hi) this->advance(SK);
      (void)compiler_barrier;
    }
  }

  // K columns [k_lo, k_hi): a whole BK block (MASK_K false) or the remainder (MASK_K true).
  // `interior` is the same for all lanes of the simdgroup, so the branch does not diverge.
  template <bool MASK_K>
  void k_range(const int k_lo, const int k_hi) thread {
    if (interior) {
      this->template steps<false, MASK_K>(k_lo, k_hi);
    } else {
      this->template steps<true, MASK_K>(k_lo, k_hi);
    }
  }

  template <bool MASK, typename Epilogue>
  void store_masked(thread const Epilogue& epilogue) const thread {
    INT8NAX_UNROLL
    for (int tm = 0; tm < TM; ++tm) {
      INT8NAX_UNROLL
      for (int tn = 0; tn < TN; ++tn) {
        INT8NAX_UNROLL
        for (int h = 0; h < PAIR; ++h) {
          INT8NAX_UNROLL
          for (int r = 0; r < PIECES; ++r) {
            const int m = m0 + tm * FM + fm + r * ROW_JUMP;
            const int n = n0 + tn * FN + h * HALF_N + fn;
            INT8NAX_UNROLL
            for (int j = 0; j < ROW_PIECE; ++j) {
              if (!MASK || (m < M && n + j < N)) epilogue(m, n + j, acc[tm][tn][h * FRAG + r * ROW_PIECE + j]);
            }
          }
        }
      }
    }
  }

  template <typename Epilogue>
  void store(thread const Epilogue& epilogue) const thread {
    if (interior) {
      this->template store_masked<false>(epilogue);
    } else {
      this->template store_masked<true>(epilogue);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The walk
// ---------------------------------------------------------------------------------------------

// One threadgroup's share of C = A @ B^T. `params` holds M, N, K, swizzle_log and tiles_m
// (tiling.metal_gemm_dispatch), `tg` is threadgroup_position_in_grid.xy, `sg`
// simdgroup_index_in_threadgroup and `lane` thread_index_in_simdgroup.
template <int BM, int BN, int BK, int SK, int WM, int WN, int FM, int FN, int FK, int SIMD,
          int ROW_PIECE, bool RELAXED, bool MLX_LAYOUT, typename PtrA, typename PtrB,
          typename PtrParams, typename Epilogue>
inline void nax_gemm(PtrA a, PtrB b, PtrParams params, const uint2 tg, const uint sg, const uint lane,
                     thread const Epilogue& epilogue) {
  static_assert(BK % FK == 0 && BK % SK == 0, "a K block is made of whole inner steps");
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

  constexpr int SM = BM / WM;
  constexpr int SN = BN / WN;
  using Subtile = metal::conditional_t<
      MLX_LAYOUT, MlxLayoutSubtile<SM, SN, SK, FM, FN, FK, SIMD, ROW_PIECE, RELAXED, PtrA, PtrB>,
      GenericSubtile<SM, SN, FM, FN, FK, SIMD, RELAXED, PtrA, PtrB>>;
  const int m0 = tile_m * BM + int(sg) / WN * SM;  // first row and column of this simdgroup
  const int n0 = tile_n * BN + int(sg) % WN * SN;
  const bool active = m0 < M && n0 < N;  // owns at least one element of C
  Subtile sub;
  if (active) {
    sub.init(a, b, M, N, K, m0, n0, lane);
  }

  const int k_full = K / BK * BK;  // K covered by whole blocks: no K mask there
  INT8NAX_NO_UNROLL
  for (int kb = 0; kb < k_full; kb += BK) {
    threadgroup_barrier(mem_flags::mem_none);
    if (active) {
      sub.template k_range<false>(kb, kb + BK);
    }
  }
  if (k_full < K) {
    threadgroup_barrier(mem_flags::mem_none);
    if (active) {
      sub.template k_range<true>(k_full, K);
    }
  }
  if (active) {
    sub.store(epilogue);
  }
}

}  // namespace int8nax

// The schedule the kernel bodies (int8_gemm.metal, w8a8_gemm.metal) call: this file's walk.
#define INT8NAX_GEMM_SCHEDULE \
  int8nax::nax_gemm<BM, BN, BK, SK, WM, WN, FM, FN, FK, SIMD, ROW_PIECE, RELAXED, MLX_LAYOUT>
