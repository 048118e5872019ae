// int8nax per-token activation quantization, bit-for-bit int8nax.quant (cider's formula):
//   s[m] = max_k |x[m, k]| / QMAX   (float32; an all-zero row gets 1; a row with NaN/inf: NaN)
//   q[m, k] = clamp(round(x[m, k] * (1 / s[m])), -QMAX, QMAX)   (round: half away from zero)
// and q = 0 on a NaN/inf row. A row whose scale is subnormal (s < FLT_MIN = 2^-126) follows
// int8nax.quant's tiny-row rule: x and s are both scaled by a power of two (exact), so that the
// reciprocal does not overflow: q = round((x * 2^k) * (1 / (s * 2^k))); every row with a
// normal scale is unchanged (factor 1). quant.py defines k = 64; this kernel uses
// k = 126 (2^k = 1 / FLT_MIN, no numeric literal): every k in [23, 126] gives the same codes,
// because s * 2^k and 1 / (s * 2^k) are then normal, where float32 rounding is independent of
// the exponent, and x * 2^k is exact (tests/test_extremes.py checks this on the model).
// This relies on float32 subnormals being kept, not flushed to zero, in the loads, fabs, max,
// the division and the multiplications (unverified on Apple GPUs).
// Divisions use precise::divide: plain `/` need not be correctly
// rounded even in safe math mode, and numpy's float32 division is.
//
// Built by int8nax/backends/metal.py with mx.fast.metal_kernel: the part above the
// "kernel body" line goes into `header`, the part below is `source`.
//   inputs   x float16 | bfloat16 | float32 [M, K] (row-contiguous)
//   outputs  q int8 [M, K], s float32 [M]
//   template QT (threads per row), SIMD, QMAX (tiling.metal_quant_dispatch)
//   launch   one threadgroup of QT threads per row: grid (QT, M, 1) threads

#include <metal_stdlib>

using namespace metal;

namespace int8nax {

template <int QT, int SIMD, int QMAX, typename PtrX>
inline void quantize_row(PtrX x, device int8_t* q, device float* s, const int K, const uint row,
                         const uint tid, const uint sg, const uint lane,
                         threadgroup float* part_max, threadgroup uint* part_bad) {
  constexpr int SIMDGROUPS = QT / SIMD;
  static_assert(QT % SIMD == 0, "whole simdgroups per row");
  const ulong base = ulong(row) * ulong(K);

  // Absmax of the row, and whether it holds NaN or inf (max() would skip a NaN).
  float amax = 0.0f;
  bool bad = false;
  for (int k = int(tid); k < K; k += QT) {
    const float v = float(x[base + ulong(k)]);
    bad = bad || !isfinite(v);
    amax = max(amax, fabs(v));
  }
  amax = simd_max(amax);
  bad = simd_any(bad);
  if (lane == 0) {
    part_max[sg] = amax;
    part_bad[sg] = bad ? 1u : 0u;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float row_max = 0.0f;
  bool row_bad = false;
  for (int i = 0; i < SIMDGROUPS; ++i) {
    row_max = max(row_max, part_max[i]);
    row_bad = row_bad || part_bad[i] != 0u;
  }

  float scale = precise::divide(row_max, float(QMAX));
  if (scale == 0.0f) {
    scale = 1.0f;  // an all-zero row quantizes to zeros, not NaN
  }
  // A NaN scale compares false and keeps the factor 1.
  const float up = scale < FLT_MIN ? 1.0f / FLT_MIN : 1.0f;
  const float inv = precise::divide(1.0f, scale * up);
  for (int k = int(tid); k < K; k += QT) {
    const float v = float(x[base + ulong(k)]) * up;  // exact: |x| < 127 * 2^-126 when up != 1
    const float code = clamp(round(v * inv), -float(QMAX), float(QMAX));
    q[base + ulong(k)] = row_bad ? int8_t(0) : int8_t(code);
  }
  if (tid == 0) {
    s[row] = row_bad ? NAN : scale;
  }
}

}  // namespace int8nax

// ==== kernel body ====
threadgroup float part_max[QT / SIMD];
threadgroup uint part_bad[QT / SIMD];
int8nax::quantize_row<QT, SIMD, QMAX>(
    x, q, s, x_shape[1], threadgroup_position_in_grid.y, thread_index_in_threadgroup,
    simdgroup_index_in_threadgroup, thread_index_in_simdgroup, part_max, part_bad);
