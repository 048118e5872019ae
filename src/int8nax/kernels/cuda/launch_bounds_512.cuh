// The launch bound of the staged SwiGLU quantization (swiglu_quantize_staged.cuh): 512 threads,
// 1 block an SM.
//
// Without a bound ptxas gives that kernel up to 136 registers a thread (CUDA 13.0, sm_90a: h's
// held groups come from shared memory at once, and their sigmoids run side by side), and 512 x
// 136 registers exceed an SM's 65536, so the launch would fail. With it ptxas keeps to 128.
// As launch_bounds_384.cuh: MLX writes `__global__ void custom_kernel_<name>(...)` right after
// the user header, so this header, included LAST and only by that kernel, redefines __global__
// (crt/host_defines.h: __location__(global)) to carry the bound.
#pragma once

#undef __global__
#define __global__ __location__(global) __launch_bounds__(512, 1)
