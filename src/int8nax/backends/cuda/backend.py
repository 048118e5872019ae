"""CUDA backend: exact int8 GEMM and the W8A8 pipeline on NVIDIA GPUs through mx.fast.cuda_kernel.

Which kernel runs a shape is backends/cuda_choice.py's choose() (a pure function of the shape, the
GPU's family and SM count and INT8NAX_CUDA_KERNEL); this module asks it once per shape and launches
what it returns as the variant's row says (cuda_choice.VARIANTS). On compute capability 9.0 (H100/H200;
MLX compiles for sm_90a) the tiled variants multiply on the tensor cores with wgmma; on any other GPU
the portable __dp4a kernel gives the same exact results, slowly. W8A8 at M <= 16 can take the GEMV
(mma.sync, compute capability 8.0 and newer): by default (cuda_choice.GEMV_DEFAULT), or where
INT8NAX_CUDA_KERNEL=gemv names it.

W8A8: one kernel quantizes the activations per token (kernels/cuda/quantize.cuh), then the GEMM with
the dequantization fused into its epilogue writes y in x's dtype; the GEMV quantizes a small x
itself (one kernel a call). When the plan splits K, each
split writes its int32 partial sums to a [splits, M, N] workspace and one more kernel sums them
(and, for W8A8, dequantizes). A SwiGLU MLP's down projection can quantize its input in the kernel
that computes it (kernels/cuda/swiglu_quantize.cuh; INT8NAX_CUDA_SWIGLU, below).

Caches, each with its bound: kernel objects by KernelSpec (a spec is one kernel source for one
tile configuration, never a shape: at most KERNEL_CACHE_SIZE); the choice and compiled entry point
per shape (SHAPE_CACHE_SIZE shapes each, least recently used dropped); plan arrays by (splits,
group) (PLAN_ARRAY_CACHE_SIZE); the SwiGLU kernel's first-use check by (dtype, launch) (16). MLX
compiles each kernel object once per set of template arguments and input dtypes (NVRTC, seconds
each), so the kernels a process compiles depend on which tile configurations its shapes meet,
not on how many shapes it sees.
"""

from __future__ import annotations

import os
import threading
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import mlx.core as mx
import numpy as np

from ..per_thread import compile_per_thread
from ..quant import quantize_activations_np
from ..tiling import ceil_div
from . import cuda_binary_cache, cuda_choice, cuda_plans, cuda_source
from .base import Backend, Probe, swiglu_of
from .cuda_choice import CPASYNC, SIMT, Choice
from .kernel_spec import KernelSpec

SM_ID_CAPACITY = 1024
"""Size of the flag array the SM-count probe writes (well above any GPU's SM count)."""

MAX_GRID_Y = 65535
"""CUDA's limit on gridDim.y; taller problems are launched in row chunks."""

REDUCE_THREADS = 256
MAX_REDUCE_BLOCKS = 4096
"""The split-K reduction is a grid-stride loop over groups of four outputs."""

KERNEL_CACHE_SIZE = 256
"""Kernel objects kept (cuda_source specs: variants x tile configurations + the quantization,
reduction and SM-count kernels, about 50 today)."""

SHAPE_CACHE_SIZE = 4096
"""Shapes whose choice and compiled entry point are kept, per operation."""

PLAN_ARRAY_CACHE_SIZE = 64
"""(splits, group) pairs whose plan array is kept (powers of two: a handful per GPU)."""


def _device_info() -> dict:
    return mx.device_info(mx.gpu)


def compute_capability() -> tuple[int, int]:
    info = _device_info()
    return int(info.get("compute_capability_major", 0)), int(info.get("compute_capability_minor", 0))


def family_for(cc: tuple[int, int]) -> str:
    """The GEMM family for a compute capability (cuda_choice.RUNS): wgmma exists only on 9.0
    (sm_90a), mma.sync from 8.0."""
    return "sm90" if cc == (9, 0) else "sm80" if cc >= (8, 0) else "simt"


@lru_cache(maxsize=1)
def _family() -> str:
    """This process's GPU's GEMM family (asked once: device_info is not free per call)."""
    return family_for(compute_capability())


_built: set[str] = set()


def kernels_built() -> int:
    """Distinct mx.fast.cuda_kernel objects this process has built (by kernel name): it grows with
    the tile configurations the shapes meet, never with M."""
    return len(_built)


@lru_cache(maxsize=KERNEL_CACHE_SIZE)
def _kernel(spec: KernelSpec):
    _built.add(spec.name)
    return _Launcher(spec, mx.fast.cuda_kernel(
        name=spec.name,
        input_names=list(spec.input_names),
        output_names=list(spec.output_names),
        source=spec.source,
        header=spec.header,
        ensure_row_contiguous=True,
        shared_memory=spec.shared_memory,
    ))


# ---- compiled kernels on disk (cuda_binary_cache; INT8NAX_CUDA_BINARY_CACHE=off leaves them to MLX) ----

class _Launcher:
    """An mx.fast.cuda_kernel object whose instances MLX loads from disk: each call (a trace, under
    mx.compile) first has the binary cache make the instance's compiled entry present, then calls
    MLX's object with the same arguments."""

    __slots__ = ("spec", "kernel")

    def __init__(self, spec: KernelSpec, kernel):
        self.spec, self.kernel = spec, kernel

    def __call__(self, *, inputs, output_dtypes, template=None, **kwargs):
        _provide(self.spec, inputs, output_dtypes, template)
        return self.kernel(inputs=inputs, output_dtypes=output_dtypes, template=template or [], **kwargs)


