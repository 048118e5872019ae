"""Launches and graphs: the GEMM, quantization, reduction and SwiGLU-quantization kernels launched
on their grids (row chunks for gridDim.y, persistent plans, split-K workspaces or int8_matmul's
atomic split-K), the W8A8 graphs
built from them, and the SwiGLU kernel's first-use check. Nothing here chooses a variant or caches
per shape (backend.py)."""

from __future__ import annotations

import warnings
from functools import lru_cache

import mlx.core as mx
import numpy as np

from ...quant import quantize_activations_np
from ...tiling import ceil_div
from ..base import swiglu_of
from ..entries import rows_of
from ..kernel_spec import KernelSpec
from . import choice as cuda_choice
from . import kernels, pack as cuda_pack, plans as cuda_plans, probe, settings
from . import source as cuda_source

MAX_GRID_Y = 65535
"""CUDA's limit on gridDim.y; taller problems are launched in row chunks."""

REDUCE_THREADS = 256
MAX_REDUCE_BLOCKS = 4096
"""The split-K reduction is a grid-stride loop over groups of four outputs."""

PLAN_ARRAY_CACHE_SIZE = 64
"""(splits, group) pairs whose plan array is kept (powers of two: a handful per GPU)."""


def dtype_name(dtype) -> str | None:
    return None if dtype is None else str(dtype).split(".")[-1]


def epilogue_template(out_dtype, has_bias: bool, narrow: bool) -> list:
    """The W8A8 kernels' epilogue template arguments (cuda_source._dequant_store): TOut, HAS_BIAS,
    NARROW, which is set only where it changes the code (a float16 or bfloat16 output)."""
    return [("TOut", out_dtype), ("HAS_BIAS", has_bias), ("NARROW", bool(narrow) and out_dtype != mx.float32)]


# ---- launches ----

@lru_cache(maxsize=1)
def _no_bias() -> mx.array:
    """The placeholder bound to the kernel's bias argument when HAS_BIAS is false."""
    placeholder = mx.zeros((1,), dtype=mx.float32)
    mx.eval(placeholder)
    return placeholder


@lru_cache(maxsize=PLAN_ARRAY_CACHE_SIZE)
def _plan_array(shape: tuple[int, ...]) -> mx.array:
    """An int8 array of `shape`: the persistent kernels read its shape (kernel arguments), never
    its data, so no launch waits for a load from memory the host made."""
    arr = mx.zeros(shape, dtype=mx.int8)
    mx.eval(arr)
    return arr


def _row_chunks(m: int, cfg) -> list[tuple[int, int]]:
    """[r0, r1) row ranges small enough for gridDim.y (each launch has at most 65535 M-tiles)."""
    step = MAX_GRID_Y * cfg.bm
    return [(r0, min(m, r0 + step)) for r0 in range(0, m, step)]


def _row_slice(v, r0, r1):
    return v if (r0, r1) == (0, v.shape[0]) else v[r0:r1]


def _by_row_chunks(m, plan, row: cuda_choice.Variant, one_chunk):
    """one_chunk(r0, r1) over row ranges that fit gridDim.y (one-block-per-tile launches; a
    persistent grid is one-dimensional), joined along M."""
    chunks = [(0, m)] if row.persistent else _row_chunks(m, plan.cfg)
    if len(chunks) == 1:
        return one_chunk(0, m)
    return mx.concatenate([one_chunk(r0, r1) for r0, r1 in chunks], axis=0)


def _launch_reduce(spec, inputs, out_dtype, template, lead: tuple[int, ...] | None = None):
    """Sum a [splits, M, N] workspace (inputs[0]) into [M, N] through the spec's epilogue (lead:
    the output's leading dims in place of M, whose product is M)."""
    _, m, n = inputs[0].shape
    blocks = max(1, min(ceil_div(m * n, 4 * REDUCE_THREADS), MAX_REDUCE_BLOCKS))
    return kernels._kernel(spec)(
        inputs=inputs,
        output_shapes=[(lead if lead is not None else (m,)) + (n,)],
        output_dtypes=[out_dtype],
        grid=(blocks * REDUCE_THREADS, 1, 1),
        threadgroup=(REDUCE_THREADS, 1, 1),
        template=template,
    )[0]


