// int8nax CUDA kernels, part 4: per-token activation quantization (int8nax/quant.py, bit for bit).
//
//   s[m] = max_k |x[m, k]| / 127 in float32 (1 for an all-zero row, NaN for a row with NaN/inf)
//   q[m, k] = clamp(roundf((x[m, k] * 2^k) * (1.0f / (s[m] * 2^k))), -127, 127)   (0 in a NaN/inf row)
//   with k = 0 when s[m] >= 2^-126 (then this is x * (1 / s), bit for bit) and k = 64 for a
//   subnormal s[m], whose reciprocal would overflow: both scalings by 2^64 are exact, so the
//   codes are x * (1 / s) as if float32 had no exponent limit (int8nax.quant's spec; example:
//   [1e-37, 1e-38, 0, 5e-39] -> [127, 13, 0, 6]).
// NVRTC's defaults keep IEEE division and no fast-math, and roundf rounds half away from zero,
// which is exactly the reference. One block of THREADS threads per row; rows of whole
// 8-value groups are read 16 bytes at a time (the row is read twice: for the scale, then the codes).
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

// Eight consecutive values as float: one 16-byte load for 2-byte types, two for float.
__device__ __forceinline__ void load8(const __half* p, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __half2* h = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __half22float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
__device__ __forceinline__ void load8(const float* p, float (&f)[8]) {
  const float4 lo = *reinterpret_cast<const float4*>(p);
  const float4 hi = *reinterpret_cast<const float4*>(p + 4);
  f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w;
  f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
}

// The quantization of one value, given the row's pre-scale (1 or 2^64) and reciprocal scale
// (0 codes in a NaN/inf row). __fmul_rn: the two products must not be fused or reordered.
__device__ __forceinline__ int quantize_one(float v, float up, float inv, bool bad) {
  const float r = fminf(fmaxf(roundf(__fmul_rn(__fmul_rn(v, up), inv)), -127.0f), 127.0f);
  return bad ? 0 : static_cast<int>(r);
}

template <typename T, int THREADS>
__device__ void quantize_rows(const T* x, int K, int8_t* q, float* scale) {
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, one block");
  __shared__ float warp_max[THREADS / 32];
  const int row = blockIdx.x;
  const T* xr = x + static_cast<size_t>(row) * K;
  int8_t* qr = q + static_cast<size_t>(row) * K;
  // Vector path: rows of whole 8-value groups on 16-byte boundaries (8-byte for the codes).
  const bool vec = (K & 7) == 0 && (reinterpret_cast<unsigned long long>(x) & 15) == 0 &&
                   (reinterpret_cast<unsigned long long>(q) & 7) == 0;
  const int groups = vec ? K / 8 : 0;

  // fmaxf drops NaN, so non-finite values are flagged separately.
  float amax = 0.0f;
  int bad = 0;
#pragma unroll 4
  for (int g = threadIdx.x; g < groups; g += THREADS) {
    float f[8];
    load8(xr + 8 * g, f);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      bad |= !isfinite(f[i]);
      amax = fmaxf(amax, fabsf(f[i]));
    }
  }
  for (int k = 8 * groups + threadIdx.x; k < K; k += THREADS) {
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
  // Tiny rows: s subnormal, 1 / s would be inf; scale x and s by 2^64 first (exact).
  const float up = s < 0x1p-126f ? 0x1p64f : 1.0f;
  const float inv = bad ? 0.0f : 1.0f / __fmul_rn(s, up);
#pragma unroll 4
  for (int g = threadIdx.x; g < groups; g += THREADS) {
    float f[8];
    load8(xr + 8 * g, f);
    uint32_t packed[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      packed[i >> 2] |= (static_cast<uint32_t>(quantize_one(f[i], up, inv, bad)) & 0xffu) << (8 * (i & 3));
    }
    *reinterpret_cast<uint2*>(qr + 8 * g) = make_uint2(packed[0], packed[1]);
  }
  for (int k = 8 * groups + threadIdx.x; k < K; k += THREADS) {
    qr[k] = static_cast<int8_t>(quantize_one(to_float(xr[k]), up, inv, bad));
  }
  if (threadIdx.x == 0) {
    scale[row] = s;
  }
}

}  // namespace int8nax