_collecting = threading.local()


def _provide(spec: KernelSpec, inputs, output_dtypes, template) -> None:
    """The instance a launch needs: built or found now, or (inside collect_instances) noted."""
    sink = getattr(_collecting, "instances", None)
    if sink is not None:
        sink.append(cuda_binary_cache.Instance.of(spec, inputs, output_dtypes, template))
        return
    cache = binary_cache()
    if cache is not None:
        cache.ensure(cuda_binary_cache.Instance.of(spec, inputs, output_dtypes, template))


@contextmanager
def collect_instances():
    """Within it, this thread's launches note their kernel instances in the yielded list instead of
    building them (graphs built there must not be evaluated: MLX would then compile each itself)."""
    found: list = []
    outer = getattr(_collecting, "instances", None)
    _collecting.instances = found
    try:
        yield found
    finally:
        _collecting.instances = outer


BINARY_CACHE_ENV = cuda_binary_cache.DISABLE_ENV


@lru_cache(maxsize=1)
def binary_cache() -> cuda_binary_cache.BinaryCache | None:
    """This process's binary cache (its GPU's architecture, MLX's installation and cache folder),
    or None where INT8NAX_CUDA_BINARY_CACHE=off or MLX has no CUDA device (binary_cache_status says)."""
    if os.environ.get(BINARY_CACHE_ENV, "").strip().lower() in ("off", "0", "false", "no"):
        return None
    cuda = getattr(mx, "cuda", None)
    package = cuda_binary_cache.mlx_package_dir()
    if cuda is None or not cuda.is_available() or package is None:
        return None
    return cuda_binary_cache.BinaryCache(cuda_binary_cache.arch_of(compute_capability()), package, mx.__version__)


def binary_cache_status() -> str:
    """Where this process's kernels come from, for int8nax.info()."""
    cache = binary_cache()
    if cache is None:
        off = os.environ.get(BINARY_CACHE_ENV, "").strip().lower() in ("off", "0", "false", "no")
        return ("compiled by MLX (NVRTC) in every process: " +
                (f"{BINARY_CACHE_ENV}={os.environ[BINARY_CACHE_ENV]}" if off else "no CUDA device"))
    c = cache.counts
    text = (f"compiled once per machine for {cache.arch} into {cache.folder} (MLX's kernel cache): "
            f"{c.found} loaded from there, {c.built} built by this process")
    if c.failed:
        text += f", {c.failed} left to MLX's NVRTC ({cache.reason})"
    return text


@lru_cache(maxsize=1)
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


def known_sm_count() -> int | None:
    """The SM count if this process has counted it already (sm_count runs a kernel), else None."""
    info = getattr(sm_count, "cache_info", None)  # tests may stand in a plain function
    return sm_count() if info is None or info().currsize else None


# ---- the choice (INT8NAX_CUDA_KERNEL: cuda_choice.OVERRIDES; read once per process, clear_caches()) ----

KERNEL_ENV = cuda_choice.KERNEL_ENV


@lru_cache(maxsize=1)
def kernel_choice() -> str:
    """"auto" or the variant INT8NAX_CUDA_KERNEL names (its old names are aliases)."""
    return cuda_choice.override_name(os.environ.get(KERNEL_ENV, ""))


def _sms() -> int:
    """The SM count the choice weighs on this GPU: sm_count(), or DEFAULT_SMS on a SIMT-only GPU
    (whose single variant does not depend on it)."""
    return sm_count() if _family() != SIMT else cuda_choice.DEFAULT_SMS


def choice(m: int, n: int, k: int, w8a8: bool = False, bias: bool = False, out_dtype=None) -> Choice:
    """The variant and plan int8_matmul (w8a8: w8a8_linear) runs for (M, N, K) on this GPU."""
    return cuda_choice.choose(m, n, k, w8a8=w8a8, bias=bias, out_dtype=_dtype_name(out_dtype), sms=_sms(),
                              family=_family(), override=kernel_choice())


def _dtype_name(dtype) -> str | None:
    return None if dtype is None else str(dtype).split(".")[-1]


# INT8NAX_CUDA_EPILOGUE picks W8A8's dequantization into float16 / bfloat16 outputs:
#   eft      float32 with error-free transformations, within 1 ulp of float32, then one rounding
#            to the output type;
#   narrow   float32 with only the exactness the output type's ulp needs (11-15 fewer PTX
#            instructions a value); the rare pairs where it could miss 1 ulp take the eft path
#            (kernels/cuda/dequantize.cuh, dequantize_narrow). Checked on the CPU against long
#            double (tests/test_cuda_epilogue.py).
# float32 outputs always take eft. Read once per process (clear_caches()).

EPILOGUE_ENV = "INT8NAX_CUDA_EPILOGUE"
EPILOGUE_CHOICES = ("eft", "narrow")
EPILOGUE_DEFAULT = "narrow"
"""The epilogue when INT8NAX_CUDA_EPILOGUE is unset. narrow is within 1 ulp of the float64 model
like eft (its GPU tests and kernel-time checks pass on the H200) and skips eft's cancellation test,
which sends about 1 biased value in 250 to the exact path and so nearly every tile of a biased
layer through its slow pass. INT8NAX_CUDA_EPILOGUE=eft keeps the previous epilogue."""


