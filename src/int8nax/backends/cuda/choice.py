"""Which CUDA GEMM runs a problem, and with which plan: one pure function over a table of variants.

    choose(m, n, k, w8a8=..., bias=..., out_dtype=..., sms=..., family=..., override=...)
        -> Choice(variant, plan)

Everything the choice depends on comes in as an argument (the SM count, the GPU's family, the
INT8NAX_CUDA_KERNEL override), so it runs without MLX or a GPU; backends/cuda/backend.py calls it once per
shape and launches what it returns: the launch is read from the variant's row (its kernel
sources, template arguments, and whether it is persistent).

The variants, named by their schedule as CUTLASS names its sm90 kernels:
  simt                portable __dp4a GEMM (GPUs without wgmma; kernels/cuda/gemm/simt.cuh)
  cpasync             wgmma fed by cp.async, one block per tile and split (gemm/cpasync.cuh)
  tma-unspecialized   wgmma fed by TMA + mbarriers, no warp specialisation, one block per tile
  tma-ws-cooperative  a producer warpgroup and two consumer warpgroups sharing each tile,
                      persistent blocks walking the tiles
  tma-ws-pingpong     the same producer, each consumer on whole tiles, the two taking turns
  gemv                M <= 16: the weight streamed once, mma.sync on 8- or 16-row slices of w
                      (sm_80 and newer; gemm/gemv_w8a8.cuh); W8A8's default there (GEMV_DEFAULT),
                      after the quantization kernel, or quantizing x itself (cuda_plans.gemv_inside)

Adding a variant: its kernel header (and its header list and spec functions in cuda_source),
one VARIANTS row here, and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

from ...tiling import ceil_div
from . import plans
from . import source as cuda_source

SIMT = "simt"
CPASYNC = "cpasync"
TMA = "tma-unspecialized"
COOPERATIVE = "tma-ws-cooperative"
PINGPONG = "tma-ws-pingpong"
GEMV = "gemv"

RUNS = {"sm90": ("sm90", "sm80", "simt"), "sm80": ("sm80", "simt"), "simt": ("simt",)}
"""The variant families a GPU family runs: sm80 is mma.sync (compute capability 8.0 and newer),
sm90 adds wgmma (9.0, sm_90a)."""

DEFAULT_SMS = 132
"""The SM count assumed where the GPU's is not known (the H200's)."""


@dataclass(frozen=True)
class Problem:
    """One GEMM call: int8_matmul's a [M, K] . b [N, K]^T, or (w8a8) w8a8_linear's with its bias
    and output dtype (a name: "float16", "bfloat16", "float32"), on a GPU of `sms` SMs."""

    m: int
    n: int
    k: int
    w8a8: bool = False
    bias: bool = False
    out_dtype: str | None = None
    sms: int = DEFAULT_SMS


@dataclass(frozen=True)
class Variant:
    """One row of the table: a kernel schedule and everything the backend needs to run it.

    supports(problem): whether it can run the problem at all; plan(problem): the plan it would run
    it with; specs(cfg): its kernels for a tile (Specs); template(cfg):
    the tile's template arguments; configs: every tile it is built for (the compile check builds
    them all); persistent: launched as plan.blocks blocks walking the tiles (a
    cuda_plans.PersistentPlan, with the `plan` input), else one block per tile and split (a
    cuda_plans.CudaPlan); maps: the kernel builds tensor maps in a scratch (int8_matmul's: an
    extra uint8 output; W8A8's: the activation pack's scratch region);
    quantizing: where the variant also has a W8A8 kernel that quantizes x itself, its
    cuda_source.KernelSpec (inputs x, w, scale_w, bias), taken where the plan's `fused` says so."""

    name: str
    family: str
    persistent: bool
    maps: bool
    supports: Callable[[Problem], bool]
    plan: Callable[[Problem], object]
    specs: Callable[[object], tuple]
    template: Callable[[object], list]
    configs: tuple
    aliases: tuple[str, ...] = ()
    quantizing: Callable[[], object] | None = None


