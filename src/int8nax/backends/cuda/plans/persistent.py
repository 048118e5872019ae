"""The plans of the persistent, warp-specialised TMA GEMMs (tma-ws-cooperative, tma-ws-pingpong):
their tile configurations, the walk of (tile, split) units and each kernel's plan rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ....tiling import TileConfig, ceil_div
from .tiles import (CUDA_SWIZZLE_BYTES, MIN_SPLIT_BLOCKS, TMA_MAP_SLOT_BYTES, WORKSPACE, epilogue_chunk, reduce_suffix,
                    split_ranges, tile_count, tma_shared_bytes)

CUDA_WS_THREADS = 384
"""Producer warpgroup + 2 consumer warpgroups (cuda_source.LAUNCH_BOUNDS sets the launch
bound)."""

CUDA_WS_REGISTERS = (40, 232)
"""setmaxnreg of the producer and of the consumers: 128 x 40 + 256 x 232 <= 65536."""


@dataclass(frozen=True)
class PersistentConfig(TileConfig):
    """What the persistent TMA GEMMs' tiles share (kernels/cuda/gemm/tma_ws_common.cuh,
    persistent_start): 384
    threads, BK = 128 bytes, STAGES full/empty stage pairs, EXTRA_BARRIERS more mbarriers."""

    stages: int = 4
    EXTRA_BARRIERS: ClassVar[int] = 0

    def __post_init__(self):
        super().__post_init__()
        if self.bk != CUDA_SWIZZLE_BYTES:
            raise ValueError(f"{self.name}: BK must be {CUDA_SWIZZLE_BYTES} (one swizzle row)")
        self._check_shape()
        if self.stages < 2:
            raise ValueError(f"{self.name}: the pipeline needs at least 2 stages")

    def _check_shape(self) -> None:
        raise NotImplementedError

    @property
    def threads(self) -> int:
        return CUDA_WS_THREADS

    @property
    def epilogue_chunk(self) -> int:
        return epilogue_chunk(self.threads, 1)

    @property
    def shared_bytes(self) -> int:
        """tma_shared_bytes with 2 x STAGES (full and empty) + EXTRA_BARRIERS mbarriers."""
        return tma_shared_bytes(self, 2 * self.stages + self.EXTRA_BARRIERS)


@dataclass(frozen=True)
class CooperativeConfig(PersistentConfig):
    """A tile of the cooperative warp-specialised TMA GEMM (gemm_tma_ws_cooperative): BM = 128 (each consumer
    warpgroup m64 x BN) or BM = 64 (each consumer m64 x BN/2)."""

    def _check_shape(self) -> None:
        if (self.bm, self.wm, self.wn) not in ((128, 2, 1), (64, 1, 2)):
            raise ValueError(f"{self.name}: two consumer warpgroups: BM=128 (WM=2, WN=1) or BM=64 (WM=1, WN=2)")
        width = self.bn // self.wn
        if width % 8 or not 8 <= width <= 256 or self.bn > 256:
            raise ValueError(f"{self.name}: each consumer's wgmma N (BN/WN) must be 8..256, a multiple of 8; BN <= 256 (TMA box)")

    @property
    def consumer_width(self) -> int:
        return self.bn // self.wn

    def template(self) -> list[tuple[str, int]]:
        return [("BM", self.bm), ("BN", self.bn), ("STAGES", self.stages), ("CHUNK", self.epilogue_chunk)]


COOPERATIVE_CONFIGS = {
    cfg.name: cfg
    for cfg in (
        # Large: 2 x m64n256 consumers, 4 stages of 48 KB.
        CooperativeConfig("ws_128x256", bm=128, bn=256, bk=128, wm=2, wn=1, stages=4),
        # Mid: 2 x m64n128, 6 stages of 32 KB.
        CooperativeConfig("ws_128x128", bm=128, bn=128, bk=128, wm=2, wn=1, stages=6),
        # Small M: 64 rows, consumers side by side along N (2 x m64n64), 8 stages of 24 KB.
        CooperativeConfig("ws_64x128", bm=64, bn=128, bk=128, wm=1, wn=2, stages=8),
    )
}


@dataclass(frozen=True)
class PingPongConfig(PersistentConfig):
    """A tile of the ping-pong TMA GEMM (gemm_tma_ws_pingpong): each consumer warpgroup owns whole BM = 128
    x BN tiles (two m64 wgmma, BN accumulators a thread), so BN is at most 128; the two turn
    barriers follow the stage barriers."""

    EXTRA_BARRIERS: ClassVar[int] = 2

    def _check_shape(self) -> None:
        if (self.bm, self.wm, self.wn) != (128, 1, 1):
            raise ValueError(f"{self.name}: one consumer warpgroup per 128-row tile (BM=128, WM=WN=1)")
        if self.bn % 8 or not 8 <= self.bn <= 128:
            raise ValueError(f"{self.name}: BN must be 8..128, a multiple of 8 (2 x BN/2 accumulator registers)")

    def template(self) -> list[tuple[str, int]]:
        return [("BN", self.bn), ("STAGES", self.stages), ("CHUNK", self.epilogue_chunk)]


PINGPONG_CONFIGS = {
    cfg.name: cfg
    for cfg in (
        # cuBLASLt's tile at 2048 x 4096^2, 512 x 3584 x 18944 and 8192^3, 7 stages of 32 KB (224 KB,
        # the depth of cuBLASLt's 231 KB kernels; 0-2 % faster than 6 stages at every seed shape).
        PingPongConfig("pp_128x128", bm=128, bn=128, bk=128, wm=1, wn=1, stages=7),
        # Twice the tiles, for problems whose 128 x 128 tiles leave SMs idle: 8 stages of 24 KB.
        PingPongConfig("pp_128x64", bm=128, bn=64, bk=128, wm=1, wn=1, stages=8),
    )
}


@dataclass(frozen=True)
class PersistentPlan:
    """One launch of a persistent GEMM (gemm_tma_ws_cooperative, or gemm_tma_ws_pingpong with a
    PingPongConfig):
    tile, K splits, raster band height, blocks, and how the splits meet (reduce: as CudaPlan's)."""

    cfg: CooperativeConfig | PingPongConfig
    splits: int
    group: int
    blocks: int
    reduce: str = WORKSPACE

    def __post_init__(self):
        reduce_suffix("PersistentPlan", self.reduce, self.splits)

    @property
    def name(self) -> str:
        suffix = reduce_suffix("PersistentPlan", self.reduce, self.splits)
        return f"{self.cfg.name}_s{self.splits}_g{self.group}_b{self.blocks}{suffix}"

    def plan_shape(self) -> tuple[int, int]:
        """The shape of the kernel's `plan` input: (splits, group)."""
        return (self.splits, self.group)

    def grid(self) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid in threads, block) as mx.fast.cuda_kernel wants them."""
        return (self.blocks * CUDA_WS_THREADS, 1, 1), (CUDA_WS_THREADS, 1, 1)

    def map_bytes(self, m: int, n: int) -> int:
        """Bytes of the blocks' tensor-map scratch: one TMA_MAP_SLOT_BYTES slot per block, whatever
        the output (CudaPlan.map_bytes's signature)."""
        return self.blocks * TMA_MAP_SLOT_BYTES


def ws_units(m: int, n: int, cfg: TileConfig, splits: int) -> int:
    return tile_count(m, n, cfg) * splits


def ws_group(tiles_m: int, cfg: TileConfig, sms: int) -> int:
    """Band height (M-tiles) of the raster: the largest power of two g with g * BM about the
    rows of B the other sms / g blocks touch (g^2 <= sms * BN / BM), at most tiles_m."""
    g = 1
    while (2 * g) ** 2 * cfg.bm <= sms * cfg.bn and 2 * g <= tiles_m:
        g *= 2
    return max(1, min(g, tiles_m))


def cooperative_plan(m: int, n: int, k: int, sms: int = 132) -> PersistentPlan:
    """The cooperative persistent TMA GEMM's plan: the 64-row tile for M <= 64, 128 x 256 once its
    tiles alone fill the SMs, else 128 x 128; then K split in powers of two while the units
    still fit on the SMs at once and every split keeps MIN_SPLIT_BLOCKS K blocks (the partial
    sums go to a [splits, M, N] workspace, summed by the reduce kernel, which for W8A8 also
    dequantizes; W8A8 takes the same plans). The dispatch takes it only where
    cuda_choice.persistent_variant says so (128 x 256, unsplit there); its other plans run where
    INT8NAX_CUDA_KERNEL asks for this kernel."""
    large = COOPERATIVE_CONFIGS["ws_128x256"]
    if m <= 64:
        cfg = COOPERATIVE_CONFIGS["ws_64x128"]
    elif ws_units(m, n, large, 1) >= sms:
        cfg = large
    else:
        cfg = COOPERATIVE_CONFIGS["ws_128x128"]
    return persistent_plan(m, n, k, cfg, sms)


def persistent_plan(m: int, n: int, k: int, cfg: TileConfig, sms: int = 132, split: bool = True) -> PersistentPlan:
    """A persistent GEMM's plan on cfg's tiles: K split (where `split`) in powers of two while the
    units still fit on the SMs at once and every split keeps MIN_SPLIT_BLOCKS K blocks; ws_group's
    raster; min(SMs, units) blocks."""
    k_blocks = ceil_div(k, cfg.bk)
    splits = 1
    while split and ws_units(m, n, cfg, splits * 2) <= sms and k_blocks // (splits * 2) >= MIN_SPLIT_BLOCKS:
        splits *= 2
    units = ws_units(m, n, cfg, splits)
    return PersistentPlan(cfg, splits, ws_group(ceil_div(m, cfg.bm), cfg, sms), max(1, min(sms, units)))


def ws_unit(u: int, m: int, n: int, k: int, cfg: TileConfig, splits: int, group: int) -> tuple[int, int, int, int, int]:
    """(m0, n0, split, first K block, K blocks) of work unit u; mirrors tile/scheduler.cuh's ws_unit."""
    tiles_m, tiles_n = ceil_div(m, cfg.bm), ceil_div(n, cfg.bn)
    tile, z = divmod(u, splits)
    band, r = divmod(tile, group * tiles_n)
    first_m = band * group
    rows = min(group, tiles_m - first_m)
    tile_m, tile_n = first_m + r % rows, r // rows
    kb0, kb1 = split_ranges(k, cfg.bk, splits)[z]
    return tile_m * cfg.bm, tile_n * cfg.bn, z, kb0, kb1 - kb0


def pingpong_plan(m: int, n: int, k: int, sms: int = 132, w8a8: bool = False) -> PersistentPlan:
    """The ping-pong GEMM's plan: 128 x 128 tiles, or 128 x 64 where the 128 x 128 tiles give
    fewer units than SMs; K split (not for W8A8) in powers of two while the units still fit on
    the SMs at once and every split keeps MIN_SPLIT_BLOCKS K blocks; ws_group's raster;
    min(SMs, units) blocks. The dispatch takes it only where cuda_choice.persistent_variant says
    so (128 x 128 unsplit there, the sweep's fastest plan at 512 x 3584 x 18944)."""
    cfg = PINGPONG_CONFIGS["pp_128x128"]
    if ws_units(m, n, cfg, 1) < sms:
        cfg = PINGPONG_CONFIGS["pp_128x64"]
    return persistent_plan(m, n, k, cfg, sms, split=not w8a8)
