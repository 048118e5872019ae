// int8nax layout probe: where the int8 cooperative tensors of the NAX GEMM's matmul2d put each
// lane's elements. Run on first use by int8nax/backends/metal/backend.py (one simdgroup), which builds
// the MLX-layout load path only if the dump equals MLX's BaseNAXFrag layout; `int8nax selftest`
// prints it, and nax_emulator replays it.
//
// Built by int8nax/backends/metal/backend.py: the part above the "kernel body" line goes into
// `header` (after nax_gemm.metal), the part below is `source`.
//   inputs   dummy int32 [1], unused (every custom kernel takes at least one input)
//   output   out int32 [3, SIMD, 1 + 3 * CAP] for the left (A), right (B) and destination (C)
//            tensors: per lane, the capacity, then (valid, index[0], index[1]) per element
//   template FM, FN, FK, SIMD, CAP (CAP >= every capacity expected), RELAXED (the descriptor
//            flag of the GEMM variant the probe speaks for)
//   launch   grid (SIMD, 1, 1), threadgroup (SIMD, 1, 1)

namespace int8nax {

template <int CAP, typename CoopTensor>
inline void dump_coords(thread CoopTensor& ct, device int32_t* out) {
  const int capacity = int(ct.get_capacity());
  out[0] = capacity;
  INT8NAX_UNROLL
  for (int i = 0; i < CAP; ++i) {
    const bool inside = i < capacity;
    const auto idx = ct.get_multidimensional_index(inside ? i : 0);
    out[1 + i * 3] = inside && ct.is_valid_element(i) ? 1 : 0;
    out[2 + i * 3] = inside ? int(idx[0]) : -1;
    out[3 + i * 3] = inside ? int(idx[1]) : -1;
  }
}

}  // namespace int8nax

// ==== kernel body ====
constexpr auto desc = mpp::tensor_ops::matmul2d_descriptor(
    FM, FN, FK, false, true, RELAXED, mpp::tensor_ops::matmul2d_descriptor::mode::multiply_accumulate);
mpp::tensor_ops::matmul2d<desc, execution_simdgroup> mma;
auto ct_a = mma.template get_left_input_cooperative_tensor<int8_t, int8_t, int32_t>();
auto ct_b = mma.template get_right_input_cooperative_tensor<int8_t, int8_t, int32_t>();
auto ct_c = mma.template get_destination_cooperative_tensor<
    remove_addrspace_t<decltype(ct_a)>, remove_addrspace_t<decltype(ct_b)>, int32_t>();
const uint stride = 1 + 3 * CAP;
const uint lane = thread_index_in_simdgroup;
int8nax::dump_coords<CAP>(ct_a, out + (0 * SIMD + lane) * stride);
int8nax::dump_coords<CAP>(ct_b, out + (1 * SIMD + lane) * stride);
int8nax::dump_coords<CAP>(ct_c, out + (2 * SIMD + lane) * stride);
