// The launch bound of the warp-specialised TMA GEMMs (gemm_tma_ws_*.cuh): 384 threads, 1 block.
//
// MLX's cuda_kernel writes the kernel as `__global__ void custom_kernel_<name>(...)` right after
// the user header, with no __launch_bounds__. setmaxnreg needs ptxas to know the register
// count at entry (otherwise it is ignored, warning C7508) and 384 threads x 255 registers would
// not launch at all, so this header, included LAST and only by the warp-specialised kernels,
// redefines __global__ (crt/host_defines.h: __location__(global)) to carry the bound.
// Nothing else in the translation unit is declared __global__ after it.
#pragma once

#undef __global__
#define __global__ __location__(global) __launch_bounds__(384, 1)
