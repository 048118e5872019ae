// Epilogues: what a GEMM does with each pair of int32 results (int32 stores, the split-K
// workspace, W8A8's fused dequantization).
#pragma once

#include "../common.cuh"
#include "dequantize.cuh"

namespace int8nax {

// ---- epilogues: what happens to a pair of int32 results (row, col) and (row, col + 1) ----
//
// Every epilogue has row_factor(row) (read once per accumulator row: s_x[row] for W8A8);
// store2(row, col, v0, v1, factor) / store1(row, col, v, factor), exact anywhere (bounds
// checked); and for pairs inside (fast_ok: a block of rows and columns; cols_ok: the columns of
// a tile whose rows the caller checks one by one against M) cols(col), the column factors of a
// pair (s_w and bias for W8A8; nothing for int32), and store2_fast(row, col, v0, v1, factor, cols),
// branch-free, which returns true when its pair needs the exact store2 after all (rare W8A8
// scales or cancellation). The GEMMs run store2_fast over a whole interior tile first and store2
// over it only if some pair asked: a branch or call per element serialised them (the fused W8A8
// GEMM ran 1.83x the int32 one at 8192^3). They load the column factors of
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

  // Whether cols [c0, c0 + cols) lie inside and pairs can be stored whole (any row below M).
  __device__ __forceinline__ bool cols_ok(int c0, int cols) const {
    return c0 + cols <= N && (N & 1) == 0;
  }

  // Whether rows [r0, r0 + rows) x cols [c0, c0 + cols) lie inside and pairs can be stored whole.
  __device__ __forceinline__ bool fast_ok(int r0, int c0, int rows, int cols) const {
    return r0 + rows <= M && cols_ok(c0, cols);
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

// A bias pair (col, col + 1) as float32, one load: 8 bytes of float, 4 of float16 or bfloat16
// (exact, so a layer's bias is read in its own type and never cast to float32 before the call).
__device__ __forceinline__ float2 load_pair(const float* p) {
  return *reinterpret_cast<const float2*>(p);
}
__device__ __forceinline__ float2 load_pair(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}
__device__ __forceinline__ float2 load_pair(const __nv_bfloat16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

// W8A8: y[m, n] = dequantize(acc, s_x[m], s_w[n], bias[n]) rounded to TOut, the bias read in its
// own type TBias (float, __half or __nv_bfloat16; to_float is exact). NARROW: where TOut is
// float16 or bfloat16, dequantize_narrow on the branch-free path (dequantize_fast for float32) and
// first on the exact path (value()). Kernel bodies name TBias as pointee<decltype(bias)>: MLX
// declares each input in its array's type.
template <typename TOut, bool HAS_BIAS, bool NARROW = false, typename TBias = float>
struct DequantStore {
  TOut* out;
  const float* scale_x;
  const float* scale_w;
  const TBias* bias;
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
    const float b = HAS_BIAS ? to_float(bias[col]) : 0.0f;
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

  // Pairs load whole (cols): s_w and the bias on 8-byte boundaries (a 16-bit bias needs only 4; one
  // test for both keeps a float32 bias's code as it was, and views off 8 bytes are rare).
  __device__ __forceinline__ bool cols_ok(int c0, int cols) const {
    const unsigned long long ptrs =
        reinterpret_cast<unsigned long long>(scale_w) | (HAS_BIAS ? reinterpret_cast<unsigned long long>(bias) : 0ull);
    return c0 + cols <= N && (N & 1) == 0 && (ptrs & 7) == 0;
  }

  __device__ __forceinline__ bool fast_ok(int r0, int c0, int rows, int cols) const {
    return r0 + rows <= M && cols_ok(c0, cols);
  }

  // s_w and bias of the pair (col, col + 1), one load each (inside, fast_ok).
  struct Cols {
    float2 sw;
    float2 bias;
  };

  __device__ __forceinline__ Cols cols(int col) const {
    return Cols{*reinterpret_cast<const float2*>(scale_w + col),
                HAS_BIAS ? load_pair(bias + col) : make_float2(0.0f, 0.0f)};
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

// Epilogue factories of the persistent kernels (epis(z): the epilogue of a unit of split z): the
// int32 [splits, M, N] workspace, slice z per split (the grid is 1-D, so StoreInt32's blockIdx.z
// slice offset is 0), or one epilogue for every unit (W8A8's fused dequantization, launched
// unsplit only: a split W8A8 plan writes the int32 workspace and the dequantizing reduction sums it).
struct SplitInt32 {
  int32_t* out;
  int M;
  int N;
  __device__ __forceinline__ StoreInt32 operator()(int z) const {
    return StoreInt32{out + static_cast<size_t>(z) * M * N, M, N};
  }
};

template <class Epilogue>
struct SameEpilogue {
  Epilogue epi;
  __device__ __forceinline__ const Epilogue& operator()(int) const {
    return epi;
  }
};

template <class Epilogue>
__device__ __forceinline__ SameEpilogue<Epilogue> same_epilogue(const Epilogue& epi) {
  return SameEpilogue<Epilogue>{epi};
}

}  // namespace int8nax
