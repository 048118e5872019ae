"""The plans of the GEMMs that run one block per tile and split: the cp.async kernel's
(cpasync_plan) and the TMA kernel's (tma_plan, with its wave tile and long-K split rules).
"""

from __future__ import annotations

from dataclasses import dataclass

from ....tiling import Launch, TileConfig, ceil_div, launch
from .tiles import (CUDA_CONFIGS, CUDA_SWIZZLE_BYTES, MIN_SPLIT_BLOCKS, TMA_MAP_SLOT_BYTES, WORKSPACE, blocks_per_sm,
                    reduce_suffix, tile_count)


@dataclass(frozen=True)
class CudaPlan:
    """What one CUDA GEMM launch runs: a tile configuration, how many K splits, and how the splits
    meet (reduce: tiles.REDUCTIONS; "atomic" int8_matmul's trial on split plans only)."""

    cfg: TileConfig
    splits: int
    reduce: str = WORKSPACE

    def __post_init__(self):
        reduce_suffix("CudaPlan", self.reduce, self.splits)

    @property
    def name(self) -> str:
        return f"{self.cfg.name}_s{self.splits}{reduce_suffix('CudaPlan', self.reduce, self.splits)}"

    def launch(self, m: int, n: int) -> Launch:
        """The swizzled grid of tiles of an [M, N] output (int8nax.tiling.launch)."""
        return launch(m, n, self.cfg)

    def grid(self, m: int, n: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid in threads, block) as mx.fast.cuda_kernel wants them; z counts the splits."""
        lau = self.launch(m, n)
        return (lau.grid_x * self.cfg.threads, lau.grid_y, self.splits), (self.cfg.threads, 1, 1)

    def map_bytes(self, m: int, n: int) -> int:
        """Bytes of a TMA launch's `maps` output: one TMA_MAP_SLOT_BYTES slot per block."""
        lau = self.launch(m, n)
        return lau.grid_x * lau.grid_y * self.splits * TMA_MAP_SLOT_BYTES


def cpasync_plan(m: int, n: int, k: int, sms: int = 132) -> CudaPlan:
    """The cp.async kernel's tile and split-K for an [M, K] x [N, K] product on `sms` SMs.

    Measured on the H200 (docs/cuda.md): the 128x256 tile is fastest once it alone fills
    the GPU; below that two 128x128 blocks per SM win; small M takes the one-warpgroup 64x64
    tile (the m64 instruction cannot shrink further). Then K is split (in powers of two) while
    the blocks still fit on the SMs at once and every split keeps MIN_SPLIT_BLOCKS K blocks,
    so that short-and-wide problems stream the weights through every SM.
    """
    large = CUDA_CONFIGS["wg2_128x256"]
    if m <= 64:
        cfg = CUDA_CONFIGS["wg1_64x64"]
    elif tile_count(m, n, large) >= sms:
        cfg = large
    else:
        cfg = CUDA_CONFIGS["wg2_128x128_x2"]
    return CudaPlan(cfg, fill_splits(m, n, k, cfg, sms))


def fill_splits(m: int, n: int, k: int, cfg: TileConfig, sms: int = 132) -> int:
    """K splits (a power of two) for cfg's tiles: doubled while all blocks still fit on the SMs
    at once and every split keeps MIN_SPLIT_BLOCKS K blocks."""
    slots = sms * blocks_per_sm(cfg)
    tiles = tile_count(m, n, cfg)
    k_blocks = ceil_div(k, cfg.bk)
    splits = 1
    while tiles * splits * 2 <= slots and k_blocks // (splits * 2) >= MIN_SPLIT_BLOCKS:
        splits *= 2
    return splits


TMA_FILL = 0.85
"""A tile of the TMA GEMM is taken when its tiles alone give this many blocks per SM."""

TMA_LONG_K_BLOCKS = 64
"""From this many K blocks (K >= 8192) the TMA GEMM splits K as cpasync_plan does, unless the wave
rule's tile alone fills TMA_LONG_K_FILL of the SMs."""