def _grid(row: cuda_choice.Variant, plan, inputs, m: int, n: int):
    """(inputs, grid, block) of one GEMM launch of the variant for an [M, N] output: persistent
    blocks walking the tiles (the plan's (splits, group) as the shape of an extra last input), or
    one block per tile and split."""
    if row.persistent:
        return list(inputs) + [_plan_array(plan.plan_shape())], *plan.grid()
    return inputs, *plan.grid(m, n)


def _launch(row: cuda_choice.Variant, spec, inputs, out_dtype, plan, template, maps: bool,
            lead: tuple[int, ...] | None = None):
    """One GEMM launch of the variant (_grid); [M, N] out (M = the product of inputs[0]'s leading
    dims; lead: the output's leading dims in place of M), or the [splits, M, N] workspace; maps:
    the extra uint8 output of int8_matmul's TMA kernels, a 256-byte slot a block for its tensor
    maps (a kernel over a pack has its scratch there)."""
    m, n = rows_of(inputs[0].shape)[0], inputs[1].shape[0]
    out = (lead if lead is not None else (m,)) + (n,)  # lead () for a 1-D x: y [N]
    shapes, dtypes = [out if plan.splits == 1 else (plan.splits, m, n)], [out_dtype]
    if maps:
        shapes.append((plan.map_bytes(m, n),))
        dtypes.append(mx.uint8)
    inputs, grid, block = _grid(row, plan, inputs, m, n)
    return kernels._kernel(spec)(inputs=inputs, output_shapes=shapes, output_dtypes=dtypes, grid=grid, threadgroup=block,
                                 template=template)[0]


def map_rows(row: cuda_choice.Variant, plan, m: int, n: int) -> int:
    """Rows of N int32 after the [M, N] sums in the one output of an atomic launch (_launch_atomic)
    that hold the blocks' tensor-map slots (row.maps), from the first slot boundary after the sums,
    as the kernel's map_slots_after_sums places them (kernels/cuda/epilogue/atomic_add.cuh); 0
    without maps."""
    if not row.maps:
        return 0
    align = cuda_plans.TMA_MAP_SLOT_BYTES // 4
    return ceil_div(ceil_div(m * n, align) * align + plan.map_bytes(m, n) // 4, n) - m


def _launch_atomic(row: cuda_choice.Variant, spec, inputs, plan, template):
    """One launch of a plan with reduce="atomic" (cuda_plans.REDUCTIONS): int32 [M, N] = a . b^T
    for inputs (a, b), every K split adding its partial sums into the output, which MLX zero-fills
    first (init_value=0); no workspace, no reduction. The kernels with tensor maps (row.maps) have
    one output, int32 [M + map_rows, N], the map slots after the sums (the fill is then one kernel,
    where a second output would take another): the sums are its first M rows, a view."""
    m, n = inputs[0].shape[0], inputs[1].shape[0]
    extra = map_rows(row, plan, m, n)
    inputs, grid, block = _grid(row, plan, inputs, m, n)
    out = kernels._kernel(spec)(inputs=inputs, output_shapes=[(m + extra, n)], output_dtypes=[mx.int32], grid=grid,
                                threadgroup=block, template=template, init_value=0)[0]
    return out[:m] if extra else out


def scratch_bytes(row: cuda_choice.Variant, plan, m: int, n: int) -> int:
    """Bytes of scratch the variant's GEMM over a pack needs for an [M, N] output with `plan`:
    its blocks' tensor-map slots (cuda_pack)."""
    return plan.map_bytes(m, n) if row.maps else 0


def gemm_graph(a, b, variant: str, plan):
    """int32 [M, N] = a [M, K] . b [N, K]^T on `variant` (a cuda_choice name or alias) with `plan`:
    a split plan through the workspace and the reduction, or with reduce="atomic" its splits added
    into each row chunk's own zero-filled output (_launch_atomic). ValueError naming the plan where
    the variant has no atomic kernel."""
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(variant)]
    specs = row.specs(plan.cfg)
    template = row.template(plan.cfg)
    if cuda_plans.reduce_of(plan) == cuda_plans.ATOMIC:
        if specs.int32_atomic is None:
            atomic = sorted(v.name for v in cuda_choice.VARIANTS.values() if v.specs(v.configs[0]).int32_atomic)
            raise ValueError(f"plan: reduce={cuda_plans.ATOMIC!r} runs on the variants {atomic}, got {row.name!r} "
                             f"with {plan.name}")
        return _by_row_chunks(a.shape[0], plan, row, lambda r0, r1: _launch_atomic(
            row, specs.int32_atomic, [_row_slice(a, r0, r1), b], plan, template))

    def one_chunk(r0, r1):
        out = _launch(row, specs.int32, [_row_slice(a, r0, r1), b], mx.int32, plan, template, row.maps)
        return out if plan.splits == 1 else _launch_reduce(cuda_source.reduce_int32(), [out], mx.int32, [])

    return _by_row_chunks(a.shape[0], plan, row, one_chunk)


