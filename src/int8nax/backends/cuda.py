"""CUDA backend: exact int8 GEMM and the W8A8 pipeline on NVIDIA GPUs through mx.fast.cuda_kernel.

On compute capability 9.0 (H100/H200; MLX compiles for sm_90a) the GEMM runs on the tensor cores
with wgmma: fed by the tensor memory accelerator (kernels/gemm_tma.cuh: gemm_tma_simple, or for
problems of many tiles the persistent gemm_tma_ws / gemm_tma_pp) where K % 16 == 0, from cp.async
loads (kernels/gemm_sm90.cuh) elsewhere ("which kernel runs" below); on any other GPU a portable
__dp4a kernel (kernels/gemm_simt.cuh) gives the same exact results, slowly. Kernel, tile and
split-K choices come from int8nax.tiling (CUDA section: cuda_gemm_kernel, persistent_kernel,
tma_plan, ws_plan, pp_plan, cuda_plan; the quantization's launch: cuda_quant_launch); kernel
objects are built once per process and reused.

W8A8: one kernel quantizes the activations per token (kernels/quantize.cuh), then the GEMM with
the dequantization fused into its epilogue writes y in x's dtype. When the plan splits K, each
split writes its int32 partial sums to a [splits, M, N] workspace and one more kernel sums them
(and, for W8A8, dequantizes).
"""

from __future__ import annotations

import os
from functools import lru_cache

import mlx.core as mx

from .. import tiling
from . import cuda_source
from .base import Backend, Probe

SM_ID_CAPACITY = 1024
"""Size of the flag array the SM-count probe writes (well above any GPU's SM count)."""

MAX_GRID_Y = 65535
"""CUDA's limit on gridDim.y; taller problems are launched in row chunks."""

REDUCE_THREADS = 256
MAX_REDUCE_BLOCKS = 4096
"""The split-K reduction is a grid-stride loop over groups of four outputs."""


def _device_info() -> dict:
    return mx.device_info(mx.gpu)


def compute_capability() -> tuple[int, int]:
    info = _device_info()
    return int(info.get("compute_capability_major", 0)), int(info.get("compute_capability_minor", 0))


def family_for(cc: tuple[int, int]) -> str:
    """The GEMM family for a compute capability: wgmma exists only on 9.0 (sm_90a)."""
    return "sm90" if cc == (9, 0) else "simt"


@lru_cache(maxsize=None)
def _family() -> str:
    """This process's GPU's GEMM family (asked once: device_info is not free per call)."""
    return family_for(compute_capability())


@lru_cache(maxsize=None)
def _kernel(spec: cuda_source.KernelSpec):
    return mx.fast.cuda_kernel(
        name=spec.name,
        input_names=list(spec.input_names),
        output_names=list(spec.output_names),
        source=spec.source,
        header=spec.header,
        ensure_row_contiguous=True,
        shared_memory=spec.shared_memory,
    )


@lru_cache(maxsize=None)
def sm_count() -> int:
    """Streaming multiprocessors of the GPU, counted once per process by where blocks land."""
    flags = _kernel(cuda_source.count_sms())(
        inputs=[mx.zeros((1,), dtype=mx.int32)],
        output_shapes=[(SM_ID_CAPACITY,)],
        output_dtypes=[mx.int32],
        grid=(32 * 8 * SM_ID_CAPACITY, 1, 1),
        threadgroup=(32, 1, 1),
        template=[("CAPACITY", SM_ID_CAPACITY)],
        init_value=0,
    )[0]
    return max(1, int(mx.sum(flags).item()))


def default_plan(m: int, n: int, k: int, family: str | None = None) -> tiling.CudaPlan:
    """The dispatch: tiling.cuda_plan on this GPU, or the SIMT tile when wgmma is absent."""
    family = family or _family()
    if family == "simt":
        return tiling.CudaPlan(tiling.CUDA_SIMT_CONFIG, 1)
    return tiling.cuda_plan(m, n, k, sm_count())


@lru_cache(maxsize=None)
def _no_bias() -> mx.array:
    """The placeholder bound to the kernel's bias argument when HAS_BIAS is false."""
    placeholder = mx.zeros((1,), dtype=mx.float32)
    mx.eval(placeholder)
    return placeholder


