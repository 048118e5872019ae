// int8nax per-token activation quantization kernel: one threadgroup per row takes the row's
// absmax and NaN/inf flag, then writes the codes and the scale (quantize_core.metal has the
// formula and why it is bit-for-bit int8nax.quant whether or not the GPU flushes subnormals).
//
// Built by int8nax/backends/metal/backend.py with mx.fast.metal_kernel: the part above the
// "kernel body" line goes into `header` (after float_bits.metal and quantize_core.metal), the
// part below is `source`.
//   inputs   x float16 | bfloat16 | float32 [..., K] (row-contiguous, any rank >= 1: M rows, the
//            product of the leading dims; K read from the last dim, so a layer's x [B, L, K] needs
//            no reshape before the kernel)
//   outputs  q int8 of x's shape, s float32 [>= M] (entries past M are not written)
//   template QT (threads per row), SIMD, QMAX, TINY (tiling.metal_quant_dispatch)
//   launch   one threadgroup of QT threads per row: grid (QT, M, 1) threads

namespace int8nax {

template <int QT, int SIMD, int QMAX, int TINY, typename PtrX>
inline void quantize_row(PtrX x, device int8_t* q, device float* s, const int K, const uint row,
                         const uint tid, const uint sg, const uint lane,
                         threadgroup uint* part_max, threadgroup uint* part_bad) {
  constexpr int SIMDGROUPS = QT / SIMD;
  static_assert(QT % SIMD == 0, "whole simdgroups per row");
  const ulong base = ulong(row) * ulong(K);

  // Absmax of the row as magnitude bits, and whether it holds NaN or inf.
  uint amax = 0u;
  bool bad = false;
  for (int k = int(tid); k < K; k += QT) {
    const uint mag = f32_bits(x[base + ulong(k)]) & F32_MAGNITUDE;
    bad = bad || mag >= F32_INF_BITS;
    amax = max(amax, mag);
  }
  amax = simd_max(amax);
  bad = simd_any(bad);
  if (lane == 0) {
    part_max[sg] = amax;
    part_bad[sg] = bad ? 1u : 0u;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  uint row_max = 0u;
  bool row_bad = false;
  for (int i = 0; i < SIMDGROUPS; ++i) {
    row_max = max(row_max, part_max[i]);
    row_bad = row_bad || part_bad[i] != 0u;
  }

  const RowScale rs = row_scale<QMAX, TINY>(row_max, row_bad);
  for (int k = int(tid); k < K; k += QT) {
    q[base + ulong(k)] = int8_t(code_of<QMAX>(f32_bits(x[base + ulong(k)]), rs));
  }
  if (tid == 0) {
    s[row] = scale_of(rs);
  }
}

}  // namespace int8nax

// ==== kernel body ====
threadgroup uint part_max[QT / SIMD];
threadgroup uint part_bad[QT / SIMD];
int8nax::quantize_row<QT, SIMD, QMAX, TINY>(
    x, q, s, x_shape[x_ndim - 1], threadgroup_position_in_grid.y, thread_index_in_threadgroup,
    simdgroup_index_in_threadgroup, thread_index_in_simdgroup, part_max, part_bad);