def _chunked(row: cuda_choice.Variant, plan, m: int) -> bool:
    """Whether an [M, ...] problem runs in row chunks (_by_row_chunks)."""
    return not row.persistent and len(_row_chunks(m, plan.cfg)) > 1


def pack_scratch(row: cuda_choice.Variant, plan, m: int, n: int) -> int:
    """The scratch bytes the quantization gives the pack of x [M, K] for `plan`'s GEMM: none where
    the GEMM runs in row chunks (each chunk's pack is built with its own)."""
    return 0 if _chunked(row, plan, m) else scratch_bytes(row, plan, m, n)


def dequant_packed(pack, k: int, w, scale_w, bias_arg, out_dtype, variant: str, plan, has_bias: bool, narrow=False,
                   lead: tuple[int, ...] | None = None):
    """y [M, N] (out_dtype) = q [M, K] . w [N, K]^T * scale_x[m] * scale_w[n] (+ bias[n]) of an
    activation pack (cuda_pack, with pack_scratch's scratch) on `variant` with `plan`
    (bias_arg: backend._bias_arg's): the fused epilogue unsplit, else the int32 workspace and the
    dequantizing reduction; narrow: the narrow epilogue (epilogue_template); lead: y's leading
    dims in place of M (the layer's own x shape: no reshape after the kernel)."""
    if cuda_plans.reduce_of(plan) != cuda_plans.WORKSPACE:
        raise ValueError(f"plan: W8A8 dequantizes the exact sum of the K splits, so its split plans take "
                         f"reduce={cuda_plans.WORKSPACE!r} (reduce={cuda_plans.reduce_of(plan)!r} is int8_matmul's), "
                         f"got {plan.name}")
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(variant)]
    specs = row.specs(plan.cfg)
    epilogue = epilogue_template(out_dtype, has_bias, narrow)
    tile = row.template(plan.cfg)
    m, n = pack.shape[0], w.shape[0]

    def one_pack(p, lead=None):
        # Input order = spec.input_names: pack, w, scale_w, bias (then the persistent plan).
        if plan.splits == 1:
            return _launch(row, specs.w8a8, [p, w, scale_w, bias_arg], out_dtype, plan, tile + epilogue, False, lead)
        ws = _launch(row, specs.int32_packed, [p, w], mx.int32, plan, tile, False)
        return _launch_reduce(cuda_source.reduce_w8a8(), [ws, p, scale_w, bias_arg], out_dtype, epilogue, lead)

    if not _chunked(row, plan, m):
        return one_pack(pack, lead)
    q, scale_x = cuda_pack.unpack(pack, m, k)
    y = mx.concatenate([one_pack(cuda_pack.pack_of(q[r0:r1], scale_x[r0:r1], scratch_bytes(row, plan, r1 - r0, n)))
                        for r0, r1 in _row_chunks(m, plan.cfg)], axis=0)
    return y if lead is None else y.reshape(lead + (n,))


