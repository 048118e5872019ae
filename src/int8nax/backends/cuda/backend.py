"""CUDA backend: exact int8 GEMM and the W8A8 pipeline on NVIDIA GPUs through mx.fast.cuda_kernel.

Which kernel runs a shape is choice.py's choose() (a pure function of the shape, the GPU's family
and SM count and INT8NAX_CUDA_KERNEL); this module asks it once per shape and launches what it
returns as the variant's row says (cuda_choice.VARIANTS; the launches are graphs.py's, the device
and SM count device.py's and probe.py's, the environment choices settings.py's, the kernel objects
kernels.py's). On compute capability 9.0 (H100/H200; MLX compiles for sm_90a) the tiled variants
multiply on the tensor cores with wgmma; on any other GPU the portable __dp4a kernel gives the same
exact results, slowly. At M <= 16 W8A8 and int8_matmul can take the GEMV
(mma.sync, compute capability 8.0 and newer): by default (cuda_choice.GEMV_DEFAULT,
GEMV_RAW_DEFAULT), or where INT8NAX_CUDA_KERNEL=gemv names it.

W8A8: one kernel quantizes the activations per token (kernels/cuda/quant/quantize.cuh) into an
activation pack (pack.py: the codes, scales and the GEMM's tensor-map scratch in one buffer), then
the GEMM with the dequantization fused into its epilogue writes y in x's dtype: two buffers a call;
the GEMV quantizes a small x itself (one kernel a call). When the plan splits K, each
split writes its int32 partial sums to a [splits, M, N] workspace and one more kernel sums them
(and, for W8A8, dequantizes). A SwiGLU MLP's down projection can quantize its input in the kernel
that computes it (kernels/cuda/quant/swiglu_quantize.cuh; INT8NAX_CUDA_SWIGLU, below).

Caches, each with its bound: kernel objects by KernelSpec (a spec is one kernel source for one
tile configuration, never a shape: at most KERNEL_CACHE_SIZE); the choice and compiled entry point
per shape (SHAPE_CACHE_SIZE shapes each, least recently used dropped); plan arrays by (splits,
group) (PLAN_ARRAY_CACHE_SIZE); the SwiGLU kernel's first-use check by (dtype, launch) (16). MLX
compiles each kernel object once per set of template arguments and input dtypes (NVRTC, seconds
each), so the kernels a process compiles depend on which tile configurations its shapes meet,
not on how many shapes it sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import mlx.core as mx

from ...per_thread import compile_per_thread
from .. import entries, tape
from ..base import Backend, Probe, swiglu_of
from . import choice as cuda_choice
from . import device, graphs, kernels, probe, settings
from . import plans as cuda_plans
from .plans import gemv as gemv_rule
from .choice import CPASYNC, SIMT, Choice

SHAPE_CACHE_SIZE = 4096
"""Shapes whose choice and compiled entry point are kept, per operation."""


def choice(m: int, n: int, k: int, w8a8: bool = False, bias: bool = False, out_dtype=None) -> Choice:
    """The variant and plan int8_matmul (w8a8: w8a8_linear) runs for (M, N, K) on this GPU."""
    return cuda_choice.choose(m, n, k, w8a8=w8a8, bias=bias, out_dtype=graphs.dtype_name(out_dtype),
                              sms=probe._sms(), family=device._family(), override=settings.kernel_choice())


# ---- entry points: one per operation ----
#
# Each shape's entry point is wrapped in mx.compile: MLX then replays the recorded launches for
# every later call of that shape and dtype, skipping the Python work of building them. The
# quantization launch and the SM count are settled outside the compiled function (probe.sm_count runs
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
    return _maybe_compile(lambda a, b: graphs.gemm_graph(a, b, c.variant, c.plan))


def _w8a8_launches(m: int, n: int, k: int, has_bias: bool):
    """w8a8_graph's arguments after the arrays for x [M, K] and w [N, K]: the variant and plan
    chosen, has_bias, the quantization launch and the epilogue (every W8A8 entry point's)."""
    c = choice(m, n, k, w8a8=True, bias=has_bias)
    return c.variant, c.plan, has_bias, graphs.quant_launch(m, k), settings._narrow()


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _w8a8_for_shape(m: int, n: int, k: int, has_bias: bool):
    launches = _w8a8_launches(m, n, k, has_bias)
    return _maybe_compile(lambda x, w, s, bias: graphs.w8a8_graph(x, w, s, bias, *launches))


# The layers' entry points (Backend.w8a8_linear_marked, w8a8_mlp_marked): backends.entries' compiled
# steps over the launches a 2-D call of the same rows would build (one source: _w8a8_launches).


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _w8a8_any_rows_body(shape: tuple[int, ...], n: int, has_bias: bool):
    """The graph of x `shape` [..., K] (entries.linear_body): _w8a8_for_shape's launches (the same
    choice, quantization launch and epilogue for its M = the product of the leading dims)."""
    m, k = entries.rows_of(shape)
    launches = _w8a8_launches(m, n, k, has_bias)
    return entries.linear_body(shape, n, lambda x, w, s, bias: graphs.w8a8_graph(x, w, s, bias, *launches),
                               any_rank=True)


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _w8a8_any_rows(shape: tuple[int, ...], n: int, has_bias: bool):
    """The compiled entry point of _w8a8_any_rows_body's graph."""
    return compile_per_thread(_w8a8_any_rows_body(shape, n, has_bias))


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _w8a8_mlp_any_rows(shape: tuple[int, ...], n_gate_up: int, n: int, gate_up_bias: bool, down_bias: bool):
    """The compiled entry point of a SwiGLU MLP for x `shape` [..., K] (Backend.w8a8_mlp_marked):
    the gate/up projection's launches (_w8a8_any_rows' for N = n_gate_up), swiglu of its halves,
    the down projection's launches for N = n."""
    m, k = entries.rows_of(shape)
    gate_up = _w8a8_launches(m, n_gate_up, k, gate_up_bias)
    down = _w8a8_launches(m, n, n_gate_up // 2, down_bias)
    return entries.mlp(shape, n, lambda x, w, s, bias: graphs.w8a8_graph(x, w, s, bias, *gate_up),
                       lambda h, w, s, bias: graphs.w8a8_graph(h, w, s, bias, *down), any_rank=True)


_ENTRIES = entries.table(_w8a8_any_rows, SHAPE_CACHE_SIZE)
"""This thread's compiled entry points of the layers' calls by (x shape, N, bias or not)."""

_MLP_ENTRIES = entries.table(_w8a8_mlp_any_rows, SHAPE_CACHE_SIZE)
"""This thread's compiled entry points of the SwiGLU MLPs' calls by (x shape, 2H, N, biases or not)."""


def w8a8_marked(x, w, scale_w, bias):
    """(y [..., N], maybe_traced) of x [..., K] through _w8a8_any_rows (Backend.w8a8_linear_marked);
    None with COMPILE off (every call would run the body)."""
    if not COMPILE:
        return None
    return entries.marked(_ENTRIES.get((x.shape, w.shape[0], bias is not None)), x, w, scale_w, _bias_arg(bias))


def w8a8_graph_any_rows(x, w, scale_w, bias):
    """y [..., N] of x [..., K] built directly (Backend.w8a8_linear_graph); None with COMPILE off
    (a tape's replay is a compiled call too)."""
    if not COMPILE:
        return None
    return _w8a8_any_rows_body(x.shape, w.shape[0], bias is not None)(x, w, scale_w, _bias_arg(bias))


def w8a8_mlp_marked(x, w1, s1, b1, w2, s2, b2):
    """(y [..., N], maybe_traced) of a SwiGLU MLP on x [..., K] through _w8a8_mlp_any_rows
    (Backend.w8a8_mlp_marked); None with COMPILE off."""
    if not COMPILE:
        return None
    entry = _MLP_ENTRIES.get((x.shape, w1.shape[0], w2.shape[0], b1 is not None, b2 is not None))
    return entries.marked(entry, x, w1, s1, _bias_arg(b1), w2, s2, _bias_arg(b2))


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _swiglu_w8a8_for_shape(m: int, n: int, k: int, has_bias: bool, dtype):
    """(the SwiGLU kernel's launch, None where the variant quantizes h itself (the GEMV), the
    compiled entry point) for this shape and dtype (the launch depends on the dtype's size)."""
    c = choice(m, n, k, w8a8=True, bias=has_bias)
    row = cuda_choice.VARIANTS[cuda_choice.variant_name(c.variant)]
    inside = graphs._quantizes_inside(row, c.plan, m, k, dtype)
    launch, narrow = None if inside else graphs.swiglu_quant_launch(m, k, dtype), settings._narrow()
    return launch, _maybe_compile(
        lambda gu, w, s, bias: graphs.swiglu_w8a8_graph(gu, w, s, bias, c.variant, c.plan, has_bias, launch,
                                                        narrow))


@lru_cache(maxsize=SHAPE_CACHE_SIZE)
def _quantize_for_shape(m: int, k: int):
    launch = graphs.quant_launch(m, k)
    return _maybe_compile(lambda x: graphs._quantize_graph(x, launch))


def clear_caches() -> None:
    """Forget every built kernel object, compiled entry point and first-use check (after changing
    COMPILE, INT8NAX_CUDA_KERNEL, INT8NAX_CUDA_EPILOGUE, INT8NAX_CUDA_SWIGLU, INT8NAX_CUDA_BIAS or
    INT8NAX_CUDA_MLP)."""
    for fn in (_gemm_for_shape, _w8a8_for_shape, _w8a8_any_rows_body, _w8a8_any_rows, _w8a8_mlp_any_rows,
               _swiglu_w8a8_for_shape,
               _quantize_for_shape,
               settings.kernel_choice, settings.epilogue_choice, settings.swiglu_choice, settings.bias_choice,
               settings.mlp_choice,
               graphs.swiglu_kernel_ok, kernels._kernel, kernels.binary_cache):
        if hasattr(fn, "cache_clear"):  # tests put stand-ins in the place of some
            fn.cache_clear()
    kernels._built.clear()
    global _ENTRIES, _MLP_ENTRIES
    _ENTRIES = entries.table(_w8a8_any_rows, SHAPE_CACHE_SIZE)
    _MLP_ENTRIES = entries.table(_w8a8_mlp_any_rows, SHAPE_CACHE_SIZE)  # every thread's go too
    BACKEND._probe = None  # its reason names the choices (settings.w8a8_settings)
    tape.invalidate()  # recorded launches of the old choices


def _explicit(variant: str | None, plan, m: int, n: int, k: int, w8a8: bool) -> tuple[str, object]:
    """(variant, plan) of a call that names them: the variant's own plan where none is given; the
    dispatch's variant where only a plan is given (a CudaPlan: the family's one-block-per-tile
    kernel)."""
    if variant is None:
        variant = CPASYNC if device._family() == "sm90" else SIMT
    name = cuda_choice.variant_name(variant)
    row = cuda_choice.VARIANTS[name]
    problem = cuda_choice.Problem(m, n, k, w8a8, sms=probe._sms())
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
    return graphs.gemm_graph(a, b, *_explicit(variant, plan, m, n, k, False))


def quantize(x: mx.array) -> tuple[mx.array, mx.array]:
    """(int8 [M, K], float32 [M]) per-token quantization of float [M, K] (int8nax.quant)."""
    return _quantize_for_shape(*x.shape)(x)


def _bias_arg(bias):
    """The kernels' bias input: the float32 placeholder where there is none; a float32 bias, or any
    with INT8NAX_CUDA_BIAS=own, as it comes; else the bias cast to float32 (settings.bias_choice)."""
    if bias is None:
        return graphs._no_bias()
    return bias if bias.dtype == mx.float32 or settings.bias_choice() == "own" else bias.astype(mx.float32)


def w8a8(x, w, scale_w, bias, variant: str | None = None, plan=None, epilogue: str | None = None):
    """dequant(quant(x) . w^T) (+ bias) in x's dtype, [M, N]; bias None or float [N]; variant and
    plan as in gemm_int32 (the GEMV's plan: cuda_plans.GemvPlan, its `fused` forcing the one-kernel
    form or not); epilogue: "eft" or "narrow" for a call that names its variant or plan (default:
    settings.epilogue_choice())."""
    m, k = x.shape
    has_bias = bias is not None
    if variant is None and plan is None and epilogue is None:
        return _w8a8_for_shape(m, w.shape[0], k, has_bias)(x, w, scale_w, _bias_arg(bias))
    name, plan = _explicit(variant, plan, m, w.shape[0], k, True)
    return graphs.w8a8_graph(x, w, scale_w, _bias_arg(bias), name, plan, has_bias, graphs.quant_launch(m, k),
                             settings._narrow(epilogue))


def swiglu_w8a8(gate_up, w, scale_w, bias):
    """w8a8(swiglu(gate_up[:, :K], gate_up[:, K:]), w, scale_w, bias) through the SwiGLU
    quantization kernel, y [M, N] in gate_up's dtype: gate_up float [M, 2K], w int8 [N, K]."""
    m, k = gate_up.shape[0], gate_up.shape[1] // 2
    launch, entry = _swiglu_w8a8_for_shape(m, w.shape[0], k, bias is not None, gate_up.dtype)
    if launch is not None and not graphs.swiglu_kernel_ok(gate_up.dtype, launch):
        return w8a8(swiglu_of(gate_up), w, scale_w, bias)
    return entry(gate_up, w, scale_w, _bias_arg(bias))


def dequant_gemm(q, scale_x, w, scale_w, bias, out_dtype, variant: str | None = None, plan=None,
                 epilogue: str | None = None):
    """The W8A8 GEMM and epilogue on given codes: q int8 [M, K], scale_x float32 [M], w int8
    [N, K], scale_w float32 [N], bias None or float [N] -> out_dtype [M, N] (tests, experiments);
    variant and plan as in gemm_int32; epilogue: "eft" or "narrow" (default: settings.epilogue_choice())."""
    narrow = settings._narrow(epilogue)
    name, plan = _explicit(variant, plan, q.shape[0], w.shape[0], q.shape[1], True)
    return graphs.dequant_graph(q, scale_x, w, scale_w, _bias_arg(bias), out_dtype, name, plan, bias is not None,
                                narrow)


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
    ms = {m for m, _ in cuda_choice.reachable(n, k, m_max, w8a8=linear, bias=bias,
                                              out_dtype=graphs.dtype_name(dtype), sms=probe._sms(),
                                              family=device._family(), override=settings.kernel_choice())}
    if layer.op == "w8a8_linear":
        ms |= set({graphs.quant_launch(m, k): m for m in range(m_max, 0, -1)}.values())
    elif layer.op == "swiglu_w8a8_linear":
        ms |= set({graphs.swiglu_quant_launch(m, k, dtype): m for m in range(m_max, 0, -1)}.values())
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
    m_max with x of `dtype`: one call of each built on zeros (graphs only) while their instances
    are collected, the missing compiled entries built in parallel (`jobs` NVRTC threads, default
    the CPUs; progress(done, total) as they finish) into MLX's kernel cache (binary_cache), then
    the calls evaluated, which loads them. Later processes find them on disk; a first call at a new
    M otherwise pays NVRTC (seconds per instance). Returns the kernel objects built
    (kernels.kernels_built() after minus before)."""
    before = kernels.kernels_built()
    probe._sms()  # counts the SMs with a kernel it evaluates: outside the collection below
    calls = [c for layer in layers for c in _warm_calls(layer, m_max, dtype)]
    with kernels.collect_instances() as found:
        outputs = [call() for call in calls]
    cache = kernels.binary_cache()
    if cache is not None:
        cache.prebuild(found, jobs, progress)
    for out in outputs:
        mx.eval(out)
    return kernels.kernels_built() - before


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
        info = device._device_info()
        cc = device.compute_capability()
        name = info.get("device_name", "unknown NVIDIA GPU")
        if cc < (6, 1):
            return Probe(False, f"{name} has compute capability {cc[0]}.{cc[1]}; int8nax needs 6.1 (dp4a) or newer")
        ops = [op for op, on in (("W8A8", cuda_choice.GEMV_DEFAULT), ("int8_matmul", cuda_choice.GEMV_RAW_DEFAULT)) if on]
        gemv = f", mma.sync GEMV for {' and '.join(ops)} at M <= 16" if ops else ""
        how = {"sm90": "wgmma tensor-core GEMM (sm_90a)" + gemv,
               "sm80": "portable dp4a GEMM (no wgmma on this GPU; exact but slow)" + gemv,
               "simt": "portable dp4a GEMM (no wgmma on this GPU; exact but slow)"}[device.family_for(cc)]
        return Probe(True, f"{name}, compute capability {cc[0]}.{cc[1]}: {how}; {settings.w8a8_settings()}; "
                           f"kernels {kernels.binary_cache_status()}")

    def int8_matmul(self, a: mx.array, b: mx.array) -> mx.array:
        return gemm_int32(a, b)

    def quantize_activations(self, x: mx.array) -> tuple[mx.array, mx.array]:
        return quantize(x)

    def w8a8_linear(self, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        return w8a8(x, w, scale_w, bias)

    def w8a8_linear_marked(self, x: mx.array, w: mx.array, scale_w: mx.array, bias):
        return w8a8_marked(x, w, scale_w, bias)

    def w8a8_linear_graph(self, x: mx.array, w: mx.array, scale_w: mx.array, bias):
        return w8a8_graph_any_rows(x, w, scale_w, bias)

    @property
    def w8a8_mlp_marked(self):
        # Backend.w8a8_mlp_marked: the whole-MLP step where INT8NAX_CUDA_MLP=step, else None
        return w8a8_mlp_marked if settings.mlp_choice() == "step" else None

    def swiglu_one_step(self) -> bool:
        return settings.swiglu_choice() != "split"

    def swiglu_one_step_at(self, rows: int) -> bool:
        # Where the GEMV quantizes its input itself (decode rows with cuda_plans.gemv_inside's
        # GEMV_QUANTIZE_INSIDE), swiglu_w8a8 runs swiglu, then that GEMV: the two steps' launches,
        # which the MLP's own call, replayed from its tape, makes with less host work than the
        # API's call of swiglu_w8a8_linear (the same bits).
        inside = rows <= cuda_plans.GEMV_MAX_M and gemv_rule.GEMV_QUANTIZE_INSIDE
        return not inside and self.swiglu_one_step()

    def warm_up(self, layers, max_rows: int, dtype, *, jobs: int | None = None, progress=None) -> int:
        return warm_up_layers([WarmLayer(*layer) for layer in layers], max_rows, dtype=dtype, jobs=jobs,
                              progress=progress)

    def swiglu_w8a8_linear(self, gate_up: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        if settings.swiglu_choice() != "split":
            return swiglu_w8a8(gate_up, w, scale_w, bias)
        return super().swiglu_w8a8_linear(gate_up, w, scale_w, bias)

    def describe(self, op: str, m: int, n: int, k: int, *, bias: bool = False, dtype=None,
                 sms: int | None = None) -> str:
        """"cuda <variant> <BM>x<BN> splits=<s>", from cuda_choice.choose without launching: on this
        GPU's family (sm_90a where there is none) and SM count where this process has counted it
        (it ran a CUDA call already), else on the H200's 132 SMs, which the answer then says.
        `sms`: a GPU of that many SMs, here or not (what a GPU's record names, as it would)."""
        if op not in ("int8_matmul", "w8a8_linear"):
            raise ValueError(f"op: expected 'int8_matmul' or 'w8a8_linear', got {op!r}")
        here = self.probe().available
        counted = sms or (probe.known_sm_count() if here else None)
        family = device._family() if here else "sm90"
        got = cuda_choice.choose(m, n, k, w8a8=op == "w8a8_linear", bias=bias, out_dtype=graphs.dtype_name(dtype),
                                 sms=counted or cuda_choice.DEFAULT_SMS, family=family,
                                 override=settings.kernel_choice())
        return f"cuda {got.describe()}" + ("" if counted else f" ({cuda_choice.DEFAULT_SMS} SMs assumed)")


BACKEND = CUDABackend()