def _row_chunks(m: int, cfg: tiling.TileConfig):
    """[r0, r1) row ranges small enough for gridDim.y (each launch has at most 65535 M-tiles)."""
    step = MAX_GRID_Y * cfg.bm
    return [(r0, min(m, r0 + step)) for r0 in range(0, m, step)]


def _launch_gemm(spec, inputs, m, n, out_dtype, plan, template, tma=False):
    """The GEMM kernel over one row chunk: [M, N], or the [splits, M, N] workspace. A TMA kernel
    (gemm_tma_simple) also gets an extra uint8 output, one 256-byte slot per block for its
    tensor maps."""
    _, grid, block = plan.grid(m, n)
    shapes = [(m, n) if plan.splits == 1 else (plan.splits, m, n)]
    dtypes = [out_dtype]
    if tma:
        shapes.append((plan.map_bytes(m, n),))
        dtypes.append(mx.uint8)
    return _kernel(spec)(
        inputs=inputs,
        output_shapes=shapes,
        output_dtypes=dtypes,
        grid=grid,
        threadgroup=block,
        template=(plan.cfg.tma_template() if tma else plan.cfg.template()) + template,
    )[0]


def _launch_reduce(spec, inputs, out_dtype, template):
    """Sum a [splits, M, N] workspace (inputs[0]) into [M, N] through the spec's epilogue."""
    _, m, n = inputs[0].shape
    blocks = max(1, min(tiling.ceil_div(m * n, 4 * REDUCE_THREADS), MAX_REDUCE_BLOCKS))
    return _kernel(spec)(
        inputs=inputs,
        output_shapes=[(m, n)],
        output_dtypes=[out_dtype],
        grid=(blocks * REDUCE_THREADS, 1, 1),
        threadgroup=(REDUCE_THREADS, 1, 1),
        template=template,
    )[0]


def _by_row_chunks(m, plan, one_chunk):
    """one_chunk(r0, r1) over row ranges that fit gridDim.y, joined along M."""
    chunks = _row_chunks(m, plan.cfg)
    if len(chunks) == 1:
        return one_chunk(0, m)
    return mx.concatenate([one_chunk(r0, r1) for r0, r1 in chunks], axis=0)


def _rows(v, r0, r1):
    return v if (r0, r1) == (0, v.shape[0]) else v[r0:r1]


def _gemm_int32_graph(a, b, family, plan, tma=False):
    spec = cuda_source.gemm_tma_simple(plan.cfg) if tma else cuda_source.gemm_int32(family, plan.cfg)
    n = b.shape[0]

    def one_chunk(r0, r1):
        out = _launch_gemm(spec, [_rows(a, r0, r1), b], r1 - r0, n, mx.int32, plan, [], tma)
        return out if plan.splits == 1 else _launch_reduce(cuda_source.reduce_int32(), [out], mx.int32, [])

    return _by_row_chunks(a.shape[0], plan, one_chunk)


def quant_launch(m: int, k: int) -> tiling.CudaQuantLaunch:
    """The quantization kernel's launch for x [M, K] on this GPU (tiling.cuda_quant_launch)."""
    return tiling.cuda_quant_launch(m, k, sm_count())


def _quantize_graph(x, launch: tiling.CudaQuantLaunch | None = None):
    """(q int8 [M, K], scale float32 [M]) of x float16/bfloat16/float32 [M, K]; launch: the
    kernel's (threads, held), quant_launch's by default (tests force the others)."""
    m, k = x.shape
    launch = launch or quant_launch(m, k)
    grid, block = launch.grid(m)
    q, s = _kernel(cuda_source.quantize())(
        inputs=[x],
        output_shapes=[(m, k), (m,)],
        output_dtypes=[mx.int8, mx.float32],
        grid=grid,
        threadgroup=block,
        template=[("T", x.dtype)] + launch.template(),
    )
    return q, s


