// h = silu(g) * u for one value, as mlx-lm's MLP computes nn.silu(g) * u: MLX's compiled CUDA kernels
// evaluate it as these calls of MLX's own device functors (mlx::core::cu::Sigmoid and ::Multiply,
// mlx/backend/cuda/device/binary_ops.cuh, which includes unary_ops.cuh), every intermediate in T.
// Built by the same NVRTC with the same options, the same calls on the same types give the same h
// (quant/swiglu_quantize.cuh, quant/gemv_swiglu.cuh). silu(g) = g * sigmoid(g), the operand order of
// MLX's nn.silu (a product of two values commutes exactly anyway).
#pragma once

#include "mlx/backend/cuda/device/binary_ops.cuh"

namespace int8nax {

template <typename T>
__device__ __forceinline__ T swiglu(T g, T u) {
  const T s = mlx::core::cu::Sigmoid{}(g);
  const T gs = mlx::core::cu::Multiply{}(g, s);
  return mlx::core::cu::Multiply{}(gs, u);
}

}  // namespace int8nax
