"""The plan of the small-M GEMV (kernels/cuda/gemm/gemv_w8a8.cuh): its block shapes, and whether
W8A8 quantizes x inside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ....tiling import ceil_div

# At M <= 16 a GEMM is a stream of the int8 weight. A block of GEMV_WARPS warps owns 8 x NT rows
# of w (NT tiles of mma.m16n8k32's eight columns) and its warps split K in 64-byte steps; the
# grid is one-dimensional, ceil(N / (8 NT)) blocks.

GEMV_MAX_M = 16
"""Activation rows the GEMV takes (one mma.m16n8k32's M)."""

GEMV_WARPS = 8
"""Warps of a GEMV block (GemvConfig's default); they split K between them."""

GEMV_UNROLL = 2
"""64-byte steps whose loads a GEMV warp issues before multiplying (GemvConfig's default)."""

GEMV_X_MAX_BYTES = 64 << 10
"""The GEMV with the quantization fused (one kernel a call) takes x up to this size: every block
reads x twice from the caches. A bound on that re-reading, not a break-even: at the sizes timed the
fused form never beat the two kernels (GEMV_QUANTIZE_INSIDE)."""

GEMV_QUANTIZE_INSIDE = False
"""Whether W8A8's GEMV rule takes the fused form (where gemv_x_ok). Off: the quantization kernel
runs first, then the GEMV reads int8 x. On an H100 (docs/results/cuda-h100.md, the decode GEMV's
schedules section) the two kernels on 16 x 16 u4 were the fastest W8A8 plan at every M <= 16
timed (K 3584 to 18944, N 3584 to 37888): 0.6-11.4 us under the fused form at M = 1, more at 16
rows. The fused form's x quantization in every block takes the registers that a deeper unroll
needs. `compare --mode kernel --plans` still times it."""

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
"""Bytes of an activation of each W8A8 dtype (by name)."""


@dataclass(frozen=True)
class GemvConfig:
    """A GEMV block's share of the output, BM = 16 activation rows by BN = 8 NT rows of w, and its
    schedule: `warps` warps splitting K, `unroll` 64-byte steps' loads a warp issues before
    multiplying, and `ahead`: how many of a warp's steps ahead of its loads it asks L2 to fetch
    (prefetch.global.L2; 0: none, where the registers' unroll steps are all a warp has in flight)."""

    name: str
    nt: int
    warps: int = GEMV_WARPS
    unroll: int = GEMV_UNROLL
    ahead: int = 0
    bm: ClassVar[int] = GEMV_MAX_M

    @property
    def bn(self) -> int:
        return 8 * self.nt

    @property
    def threads(self) -> int:
        return 32 * self.warps

    @property
    def schedule(self) -> str:
        """" w4 u4 a8": where the schedule differs from the first GEMV's (GEMV_WARPS warps,
        GEMV_UNROLL, no prefetch), which parts; "" where it does not (Choice.describe's text)."""
        parts = [f"w{self.warps}" if self.warps != GEMV_WARPS else "",
                 f"u{self.unroll}" if self.unroll != GEMV_UNROLL else "", f"a{self.ahead}" if self.ahead else ""]
        return "".join(f" {p}" for p in parts if p)

    def template(self) -> list:
        return [("NT", self.nt), ("WARPS", self.warps), ("UNROLL", self.unroll), ("AHEAD", self.ahead)]


GEMV_CONFIGS = {c.name: c for c in (GemvConfig("gemv_16x8", 1), GemvConfig("gemv_16x16_u4", 2, unroll=4))}
"""The GEMV configurations gemv_plan chooses from (the kernel catalogue builds each). 16 x 16 loads
four steps ahead of its multiplies: on an H100 up to 1.2x faster than two steps for int8_matmul
and 1.4x for W8A8 over the models' decode layers (docs/results/cuda-h100.md, the decode GEMV's
schedules section), though its 94-96 registers (ptxas) leave 2 blocks an SM where two steps' 72
leave 3."""

GEMV_TRIALS = {c.name: c for c in (
    GemvConfig("gemv_16x16", 2), GemvConfig("gemv_16x16_a4", 2, ahead=4),
    GemvConfig("gemv_16x16_a8", 2, ahead=8), GemvConfig("gemv_16x16_a16", 2, ahead=16),
    GemvConfig("gemv_16x16_u4a8", 2, unroll=4, ahead=8), GemvConfig("gemv_16x8_a8", 1, ahead=8),
    GemvConfig("gemv_16x8_u4a8", 1, unroll=4, ahead=8), GemvConfig("gemv_16x32_a8", 4, ahead=8),
    GemvConfig("gemv_16x16_w4a8", 2, warps=4, ahead=8), GemvConfig("gemv_16x8_u4", 1, unroll=4),
    GemvConfig("gemv_16x16_u8", 2, unroll=8))}
"""Schedules `int8nax compare --mode kernel --plans` times beside GEMV_CONFIGS at M <= 16, which
no rule chooses: the two-step 16 x 16 the rule took before u4 (for comparison), deeper load
pipelines (unroll), L2 prefetch ahead of the loads (ahead), wider blocks and fewer warps
(docs/results/cuda-h100.md, the decode GEMV's schedules section). Not in the catalogue: a run
that times them compiles them, or carries them (tools/cuda_cache_offline.py --plans;
tools/cuda_compile_check.py --trials compiles them here)."""


@dataclass(frozen=True)
class GemvPlan:
    """The GEMV's launch: its config, and for W8A8 whether x is quantized inside the GEMV (fused:
    one kernel) or by the quantization kernel first; fused None: decided at the launch from x's
    item size (gemv_inside)."""

    cfg: GemvConfig
    fused: bool | None = None
    splits: ClassVar[int] = 1

    def grid(self, m: int, n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid in threads, block) as mx.fast.cuda_kernel wants them."""
        return (ceil_div(n, self.cfg.bn) * self.cfg.threads, 1, 1), (self.cfg.threads, 1, 1)


def gemv_ok(m: int, k: int) -> bool:
    """Whether the GEMV takes an [m, k] operand: 1 <= m <= GEMV_MAX_M and k >= 1 (any K: 16-byte
    loads where K % 16 == 0 and the bases are 16-byte aligned, byte loads elsewhere)."""
    return 1 <= m <= GEMV_MAX_M and k >= 1


def gemv_x_ok(m: int, k: int, itemsize: int) -> bool:
    """Whether the GEMV with the quantization fused takes x [m, k] of `itemsize`-byte values:
    gemv_ok and at most GEMV_X_MAX_BYTES of x."""
    return gemv_ok(m, k) and m * k * itemsize <= GEMV_X_MAX_BYTES


def gemv_inside(m: int, k: int, itemsize: int) -> bool:
    """Whether W8A8's rule quantizes x [m, k] of `itemsize`-byte values inside the GEMV:
    GEMV_QUANTIZE_INSIDE and gemv_x_ok."""
    return GEMV_QUANTIZE_INSIDE and gemv_x_ok(m, k, itemsize)


def gemv_plan(m: int, n: int, k: int, sms: int = 132, dtype: str | None = None) -> GemvPlan:
    """16 rows of w a block (NT = 2, four steps unrolled) where that still gives every SM a block
    and a half (N = 3584 on 132 SMs: 224 blocks of 16 rows), else 8; fused: gemv_inside for x of
    `dtype` (a name), None where no float dtype is given (decided at the launch)."""
    cfg = GEMV_CONFIGS["gemv_16x16_u4" if ceil_div(n, 16) >= 3 * sms // 2 else "gemv_16x8"]
    return GemvPlan(cfg, gemv_inside(m, k, ITEMSIZE[dtype]) if dtype in ITEMSIZE else None)
