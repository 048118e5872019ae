// int8nax CUDA kernels, part 4: per-token activation quantization (int8nax/quant.py, bit for bit).
//
//   s[m] = max_k |x[m, k]| / 127 in float32 (1 for an all-zero row, NaN for a row with NaN/inf)
//   q[m, k] = clamp(roundf(x[m, k] * (1.0f / s[m])), -127, 127)   (0 in a NaN/inf row)
// NVRTC's defaults keep IEEE division and no fast-math, and roundf rounds half away from zero,
// which is exactly the reference. One block of THREADS threads per row.
#pragma once

namespace int8nax {

__device__ __forceinline__ float to_float(float v) {
  return v;
}
__device__ __forceinline__ float to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T, int THREADS>
__device__ void quantize_rows(const T* x, int K, int8_t* q, float* scale) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, one block");
  __shared__ float warp_max[THREADS / 32];
  const int row = blockIdx.x;
  const T* xr = x + static_cast<size_t>(row) * K;
  int8_t* qr = q + static_cast<size_t>(row) * K;

  // fmaxf drops NaN, so non-finite values are flagged separately.
  float amax = 0.0f;
  int bad = 0;
  for (int k = threadIdx.x; k < K; k += THREADS) {
    const float v = to_float(xr[k]);
    bad |= !isfinite(v);
    amax = fmaxf(amax, fabsf(v));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  }
  if ((threadIdx.x & 31) == 0) {
    warp_max[threadIdx.x >> 5] = amax;
  }
  bad = __syncthreads_or(bad);
  amax = warp_max[0];
#pragma unroll
  for (int w = 1; w < THREADS / 32; ++w) {
    amax = fmaxf(amax, warp_max[w]);
  }

  float s = amax / 127.0f;
  if (s == 0.0f) {
    s = 1.0f;
  }
  if (bad) {
    s = __int_as_float(0x7fc00000);  // quiet NaN
  }
  const float inv = bad ? 0.0f : 1.0f / s;
  for (int k = threadIdx.x; k < K; k += THREADS) {
    const float r = roundf(to_float(xr[k]) * inv);
    qr[k] = bad ? static_cast<int8_t>(0) : static_cast<int8_t>(fminf(fmaxf(r, -127.0f), 127.0f));
  }
  if (threadIdx.x == 0) {
    scale[row] = s;
  }
}

}  // namespace int8nax
