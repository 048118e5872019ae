// int8nax W8A8 GEMM on NAX with the dequantization fused into the epilogue:
//   y[m, n] = acc[m, n] * s_x[m] * s_w[n] (+ bias[n]),  acc = sum_k q[m, k] * w[n, k] (int32)
//
// Built by int8nax/backends/metal/backend.py with mx.fast.metal_kernel: the part above the
// "kernel body" line goes into `header` (after the schedule, nax_gemm.metal, then
// float_bits.metal and dequantize.metal, the epilogue), the part below is `source`. M <=
// tiling.METAL_MV_MAX_M takes w8a8_decode.metal instead (one launch, x quantized in registers).
//   inputs   q int8 [..., K] (activations quantized by quantize_rows.metal, x's shape: read as
//            [M, K] from `params`), w int8 [N, K],
//            s_x float32 [>= max(M, 8)] (padded, so always a device input), s_w float32 [N],
//            bias float16 | bfloat16 | float32 [N] in the caller's dtype (widened to float32
//            here, exactly; a float32 [1] placeholder when HAS_BIAS is false),
//            params int32 [5] = (M, N, K, swizzle_log, tiles_m)
//            (inputs of fewer than 8 elements, e.g. params, the placeholder and s_w for N < 8,
//            arrive as `const constant T*`; the epilogue's pointer types are template parameters)
//   output   y OutT [..., N] in x's leading dims (float16, bfloat16 or float32; written as [M, N])
//   template the GEMM's (int8_gemm.metal), OutT, HAS_BIAS

// ==== kernel body ====
const int8nax::DequantStore<OutT, HAS_BIAS, metal::remove_addrspace_t<decltype(s_x)>,
                            metal::remove_addrspace_t<decltype(s_w)>,
                            metal::remove_addrspace_t<decltype(bias)>>
    epilogue{s_x, s_w, bias, y, params[int8nax::PARAM_N]};
INT8NAX_GEMM_SCHEDULE(
    q, w, params, threadgroup_position_in_grid.xy, simdgroup_index_in_threadgroup,
    thread_index_in_simdgroup, epilogue);
