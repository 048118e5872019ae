// The decode GEMV of a SwiGLU MLP's down projection with h = silu(gate) * up made inside it:
// y [M, N] (T) = dequant(quant(h) [M, H] . w [N, H]^T) (+ bias), h from the gate/up output [M, 2H]
// (quant/gemv_swiglu.cuh), M <= 16. The same bits as MLX's swiglu kernel followed by gemv_w8a8_x.
#pragma once

#include "gemv_w8a8.cuh"
#include "../quant/gemv_swiglu.cuh"

namespace int8nax {

template <typename T, int NT, int WARPS, int UNROLL, bool HAS_BIAS, bool NARROW, typename TBias>
__device__ void gemv_w8a8_swiglu(const T* gate_up, const int8_t* w, int M, int N, int H, const float* scale_w,
                                 const TBias* bias, T* y) {
  gemv_w8a8_rows<T, NT, WARPS, UNROLL, HAS_BIAS, NARROW>(gemv::SwigluRows<T>{gate_up, H}, w, M, N, H, scale_w, bias,
                                                         y);
}

}  // namespace int8nax