def _check_choice(value: str, choices: tuple[str, ...], source: str) -> str:
    if value not in choices:
        raise ValueError(f"{source}: expected one of {list(choices)}, got {value!r}")
    return value


def _env_choice(env: str, choices: tuple[str, ...], default: str) -> str:
    """The value of the environment variable `env` (trimmed, lower case), one of `choices`, or
    `default` where it is unset or empty; a ValueError naming `env` otherwise."""
    return _check_choice(os.environ.get(env, "").strip().lower() or default, choices, env)


@lru_cache(maxsize=1)
def epilogue_choice() -> str:
    """"eft" or "narrow", from INT8NAX_CUDA_EPILOGUE (EPILOGUE_DEFAULT where unset)."""
    return _env_choice(EPILOGUE_ENV, EPILOGUE_CHOICES, EPILOGUE_DEFAULT)


def _narrow(epilogue: str | None = None) -> bool:
    """Whether W8A8 takes the narrow epilogue: `epilogue` ("eft" or "narrow") where given, else
    epilogue_choice()."""
    chosen = epilogue_choice() if epilogue is None else _check_choice(epilogue, EPILOGUE_CHOICES, "epilogue")
    return chosen == "narrow"


# ---- SwiGLU's quantization: one kernel, or swiglu then the quantization kernel ----
#
#   fused   kernels/cuda/swiglu_quantize.cuh: h = silu(gate) * up with MLX's own device functors,
#           quantized from the registers; h never reaches memory (at 4096 tokens of Qwen2.5-7B,
#           0.39 GB a layer read and written instead of 0.70). Same bits as split.
#   staged  fused's kernel with persistent blocks that copy each row into shared memory while
#           they quantize the previous one (kernels/cuda/swiglu_quantize_staged.cuh), where
#           cuda_plans.cuda_swiglu_staged_launch takes the shape (many rows of 2-byte types);
#           elsewhere fused's. Same bits.
#   split   MLX's fused swiglu kernel writes h, the quantization kernel reads it.
# Read once per process (clear_caches()).

SWIGLU_ENV = "INT8NAX_CUDA_SWIGLU"
SWIGLU_CHOICES = ("fused", "staged", "split")
SWIGLU_DEFAULT = "split"
"""split, until the fused kernel's bit-for-bit test (tests/test_cuda_swiglu.py) has passed on a
GPU. On the H200 (2026-12-05, results/cuda-h200.md) fused is the faster: with the 512x5 launch
(cuda_plans.SWIGLU_PAIR_LAUNCH, two rows an SM) its kernel takes 0.161 ms a Qwen2.5-7B layer at
4096 tokens against 0.226 for swiglu and the quantization, the layer's GPU time 2.070 ms against
2.114, and its outputs were split's bits in the model at 512-4096 tokens; the test file's run was
lost to another test that left the CPU as MLX's default device. staged (predicted ~0.09 ms where
fused takes 0.161: cuda_plans.cuda_swiglu_staged_launch) has not run on a GPU."""


@lru_cache(maxsize=1)
def swiglu_choice() -> str:
    """"fused", "staged" or "split", from INT8NAX_CUDA_SWIGLU (SWIGLU_DEFAULT where unset)."""
    return _env_choice(SWIGLU_ENV, SWIGLU_CHOICES, SWIGLU_DEFAULT)


# ---- W8A8's bias: in its own type, or cast to float32 before the call ----
#
#   own   the dequantizing kernels read a float16 / bfloat16 bias as it is (kernels/cuda/
#         epilogue.cuh, load_pair and to_float: exact), so a call makes no extra node;
#   cast  MLX casts it to float32 first: one more node and copy kernel a call (1.4-3.6 µs of
#         kernel time on the H200, 2026-12-04), the same bits.
# A float32 bias (int8nax.nn's layers hold theirs so) goes as it is either way. Read once per
# process (clear_caches()).

BIAS_ENV = "INT8NAX_CUDA_BIAS"
BIAS_CHOICES = ("cast", "own")
BIAS_DEFAULT = "cast"
"""cast until the own-type reads have run on a GPU (tools/hopper_verify.sh, part bias: its test and
the kernel time; a model through int8nax.nn measures nothing here, its biases being float32)."""


@lru_cache(maxsize=1)
def bias_choice() -> str:
    """"own" or "cast", from INT8NAX_CUDA_BIAS (BIAS_DEFAULT where unset)."""
    return _env_choice(BIAS_ENV, BIAS_CHOICES, BIAS_DEFAULT)


def w8a8_settings() -> str:
    """W8A8's environment choices as int8nax.info() reports them (read once per process)."""
    swiglu = {"fused": "quantized in one step", "staged": "quantized in one step, rows staged in shared memory",
              "split": "swiglu, then the quantization"}[swiglu_choice()]
    bias = {"own": "read in its own type", "cast": "cast to float32 first"}[bias_choice()]
    return (f"W8A8: {epilogue_choice()} epilogue ({EPILOGUE_ENV}), SwiGLU {swiglu} ({SWIGLU_ENV}), "
            f"a 16-bit bias {bias} ({BIAS_ENV})")


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