def _tma_supports(p: Problem) -> bool:
    # The TMA needs a row stride that is a multiple of 16 bytes; misaligned bases are handled inside
    # the kernels (they load without the TMA there).
    return plans.tma_ok(p.k)


def _tile_template(cfg) -> list:
    return cfg.template()


class Specs(NamedTuple):
    """A variant's kernels for one tile (cuda_source.KernelSpec): int32, int8_matmul's a . b^T;
    int32_packed, the same product of an activation pack's codes (cuda_pack; a split W8A8
    plan's workspace), None where no W8A8 plan splits; w8a8, the fused W8A8 kernel over a pack;
    int32_atomic, int8_matmul's a . b^T with the K splits added into one zero-filled output (a plan
    with reduce="atomic", cuda_plans.REDUCTIONS), None where the variant has no such kernel."""

    int32: object
    int32_packed: object
    w8a8: object
    int32_atomic: object = None


VARIANTS = {
    v.name: v
    for v in (
        Variant(SIMT, "simt", False, False, lambda p: True, lambda p: plans.CudaPlan(plans.CUDA_SIMT_CONFIG, 1),
                lambda c: Specs(cuda_source.gemm_int32("simt", c), cuda_source.gemm_int32_packed("simt", c),
                                cuda_source.gemm_w8a8("simt", c)), _tile_template,
                (plans.CUDA_SIMT_CONFIG,)),
        Variant(CPASYNC, "sm90", False, False, lambda p: True, lambda p: plans.cpasync_plan(p.m, p.n, p.k, p.sms),
                lambda c: Specs(cuda_source.gemm_int32("sm90", c), cuda_source.gemm_int32_packed("sm90", c),
                                cuda_source.gemm_w8a8("sm90", c), cuda_source.gemm_int32_atomic(c)), _tile_template,
                tuple(plans.CUDA_CONFIGS.values()), aliases=("wgmma",)),
        Variant(TMA, "sm90", False, True, _tma_supports, lambda p: plans.tma_plan(p.m, p.n, p.k, p.sms, p.w8a8),
                lambda c: Specs(cuda_source.gemm_tma_unspecialized(c), cuda_source.gemm_tma_unspecialized_packed(c),
                                cuda_source.gemm_w8a8_tma_unspecialized(c), cuda_source.gemm_tma_unspecialized_atomic(c)),
                lambda c: c.tma_template(), tuple(plans.CUDA_CONFIGS.values()), aliases=("tma_simple",)),
        Variant(COOPERATIVE, "sm90", True, True, _tma_supports, lambda p: plans.cooperative_plan(p.m, p.n, p.k, p.sms),
                lambda c: Specs(cuda_source.gemm_tma_ws_cooperative(c), cuda_source.gemm_tma_ws_cooperative_packed(c),
                                cuda_source.gemm_w8a8_tma_ws_cooperative(c), cuda_source.gemm_tma_ws_cooperative_atomic(c)),
                _tile_template, tuple(plans.COOPERATIVE_CONFIGS.values()), aliases=("tma_ws", "tma")),
        Variant(PINGPONG, "sm90", True, True, _tma_supports,
                lambda p: plans.pingpong_plan(p.m, p.n, p.k, p.sms, p.w8a8),
                lambda c: Specs(cuda_source.gemm_tma_ws_pingpong(c), cuda_source.gemm_tma_ws_pingpong_packed(c),
                                cuda_source.gemm_w8a8_tma_ws_pingpong(c), cuda_source.gemm_tma_ws_pingpong_atomic(c)),
                _tile_template, tuple(plans.PINGPONG_CONFIGS.values()), aliases=("tma_pp",)),
        Variant(GEMV, "sm80", False, False, lambda p: plans.gemv_ok(p.m, p.k),
                lambda p: plans.gemv_plan(p.m, p.n, p.k, p.sms, p.out_dtype if p.w8a8 else None),
                lambda c: Specs(cuda_source.gemv_int32(), None, cuda_source.gemv_w8a8()), _tile_template,
                tuple(plans.GEMV_CONFIGS.values()), aliases=("small-m",), quantizing=cuda_source.gemv_w8a8_x),
    )
}

KERNEL_ENV = "INT8NAX_CUDA_KERNEL"

