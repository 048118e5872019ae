// PTX wrappers: tensor maps encoded on the device and the 2-D TMA load.
#pragma once

#include "../common.cuh"
#include "mbarrier.cuh"

namespace int8nax {

// ---- tensor maps built on the device ----

// Encodes the tiled 2-D map of a row-major int8 [rows, K] matrix at `base` (box: 128 bytes x
// box_rows rows, 128-byte swizzle, zero fill) in the 128-byte shared scratch `tmp`, copies it to
// the global slot `gmap` (64-byte aligned) and acquires it for the tensor-map proxy.
// Executed by one whole warp; `base` must be 16-byte aligned (bases_tma_aligned).
__device__ __forceinline__ void build_tensor_map(uint8_t* gmap, uint32_t tmp, const int8_t* base, int rows, int K,
                                                 int box_rows) {
  const int lane = threadIdx.x & 31;
  const unsigned long long addr = reinterpret_cast<unsigned long long>(base);
  asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(tmp + 4 * lane), "r"(0) : "memory");
  __syncwarp();
  if (lane == 0) {
    const uint32_t dim0 = static_cast<uint32_t>(K);
    const uint32_t dim1 = static_cast<uint32_t>(rows);
    const unsigned long long stride = static_cast<unsigned long long>(K);  // bytes (PTX ISA >= 8.5)
    const uint32_t box0 = 128;
    const uint32_t box1 = static_cast<uint32_t>(box_rows);
    asm volatile(
        "tensormap.replace.tile.global_address.shared::cta.b1024.b64 [%0], %1;\n"
        "tensormap.replace.tile.rank.shared::cta.b1024.b32 [%0], 1;\n"
        "tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 0, %2;\n"
        "tensormap.replace.tile.box_dim.shared::cta.b1024.b32 [%0], 1, %3;\n"
        "tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 0, %4;\n"
        "tensormap.replace.tile.global_dim.shared::cta.b1024.b32 [%0], 1, %5;\n"
        "tensormap.replace.tile.global_stride.shared::cta.b1024.b64 [%0], 0, %6;\n"
        "tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 0, 1;\n"
        "tensormap.replace.tile.element_stride.shared::cta.b1024.b32 [%0], 1, 1;\n"
        "tensormap.replace.tile.elemtype.shared::cta.b1024.b32 [%0], 0;\n"
        "tensormap.replace.tile.interleave_layout.shared::cta.b1024.b32 [%0], 0;\n"
        "tensormap.replace.tile.swizzle_mode.shared::cta.b1024.b32 [%0], 3;\n"
        "tensormap.replace.tile.fill_mode.shared::cta.b1024.b32 [%0], 0;\n"
        ::"r"(tmp), "l"(addr), "r"(box0), "r"(box1), "r"(dim0), "r"(dim1), "l"(stride)
        : "memory");
  }
  __syncwarp();
  asm volatile(
      "tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic.release.gpu.sync.aligned [%0], [%1], 128;\n"
      ::"l"(gmap), "r"(tmp)
      : "memory");
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(gmap) : "memory");
}

// Whether both operands can be read through tensor maps (the same answer in every thread).
__device__ __forceinline__ bool bases_tma_aligned(const int8_t* a, const int8_t* b) {
  return ((reinterpret_cast<unsigned long long>(a) | reinterpret_cast<unsigned long long>(b)) & 15ull) == 0;
}

// Both operands' maps into a block's 256-byte slot (A's first, B's 128 bytes on), encoded in
// `scratch` (256 bytes of shared memory); executed by warp 0 only.
__device__ __forceinline__ void build_operand_maps(uint8_t* slot, uint32_t scratch, const int8_t* a, const int8_t* b,
                                                   int M, int N, int K, int a_box_rows, int b_box_rows) {
  build_tensor_map(slot, scratch, a, M, K, a_box_rows);
  build_tensor_map(slot + 128, scratch + 128, b, N, K, b_box_rows);
}

// One box (128 bytes from column k, rows from `row`) of the map into shared memory at `dst`,
// completing `bar`'s transaction count.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const uint8_t* gmap, int k, int row, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
      ::"r"(dst), "l"(gmap), "r"(k), "r"(row), "r"(bar)
      : "memory");
}

}  // namespace int8nax
