"""CPU backend: exact int8 GEMM through float32 BLAS, everywhere.

numpy's integer matmul runs at ~0.5 GOP/s and MLX's CPU float matmul links
reference BLAS (~4.5 GFLOP/s on Linux wheels), so neither will do. numpy's
float32 matmul (OpenBLAS/Accelerate) is fast and is exact for int8 operands as
long as no partial sum leaves float32's exact-integer range: |a*b| <= 128*128
= 2**14, so a dot product over at most K_BLOCK = 1024 terms stays within
2**24. K is therefore cut into blocks of 1024, each block's product is exact in
float32, and the blocks are summed in int32 (which cannot overflow: K is
checked against 131071 by the API).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from .. import quant
from .base import Backend, Probe

K_BLOCK = 1024
"""Longest K slice whose float32 dot products of int8 values are exact (2**10 * 2**14 = 2**24)."""


def _to_numpy(arr: mx.array) -> np.ndarray:
    """Zero-copy numpy view of an MLX CPU array; bfloat16 (unknown to numpy) widened to float32.

    Conversions to float32 happen in numpy: MLX's CPU astype is ~10x slower.
    """
    if arr.dtype == mx.bfloat16:
        arr = arr.astype(mx.float32)
    return np.asarray(arr)


def gemm_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact a @ b.T for arrays (int8, or float32 holding integers in [-128, 127]).

    a [M, K], b [N, K] -> int32 [M, N].
    """
    m, k = a.shape
    n = b.shape[0]
    acc = None
    part = np.empty((m, n), dtype=np.float32)
    for k0 in range(0, k, K_BLOCK):
        k1 = min(k, k0 + K_BLOCK)
        # Contiguous float32 copies of each K block: BLAS runs ~15% faster on them than on
        # strided views, and the conversion happens while the block is hot in cache.
        a_blk = a[:, k0:k1].astype(np.float32, order="C")
        b_blk = b[:, k0:k1].astype(np.float32, order="C")
        np.matmul(a_blk, b_blk.T, out=part)
        if acc is None:
            acc = part.astype(np.int32)
        else:
            acc += part.astype(np.int32)
    return acc


class CPUBackend(Backend):
    name = "cpu"

    def probe(self) -> Probe:
        return Probe(True, "exact float32-BLAS path through numpy; runs everywhere")

    def int8_matmul(self, a: mx.array, b: mx.array) -> mx.array:
        out = gemm_exact(_to_numpy(a), _to_numpy(b))
        return mx.array(out)

    def quantize_activations(self, x: mx.array) -> tuple[mx.array, mx.array]:
        q, scale = quant.quantize_activations_np(_to_numpy(x).astype(np.float32))
        return mx.array(q), mx.array(scale)

    def w8a8_linear(self, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        q, scale_x = quant.quantize_rows_f32(_to_numpy(x).astype(np.float32))
        acc = gemm_exact(q, _to_numpy(w))
        # Dequantize with one rounding to spare. Without a bias y is a product, and float32
        # arithmetic (relative error ~2**-22) is far inside half an ulp of float16/bfloat16.
        # A float32 output needs float64, and so does a bias: where acc*s_x*s_w + bias nearly
        # cancels, float32's error on the product is many ulps of the small result.
        work = np.float32 if (bias is None and x.dtype != mx.float32) else np.float64
        y = acc.astype(work)
        y *= scale_x.astype(work)[:, None]
        y *= np.asarray(scale_w).astype(work)[None, :]
        if bias is not None:
            y += _to_numpy(bias).astype(work)[None, :]
        return mx.array(y.astype(np.float32, copy=False)).astype(x.dtype)


BACKEND = CPUBackend()