def dequant_graph(q, scale_x, w, scale_w, bias_arg, out_dtype, variant: str, plan, has_bias: bool, narrow=False):
    """dequant_packed of given codes q int8 [M, K] and scales scale_x float32 [M] (packed by a copy:
    tests and tools; the layers' calls quantize into a pack)."""
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(variant)]
    m, k = q.shape
    pack = cuda_pack.pack_of(q, scale_x, pack_scratch(row, plan, m, w.shape[0]))
    return dequant_packed(pack, k, w, scale_w, bias_arg, out_dtype, variant, plan, has_bias, narrow)


def quant_launch(m: int, k: int) -> cuda_plans.CudaQuantLaunch:
    """The quantization kernel's launch for x [M, K] on this GPU (cuda_plans.cuda_quant_launch)."""
    return cuda_plans.cuda_quant_launch(m, k, probe.sm_count())


def _rows_pack(spec: KernelSpec, x, m: int, k: int, launch: cuda_plans.CudaQuantLaunch | None, scratch: int):
    """The activation pack (int8 [M, P], cuda_pack) of a one-block-per-row quantizing kernel of
    x's M rows into codes [M, k], with `scratch` bytes for its GEMM."""
    launch = launch or quant_launch(m, k)
    grid, block = launch.grid(m)
    return kernels._kernel(spec)(
        inputs=[x],
        output_shapes=[cuda_pack.pack_shape(m, k, scratch)],
        output_dtypes=[mx.int8],
        grid=grid,
        threadgroup=block,
        template=[("T", x.dtype)] + launch.template(),
    )[0]


def _quantize_pack(x, launch: cuda_plans.CudaQuantLaunch | None = None, scratch: int = 0):
    """The pack of x float16/bfloat16/float32 [..., K] (M rows: the product of the leading dims);
    launch: the kernel's (threads, held), quant_launch's by default (tests force the others)."""
    m, k = rows_of(x.shape)
    return _rows_pack(cuda_source.quantize(), x, m, k, launch, scratch)


def _quantize_graph(x, launch: cuda_plans.CudaQuantLaunch | None = None):
    """(q int8 [M, K], scale float32 [M]) of x [M, K]: views of _quantize_pack's pack."""
    return cuda_pack.unpack(_quantize_pack(x, launch), *rows_of(x.shape))


def swiglu_quant_launch(m: int, k: int, dtype) -> cuda_plans.CudaQuantLaunch | cuda_plans.CudaStagedLaunch:
    """The SwiGLU quantization kernel's launch for y [M, 2K] of `dtype` on this GPU: with
    INT8NAX_CUDA_SWIGLU=staged cuda_plans.cuda_swiglu_staged_launch's where it takes the shape,
    else cuda_plans.cuda_swiglu_quant_launch's."""
    staged = (cuda_plans.cuda_swiglu_staged_launch(m, k, dtype.size, probe.sm_count())
              if settings.swiglu_choice() == "staged" else None)
    return staged or cuda_plans.cuda_swiglu_quant_launch(m, k, dtype.size, probe.sm_count())