def _dequant_gemm_graph(q, scale_x, w, scale_w, bias32, out_dtype, family, plan, has_bias, tma=False,
                        narrow=False):
    """y [M, N] (out_dtype) = q [M, K] . w [N, K]^T * scale_x[m] * scale_w[n] (+ bias32[n]);
    narrow: the narrow epilogue (epilogue_template)."""
    n = w.shape[0]
    epilogue = epilogue_template(out_dtype, has_bias, narrow)
    if tma:
        fused, raw = cuda_source.gemm_w8a8_tma_simple(plan.cfg), cuda_source.gemm_tma_simple(plan.cfg)
    else:
        fused, raw = cuda_source.gemm_w8a8(family, plan.cfg), cuda_source.gemm_int32(family, plan.cfg)

    def one_chunk(r0, r1):
        q_rows, sx_rows = _rows(q, r0, r1), _rows(scale_x, r0, r1)
        if plan.splits == 1:
            # Input order = spec.input_names: q, w, scale_x, scale_w, bias.
            return _launch_gemm(fused, [q_rows, w, sx_rows, scale_w, bias32], r1 - r0, n, out_dtype, plan, epilogue,
                                tma)
        ws = _launch_gemm(raw, [q_rows, w], r1 - r0, n, mx.int32, plan, [], tma)
        return _launch_reduce(cuda_source.reduce_w8a8(), [ws, sx_rows, scale_w, bias32], out_dtype, epilogue)

    return _by_row_chunks(q.shape[0], plan, one_chunk)


def dequant_gemm(q, scale_x, w, scale_w, bias, out_dtype, plan=None, family: str | None = None,
                 kernel: str | None = None, epilogue: str | None = None):
    """The W8A8 GEMM and epilogue on given codes: q int8 [M, K], scale_x float32 [M], w int8
    [N, K], scale_w float32 [N], bias None or float32 [N] -> out_dtype [M, N] (tests, experiments);
    kernel: dequant_graph's ("tma_simple", "tma_ws", "tma_pp": sm90 and K % 16 == 0), else the
    family's kernel; plan: the kernel's (default: default_plan, or variant_plan for a TMA kernel);
    epilogue: "eft" or "narrow" (default: epilogue_choice())."""
    family = family or _family()
    kernel = kernel or ("simt" if family == "simt" else "wgmma")
    m, n, k = q.shape[0], w.shape[0], q.shape[1]
    if plan is None:
        plan = variant_plan(kernel, m, n, k, w8a8=True) if kernel.startswith("tma_") else default_plan(m, n, k, family)
    has_bias = bias is not None
    return dequant_graph(q, scale_x, w, scale_w, bias if has_bias else _no_bias(), out_dtype, kernel, plan, has_bias,
                         _narrow(epilogue))


# ---- which kernel runs ----
#
# INT8NAX_CUDA_KERNEL picks the GEMM on compute capability 9.0:
#   auto (or unset)   tiling.cuda_gemm_kernel's measured per-shape rule: a TMA kernel where K %
#                     16 == 0 (a persistent one for problems of many tiles, else gemm_tma_simple),
#                     the cp.async kernel elsewhere;
#   wgmma / cpasync   the cp.async kernel everywhere;
#   tma_simple        the TMA kernel wherever K % 16 == 0;
#   tma / tma_ws      int8_matmul and w8a8_linear on the cooperative persistent kernel wherever
#                     K % 16 == 0;
#   tma_pp            int8_matmul and w8a8_linear on the ping-pong persistent kernel wherever
#                     K % 16 == 0.
# The TMA kernels themselves load without the TMA when a base is not 16-byte aligned (MLX passes
# offset views), so every choice is exact on every input. Read once per process (clear_caches()).

KERNEL_ENV = "INT8NAX_CUDA_KERNEL"
KERNEL_CHOICES = {"": "auto", "auto": "auto", "wgmma": "wgmma", "cpasync": "wgmma", "tma": "tma_ws",
                  "tma_ws": "tma_ws", "tma_simple": "tma_simple", "tma_pp": "tma_pp"}