NAMES = {**{v.name: v.name for v in VARIANTS.values()}, **{a: v.name for v in VARIANTS.values() for a in v.aliases}}
"""Every variant name and alias -> the variant name (what a call that names its kernel takes)."""

OVERRIDES = {"": "auto", "auto": "auto",
             **{key: name for key, name in NAMES.items() if VARIANTS[name].family != "simt"}}
"""INT8NAX_CUDA_KERNEL's values (case-insensitive) -> a variant name, or "auto" (the rule below). The
names before the schedule names (wgmma, tma_simple, tma_ws, tma, tma_pp) stay accepted. An override
holds wherever the variant supports the problem and the GPU runs it; elsewhere the cp.async kernel
runs (the SIMT one where there is no wgmma). So INT8NAX_CUDA_KERNEL=cpasync (or any tiled variant)
keeps W8A8 at M <= 16 off the GEMV."""


def variant_name(value: str) -> str:
    """The variant a name or alias stands for (case-insensitive); ValueError otherwise."""
    key = value.strip().lower() if isinstance(value, str) else value
    if key not in NAMES:
        raise ValueError(f"variant: expected one of {sorted(NAMES)}, got {value!r}")
    return NAMES[key]


def override_name(value: str | None) -> str:
    """The variant name (or "auto") an INT8NAX_CUDA_KERNEL value stands for; ValueError otherwise."""
    key = (value or "").strip().lower()
    if key not in OVERRIDES:
        raise ValueError(f"{KERNEL_ENV}={value!r}: expected one of {sorted(k for k in OVERRIDES if k)}")
    return OVERRIDES[key]


# ---- the automatic rule (the measurements behind each threshold: tests/data/cuda_dispatch_evidence.json) ----

TMA_MIN_M = 1
"""Smallest M at which int8_matmul takes a TMA kernel where the GEMV does not (GEMV_RAW_DEFAULT off,
or an override). At decode-sized M the TMA kernel's unsplit 64 x 64 plan is one kernel where the
cp.async kernel's split plan needs two (GEMM + split-K reduction), and it measured no slower."""

TMA_MIN_M_W8A8 = 17
"""Smallest M at which w8a8_linear takes a TMA kernel. Below, the cp.async kernel's split plan
measured faster for the pipeline (quantization + GEMM + dequantizing reduction) than the TMA
kernel's unsplit plan with its fused epilogue, though the raw GEMMs take the same time."""

PERSISTENT_MIN_TILES = 1.5
"""The persistent kernels are weighed once the 128 x 256 tiles number this many per SM: below,
a one-block-per-tile grid has no second tile per SM whose work could hide a tile's pipeline fill
and epilogue."""

PERSISTENT_WAVE_FILL = 0.9
"""The cooperative kernel (128 x 256 tiles) is taken when its rounds of SMs tiles are filled this
much (tiles / (rounds x SMs)); below, the ping-pong kernel's half-size tiles even out the rounds."""

W8A8_WS_MIN_ROUNDS = 3
"""Rounds of 128 x 256 tiles (filled PERSISTENT_WAVE_FILL) from which W8A8 takes the cooperative
kernel where int8_matmul does: its fused epilogue is each unit's unhidden tail, which a walk of
several units amortises against the persistent grid's gain. At 2 rounds the one-block-per-tile
TMA kernel is as fast or faster, from 3 rounds the cooperative one is faster (the H200 pairs:
tests/data/cuda_dispatch_evidence.json, docs/cuda.md's dispatch table)."""