TMA_LONG_K_FILL = 0.75
"""At long K the wave tile runs unsplit when its tiles alone give this many blocks per SM
(512 x 18944 x 3584: 100 tiles of 128 x 144 on 132 SMs, faster than cpasync_plan's split)."""


def long_k(k: int) -> bool:
    """Whether K is long: TMA_LONG_K_BLOCKS K blocks or more (K >= 8192), where a tile's main loop
    is long against its pipeline fill and epilogue (tma_plan splits K there; W8A8 takes the
    cooperative kernel where its plan is unsplit, cuda_choice.w8a8_cooperative)."""
    return ceil_div(k, CUDA_SWIZZLE_BYTES) >= TMA_LONG_K_BLOCKS


W8A8_COMPUTE_MIN_M = 385
"""Smallest M at which W8A8 takes the plans that pay off only where each weight tile feeds several
128-row tiles: the wave tile at short K (w8a8_wave_tile) and the cooperative kernel wherever its
plan runs unsplit (cuda_choice.w8a8_cooperative). Below, the GEMM streams the weight, and two
128 x 128 blocks per SM (more loads in flight) measured faster: at 128 x 3584 x 18944 (H200,
W8A8 pipeline, bf16 x) 35.1 us against 43.2 on the one-wave 128 x 144 and 40.7 on the cooperative
kernel; at M = 512 the wave tile won (512 x 3584 x 4608: 128 x 144 22.2 against 28.0; 512 x 4096 x
6144: 128 x 192 29.8 against 33.6), and so did the cooperative kernel (w8a8_cooperative; H100:
512 x 4096 x 4096 23.5 against 29.4 on 128 x 128). From 385 rows every plan launches the grid of
512 rows (four 128-row tiles, the last partly past M, whose rows the epilogue skips pair by pair),
so the 512-row measurements hold there: mlx-lm's 512-token prompts run 511-row chunks (at 511 x
18944 x 3584 the cooperative kernel took 70.1 us against 79.8 on 128 x 128 in 2 splits, H100).
M from 129 to 384 is unmeasured where these plans would apply, and keeps the rules without them."""

_TMA_TILES = ("wg2_128x256", "wg2_128x128_x2", "wg1_64x64")

_WAVE_TILES = ("wg2_128x256", "wg2_128x192", "wg2_128x144", "wg2_128x128_x2")
"""The 128-row tiles the wave rule weighs, the default first: 128 x 256 is the most efficient
per output (fewest shared-memory bytes per multiply), so another must be clearly cheaper."""

WAVE_MARGIN = 0.9
"""A narrower tile replaces 128 x 256 when its wave cost is at most this fraction of it."""


def wave_cost(m: int, n: int, cfg, sms: int = 132) -> int:
    """Columns of output the busiest SM computes per 128 rows: the waves the tiles need
    (ceil(tiles / (SMs x blocks per SM))) times the columns one wave puts on an SM (BN x blocks
    per SM). A partial last wave costs a whole one: that is what a narrower tile can save."""
    bps = blocks_per_sm(cfg)
    return ceil_div(tile_count(m, n, cfg), sms * bps) * cfg.bn * bps


def wave_tile(m: int, n: int, sms: int = 132):
    """The 128-row tile of least wave cost (_WAVE_TILES; ties to the wider tile), or 128 x 256
    unless that is at most WAVE_MARGIN of its cost."""
    tiles = [CUDA_CONFIGS[name] for name in _WAVE_TILES]
    default = tiles[0]
    best = min(tiles, key=lambda c: (wave_cost(m, n, c, sms), -c.bn))
    return best if wave_cost(m, n, best, sms) <= WAVE_MARGIN * wave_cost(m, n, default, sms) else default