def _launch_reduce(spec, inputs, out_dtype, template):
    """Sum a [splits, M, N] workspace (inputs[0]) into [M, N] through the spec's epilogue."""
    _, m, n = inputs[0].shape
    blocks = max(1, min(ceil_div(m * n, 4 * REDUCE_THREADS), MAX_REDUCE_BLOCKS))
    return _kernel(spec)(
        inputs=inputs,
        output_shapes=[(m, n)],
        output_dtypes=[out_dtype],
        grid=(blocks * REDUCE_THREADS, 1, 1),
        threadgroup=(REDUCE_THREADS, 1, 1),
        template=template,
    )[0]


def _launch_grid(spec, inputs, out_dtype, plan: cuda_plans.CudaPlan, template, maps: bool):
    """One block per tile and split: [M, N] out (M = inputs[0]'s rows), or the [splits, M, N]
    workspace; maps: the TMA kernel's extra uint8 output, one 256-byte slot per block for its
    tensor maps."""
    m, n = inputs[0].shape[0], inputs[1].shape[0]
    grid, block = plan.grid(m, n)
    shapes, dtypes = [(m, n) if plan.splits == 1 else (plan.splits, m, n)], [out_dtype]
    if maps:
        shapes.append((plan.map_bytes(m, n),))
        dtypes.append(mx.uint8)
    return _kernel(spec)(inputs=inputs, output_shapes=shapes, output_dtypes=dtypes, grid=grid, threadgroup=block,
                         template=template)[0]


def _launch_persistent(spec, inputs, out_dtype, plan: cuda_plans.PersistentPlan, template, maps: bool = True):
    """`plan.blocks` blocks walking the tiles, the plan's (splits, group) as the shape of the last
    input: [M, N] out (or the [splits, M, N] workspace) and an extra uint8 output with a 256-byte
    slot per block for its tensor maps."""
    m, n = inputs[0].shape[0], inputs[1].shape[0]
    grid, block = plan.grid()
    return _kernel(spec)(
        inputs=list(inputs) + [_plan_array(plan.plan_shape())],
        output_shapes=[(m, n) if plan.splits == 1 else (plan.splits, m, n),
                       (plan.blocks * cuda_plans.TMA_MAP_SLOT_BYTES,)],
        output_dtypes=[out_dtype, mx.uint8],
        grid=grid,
        threadgroup=block,
        template=template,
    )[0]


def _launch(row: cuda_choice.Variant):
    """The launch of a variant's kernels: persistent blocks, or one block per tile and split."""
    return _launch_persistent if row.persistent else _launch_grid


def gemm_graph(a, b, variant: str, plan):
    """int32 [M, N] = a [M, K] . b [N, K]^T on `variant` (a cuda_choice name or alias) with `plan`."""
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(variant)]
    raw, _ = row.specs(plan.cfg)

    def one_chunk(r0, r1):
        out = _launch(row)(raw, [_row_slice(a, r0, r1), b], mx.int32, plan, row.template(plan.cfg), row.maps)
        return out if plan.splits == 1 else _launch_reduce(cuda_source.reduce_int32(), [out], mx.int32, [])

    return _by_row_chunks(a.shape[0], plan, row, one_chunk)


def dequant_graph(q, scale_x, w, scale_w, bias_arg, out_dtype, variant: str, plan, has_bias: bool, narrow=False):
    """y [M, N] (out_dtype) = q [M, K] . w [N, K]^T * scale_x[m] * scale_w[n] (+ bias[n]) on
    `variant` with `plan` (bias_arg: _bias_arg's): the fused epilogue unsplit, else the int32
    workspace and the dequantizing reduction; narrow: the narrow epilogue (epilogue_template)."""
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(variant)]
    raw, fused = row.specs(plan.cfg)
    epilogue = epilogue_template(out_dtype, has_bias, narrow)
    tile = row.template(plan.cfg)

    def one_chunk(r0, r1):
        q_rows, sx_rows = _row_slice(q, r0, r1), _row_slice(scale_x, r0, r1)
        if plan.splits == 1:
            # Input order = spec.input_names: q, w, scale_x, scale_w, bias.
            return _launch(row)(fused, [q_rows, w, sx_rows, scale_w, bias_arg], out_dtype, plan, tile + epilogue,
                                row.maps)
        ws = _launch(row)(raw, [q_rows, w], mx.int32, plan, tile, row.maps)
        return _launch_reduce(cuda_source.reduce_w8a8(), [ws, sx_rows, scale_w, bias_arg], out_dtype, epilogue)

    return _by_row_chunks(q.shape[0], plan, row, one_chunk)


def quant_launch(m: int, k: int) -> cuda_plans.CudaQuantLaunch:
    """The quantization kernel's launch for x [M, K] on this GPU (cuda_plans.cuda_quant_launch)."""
    return cuda_plans.cuda_quant_launch(m, k, sm_count())


def _rows_graph(spec: KernelSpec, x, k: int, launch: cuda_plans.CudaQuantLaunch | None):
    """(q int8 [M, k], scale float32 [M]) by a one-block-per-row quantizing kernel of x [M, ...]."""
    m = x.shape[0]
    launch = launch or quant_launch(m, k)
    grid, block = launch.grid(m)
    q, s = _kernel(spec)(
        inputs=[x],
        output_shapes=[(m, k), (m,)],
        output_dtypes=[mx.int8, mx.float32],
        grid=grid,
        threadgroup=block,
        template=[("T", x.dtype)] + launch.template(),
    )
    return q, s


def _quantize_graph(x, launch: cuda_plans.CudaQuantLaunch | None = None):
    """(q int8 [M, K], scale float32 [M]) of x float16/bfloat16/float32 [M, K]; launch: the
    kernel's (threads, held), quant_launch's by default (tests force the others)."""
    return _rows_graph(cuda_source.quantize(), x, x.shape[1], launch)