def w8a8_cooperative(m: int, n: int, k: int, sms: int = DEFAULT_SMS) -> bool:
    """Whether W8A8 takes the cooperative kernel whatever its tile count (persistent_variant asks
    this first): at M >= cuda_plans.W8A8_COMPUTE_MIN_M, where cooperative_plan runs unsplit (no
    workspace, the epilogue fused), not at a long K that cuda_plans.one_wave_tile runs in one
    wave (its 128 x 112 blocks fill more SMs than the cooperative units), and either

    - K is long (cuda_plans.long_k, K >= 8192): each unit's main loop of 64 or more K blocks dwarfs
      its epilogue tail, and the TMA kernel's plans there split K or leave SMs idle (a split
      cooperative plan gains nothing over them: hence unsplit only).
    - or its units fit one round (units <= SMs, which at short K means 128 x 128 tiles: 128 x 256's
      number fewer than the SMs): every block runs one tile, so the epilogue tail costs both kernels
      alike, and the cooperative tile's 6 producer-fed stages beat the TMA kernel's 128 x 128
      (3 stages, its second block per SM unused) or 64 x 64. Over more than one round the TMA
      kernel is the faster.

    The H200 pairs behind each case, either side of it: tests/data/cuda_dispatch_evidence.json
    (replayed by tests/test_cuda_dispatch_evidence.py), docs/cuda.md's dispatch table.
    """
    if m < plans.W8A8_COMPUTE_MIN_M or (plans.long_k(k) and plans.one_wave_tile(m, n, sms) is not None):
        return False  # the second: the TMA kernel's one-wave plan fills more SMs than the units
    plan = plans.cooperative_plan(m, n, k, sms)
    if plan.splits > 1:
        return False
    return plans.long_k(k) or plans.ws_units(m, n, plan.cfg, 1) <= sms


def persistent_variant(m: int, n: int, k: int, sms: int = DEFAULT_SMS, w8a8: bool = False) -> str | None:
    """COOPERATIVE, PINGPONG or None (the one-block-per-tile TMA kernel) for a problem the TMA can
    load: the persistent kernels for problems of many tiles, the cooperative one where its 128 x 256
    tiles fill their rounds of SMs, the ping-pong one where they leave a partial round. W8A8 takes
    the cooperative one first where w8a8_cooperative says so, and from W8A8_WS_MIN_ROUNDS rounds."""
    if w8a8 and w8a8_cooperative(m, n, k, sms):
        return COOPERATIVE
    tiles = plans.tile_count(m, n, plans.COOPERATIVE_CONFIGS["ws_128x256"])
    if m <= 64 or tiles < PERSISTENT_MIN_TILES * sms:
        return None
    rounds = ceil_div(tiles, sms)
    if tiles / (rounds * sms) >= PERSISTENT_WAVE_FILL:
        return None if w8a8 and rounds < W8A8_WS_MIN_ROUNDS else COOPERATIVE
    return PINGPONG


GEMV_DEFAULT = True
"""Whether W8A8 at M <= GEMV_MAX_M takes the GEMV by default. It does: in a model on the H200 it
takes less GPU time a layer than the tiled kernels at decode and at 16 tokens, and makes compiled
decode faster against bf16 (docs/results/cuda-h200.md, docs/cuda.md's dispatch); its outputs are
the tiled kernels' bits (tests/test_cuda_gemv.py). False (or INT8NAX_CUDA_KERNEL naming a tiled
variant) gives the tiled kernels."""


GEMV_RAW_DEFAULT = True
"""Whether int8_matmul at M <= GEMV_MAX_M takes the GEMV (its int32 kernel) by default. It does: at
16 x 4096 x 4096 (H100, CUPTI kernel time, inputs rotated over 4x the L2, outputs bit-exact) the
GEMV took 9.4 µs (16-row slices, gemv_plan's; 8.4 on 8-row slices) against 12.2 for the TMA
kernel's 64 x 64, whose 64 blocks stream the weight on half the SMs, and 11.6 for the cp.async
kernel's 4 splits; cuBLASLt takes 11.0 there (tests/data/cuda_dispatch_evidence.json). False gives
the tiled kernels, TMA_MIN_M's rule."""


def auto_variant(p: Problem, family: str = "sm90") -> str:
    """The variant for a problem by default: at M <= GEMV_MAX_M the GEMV where GEMV_DEFAULT (W8A8)
    or GEMV_RAW_DEFAULT (int8_matmul) says so (on sm80 and sm90; a weight stream at M <= 16, which
    it reads once at full width where the tiled kernels' 64-row tiles waste 48 rows or more), else
    tiled_variant."""
    gemv = GEMV_DEFAULT if p.w8a8 else GEMV_RAW_DEFAULT
    if gemv and "sm80" in RUNS[family] and VARIANTS[GEMV].supports(p):
        return GEMV
    return tiled_variant(p, family)