@lru_cache(maxsize=None)
def kernel_choice() -> str:
    """"auto" (the default: tiling.cuda_gemm_kernel per shape), "wgmma" (the cp.async kernel),
    "tma_simple", "tma_ws" or "tma_pp", from INT8NAX_CUDA_KERNEL."""
    value = os.environ.get(KERNEL_ENV, "").strip().lower()
    if value not in KERNEL_CHOICES:
        raise ValueError(f"{KERNEL_ENV}={value!r}: expected one of {sorted(k for k in KERNEL_CHOICES if k)}")
    return KERNEL_CHOICES[value]


def gemm_kernel(m: int, n: int, k: int, w8a8: bool = False, family: str | None = None) -> str:
    """The kernel that int8_matmul (or, w8a8=True, w8a8_linear) runs for (M, N, K) here:
    "simt" (no wgmma on this GPU), "wgmma" (the cp.async kernel), "tma_simple", "tma_ws" or "tma_pp"."""
    family = family or _family()
    if family != "sm90":
        return "simt"
    choice = kernel_choice()
    if choice == "wgmma" or not tiling.tma_ok(k):
        return "wgmma"
    if choice == "auto":
        return tiling.cuda_gemm_kernel(m, n, k, w8a8, sm_count())
    return choice


# INT8NAX_CUDA_EPILOGUE picks W8A8's dequantization into float16 / bfloat16 outputs:
#   eft      (EPILOGUE_DEFAULT) float32 with error-free transformations, within 1 ulp of float32,
#            then one rounding to the output type (run exact on the H200);
#   narrow   float32 with only the exactness the output type's ulp needs (11-15 fewer PTX
#            instructions a value); the rare pairs where it could miss 1 ulp take the eft path
#            (kernels/cuda_common.cuh, dequantize_narrow). Checked on the CPU against long double
#            (tests/test_cuda_epilogue.py); not yet run on a GPU, hence opt-in.
# float32 outputs always take eft. Read once per process (clear_caches()).

EPILOGUE_ENV = "INT8NAX_CUDA_EPILOGUE"
EPILOGUE_CHOICES = ("eft", "narrow")
EPILOGUE_DEFAULT = "eft"
"""The epilogue when INT8NAX_CUDA_EPILOGUE is unset: eft until narrow has run exact on the H200
(docs/cuda.md, epilogues)."""


def _check_epilogue(value: str, source: str) -> str:
    if value not in EPILOGUE_CHOICES:
        raise ValueError(f"{source}: expected one of {list(EPILOGUE_CHOICES)}, got {value!r}")
    return value


@lru_cache(maxsize=None)
def epilogue_choice() -> str:
    """"eft" or "narrow", from INT8NAX_CUDA_EPILOGUE (EPILOGUE_DEFAULT where unset)."""
    return _check_epilogue(os.environ.get(EPILOGUE_ENV, "").strip().lower() or EPILOGUE_DEFAULT, EPILOGUE_ENV)


def _narrow(epilogue: str | None = None) -> bool:
    """Whether W8A8 takes the narrow epilogue: `epilogue` ("eft" or "narrow") where given, else
    epilogue_choice()."""
    return (epilogue_choice() if epilogue is None else _check_epilogue(epilogue, "epilogue")) == "narrow"


def epilogue_template(out_dtype, has_bias: bool, narrow: bool) -> list:
    """The W8A8 kernels' epilogue template arguments (cuda_source._dequant_store): TOut, HAS_BIAS,
    NARROW, which is set only where it changes the code (a float16 or bfloat16 output)."""
    return [("TOut", out_dtype), ("HAS_BIAS", has_bias), ("NARROW", bool(narrow) and out_dtype != mx.float32)]


@lru_cache(maxsize=None)
def _plan_array(shape: tuple[int, ...]) -> mx.array:
    """An int8 array of `shape`: the persistent kernels read its shape (kernel arguments), never
    its data, so no launch waits for a load from memory the host made."""
    arr = mx.zeros(shape, dtype=mx.int8)
    mx.eval(arr)
    return arr