def swiglu_quant_launch(m: int, k: int, dtype) -> cuda_plans.CudaQuantLaunch | cuda_plans.CudaStagedLaunch:
    """The SwiGLU quantization kernel's launch for y [M, 2K] of `dtype` on this GPU: with
    INT8NAX_CUDA_SWIGLU=staged cuda_plans.cuda_swiglu_staged_launch's where it takes the shape,
    else cuda_plans.cuda_swiglu_quant_launch's."""
    staged = cuda_plans.cuda_swiglu_staged_launch(m, k, dtype.size, sm_count()) if swiglu_choice() == "staged" else None
    return staged or cuda_plans.cuda_swiglu_quant_launch(m, k, dtype.size, sm_count())


def _swiglu_quantize_graph(y, launch=None):
    """(q int8 [M, K], scale float32 [M]) of h = swiglu(y[:, :K], y[:, K:]) for y float16/bfloat16/
    float32 [M, 2K], with the bits of _quantize_graph(backends.base.swiglu(...)); launch:
    swiglu_quant_launch's by default (tests force the others; one holding more than
    cuda_plans.SWIGLU_HELD_BYTES of g and u a thread cannot start and is refused), a
    cuda_plans.CudaStagedLaunch the staged kernel's (rows it cannot stage it quantizes from y)."""
    m, k = y.shape[0], y.shape[1] // 2
    if launch is None:
        launch = swiglu_quant_launch(m, k, y.dtype)
    if isinstance(launch, cuda_plans.CudaStagedLaunch):
        return _rows_graph(cuda_source.swiglu_quantize_staged(launch.stage_bytes), y, k, launch)
    if cuda_plans.swiglu_held_bytes(launch, y.dtype.size) > cuda_plans.SWIGLU_HELD_BYTES:
        raise ValueError(f"launch: {launch} holds {cuda_plans.swiglu_held_bytes(launch, y.dtype.size)} bytes of g and u "
                         f"a thread for {_dtype_name(y.dtype)}, more than {cuda_plans.SWIGLU_HELD_BYTES}: its "
                         "registers exceed an SM's")
    return _rows_graph(cuda_source.swiglu_quantize(), y, k, launch)


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
            warnings.warn(f"int8nax: the CUDA SwiGLU quantization kernel ({_dtype_name(dtype)}, {launch}) did not give "
                          "the bits of swiglu then quantization on this GPU; SwiGLU MLPs take the two steps in this "
                          "process", RuntimeWarning, stacklevel=2)
            return False
    return True


def _quantizes_inside(row: cuda_choice.Variant, plan, m: int, k: int, dtype) -> bool:
    """Whether the variant's own quantizing kernel takes x [m, k] of `dtype`: the plan's `fused`
    where it says, else (a GEMV plan made without the dtype) cuda_plans.gemv_x_ok."""
    if row.quantizing is None:
        return False
    fused = getattr(plan, "fused", None)
    return cuda_plans.gemv_x_ok(m, k, dtype.size) if fused is None else fused


def w8a8_graph(x, w, scale_w, bias_arg, variant: str, plan, has_bias: bool,
               quant: cuda_plans.CudaQuantLaunch | None = None, narrow: bool = False):
    """quantize(x) (with the launch `quant`, quant_launch's by default), then dequant_graph on
    `variant` with `plan`: y [M, N] in x's dtype; or, where the variant quantizes x itself
    (_quantizes_inside), its one kernel."""
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(variant)]
    if _quantizes_inside(row, plan, *x.shape, x.dtype):
        template = [("T", x.dtype)] + row.template(plan.cfg) + epilogue_template(x.dtype, has_bias, narrow)[1:]
        return _launch(row)(row.quantizing(), [x, w, scale_w, bias_arg], x.dtype, plan, template, row.maps)
    q, scale_x = _quantize_graph(x, quant)
    return dequant_graph(q, scale_x, w, scale_w, bias_arg, x.dtype, variant, plan, has_bias, narrow)


def swiglu_w8a8_graph(gate_up, w, scale_w, bias_arg, variant: str, plan, has_bias: bool,
                      launch: cuda_plans.CudaQuantLaunch | None = None, narrow: bool = False):
    """w8a8_graph of h = swiglu(gate_up[:, :K], gate_up[:, K:]), y [M, N] in gate_up's dtype: the
    SwiGLU quantization kernel (with `launch`, swiglu_quant_launch's by default), then
    dequant_graph; where the variant quantizes its input itself (the GEMV), swiglu then w8a8_graph."""
    m, k = gate_up.shape[0], gate_up.shape[1] // 2
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(variant)]
    if _quantizes_inside(row, plan, m, k, gate_up.dtype):
        return w8a8_graph(swiglu_of(gate_up), w, scale_w, bias_arg, variant, plan, has_bias, None, narrow)
    q, scale_x = _swiglu_quantize_graph(gate_up, launch)
    return dequant_graph(q, scale_x, w, scale_w, bias_arg, gate_up.dtype, variant, plan, has_bias, narrow)


# ---- entry points: one per operation ----
#
# Each shape's entry point is wrapped in mx.compile: MLX then replays the recorded launches for
# every later call of that shape and dtype, skipping the Python work of building them. The
# quantization launch and the SM count are settled outside the compiled function (sm_count runs
# a kernel and reads its result: not possible while mx.compile traces). COMPILE = False builds
# the launches directly on every call instead.

