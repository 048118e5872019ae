// What every int8nax CUDA header assumes: the CUDA types, the namespace, the dynamic shared memory
// and a few small helpers.
//
// Everything lives in namespace int8nax and is called qualified from the kernel bodies: MLX
// places the bodies in namespace mlx::core::cu, whose own helpers would otherwise hide ours.
// Tile sizes arrive as template parameters (the body's constexprs, from backends/cuda/plans/).
// Every header has an include guard and includes what it needs by relative path; a kernel names
// only its own header (backends/cuda/source.py, _HEADERS), whose includes bring the rest.
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

// The element type of a kernel input, which MLX declares as `const T* name`.
template <typename P>
struct PointeeOf;
template <typename T>
struct PointeeOf<const T*> {
  using type = T;
};
template <typename P>
using pointee = typename PointeeOf<P>::type;

// A value of an input's type as float32: exact for every float16 and bfloat16 value.
__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

}  // namespace int8nax
