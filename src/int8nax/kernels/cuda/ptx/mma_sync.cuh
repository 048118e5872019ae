// The GEMV's PTX (gemm/gemv_w8a8.cuh): its 16-byte operand loads, the weight's past L1, and
// mma.sync.m16n8k32 on s8 (sm_80 and newer) with exact int32 accumulation.
#pragma once

#include "../common.cuh"

namespace int8nax {
namespace gemv {

struct Bytes16 {
  uint32_t w[4];
};

// 16 bytes at p, of which the first `valid` are inside the row (at most 16 are read); the rest
// read as zero. FAST: p is 16-byte aligned and valid is a multiple of 16 (K % 16 == 0 and aligned
// bases, uniform over the launch). STREAM: a weight, read once: no L1 allocation, so that the
// activation keeps the cache.
template <bool STREAM, bool FAST>
__device__ __forceinline__ Bytes16 load16(const int8_t* p, int valid) {
  Bytes16 r = {{0u, 0u, 0u, 0u}};
  if (FAST) {
    if (valid > 0) {
      if (STREAM) {
        asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
            : "=r"(r.w[0]), "=r"(r.w[1]), "=r"(r.w[2]), "=r"(r.w[3])
            : "l"(p));
      } else {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
        r.w[0] = v.x, r.w[1] = v.y, r.w[2] = v.z, r.w[3] = v.w;
      }
    }
    return r;
  }
  const int n = valid < 16 ? valid : 16;
  for (int i = 0; i < n; ++i) {
    r.w[i >> 2] |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * (i & 3));
  }
  return r;
}

// d += A (16 x 32, rows) . B (32 x 8, columns), s8 inputs, exact s32 accumulation.
__device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace gemv
}  // namespace int8nax
