// A row source for the GEMV's quantization (quant/gemv_quantize.cuh) that reads a SwiGLU MLP's gate/up
// output y [M, 2H] and gives h = swiglu(y[:, :H], y[:, H:]) (quant/swiglu.cuh: the model's own bits), so
// that the down projection's GEMV quantizes h with no kernel writing h out: at decode, one kernel for
// what was MLX's swiglu kernel and the GEMV. Every block computes h of its rows twice (scales, then
// codes), arithmetic in place of a kernel launch and h's round trip through memory.
#pragma once

#include "../common.cuh"
#include "groups.cuh"
#include "gemv_quantize.cuh"
#include "swiglu.cuh"

namespace int8nax {

namespace gemv {

// Row m of h [M, H] = swiglu of y [M, 2H]'s halves (row stride 2H): an 8-value group of h from k, or value k.
template <typename T>
struct SwigluRows {
  const T* y;
  int H;
  __device__ __forceinline__ const T* row(int m) const { return y + static_cast<size_t>(m) * (2 * static_cast<size_t>(H)); }
  __device__ __forceinline__ void group(const T* r, int k, uint32_t (&v)[Group<T>::WORDS]) const {
    uint32_t u[Group<T>::WORDS];
    load_group(r + k, v);
    load_group(r + H + k, u);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      Group<T>::set(v, i, swiglu(Group<T>::get(v, i), Group<T>::get(u, i)));
    }
  }
  __device__ __forceinline__ float value(const T* r, int k) const { return to_float(swiglu(r[k], r[H + k])); }
  // Whether both halves' groups are 16-byte aligned (H % 8 == 0, y 16-byte aligned).
  __device__ __forceinline__ bool aligned() const {
    return (reinterpret_cast<unsigned long long>(y) & 15) == 0 && (H & 7) == 0;
  }
};

}  // namespace gemv

}  // namespace int8nax
