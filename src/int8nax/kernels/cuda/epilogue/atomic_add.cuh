// The raw GEMM's in-L2 split-K accumulation (a plan with reduce="atomic",
// backends/cuda/plans/tiles.py, REDUCTIONS): every K split adds its int32 partial sums straight
// into one zero-filled [M, N] output, instead of writing slice z of a [splits, M, N] workspace for
// reduce_splits to sum in a second kernel. Integer addition is associative, so the result is the
// exact product, the same bits whatever order the splits' adds land in. What it costs: the
// output's zero fill before the launch (mx.fast.cuda_kernel's init_value) and the adds, which
// resolve in L2; what it saves: the workspace's round trip and the reduction launch. Why it is
// tried: at 128 x 18944 x 3584 (4 splits of 128 x 112 on the TMA kernel, H100, Nsight) the split
// GEMM took 32.0 us and the reduction 6.4 us, against cuBLASLt's 36.7 us for the whole product.
// Only int8_matmul's: W8A8 dequantizes the exact sum, so its split plans keep the workspace.
#pragma once

#include "../common.cuh"

namespace int8nax {

// One 32-bit add into global memory whose old value nobody reads: red, not atom, so nothing
// travels back to the SM and a thread's adds issue back to back like stores (REDG.E.ADD; CUDA's
// atomicAdd with its result unused compiles to the returning ATOMG.E.ADD, nvcc 13.0, sm_90a; the
// "memory" clobber keeps the compiler from moving other memory accesses across it). One element at a
// time because PTX has no wider integer form: red's vector forms (.v2/.v4/.v8) take only f32,
// f16, bf16 and their packed pairs (PTX ISA 8.x, sm_90), and a 64-bit add of a pair would carry
// from one element into the next. So a warp's add of one register of a wgmma fragment reaches
// eight 32-byte sectors (its eight rows) with four elements each, and the pair's second register
// the same sectors again: twice the L2 requests of StoreInt32's 8-byte stores. The one
// instruction that adds whole rows of s32, cp.reduce.async.bulk.global.shared::cta.add.s32, reads
// them from shared memory: the tile would be staged there after a block barrier (the last stages
// are read until every warpgroup's wgmma has finished), in 16-byte aligned rows, a pass outside
// the per-pair epilogue interface every GEMM here shares (store_accumulators). That is the next
// trial if Nsight shows these adds as the GEMM's tail.
__device__ __forceinline__ void red_add(int32_t* p, int v) {
  asm volatile("red.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// The adds of a pair (p[0], p[1]), one asm statement: with two statements a pair, ptxas scheduled
// the cooperative 128 x 256 kernel's epilogue into spills (nvcc 13.0, sm_90a).
__device__ __forceinline__ void red_add_pair(int32_t* p, int v0, int v1) {
  asm volatile("red.global.add.s32 [%0], %1;\n\tred.global.add.s32 [%0+4], %2;\n" ::"l"(p), "r"(v0), "r"(v1)
               : "memory");
}

// int32 [M, N] sums added into `out` (zero-filled before the launch): StoreInt32's bounds (store2
// checks row and column, store1 and store2_fast take what the caller checked) with adds for
// stores, and no blockIdx.z slice: every split adds into the same [M, N]. Scalar adds need no
// 8-byte alignment, so any N takes the branch-free path (StoreInt32's int2 store needs N even).
struct AddInt32 {
  int32_t* out;
  int M;
  int N;

  __device__ __forceinline__ float row_factor(int) const {
    return 0.0f;
  }

  __device__ __forceinline__ int32_t* at(int row, int col) const {
    return out + static_cast<size_t>(row) * N + col;
  }

  __device__ __forceinline__ bool cols_ok(int c0, int cols) const {
    return c0 + cols <= N;
  }

  __device__ __forceinline__ bool fast_ok(int r0, int c0, int rows, int cols) const {
    return r0 + rows <= M && cols_ok(c0, cols);
  }

  struct Cols {};

  __device__ __forceinline__ Cols cols(int) const {
    return Cols{};
  }

  // A pair known to be inside (fast_ok): two adds; integers never need the exact pass.
  __device__ __forceinline__ bool store2_fast(int row, int col, int v0, int v1, float, Cols) const {
    red_add_pair(at(row, col), v0, v1);
    return false;
  }

  __device__ __forceinline__ void store1(int row, int col, int v, float) const {
    red_add(at(row, col), v);
  }

  __device__ __forceinline__ void store2(int row, int col, int v0, int v1, float f) const {
    if (row >= M || col >= N) {
      return;
    }
    if (col + 1 < N) {
      store2_fast(row, col, v0, v1, f, Cols{});
      return;
    }
    store1(row, col, v0, f);
  }
};

// Bytes of the tensor-map slot each block of a TMA GEMM writes (gemm/tma_unspecialized.cuh and
// gemm/tma_ws_*.cuh: `maps + block * 256`; cuda_plans.TMA_MAP_SLOT_BYTES).
constexpr int MAP_SLOT_BYTES = 256;

// The one output of a TMA GEMM with reduce="atomic", int32 [M + R, N]: the sums in its first M
// rows, then the grid's tensor-map slots (one MAP_SLOT_BYTES slot a block) from the first
// MAP_SLOT_BYTES boundary after them, R rows holding them. One output, because
// mx.fast.cuda_kernel's init_value fills every output, each by a fill kernel of its own (the maps
// need no zeros, and a second fill is a second launch). The sums first, so the epilogue adds into
// the output argument itself, which ptxas reloads from the kernel's parameters at no cost: with
// the slots first, the sums' pointer was computed at the start and held a register through the
// main loop, and the ping-pong 128 x 128 kernel spilled (nvcc 13.0, sm_90a). Returns where the
// slots start (backends/cuda/graphs.py, map_rows, sizes R the same way).
__device__ __forceinline__ uint8_t* map_slots_after_sums(int32_t* out, int M, int N) {
  constexpr size_t ALIGN = MAP_SLOT_BYTES / sizeof(int32_t);
  const size_t sums = static_cast<size_t>(M) * N;
  return reinterpret_cast<uint8_t*>(out + (sums + ALIGN - 1) / ALIGN * ALIGN);
}

}  // namespace int8nax