def _swiglu_quantize_pack(y, launch=None, scratch: int = 0):
    """The pack (cuda_pack) of h = swiglu(y[:, :K], y[:, K:]) for y float16/bfloat16/float32
    [M, 2K], with the bits of _quantize_pack(backends.base.swiglu(...)) and `scratch` bytes for its
    GEMM; launch: swiglu_quant_launch's by default (tests force the others; one holding more than
    cuda_plans.SWIGLU_HELD_BYTES of g and u a thread cannot start and is refused), a
    cuda_plans.CudaStagedLaunch the staged kernel's (rows it cannot stage it quantizes from y)."""
    m, k = y.shape[0], y.shape[1] // 2
    if launch is None:
        launch = swiglu_quant_launch(m, k, y.dtype)
    if isinstance(launch, cuda_plans.CudaStagedLaunch):
        return _rows_pack(cuda_source.swiglu_quantize_staged(launch.stage_bytes), y, m, k, launch, scratch)
    if cuda_plans.swiglu_held_bytes(launch, y.dtype.size) > cuda_plans.SWIGLU_HELD_BYTES:
        raise ValueError(f"launch: {launch} holds {cuda_plans.swiglu_held_bytes(launch, y.dtype.size)} bytes of g and u "
                         f"a thread for {dtype_name(y.dtype)}, more than {cuda_plans.SWIGLU_HELD_BYTES}: its "
                         "registers exceed an SM's")
    return _rows_pack(cuda_source.swiglu_quantize(), y, m, k, launch, scratch)