COMPILE = True


def _maybe_compile(fn):
    # One compiled object per thread (int8nax.per_thread): MLX keeps compile traces in a per-thread
    # cache whose exit-time destructor aborts a finalizing interpreter when a shared mx.compile
    # object was called from several threads. Each entry point serves one shape, so its traces
    # differ only by dtypes (x's, and with INT8NAX_CUDA_BIAS=own the bias's: at most 9 a thread);
    # max_signatures, which bounds traces by argument shapes, could never act here (and cost
    # 0.7 us a call on the CPU box).
    return compile_per_thread(fn) if COMPILE else fn


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _gemm_for_shape(m: int, n: int, k: int):
    c = choice(m, n, k)
    return _maybe_compile(lambda a, b: gemm_graph(a, b, c.variant, c.plan))


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _w8a8_for_shape(m: int, n: int, k: int, has_bias: bool):
    c = choice(m, n, k, w8a8=True, bias=has_bias)
    quant, narrow = quant_launch(m, k), _narrow()
    return _maybe_compile(lambda x, w, s, bias: w8a8_graph(x, w, s, bias, c.variant, c.plan, has_bias, quant, narrow))


# The layers' entry points (Backend.w8a8_linear_marked): x of any leading dims reshaped to rows and
# back inside the compiled function (replayed, no Python reshape a call), and a flag set by its
# body, which MLX runs only at a signature's first call and for tracers: the flag is the tracer
# test that int8nax.api otherwise makes with a compiled marker of its own.
from .base import BodyRan  # noqa: E402 - this section's own import (the imports above are the launches')

_BODY = BodyRan()


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _w8a8_any_rows(shape: tuple[int, ...], n: int, has_bias: bool):
    """The compiled entry point of x `shape` [..., K]: _w8a8_for_shape's launches (the same choice,
    quantization launch and epilogue for its M = the product of the leading dims) between two
    reshapes, marking _BODY when its body runs."""
    k = shape[-1]
    m = 1
    for d in shape[:-1]:
        m *= d
    c = choice(m, n, k, w8a8=True, bias=has_bias)
    quant, narrow = quant_launch(m, k), _narrow()
    out_shape = shape[:-1] + (n,)
    flat = len(shape) == 2

    def body(x, w, s, bias):
        _BODY.ran = True
        rows = x if flat else x.reshape(m, k)
        y = w8a8_graph(rows, w, s, bias, c.variant, c.plan, has_bias, quant, narrow)
        return y if flat else y.reshape(out_shape)

    return compile_per_thread(body)


def w8a8_marked(x, w, scale_w, bias):
    """(y [..., N], maybe_traced) of x [..., K] through _w8a8_any_rows (Backend.w8a8_linear_marked);
    None with COMPILE off (every call would run the body)."""
    if not COMPILE:
        return None
    body = _BODY
    body.ran = False
    y = _w8a8_any_rows(x.shape, w.shape[0], bias is not None)(x, w, scale_w, _bias_arg(bias))
    return y, body.ran


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _swiglu_w8a8_for_shape(m: int, n: int, k: int, has_bias: bool, dtype):
    """(the SwiGLU kernel's launch, None where the variant quantizes h itself (the GEMV), the
    compiled entry point) for this shape and dtype (the launch depends on the dtype's size)."""
    c = choice(m, n, k, w8a8=True, bias=has_bias)
    inside = _quantizes_inside(cuda_choice.VARIANTS[cuda_choice.variant_name(c.variant)], c.plan, m, k, dtype)
    launch, narrow = None if inside else swiglu_quant_launch(m, k, dtype), _narrow()
    return launch, _maybe_compile(
        lambda gu, w, s, bias: swiglu_w8a8_graph(gu, w, s, bias, c.variant, c.plan, has_bias, launch, narrow))


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _quantize_for_shape(m: int, k: int):
    launch = quant_launch(m, k)
    return _maybe_compile(lambda x: _quantize_graph(x, launch))


def clear_caches() -> None:
    """Forget every built kernel object, compiled entry point and first-use check (after changing
    COMPILE, INT8NAX_CUDA_KERNEL, INT8NAX_CUDA_EPILOGUE, INT8NAX_CUDA_SWIGLU or INT8NAX_CUDA_BIAS)."""
    for fn in (_gemm_for_shape, _w8a8_for_shape, _w8a8_any_rows, _swiglu_w8a8_for_shape, _quantize_for_shape,
               kernel_choice, epilogue_choice, swiglu_choice, bias_choice, swiglu_kernel_ok, _kernel, binary_cache):
        if hasattr(fn, "cache_clear"):  # tests put stand-ins in the place of some
            fn.cache_clear()
    _built.clear()
    BACKEND._probe = None  # its reason names the choices (w8a8_settings)


def _explicit(variant: str | None, plan, m: int, n: int, k: int, w8a8: bool) -> tuple[str, object]:
    """(variant, plan) of a call that names them: the variant's own plan where none is given; the
    dispatch's variant where only a plan is given (a CudaPlan: the family's one-block-per-tile
    kernel)."""
    if variant is None:
        variant = CPASYNC if _family() == "sm90" else SIMT
    name = cuda_choice.variant_name(variant)
    row = cuda_choice.VARIANTS[name]
    problem = cuda_choice.Problem(m, n, k, w8a8, sms=_sms())
    if not row.supports(problem):
        raise ValueError(f"variant {name!r} cannot run M={m}, K={k} (the TMA kernels need K % "
                         f"{cuda_plans.TMA_K_MULTIPLE} == 0; the GEMV, 1 <= M <= {cuda_plans.GEMV_MAX_M})")
    return name, plan if plan is not None else row.plan(problem)


