"""The CPU backend's operations as MLX operations, for calls inside mx.compile or mx.vmap.

The CPU backend computes in numpy and onnxruntime (cpu.py), outside MLX's graph, which a
function transformation that traces its inputs (mx.compile, mx.vmap) cannot evaluate. There
it runs these instead: the same numerics (int8nax.quant), built from MLX operations, so the
traced graph holds them.

- Quantization: bit for bit int8nax.quant's codes and scales. Rounding half away from zero is
  floor(|v|) + (|v| - floor(|v|) >= 0.5), both steps exact; |v| stands between the product
  x * (1 / s) and the subtraction, so no compiler can contract them into one fused
  multiply-add (MLX compiles a traced graph's elementwise code with the system C++ compiler).
- The int8 product: exact, as cpu_engines.NumpyEngine's: float32 products of K blocks of at
  most K_BLOCK terms (integers below 2**24), summed in int32.
- Dequantization: acc * s_x[m] * s_w[n] (+ bias[n]) in float64, rounded to float32 and then
  to x's dtype: within 1 ulp of the float64 model, as every backend's. The eager path rounds
  from float64 directly, so a float16 / bfloat16 output can differ from it by 1 ulp where the
  float32 value is a tie of the output type (about 1 value in 2**16 for bfloat16).

Correct, not fast: MLX's CPU float32 GEMM does the product (16 x 896 x 4864 took 38 ms on the
2-core box, where the eager path's onnxruntime int8 GEMM takes ~1 ms), so a compiled W8A8 model
runs several times slower on a CPU than the same model eager (docs/numerics.md).
"""

from __future__ import annotations

import mlx.core as mx

from ...quant import FLT_MIN, QMAX, TINY_SHIFT
from .engines import K_BLOCK


def quantize_rows(x: mx.array) -> tuple[mx.array, mx.array]:
    """(int8 [M, K], float32 [M]) = int8nax.quant's per-token quantization of float x [M, K]."""
    x32 = x.astype(mx.float32)
    bad = mx.any(mx.isnan(x32) | mx.isinf(x32), axis=1)
    scale = mx.max(mx.abs(x32), axis=1) / QMAX
    scale = mx.where(bad, mx.array(float("nan"), mx.float32), mx.where(scale == 0, 1.0, scale))
    up = mx.where(scale < float(FLT_MIN), 2.0**TINY_SHIFT, 1.0).astype(mx.float32)
    inv = 1.0 / (mx.where(bad, 1.0, scale) * up)
    v = (x32 * up[:, None]) * inv[:, None]
    magnitude = mx.abs(v)
    whole = mx.floor(magnitude)
    code = mx.minimum(whole + (magnitude - whole >= 0.5), QMAX)
    code = mx.where(v < 0, -code, code)
    return mx.where(bad[:, None], 0, code).astype(mx.int8), scale


def gemm_int32(a: mx.array, b: mx.array) -> mx.array:
    """int32 [M, N] = a [M, K] . b [N, K]^T, exact, for int8 a and b."""
    k = a.shape[1]
    a32, b32 = a.astype(mx.float32), b.astype(mx.float32)
    acc = None
    for k0 in range(0, k, K_BLOCK):
        part = (a32[:, k0:k0 + K_BLOCK] @ b32[:, k0:k0 + K_BLOCK].T).astype(mx.int32)
        acc = part if acc is None else acc + part
    return acc


def dequantize(acc: mx.array, scale_x: mx.array, scale_w: mx.array, bias, dtype) -> mx.array:
    """y [M, N] in `dtype` = acc * scale_x[m] * scale_w[n] (+ bias[n]), in float64 then rounded."""
    y = acc.astype(mx.float64) * scale_x.astype(mx.float64)[:, None] * scale_w.astype(mx.float64)[None, :]
    if bias is not None:
        y = y + bias.astype(mx.float64)[None, :]
    return y.astype(mx.float32).astype(dtype)


def w8a8_linear(x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
    """dequant(quant(x) . w^T) (+ bias) in x's dtype, [M, N], as the CPU backend's w8a8_linear."""
    q, scale_x = quantize_rows(x)
    return dequantize(gemm_int32(q, w), scale_x, scale_w, bias, x.dtype)