def variant_plan(variant: str, m: int, n: int, k: int, w8a8: bool = False):
    """The plan of a TMA variant: a tiling.CudaPlan (tma_simple) or tiling.CudaWsPlan (tma_ws,
    tma_pp); w8a8: for w8a8_linear (ws_plan is the same for both)."""
    if variant == "tma_simple":
        return tiling.tma_plan(m, n, k, sm_count(), w8a8)
    if variant == "tma_ws":
        return tiling.ws_plan(m, n, k, sm_count())
    if variant == "tma_pp":
        return tiling.pp_plan(m, n, k, sm_count(), w8a8)
    raise ValueError(f"unknown TMA variant {variant!r}; expected one of {cuda_source.TMA_VARIANTS}")


def _launch_persistent(spec, inputs, m, n, out_dtype, plan: tiling.CudaWsPlan, template=()):
    """A persistent TMA kernel (gemm_tma_ws, gemm_tma_pp): `plan.blocks` blocks, the plan's
    (splits, group) as the shape of the last input, [M, N] out (or the [splits, M, N] workspace)
    and an extra uint8 output with a 256-byte slot per block for its tensor maps."""
    grid, block = plan.grid()
    return _kernel(spec)(
        inputs=list(inputs) + [_plan_array(plan.plan_shape())],
        output_shapes=[(m, n) if plan.splits == 1 else (plan.splits, m, n), (plan.blocks * tiling.TMA_MAP_SLOT_BYTES,)],
        output_dtypes=[out_dtype, mx.uint8],
        grid=grid,
        threadgroup=block,
        template=plan.cfg.template() + list(template),
    )[0]


def _persistent_specs(cfg):
    """(int32 spec, W8A8 spec) of a persistent tile: gemm_tma_pp's for a CudaPingPongConfig, else
    gemm_tma_ws's."""
    if isinstance(cfg, tiling.CudaPingPongConfig):
        return cuda_source.gemm_tma_pp(cfg), cuda_source.gemm_w8a8_tma_pp(cfg)
    return cuda_source.gemm_tma_ws(cfg), cuda_source.gemm_w8a8_tma_ws(cfg)


def _persistent_int32(a, b, plan: tiling.CudaWsPlan):
    """int32 [M, N] by gemm_tma_ws or (a CudaPingPongConfig) gemm_tma_pp; split-K through the
    [splits, M, N] workspace and the reduction kernel."""
    raw, _ = _persistent_specs(plan.cfg)
    out = _launch_persistent(raw, [a, b], a.shape[0], b.shape[0], mx.int32, plan)
    return out if plan.splits == 1 else _launch_reduce(cuda_source.reduce_int32(), [out], mx.int32, [])


def _persistent_dequant_graph(q, scale_x, w, scale_w, bias32, out_dtype, plan: tiling.CudaWsPlan, has_bias,
                              narrow=False):
    """_dequant_gemm_graph on a persistent kernel (gemm_tma_ws, or gemm_tma_pp for a
    CudaPingPongConfig): the fused epilogue unsplit, else the int32 workspace and the dequantizing
    reduction."""
    m, n = q.shape[0], w.shape[0]
    epilogue = epilogue_template(out_dtype, has_bias, narrow)
    raw, fused = _persistent_specs(plan.cfg)
    if plan.splits == 1:
        return _launch_persistent(fused, [q, w, scale_x, scale_w, bias32], m, n, out_dtype, plan, epilogue)
    ws = _launch_persistent(raw, [q, w], m, n, mx.int32, plan)
    return _launch_reduce(cuda_source.reduce_w8a8(), [ws, scale_x, scale_w, bias32], out_dtype, epilogue)


def tma_gemm_int32(a: mx.array, b: mx.array, variant: str = "tma_ws", plan=None) -> mx.array:
    """int32 [M, N] = a [M, K] . b [N, K]^T by a TMA kernel (K % 16 == 0), not compiled with
    mx.compile (tools/tma_gemm_trial.py calls this directly)."""
    m, k = a.shape
    n = b.shape[0]
    if not tiling.tma_ok(k):
        raise ValueError(f"the TMA GEMMs need K % {tiling.TMA_K_MULTIPLE} == 0, got K={k}")
    return gemm_graph(a, b, variant, plan or variant_plan(variant, m, n, k))


# The graphs by kernel name (gemm_kernel's answers): "simt" and "wgmma" (the family kernels on a
# CudaPlan), "tma_simple" (a CudaPlan), "tma_ws" and "tma_pp" (a CudaWsPlan).

