// int8nax CUDA kernels: the cluster shape of the cluster-reduced split-K TMA GEMM (gemm_tma.cuh,
// gemm_tma_simple with CLUSTER).
//
// The splits of one output tile must run as one thread-block cluster (grid z = splits = the
// cluster's z extent), and mx.fast.cuda_kernel has no launch attribute for it, so the cluster
// shape is fixed at compile time. As in tma_bounds.cuh, MLX writes `__global__ void
// custom_kernel_<name>(...)` right after the user header: this header, included LAST, redefines
// __global__ (crt/host_defines.h: __location__(global)) to carry __cluster_dims__.
// INT8NAX_CLUSTER_Z (2..8: the portable cluster size) is defined by the line before the include.
#pragma once

#ifndef INT8NAX_CLUSTER_Z
#error "define INT8NAX_CLUSTER_Z (the K splits of a tile, 2..8) before including tma_cluster.cuh"
#endif

#undef __global__
#define __global__ __location__(global) __cluster_dims__(1, 1, INT8NAX_CLUSTER_Z)