def w8a8_wave_tile(m: int, n: int, sms: int = 132):
    """W8A8's wave tile at short K: wave_tile where M >= W8A8_COMPUTE_MIN_M and its blocks fit one
    wave (tiles <= SMs x blocks per SM), else None (tma_plan's tiles without it). Over several
    waves each block's fused epilogue is an unhidden tail that a narrower tile pays more often: at
    512 x 3584 x 18944 the wave rule's 128 x 192 (3 waves) took 105.9 us against 128 x 256's 94.7
    (though at 2048 x 3584 x 4608 its 128 x 192 in 3 waves took 76.8 against 90.6: the dispatch runs
    the ping-pong kernel at both, so the TMA plan there is what INT8NAX_CUDA_KERNEL asks for)."""
    if m < W8A8_COMPUTE_MIN_M:
        return None
    wave = wave_tile(m, n, sms)
    return wave if tile_count(m, n, wave) <= sms * blocks_per_sm(wave) else None


_SPLIT_TILES = ("wg2_128x112",)
"""Tiles the long-K split plan weighs besides the wave tile (split_plan), and that may run a long
K unsplit in one wave (one_wave_tile)."""

ONE_WAVE_FILL = 0.95
"""At long K a _SPLIT_TILES tile runs unsplit where its tiles alone fill this much of the SMs in one
wave (one_wave_tile)."""


def one_wave_tile(m: int, n: int, sms: int = 132):
    """The _SPLIT_TILES tile whose tiles alone put one block on ONE_WAVE_FILL or more of the SMs
    and no second wave, or None. At long K the GEMM streams the weight and a block's main loop
    dwarfs its fill and epilogue, so time goes with the SMs left idle: at 512 x 18944 x 3584
    (H100, W8A8 pipeline with bfloat16 x, CUPTI) 128 x 112 unsplit (128 blocks) took 64.0 us
    against 70.8 on the cooperative kernel (112 units of 128 x 128), 78.4 on 128 x 128 in 2 splits
    and 86.5 on the wave tile 128 x 144 unsplit (100 blocks): 0.74x, near its 100 / 128 blocks.
    Both int8_matmul and W8A8 take it (tma_plan; W8A8 before the cooperative kernel,
    cuda_choice.w8a8_cooperative); W8A8's fused epilogue runs once a block there."""
    for cfg in (CUDA_CONFIGS[name] for name in _SPLIT_TILES):
        if ONE_WAVE_FILL * sms <= tile_count(m, n, cfg) <= sms:
            return cfg
    return None


def split_plan(m: int, n: int, k: int, wave, sms: int = 132) -> CudaPlan:
    """The long-K split plan: the wave tile or a _SPLIT_TILES tile, each split by fill_splits,
    whichever puts blocks on the most SMs (ties to the wave tile). Few tiles at long K stream the
    weight, and an SM without a block pulls none of it: at 128 x 18944 x 3584, 4 splits of
    128 x 112 put 128 blocks on 132 SMs where 128 x 144's put 100 (measured faster:
    tests/data/cuda_dispatch_evidence.json)."""
    def busy(cfg):
        return min(sms * blocks_per_sm(cfg), tile_count(m, n, cfg) * fill_splits(m, n, k, cfg, sms))

    best = wave
    for cfg in (CUDA_CONFIGS[name] for name in _SPLIT_TILES):
        if busy(cfg) > busy(best):
            best = cfg
    return CudaPlan(best, fill_splits(m, n, k, best, sms))


W8A8_NARROW_MAX_M = 64
"""Most rows at which W8A8 takes the 64 x 32 tile where tma_plan falls back to a 64-row one
(w8a8_small_tile)."""


def w8a8_small_tile(m: int, n: int, sms: int = 132):
    """W8A8's tile where tma_plan falls back to a 64-row one (no tile of its list fills TMA_FILL of the
    SMs, so 64 x 64 leaves SMs idle): 64 x 32 at M <= W8A8_NARROW_MAX_M where its tiles fit one wave
    (two blocks an SM), else 64 x 64. Where 64 x 64 fills the SMs itself (N >= 7232 on 132 SMs)
    tma_plan takes it before asking, unmeasured against 64 x 32. The raw GEMM keeps 64 x 64. Why: at
    short K the dequantizing epilogue is each block's unhidden tail, and 64 x 32 gives every SM a
    block with half the tail: at 64 x 4096 x 4096 (H100, W8A8 pipeline with bfloat16 x, CUPTI) 14.9
    µs against 16.3 on 64 x 64 (13.8 against 14.9 on another VM), at 32 rows 15.6 against 15.8,
    where int8_matmul took 11.1 and 12.0 on 64 x 64 against 11.3 and 12.6 on 64 x 32
    (tests/data/cuda_dispatch_evidence.json); at 128 rows 16.4 against 16.7 (not taken: 128 rows
    fill 85 % of the SMs with 64 x 64 already)."""
    narrow = CUDA_CONFIGS["wg1_64x32"]
    if m <= W8A8_NARROW_MAX_M and tile_count(m, n, narrow) <= sms * blocks_per_sm(narrow):
        return narrow
    return CUDA_CONFIGS["wg1_64x64"]