def gemm_graph(a, b, kernel: str, plan):
    """int32 [M, N] = a [M, K] . b [N, K]^T on `kernel` with `plan`."""
    if kernel in ("tma_ws", "tma_pp"):
        return _persistent_int32(a, b, plan)
    return _gemm_int32_graph(a, b, "simt" if kernel == "simt" else "sm90", plan, kernel == "tma_simple")


def dequant_graph(q, scale_x, w, scale_w, bias32, out_dtype, kernel: str, plan, has_bias: bool, narrow=False):
    """_dequant_gemm_graph's y on `kernel` ("simt", "wgmma", "tma_simple", "tma_ws" or "tma_pp") with
    `plan`; narrow: the narrow epilogue (epilogue_template)."""
    if kernel in ("tma_ws", "tma_pp"):
        return _persistent_dequant_graph(q, scale_x, w, scale_w, bias32, out_dtype, plan, has_bias, narrow)
    family = "simt" if kernel == "simt" else "sm90"
    return _dequant_gemm_graph(q, scale_x, w, scale_w, bias32, out_dtype, family, plan, has_bias,
                               kernel == "tma_simple", narrow)


def w8a8_graph(x, w, scale_w, bias32, kernel: str, plan, has_bias: bool,
               quant: tiling.CudaQuantLaunch | None = None, narrow: bool = False):
    """quantize(x) (with the launch `quant`, quant_launch's by default), then dequant_graph on
    `kernel` with `plan`: y [M, N] in x's dtype."""
    q, scale_x = _quantize_graph(x, quant)
    return dequant_graph(q, scale_x, w, scale_w, bias32, x.dtype, kernel, plan, has_bias, narrow)


# Each entry point is wrapped in mx.compile, once per (family, plan): MLX then replays the
# recorded launches for every later call of the same shapes and dtypes, skipping the Python
# work of building the launches. COMPILE = False builds them directly on every call instead
# (measured against each other in on the H200; docs/cuda.md).

COMPILE = True


def _maybe_compile(fn):
    return mx.compile(fn) if COMPILE else fn


@lru_cache(maxsize=None)
def _compiled_gemm(kernel: str, plan):
    return _maybe_compile(lambda a, b: gemm_graph(a, b, kernel, plan))


# The quantization launch is chosen outside the compiled functions (it needs sm_count(), which
# runs a kernel and reads its result: not possible while mx.compile traces).
@lru_cache(maxsize=None)
def _compiled_w8a8(kernel: str, plan, has_bias: bool, quant: tiling.CudaQuantLaunch, narrow: bool):
    return _maybe_compile(lambda x, w, s, bias: w8a8_graph(x, w, s, bias, kernel, plan, has_bias, quant, narrow))


@lru_cache(maxsize=None)
def _compiled_quantize(launch: tiling.CudaQuantLaunch):
    return _maybe_compile(lambda x: _quantize_graph(x, launch))


# The dispatch's choice per shape, cached: a call of a shape seen before costs one dict lookup
# on ints (the plan and its compiled function are hashable dataclasses, slower to look up).
def gemm_plan(m: int, n: int, k: int, w8a8: bool = False, family: str | None = None):
    """(plan, kernel) that int8_matmul (w8a8: w8a8_linear) runs for (M, N, K) here: gemm_kernel's
    kernel with its plan (variant_plan for the TMA kernels, default_plan for the others)."""
    family = family or _family()
    kernel = gemm_kernel(m, n, k, w8a8=w8a8, family=family)
    if kernel.startswith("tma_"):
        return variant_plan(kernel, m, n, k, w8a8=w8a8), kernel
    return default_plan(m, n, k, family), kernel


def w8a8_plan(m: int, n: int, k: int, family: str | None = None):
    """(plan, kernel) that w8a8_linear runs for (M, N, K) here."""
    return gemm_plan(m, n, k, w8a8=True, family=family)


@lru_cache(maxsize=4096)
def _gemm_for_shape(m: int, n: int, k: int):
    plan, kernel = gemm_plan(m, n, k)
    return _compiled_gemm(kernel, plan)