def tiled_variant(p: Problem, family: str = "sm90") -> str:
    """The tiled kernel for a problem: on sm90 a TMA kernel where it can load the operands and M
    reaches TMA_MIN_M (TMA_MIN_M_W8A8 for W8A8), persistent_variant's choice among them, the
    cp.async kernel elsewhere; SIMT on other GPUs."""
    if family != "sm90":
        return SIMT
    if not plans.tma_ok(p.k) or p.m < (TMA_MIN_M_W8A8 if p.w8a8 else TMA_MIN_M):
        return CPASYNC
    return persistent_variant(p.m, p.n, p.k, p.sms, p.w8a8) or TMA


@dataclass(frozen=True)
class Choice:
    """What one GEMM call runs: a VARIANTS name and its plan."""

    variant: str
    plan: object

    def describe(self) -> str:
        """"tma-ws-cooperative 128x256 splits=1": the variant, its tile (BM x BN), a GEMV's schedule
        where it is not the first's (" u4 a8", cuda_plans.GemvConfig.schedule), its K splits,
        " reduce=atomic" where the splits add into the output (cuda_plans.REDUCTIONS), and
        " quantize=fused" where the plan quantizes x inside the GEMM."""
        cfg = self.plan.cfg
        fused = " quantize=fused" if getattr(self.plan, "fused", None) else ""
        reduce = plans.reduce_of(self.plan)
        reduce = "" if reduce == plans.WORKSPACE else f" reduce={reduce}"
        schedule = getattr(cfg, "schedule", "")  # a GEMV's, where it is not the first's
        return f"{self.variant} {cfg.bm}x{cfg.bn}{schedule} splits={self.plan.splits}{reduce}{fused}"


def choose(m: int, n: int, k: int, *, w8a8: bool = False, bias: bool = False, out_dtype: str | None = None,
           sms: int = DEFAULT_SMS, family: str = "sm90", override: str | None = "auto") -> Choice:
    """The variant and plan of an [M, K] x [N, K] GEMM (w8a8: w8a8_linear's, with `bias` and the
    output dtype's name) on a GPU of `family` (a key of RUNS) with `sms` SMs; override: an
    INT8NAX_CUDA_KERNEL value ("auto" or None: the rule)."""
    if family not in RUNS:
        raise ValueError(f"family: expected one of {sorted(RUNS)}, got {family!r}")
    if family == SIMT:
        name = SIMT
    else:
        name = override_name(override)
    problem = Problem(m, n, k, w8a8, bias, out_dtype, sms)
    if name == "auto":
        name = auto_variant(problem, family)
    variant = VARIANTS[name]
    if variant.family not in RUNS[family] or not variant.supports(problem):
        variant = VARIANTS[CPASYNC if family == "sm90" else SIMT]
    return Choice(variant.name, variant.plan(problem))


def reachable(n: int, k: int, m_max: int, *, w8a8: bool = False, bias: bool = False, out_dtype: str | None = None,
              sms: int = DEFAULT_SMS, family: str = "sm90", override: str | None = "auto") -> list[tuple[int, Choice]]:
    """Every kernel instance an [M, K] x [N, K] layer meets for M = 1 .. m_max, as (the first M that
    meets it, its Choice): one per (variant, tile, split or not). Each is an NVRTC compile the first
    time a process launches it (per output dtype and bias), whatever M; a server can launch these
    once at start (backends/cuda/backend.py, warm_up). The GEMV's fused and two-kernel W8A8 forms count
    apart."""
    first: dict[tuple, tuple[int, Choice]] = {}
    for m in range(1, m_max + 1):
        c = choose(m, n, k, w8a8=w8a8, bias=bias, out_dtype=out_dtype, sms=sms, family=family, override=override)
        first.setdefault((c.variant, c.plan.cfg.name, c.plan.splits > 1, getattr(c.plan, "fused", None)), (m, c))
    return sorted(first.values(), key=lambda mc: mc[0])