def tma_plan(m: int, n: int, k: int, sms: int = 132, w8a8: bool = False) -> CudaPlan:
    """The plan of the TMA GEMM (tma-unspecialized) for an [M, K] x [N, K] product on `sms` SMs;
    w8a8: for w8a8_linear's fused GEMM (below). The measurements behind each step:
    tests/data/cuda_dispatch_evidence.json (rule "tma_plan").

    One block per tile, no split-K, wherever K < 8192: the split's workspace round trip and
    reduction kernel cost more than idle SMs. Among the 128-row tiles the one whose tiles leave the
    least of a partial last wave (wave_tile: 128 x 192 or 128 x 144 where 128 x 256 would leave a
    mostly idle last wave, one block per SM with deep pipelines); when the 128-row tiles cannot
    fill the SMs, 128 x 128 (two per SM) or 64 x 64. At long K (K >= 8192) 128 x 112 runs unsplit
    where its tiles alone fill the SMs in one wave (one_wave_tile); else the wave tile runs
    unsplit where it alone fills most SMs (TMA_LONG_K_FILL), else its K is split until its blocks
    fill the SMs once, on the tile whose splits fill the most SMs (split_plan).

    W8A8 at short K takes the wave tile only where w8a8_wave_tile does (M >= W8A8_COMPUTE_MIN_M, one
    wave), else the rule without it (128 x 256, 128 x 128, then w8a8_small_tile's 64 x 32 or 64 x
    64): its dequantizing epilogue runs
    after each block's main loop, an unhidden tail that grows with the outputs per block. At long K
    it takes one_wave_tile's plan as int8_matmul does, cpasync_plan where the wave tile would run
    unsplit, and the int32 plan where that splits K: its GEMM is then the int32 kernel and the
    dequantization runs in the reduction, so that tail does not arise (the int32 split plan also
    beat cpasync_plan's, whose reduction reads twice the partial sums; 128 x 18944 x 3584 on
    128 x 112 x 4 splits: 33.8 us, the cooperative kernel's 4 splits 34.5). The dispatch sends much
    of W8A8's long K to the cooperative kernel instead (cuda_choice.w8a8_cooperative).
    """
    is_long = long_k(k)
    if m <= 64:
        wave = None
    elif is_long or not w8a8:
        wave = wave_tile(m, n, sms)
    else:
        wave = w8a8_wave_tile(m, n, sms)
    if is_long:
        if wave is None:
            return cpasync_plan(m, n, k, sms)
        one = one_wave_tile(m, n, sms)
        if one is not None:
            return CudaPlan(one, 1)
        if tile_count(m, n, wave) >= TMA_LONG_K_FILL * sms:
            return cpasync_plan(m, n, k, sms) if w8a8 else CudaPlan(wave, 1)
        return split_plan(m, n, k, wave, sms)
    candidates = [wave or CUDA_CONFIGS[_TMA_TILES[0]]] + [CUDA_CONFIGS[name] for name in _TMA_TILES[1:]]
    for cfg in candidates:
        if cfg.bm > 64 and m <= 64:
            continue  # a 128-row tile for at most 64 rows: half of every stage would be padding
        if tile_count(m, n, cfg) >= TMA_FILL * sms:
            return CudaPlan(cfg, 1)
    return CudaPlan(w8a8_small_tile(m, n, sms) if w8a8 else CUDA_CONFIGS["wg1_64x64"], 1)