def gemm_int32(a: mx.array, b: mx.array, variant: str | None = None, plan=None) -> mx.array:
    """int32 [M, N] = a [M, K] . b [N, K]^T, exact: the dispatch's variant and plan, or (tests,
    tools) the named `variant` with `plan` (default: the variant's plan), not compiled."""
    m, k = a.shape
    n = b.shape[0]
    if variant is None and plan is None:
        return _gemm_for_shape(m, n, k)(a, b)
    return gemm_graph(a, b, *_explicit(variant, plan, m, n, k, False))


def quantize(x: mx.array) -> tuple[mx.array, mx.array]:
    """(int8 [M, K], float32 [M]) per-token quantization of float [M, K] (int8nax.quant)."""
    return _quantize_for_shape(*x.shape)(x)


def _bias_arg(bias):
    """The kernels' bias input: the float32 placeholder where there is none; a float32 bias, or any
    with INT8NAX_CUDA_BIAS=own, as it comes; else the bias cast to float32 (bias_choice)."""
    if bias is None:
        return _no_bias()
    return bias if bias.dtype == mx.float32 or bias_choice() == "own" else bias.astype(mx.float32)


def w8a8(x, w, scale_w, bias, variant: str | None = None, plan=None, epilogue: str | None = None):
    """dequant(quant(x) . w^T) (+ bias) in x's dtype, [M, N]; bias None or float [N]; variant and
    plan as in gemm_int32 (the GEMV's plan: cuda_plans.GemvPlan, its `fused` forcing the one-kernel
    form or not); epilogue: "eft" or "narrow" for a call that names its variant or plan (default:
    epilogue_choice())."""
    m, k = x.shape
    has_bias = bias is not None
    if variant is None and plan is None and epilogue is None:
        return _w8a8_for_shape(m, w.shape[0], k, has_bias)(x, w, scale_w, _bias_arg(bias))
    name, plan = _explicit(variant, plan, m, w.shape[0], k, True)
    return w8a8_graph(x, w, scale_w, _bias_arg(bias), name, plan, has_bias, quant_launch(m, k), _narrow(epilogue))


def swiglu_w8a8(gate_up, w, scale_w, bias):
    """w8a8(swiglu(gate_up[:, :K], gate_up[:, K:]), w, scale_w, bias) through the SwiGLU
    quantization kernel, y [M, N] in gate_up's dtype: gate_up float [M, 2K], w int8 [N, K]."""
    m, k = gate_up.shape[0], gate_up.shape[1] // 2
    launch, entry = _swiglu_w8a8_for_shape(m, w.shape[0], k, bias is not None, gate_up.dtype)
    if launch is not None and not swiglu_kernel_ok(gate_up.dtype, launch):
        return w8a8(swiglu_of(gate_up), w, scale_w, bias)
    return entry(gate_up, w, scale_w, _bias_arg(bias))


def dequant_gemm(q, scale_x, w, scale_w, bias, out_dtype, variant: str | None = None, plan=None,
                 epilogue: str | None = None):
    """The W8A8 GEMM and epilogue on given codes: q int8 [M, K], scale_x float32 [M], w int8
    [N, K], scale_w float32 [N], bias None or float [N] -> out_dtype [M, N] (tests, experiments);
    variant and plan as in gemm_int32; epilogue: "eft" or "narrow" (default: epilogue_choice())."""
    narrow = _narrow(epilogue)
    name, plan = _explicit(variant, plan, q.shape[0], w.shape[0], q.shape[1], True)
    return dequant_graph(q, scale_x, w, scale_w, _bias_arg(bias), out_dtype, name, plan, bias is not None, narrow)


WARM_OPS = ("int8_matmul", "w8a8_linear", "swiglu_w8a8_linear")
"""The operations warm_up prepares: swiglu_w8a8_linear's k is the width of h (gate_up has 2k)."""


@dataclass(frozen=True)
class WarmLayer:
    """One layer call warm_up prepares: op (WARM_OPS) on a weight [n, k], with a bias of
    `bias_dtype` (None: no bias)."""

    op: str
    n: int
    k: int
    bias_dtype: object = None


def _warm_calls(layer: WarmLayer, m_max: int, dtype) -> list:
    """Thunks building (not evaluating) one call of `layer` at the first M of each kernel instance
    it meets for M = 1 .. m_max (cuda_choice.reachable) and of each quantization launch."""
    if layer.op not in WARM_OPS:
        raise ValueError(f"op: expected one of {list(WARM_OPS)}, got {layer.op!r}")
    n, k, bias = layer.n, layer.k, layer.bias_dtype is not None
    linear = layer.op != "int8_matmul"
    ms = {m for m, _ in cuda_choice.reachable(n, k, m_max, w8a8=linear, bias=bias, out_dtype=_dtype_name(dtype),
                                              sms=_sms(), family=_family(), override=kernel_choice())}
    if layer.op == "w8a8_linear":
        ms |= set({quant_launch(m, k): m for m in range(m_max, 0, -1)}.values())
    elif layer.op == "swiglu_w8a8_linear":
        ms |= set({swiglu_quant_launch(m, k, dtype): m for m in range(m_max, 0, -1)}.values())
    weight, scale = mx.zeros((n, k), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)
    b = mx.zeros((n,), dtype=layer.bias_dtype) if bias else None

    def call(m):
        if layer.op == "int8_matmul":
            return gemm_int32(mx.zeros((m, k), dtype=mx.int8), weight)
        if layer.op == "w8a8_linear":
            return w8a8(mx.zeros((m, k), dtype=dtype), weight, scale, b)
        return BACKEND.swiglu_w8a8_linear(mx.zeros((m, 2 * k), dtype=dtype), weight, scale, b)

    return [lambda m=m: call(m) for m in sorted(ms)]


