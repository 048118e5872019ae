// The SM count, by where the blocks of a launch land.
#pragma once

#include "common.cuh"

namespace int8nax {

// Number of SMs, counted by where blocks land: flags[smid] = 1 for every block of the launch.
__device__ __forceinline__ void mark_sm(int32_t* flags, int capacity) {
  if (threadIdx.x == 0) {
    uint32_t smid;
    asm volatile("mov.u32 %0, %%smid;\n" : "=r"(smid));
    if (smid < static_cast<uint32_t>(capacity)) {
      flags[smid] = 1;
    }
  }
}

}  // namespace int8nax
