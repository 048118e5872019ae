// The activation pack: one int8 allocation holding a quantized x [M, K] and the scratch of the
// GEMM that reads it, so that a W8A8 call allocates two buffers (the pack and y), not five.
//
//   [0, 4M)                            scale_x, float32 [M]
//   [pack_codes_offset(M), + M * K)    q, int8 [M, K], row-major
//   [pack_maps_offset(M, K), ...)      the GEMM's scratch: its blocks' tensor maps (TMA kernels)
//
// Why one allocation: mlx-lm empties MLX's buffer cache after every prefill chunk
// (mx.clear_cache), so every buffer a call asks for goes back to cudaMallocAsync; the scales and
// the tensor maps (which mx.fast.cuda_kernel can only give a kernel as an output) each had their
// own. The quantization kernels write the pack (an int8 output [M, P] whose P columns
// backends/cuda/pack.py sizes); the GEMM takes it as an input, M from its shape and K from w's,
// and writes its tensor maps into the scratch region, which nothing else reads: a pack serves one
// GEMM. Offsets are multiples of PACK_ALIGN (the TMA wants q 16-byte aligned, a tensor map 64).
#pragma once

#include "../common.cuh"

namespace int8nax {

constexpr size_t PACK_ALIGN = 256;

__device__ __forceinline__ size_t pack_round(size_t bytes) {
  return (bytes + PACK_ALIGN - 1) / PACK_ALIGN * PACK_ALIGN;
}

__device__ __forceinline__ size_t pack_codes_offset(int m) {
  return pack_round(static_cast<size_t>(m) * sizeof(float));
}

__device__ __forceinline__ size_t pack_maps_offset(int m, int k) {
  return pack_codes_offset(m) + pack_round(static_cast<size_t>(m) * k);
}

// The writer's view (the quantization kernels' output).
__device__ __forceinline__ float* pack_scales(int8_t* pack) {
  return reinterpret_cast<float*>(pack);
}

__device__ __forceinline__ int8_t* pack_codes(int8_t* pack, int m) {
  return pack + pack_codes_offset(m);
}

// The reader's view (a GEMM's or reduction's input, which MLX declares const).
__device__ __forceinline__ const float* pack_scales(const int8_t* pack) {
  return reinterpret_cast<const float*>(pack);
}

__device__ __forceinline__ const int8_t* pack_codes(const int8_t* pack, int m) {
  return pack + pack_codes_offset(m);
}

// The scratch region a GEMM writes its tensor maps into: written before it is read, by the one
// kernel the pack is an input of, so writing through the const input is safe.
__device__ __forceinline__ uint8_t* pack_maps(const int8_t* pack, int m, int k) {
  return reinterpret_cast<uint8_t*>(const_cast<int8_t*>(pack) + pack_maps_offset(m, k));
}

}  // namespace int8nax