def warm_up_layers(layers, m_max: int, *, dtype=mx.float16, jobs: int | None = None, progress=None) -> int:
    """Make ready every kernel instance the layer calls `layers` (WarmLayer) meet for M = 1 ..
    m_max with x of `dtype`: their compiled entries built in parallel (`jobs` NVRTC processes,
    default the CPUs; progress(done, total) as they finish) into MLX's kernel cache where absent
    (cuda_binary_cache), then one call of each run on zeros, which loads them. Later processes
    find them on disk; a first call at a new M otherwise pays NVRTC (seconds per instance).
    Returns the kernel objects built (kernels_built() after minus before)."""
    before = kernels_built()
    _sms()  # counts the SMs with a kernel it evaluates: outside the collection below
    calls = [c for layer in layers for c in _warm_calls(layer, m_max, dtype)]
    with collect_instances() as found:
        for call in calls:
            call()
    cache = binary_cache()
    if cache is not None:
        cache.prebuild(found, jobs, progress)
    for call in calls:
        mx.eval(call())
    return kernels_built() - before


def warm_up(n: int, k: int, m_max: int, *, op: str = "w8a8_linear", dtype=mx.float16, bias: bool = False,
            bias_dtype=mx.float32, jobs: int | None = None, progress=None) -> int:
    """warm_up_layers for one layer w [N, K]: op's ("w8a8_linear" with x of `dtype` and a bias of
    `bias_dtype` or none, "swiglu_w8a8_linear" likewise with gate_up [M, 2K], or "int8_matmul").
    bias_dtype matters with INT8NAX_CUDA_BIAS=own, where the kernels read a 16-bit bias in its
    own type (instances of their own); float32 is what int8nax.nn's layers hold."""
    layer = WarmLayer(op, n, k, bias_dtype if bias and op != "int8_matmul" else None)
    return warm_up_layers([layer], m_max, dtype=dtype, jobs=jobs, progress=progress)


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
        gemv = ", mma.sync GEMV for W8A8 at M <= 16" if cuda_choice.GEMV_DEFAULT else ""
        how = {"sm90": "wgmma tensor-core GEMM (sm_90a)" + gemv,
               "sm80": "portable dp4a GEMM (no wgmma on this GPU; exact but slow)" + gemv,
               "simt": "portable dp4a GEMM (no wgmma on this GPU; exact but slow)"}[family_for(cc)]
        return Probe(True, f"{name}, compute capability {cc[0]}.{cc[1]}: {how}; {w8a8_settings()}")

    def int8_matmul(self, a: mx.array, b: mx.array) -> mx.array:
        return gemm_int32(a, b)

    def quantize_activations(self, x: mx.array) -> tuple[mx.array, mx.array]:
        return quantize(x)

    def w8a8_linear(self, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        return w8a8(x, w, scale_w, bias)

    def w8a8_linear_marked(self, x: mx.array, w: mx.array, scale_w: mx.array, bias):
        return w8a8_marked(x, w, scale_w, bias)

    def swiglu_one_step(self) -> bool:
        return swiglu_choice() != "split"

    def warm_up(self, layers, max_rows: int, dtype, *, jobs: int | None = None, progress=None) -> int:
        return warm_up_layers([WarmLayer(*layer) for layer in layers], max_rows, dtype=dtype, jobs=jobs,
                              progress=progress)

    def swiglu_w8a8_linear(self, gate_up: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        if swiglu_choice() != "split":
            return swiglu_w8a8(gate_up, w, scale_w, bias)
        return super().swiglu_w8a8_linear(gate_up, w, scale_w, bias)

    def describe(self, op: str, m: int, n: int, k: int, *, bias: bool = False, dtype=None) -> str:
        """"cuda <variant> <BM>x<BN> splits=<s>", from cuda_choice.choose without launching: on this
        GPU's family (sm_90a where there is none) and SM count where this process has counted it
        (it ran a CUDA call already), else on the H200's 132 SMs, which the answer then says."""
        if op not in ("int8_matmul", "w8a8_linear"):
            raise ValueError(f"op: expected 'int8_matmul' or 'w8a8_linear', got {op!r}")
        here = self.probe().available
        sms = known_sm_count() if here else None
        family = _family() if here else "sm90"
        got = cuda_choice.choose(m, n, k, w8a8=op == "w8a8_linear", bias=bias, out_dtype=_dtype_name(dtype),
                                 sms=sms or cuda_choice.DEFAULT_SMS, family=family, override=kernel_choice())
        return f"cuda {got.describe()}" + ("" if sms else f" ({cuda_choice.DEFAULT_SMS} SMs assumed)")


BACKEND = CUDABackend()
