// The small-M GEMV's index arithmetic (gemm/gemv_w8a8.cuh): which K offsets a lane loads, how a
// lane's loaded words become mma.sync.m16n8k32's fragments, and where each accumulator lands.
//
// Plain C++ (GEMV_HD functions, no CUDA types) so that tests/test_gemv_w8a8.py compiles it on the
// host and checks it against the PTX ISA's definition of the mma fragments.
#pragma once

#ifndef GEMV_HD
#define GEMV_HD __host__ __device__ __forceinline__
#endif

namespace int8nax {
namespace gemv {

constexpr int STEP = 64;      // bytes of K per warp step: four lanes x 16 bytes per row
constexpr int ROWS = 8;       // w rows per mma (its N)
constexpr int MAX_M = 16;     // activation rows per mma (its M)

// mma.m16n8k32's lane roles (PTX ISA, "Matrix fragments for mma.m16n8k32"): groupID and
// threadID_in_group.
GEMV_HD int lane_group(int lane) {
  return lane >> 2;
}
GEMV_HD int lane_quad(int lane) {
  return lane & 3;
}

// The K offset (within a step) of byte `byte` (0..15) of the 16 a lane loads: [16 t, 16 t + 16).
GEMV_HD int lane_k(int lane, int byte) {
  return 16 * lane_quad(lane) + byte;
}

// Which of a lane's loaded 32-bit words feed mma `half` (0 or 1) as its fragment registers. The
// instruction reads, in lane (g, t), A's row g and g + 8 at logical k 4t..4t+3 (a0, a1) and
// 16+4t..16+4t+3 (a2, a3), B's column g at the same two k ranges (b0, b1). Words 2 half and
// 2 half + 1 of the lane's 16 bytes take those places in both operands, so mma `half` sees
// logical k 4t + i as physical 16t + 8 half + i and 16 + 4t + i as 16t + 8 half + 4 + i: one
// permutation of K for A and B alike (k_of).
GEMV_HD int fragment_word(int half, int reg) {  // reg 0 (k 4t..) or 1 (k 16+4t..)
  return 2 * half + reg;
}

// The physical K offset within a step that mma `half` reads as logical k (0..31) in quad t's
// lanes: what the host test checks to be a bijection onto the step's 64 bytes.
GEMV_HD int k_of(int half, int logical_k) {
  const int quad = (logical_k & 15) >> 2;  // the lane quad that holds it
  const int reg = logical_k >> 4;
  return 16 * quad + 4 * fragment_word(half, reg) + (logical_k & 3);
}

// Row (activation row m) and column (w row within the 8) of accumulator register j (0..3) of a
// lane: c0, c1 at row g, columns 2t, 2t + 1; c2, c3 at row g + 8.
GEMV_HD int acc_row(int lane, int j) {
  return lane_group(lane) + (j >= 2 ? 8 : 0);
}
GEMV_HD int acc_col(int lane, int j) {
  return 2 * lane_quad(lane) + (j & 1);
}

// Steps of warp `warp` among `warps`: k0 = (warp + i * warps) * STEP for i < warp_steps.
GEMV_HD int steps(int K) {
  return (K + STEP - 1) / STEP;
}

}  // namespace gemv

}  // namespace int8nax
