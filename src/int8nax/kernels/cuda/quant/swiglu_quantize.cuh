// The activation quantization of a SwiGLU MLP's hidden state, h = silu(g) * u, in one kernel:
//
//   y [M, 2H] (T) holds g = y[:, :H] (the gate projection) and u = y[:, H:] (the up projection);
//   h[m, j] = Multiply(Multiply(g, Sigmoid(g)), u) in T, each product rounded to T;
//   (q int8 [M, H], scale float32 [M]) = quant/quantize.cuh's quantize_rows of h, bit for bit.
//
// Why the same bits as the unfused graph: mlx-lm's MLP computes nn.silu(g) * u, which MLX's
// compiled CUDA kernels evaluate as exactly these calls of MLX's own device functors
// (mlx::core::cu::Sigmoid and ::Multiply, mlx/backend/cuda/device/binary_ops.cuh, which includes
// unary_ops.cuh) with every intermediate in T, built by the same NVRTC with the same options as
// this kernel. Calling the same functors on the same types gives the same h; h then goes through
// quant/quantize.cuh's row code (SwigluRow is one of its row sources), so q and scale are the
// quantization kernel's for that h. silu(g) = g * sigmoid(g): the operand order MLX's nn.silu
// has (a product of two values commutes exactly anyway).
//
// h never leaves the registers: the held path loads all of its g and u groups first (the whole
// row's 2H values in flight), then computes h and quantizes it; longer rows and rows off the
// vector path read g and u twice and compute h on each pass (arithmetic again, in place of
// writing h out and reading it back).
#pragma once

#include "../common.cuh"
#include "quantize.cuh"
#include "groups.cuh"
#include "act_pack.cuh"
#include "mlx/backend/cuda/device/binary_ops.cuh"

namespace int8nax {

// silu(g) * u in T, as MLX's compiled kernels compute nn.silu(g) * u (see above).
template <typename T>
__device__ __forceinline__ T swiglu(T g, T u) {
  const T s = mlx::core::cu::Sigmoid{}(g);
  const T gs = mlx::core::cu::Multiply{}(g, s);
  return mlx::core::cu::Multiply{}(gs, u);
}

// The row source (quant/quantize.cuh) of h = swiglu(g, u) for one row: g at gr, u at ur (H values each),
// in global memory, or with STAGED in shared memory (quant/swiglu_quantize_staged.cuh).
template <typename T, bool STAGED = false>
struct SwigluRow {
  struct Loaded {
    uint32_t g[Group<T>::WORDS];  // g's group; finish() overwrites it with h's
    uint32_t u[Group<T>::WORDS];
  };
  const T* gr;
  const T* ur;

  __device__ __forceinline__ void load(int j, Loaded& l) const {
    if constexpr (STAGED) {
      load_shared_group(gr + 8 * j, l.g);
      load_shared_group(ur + 8 * j, l.u);
    } else {
      load_group(gr + 8 * j, l.g);
      load_group(ur + 8 * j, l.u);
    }
  }
  static __device__ __forceinline__ void finish(Loaded& l) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      Group<T>::set(l.g, i, swiglu(Group<T>::get(l.g, i), Group<T>::get(l.u, i)));
    }
  }
  static __device__ __forceinline__ const uint32_t (&words(const Loaded& l))[Group<T>::WORDS] {
    return l.g;
  }
  __device__ __forceinline__ float value(int k) const {
    return to_float(swiglu(gr[k], ur[k]));
  }
};

// y [M, 2H] (T: float, __half or __nv_bfloat16) -> q int8 [M, H], scale float [M] of
// h = silu(y[:, :H]) * y[:, H:]; block b = row b.
template <typename T, int THREADS, int HELD>
__device__ void quantize_swiglu_rows(const T* y, int H, int8_t* q, float* scale) {
  __shared__ uint32_t slots[THREADS / 32];
  const int row = blockIdx.x;
  const T* gr = y + static_cast<size_t>(row) * (2 * static_cast<size_t>(H));
  int8_t* qr = q + static_cast<size_t>(row) * H;
  // Vector path: H % 8 == 0 keeps g's and u's groups of every row on y's 16-byte boundaries.
  const bool vec = (H & 7) == 0 && (reinterpret_cast<unsigned long long>(y) & 15) == 0 &&
                   (reinterpret_cast<unsigned long long>(q) & 7) == 0;
  quantize_row<T, THREADS, HELD>(SwigluRow<T>{gr, gr + H}, H, vec, qr, scale, slots);
}

}  // namespace int8nax