@lru_cache(maxsize=4096)
def _w8a8_for_shape(m: int, n: int, k: int, has_bias: bool):
    plan, kernel = w8a8_plan(m, n, k)
    return _compiled_w8a8(kernel, plan, has_bias, quant_launch(m, k), _narrow())


@lru_cache(maxsize=4096)
def _quantize_for_shape(m: int, k: int):
    return _compiled_quantize(quant_launch(m, k))


def clear_caches() -> None:
    """Forget every built kernel object and compiled entry point (after changing COMPILE,
    INT8NAX_CUDA_KERNEL or INT8NAX_CUDA_EPILOGUE)."""
    for fn in (_compiled_gemm, _compiled_w8a8, _compiled_quantize, _gemm_for_shape, _w8a8_for_shape,
               _quantize_for_shape, kernel_choice, epilogue_choice):
        fn.cache_clear()


def gemm_int32(a: mx.array, b: mx.array, plan: tiling.CudaPlan | None = None, family: str | None = None):
    """int32 [M, N] = a [M, K] . b [N, K]^T, exact, with a given plan/family or the dispatch's."""
    if plan is None and family is None:
        m, k = a.shape
        return _gemm_for_shape(m, b.shape[0], k)(a, b)
    family = family or _family()
    plan = plan or default_plan(a.shape[0], b.shape[0], a.shape[1], family)
    return _compiled_gemm("simt" if family == "simt" else "wgmma", plan)(a, b)


def quantize(x: mx.array) -> tuple[mx.array, mx.array]:
    """(int8 [M, K], float32 [M]) per-token quantization of float [M, K] (int8nax.quant)."""
    return _quantize_for_shape(*x.shape)(x)


def w8a8(x, w, scale_w, bias, plan: tiling.CudaPlan | None = None, family: str | None = None):
    """dequant(quant(x) . w^T) (+ bias) in x's dtype, [M, N]; bias None or float [N]."""
    has_bias = bias is not None
    # float32 holds every float16/bfloat16/float32 bias value exactly.
    bias32 = (bias if bias.dtype == mx.float32 else bias.astype(mx.float32)) if has_bias else _no_bias()
    if plan is None and family is None:
        m, k = x.shape
        return _w8a8_for_shape(m, w.shape[0], k, has_bias)(x, w, scale_w, bias32)
    family = family or _family()
    plan = plan or default_plan(x.shape[0], w.shape[0], x.shape[1], family)
    return _compiled_w8a8("simt" if family == "simt" else "wgmma", plan, has_bias, quant_launch(*x.shape),
                          _narrow())(x, w, scale_w, bias32)


class CUDABackend(Backend):
    name = "cuda"
    _probe: Probe | None = None

    def probe(self) -> Probe:
        # Asked on every call that leaves the choice of backend to int8nax; the answer (two
        # device_info queries and a message) cannot change within a process: computed once.
        if self._probe is None:
            self._probe = self._hardware_probe()
        return self._probe

    def _hardware_probe(self) -> Probe:
        cuda = getattr(mx, "cuda", None)
        if cuda is None or not cuda.is_available():
            return Probe(False, "MLX reports no CUDA device (mx.cuda.is_available() is False: "
                         "no mlx-cuda build or no NVIDIA GPU)")
        info = _device_info()
        cc = compute_capability()
        name = info.get("device_name", "unknown NVIDIA GPU")
        if cc < (6, 1):
            return Probe(False, f"{name} has compute capability {cc[0]}.{cc[1]}; int8nax needs 6.1 (dp4a) or newer")
        how = ("wgmma tensor-core GEMM (sm_90a)" if family_for(cc) == "sm90"
               else "portable dp4a GEMM (no wgmma on this GPU; exact but slow)")
        return Probe(True, f"{name}, compute capability {cc[0]}.{cc[1]}: {how}")

    def int8_matmul(self, a: mx.array, b: mx.array) -> mx.array:
        return gemm_int32(a, b)

    def quantize_activations(self, x: mx.array) -> tuple[mx.array, mx.array]:
        return quantize(x)

    def w8a8_linear(self, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        return w8a8(x, w, scale_w, bias)


BACKEND = CUDABackend()
