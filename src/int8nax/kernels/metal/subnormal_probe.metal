// int8nax subnormal probe: what this GPU's float32 arithmetic does with subnormal numbers, for
// `int8nax selftest` (Metal documents no flush-to-zero behaviour and offers no setting). The
// kernels do not depend on the answer (quantize_rows.metal, float_bits.metal); an M5 owner's
// report says which it is.
//
// Built by int8nax/backends/metal/backend.py with mx.fast.metal_kernel: the part above the
// "kernel body" line goes into `header`, the part below is `source`.
//   inputs   x float32 [8] = (s, FLT_MIN, 0.5, 1, 0, 0, 0, 0), s subnormal (from the host, so
//            that nothing is folded at compile time)
//   outputs  out float32 [6]: s * 1, s + 0, fma(s, 1, 0), FLT_MIN * 0.5, max(s, 0),
//            precise::divide(s, 1): each is s (or FLT_MIN / 2) when kept, 0 when flushed
//   launch   one simdgroup; thread 0 does the work

#include <metal_stdlib>

using namespace metal;

namespace int8nax {

// Positions in x and out (metal.py SUBNORMAL_PROBE_OPS names the outputs in this order).
enum ProbeInput { PROBE_S, PROBE_FLT_MIN, PROBE_HALF, PROBE_ONE, PROBE_ZERO };
enum ProbeOutput { PROBE_MUL, PROBE_ADD, PROBE_FMA, PROBE_UNDERFLOW, PROBE_MAX, PROBE_DIVIDE };

}  // namespace int8nax

// ==== kernel body ====
if (thread_position_in_grid.x == 0) {
  using namespace int8nax;
  const float s = x[PROBE_S];
  out[PROBE_MUL] = s * x[PROBE_ONE];
  out[PROBE_ADD] = s + x[PROBE_ZERO];
  out[PROBE_FMA] = fma(s, x[PROBE_ONE], x[PROBE_ZERO]);
  out[PROBE_UNDERFLOW] = x[PROBE_FLT_MIN] * x[PROBE_HALF];
  out[PROBE_MAX] = max(s, x[PROBE_ZERO]);
  out[PROBE_DIVIDE] = precise::divide(s, x[PROBE_ONE]);
}