def _swiglu_quantize_graph(y, launch=None):
    """(q int8 [M, K], scale float32 [M]) of swiglu(y): views of _swiglu_quantize_pack's pack."""
    return cuda_pack.unpack(_swiglu_quantize_pack(y, launch), y.shape[0], y.shape[1] // 2)


def _swiglu_probe(dtype, k: int) -> mx.array:
    """y [9, 2K] of `dtype` for the first-use check: typical rows; gates where sigmoid saturates
    both ways; a row each with an inf gate, a NaN up, zeros, tiny products (a subnormal scale in
    float32) and the dtype's largest values (silu * up overflowing)."""
    big = float(mx.finfo(dtype).max)
    j = mx.arange(2 * k, dtype=mx.float32)
    gate_half = j < k
    rows = [mx.sin(j * 0.37 + r) * (3.0 + 5 * r) for r in range(3)]
    rows.append(mx.where(gate_half, mx.sin(j) * 200, mx.cos(j)))
    rows.append(mx.where(j == 1, mx.array(float("inf")), mx.sin(j)))
    rows.append(mx.where(j == 2 * k - 1, mx.array(float("nan")), mx.cos(j)))
    rows.append(mx.zeros_like(j))
    rows.append(mx.where(gate_half, mx.sin(j) * (3e-38 if dtype == mx.float32 else 1e-4), 1.0))
    rows.append(mx.where(j % 3 == 0, -big, big) * mx.sign(mx.sin(j) + 0.5))
    return mx.stack(rows).astype(dtype)


def _staged_probe(dtype, k: int, m: int) -> mx.array:
    """y [m, 2K] of `dtype`: _swiglu_probe's rows over and over, each copy scaled apart (so that a
    row quantized from another row's buffer shows)."""
    base = _swiglu_probe(dtype, k)
    rows = mx.tile(base, (-(-m // base.shape[0]), 1))[:m]
    return rows * (1 + (mx.arange(m) % 61) / 64).astype(dtype)[:, None]


@lru_cache(maxsize=16)
def swiglu_kernel_ok(dtype, launch) -> bool:
    """Whether the SwiGLU quantization kernel gives the two steps' bits (MLX's swiglu, then the
    quantization) on this GPU and MLX for `dtype` with `launch`: checked once per process on a
    probe of three row widths (below), before its first use. The quantization of MLX's h is
    int8nax.quant's on the host, which the quantization kernel matches bit for bit: the probe
    builds no kernel the model does not (an NVRTC build is seconds of a first call). Where the
    bits differ, SwiGLU MLPs take the two steps in this process, with a warning saying so.
    A staged launch (cuda_plans.CudaStagedLaunch) is probed at its own row width (staged) and
    two it quantizes from y, each over more rows than it has blocks (every block reuses its
    buffers)."""
    if isinstance(launch, cuda_plans.CudaStagedLaunch):
        widths, rows = (launch.hidden, launch.capacity + 8, 13), 2 * launch.blocks + 3
    else:  # several groups a thread in registers, a row too long for them (read twice), single values
        widths, rows = (8 * launch.threads + 8, launch.capacity + 8, 13), None
    for k in widths:
        y = _swiglu_probe(dtype, k) if rows is None else _staged_probe(dtype, k, rows)
        q, s = _swiglu_quantize_graph(y, launch)
        q2, s2 = quantize_activations_np(np.array(swiglu_of(y).astype(mx.float32)))
        if not (np.array_equal(np.array(q), q2) and np.array_equal(np.array(s), s2, equal_nan=True)):
            warnings.warn(f"int8nax: the CUDA SwiGLU quantization kernel ({dtype_name(dtype)}, {launch}) did not give "
                          "the bits of swiglu then quantization on this GPU; SwiGLU MLPs take the two steps in this "
                          "process", RuntimeWarning, stacklevel=2)
            return False
    return True


def _quantizes_inside(row: cuda_choice.Variant, plan, m: int, k: int, dtype) -> bool:
    """Whether the variant's own quantizing kernel takes x [m, k] of `dtype`: the plan's `fused`
    where it says, else (a GEMV plan made without the dtype) cuda_plans.gemv_inside."""
    if row.quantizing is None:
        return False
    fused = getattr(plan, "fused", None)
    return cuda_plans.gemv_inside(m, k, dtype.size) if fused is None else fused


def w8a8_graph(x, w, scale_w, bias_arg, variant: str, plan, has_bias: bool,
               quant: cuda_plans.CudaQuantLaunch | None = None, narrow: bool = False):
    """quantize(x) into a pack (with the launch `quant`, quant_launch's by default), then
    dequant_packed on `variant` with `plan`: y [..., N] in x's dtype for x [..., K] (M rows, the
    product of the leading dims: the kernels read M from x's shape, so a layer's x [B, L, K] needs
    no reshape node before or after them); or, where the variant quantizes x itself
    (_quantizes_inside), its one kernel."""
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(variant)]
    m, k = rows_of(x.shape)
    lead = x.shape[:-1]
    if _quantizes_inside(row, plan, m, k, x.dtype):
        template = [("T", x.dtype)] + row.template(plan.cfg) + epilogue_template(x.dtype, has_bias, narrow)[1:]
        return _launch(row, row.quantizing(), [x, w, scale_w, bias_arg], x.dtype, plan, template, row.maps, lead)
    pack = _quantize_pack(x, quant, pack_scratch(row, plan, m, w.shape[0]))
    return dequant_packed(pack, k, w, scale_w, bias_arg, x.dtype, variant, plan, has_bias, narrow, lead)


def swiglu_w8a8_graph(gate_up, w, scale_w, bias_arg, variant: str, plan, has_bias: bool,
                      launch: cuda_plans.CudaQuantLaunch | None = None, narrow: bool = False):
    """w8a8_graph of h = swiglu(gate_up[:, :K], gate_up[:, K:]), y [M, N] in gate_up's dtype: the
    SwiGLU quantization kernel into a pack (with `launch`, swiglu_quant_launch's by default), then
    dequant_packed; where the variant quantizes its input itself (the GEMV), swiglu then w8a8_graph."""
    m, k = gate_up.shape[0], gate_up.shape[1] // 2
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(variant)]
    if _quantizes_inside(row, plan, m, k, gate_up.dtype):
        return w8a8_graph(swiglu_of(gate_up), w, scale_w, bias_arg, variant, plan, has_bias, None, narrow)
    pack = _swiglu_quantize_pack(gate_up, launch, pack_scratch(row, plan, m, w.shape[0]))
    return dequant_packed(pack, k, w, scale_w, bias_arg, gate_up.dtype, variant, plan, has_bias, narrow)
