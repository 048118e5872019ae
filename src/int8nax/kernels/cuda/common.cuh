// What every int8nax CUDA header assumes: the CUDA types, the namespace, the dynamic shared memory
// and two small helpers.
//
// Everything lives in namespace int8nax and is called qualified from the kernel bodies: MLX
// places the bodies in namespace mlx::core::cu, whose own helpers would otherwise hide ours.
// Tile sizes arrive as template parameters (the body's constexprs, from backends/cuda_plans.py).
// The headers include nothing of each other: backends/cuda_source.py lists each kernel's headers
// in dependency order (one #include line each), and each header names what it needs.
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

}  // namespace int8nax
