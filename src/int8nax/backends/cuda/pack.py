"""The activation pack (kernels/cuda/quant/act_pack.cuh): one int8 array [M, P] holding a quantized
x [M, K] (scale_x float32 [M] at byte 0, the codes q int8 [M, K] at codes_offset(M)) and, at
maps_offset(M, K), the scratch of the one GEMM that reads it (its tensor maps).

The quantization kernels write it as their only output and the W8A8 GEMMs take it as an input, so
a W8A8 call allocates the pack and y where it allocated q, scale_x, the tensor-map scratch and y:
mlx-lm empties MLX's buffer cache after every prefill chunk, and each allocation then costs a
cudaMallocAsync. The layout is the header's; this module sizes packs, views one as (q, scale_x)
and builds one from given codes (tests, tools, the public dequant_gemm)."""

from __future__ import annotations

import mlx.core as mx

from ...tiling import ceil_div

PACK_ALIGN = 256
"""Every region starts at a multiple of this many bytes (act_pack.cuh's PACK_ALIGN)."""

SCALE_BYTES = 4
"""A float32 scale a row."""


def _round(nbytes: int) -> int:
    return ceil_div(nbytes, PACK_ALIGN) * PACK_ALIGN


def codes_offset(m: int) -> int:
    """Byte offset of q in the pack of M rows."""
    return _round(m * SCALE_BYTES)


def maps_offset(m: int, k: int) -> int:
    """Byte offset of the GEMM's scratch in the pack of x [M, K]."""
    return codes_offset(m) + _round(m * k)


def pack_shape(m: int, k: int, scratch: int = 0) -> tuple[int, int]:
    """(M, P): the int8 shape of the pack of x [M, K] with `scratch` bytes for its GEMM (M >= 1).
    The GEMM reads M from it; P is only large enough."""
    return m, ceil_div(maps_offset(m, k) + scratch, m)


def unpack(pack: mx.array, m: int, k: int) -> tuple[mx.array, mx.array]:
    """(q int8 [M, K], scale_x float32 [M]): views of a pack's regions (no copy)."""
    flat = pack.reshape(-1)
    scale = flat[: m * SCALE_BYTES].view(mx.float32)
    start = codes_offset(m)
    return flat[start: start + m * k].reshape(m, k), scale


def pack_of(q: mx.array, scale_x: mx.array, scratch: int = 0) -> mx.array:
    """The pack of given codes q int8 [M, K] and scales float32 [M] (a copy), with `scratch` bytes."""
    m, k = q.shape
    head = scale_x.astype(mx.float32).view(mx.int8)
    rows, cols = pack_shape(m, k, scratch)
    parts = [head, mx.zeros((codes_offset(m) - head.size,), dtype=mx.int8), q.reshape(-1),
             mx.zeros((rows * cols - codes_offset(m) - m * k,), dtype=mx.int8)]
    return mx.concatenate(parts).reshape(rows, cols)
