"""Tile constants and launch math: the one place they live.

Kernels receive every constant below as a template argument (mx.fast.metal_kernel /
cuda_kernel `template=`), so the .metal and .cu sources hold no tile numbers of their
own, and the Metal tile-walk emulator imports the same objects. Backend sections
below add their configurations; the generic math (ceil_div, the swizzled grid and its
decode) is shared by all of them.

Swizzle: with T = 2**swizzle_log, T consecutive M-tiles share one N column of tiles,
so neighbouring threadgroups/blocks reuse the same weight tile from cache.
    grid  = (tiles_n * T, ceil(tiles_m / T))
    decode: tile_m = (gy << s) + (gx & (T - 1)), tile_n = gx >> s
Tiles that decode past tiles_m exist only to fill the grid and return at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from .quant import QMAX, TINY_SHIFT


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TileConfig:
    """One GEMM tiling: output tile BM x BN per threadgroup/block, K step BK between
    barriers, and a WM x WN grid of simdgroups/warps each owning a (BM/WM) x (BN/WN) sub-tile."""

    name: str
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int

    def __post_init__(self):
        if self.bm % self.wm or self.bn % self.wn:
            raise ValueError(f"{self.name}: BM/BN must divide by WM/WN")

    @property
    def sm(self) -> int:
        return self.bm // self.wm

    @property
    def sn(self) -> int:
        return self.bn // self.wn

    @property
    def threads(self) -> int:
        return 32 * self.wm * self.wn

    def template(self) -> list[tuple[str, int]]:
        """Template arguments for mx.fast.*_kernel."""
        return [("BM", self.bm), ("BN", self.bn), ("BK", self.bk), ("WM", self.wm), ("WN", self.wn)]


def swizzle_log(tiles_m: int) -> int:
    """log2 of how many M-tiles share an N column (0, 1 or 2)."""
    if tiles_m <= 3:
        return 0
    if tiles_m <= 6:
        return 1
    return 2


@dataclass(frozen=True)
class Launch:
    """Grid of threadgroups/blocks for one GEMM: what the kernel and the emulator both walk."""

    tiles_m: int
    tiles_n: int
    swizzle_log: int
    grid_x: int
    grid_y: int


def launch(m: int, n: int, cfg: TileConfig) -> Launch:
    tiles_m = ceil_div(m, cfg.bm)
    tiles_n = ceil_div(n, cfg.bn)
    s = swizzle_log(tiles_m)
    t = 1 << s
    return Launch(tiles_m, tiles_n, s, tiles_n * t, ceil_div(tiles_m, t))


def tile_of(gx: int, gy: int, s: int) -> tuple[int, int]:
    """(tile_m, tile_n) that threadgroup (gx, gy) owns; mirrors the kernels' decode."""
    t = 1 << s
    return (gy << s) + (gx & (t - 1)), gx >> s


# ----------------------------------------------------------------------------------------------
# Metal (Apple M5 "NAX"): matmul2d fragments, Steel-NAX-style tiles and the launch
# ----------------------------------------------------------------------------------------------
#
# Every simdgroup issues mpp::tensor_ops::matmul2d with cooperative int8 operands: one call
# multiplies an FM x FK fragment of A by an FK x FN fragment of B^T into an FM x FN int32
# fragment. A threadgroup owns a BM x BN output tile and runs WM x WN simdgroups, each owning an
# SM x SN sub-tile (TM = SM/FM by TN = SN/FN fragments). K advances BK elements between
# threadgroup barriers (a full block needs no K mask); a last partial block handles the K
# remainder with masked loads. Loads go straight from device memory (no threadgroup staging).
# The nax_emulator module walks exactly this grid with these constants.

SIMD_WIDTH = 32
"""Threads per Apple GPU simdgroup."""

NAX_FRAG_M, NAX_FRAG_N, NAX_FRAG_K = 16, 32, 16
"""The matmul2d descriptor (m, n, k): legal with both operands cooperative (each in {16, 32},
one of them 32); the shape MLX's NAX GEMM and cider use."""

NAX_INNER_K = 32
"""SK: K elements per inner step of the MLX-layout path, i.e. two FK-deep fragments loaded
before their MMAs (MLX gemm_nax.h and cider use 32)."""

NAX_ROW_PIECE = 4
"""MLX's BaseNAXFrag lane layout (nax.h): in a 16 x 16 fragment each lane holds 2 row pieces of
NAX_ROW_PIECE contiguous elements, the second FM / 2 rows below the first. For lane L
(bits b4..b0): row = 4*b4 + 2*b2 + b1, column = 8*b3 + 4*b0, i.e. with q = L / ROW_PIECE,
row = (q & ROW_PIECE) | ((L >> 1) & 3), column = ((q & 2) | (L & 1)) * ROW_PIECE."""


def mlx_lane_base(lane):
    """(row, column) of the first element a lane holds in a 16 x 16 BaseNAXFrag fragment: the
    formula the MLX-layout kernels compute from the lane id (works on ints and numpy arrays)."""
    q = lane // NAX_ROW_PIECE
    row = (q & NAX_ROW_PIECE) | ((lane >> 1) & 3)
    col = ((q & 2) | (lane & 1)) * NAX_ROW_PIECE
    return row, col


@dataclass(frozen=True)
class NaxTileConfig(TileConfig):
    """A TileConfig whose sub-tiles are made of whole matmul2d fragments, plus the descriptor's
    relaxed_precision flag. relaxed_precision=True is the only int8 form known to compile and run
    bit-exact on an M5 (cider's kernels, MLX's float NAX GEMM); False is offered for the A/B run
    the review asks for (docs/metal.md)."""

    sk: int = NAX_INNER_K
    relaxed_precision: bool = True

    def __post_init__(self):
        super().__post_init__()
        if self.sm % NAX_FRAG_M or self.sn % NAX_FRAG_N or self.bk % NAX_FRAG_K:
            raise ValueError(
                f"{self.name}: SM, SN and BK must be multiples of the fragment "
                f"({NAX_FRAG_M}, {NAX_FRAG_N}, {NAX_FRAG_K}); got SM={self.sm}, SN={self.sn}, BK={self.bk}"
            )
        if self.sk % NAX_FRAG_K or self.bk % self.sk:
            raise ValueError(f"{self.name}: SK must be whole K fragments and divide BK; got SK={self.sk}, BK={self.bk}")

    def template(self) -> list[tuple[str, int]]:
        frag = [("SK", self.sk), ("FM", NAX_FRAG_M), ("FN", NAX_FRAG_N), ("FK", NAX_FRAG_K),
                ("SIMD", SIMD_WIDTH), ("ROW_PIECE", NAX_ROW_PIECE), ("RELAXED", self.relaxed_precision)]
        return super().template() + frag


METAL_LARGE = NaxTileConfig("metal_128x128", bm=128, bn=128, bk=512, wm=4, wn=4)
"""The tile for M > METAL_SMALL_MAX_M on every M5 class: 16 simdgroups (512 threads), 32 x 32 per
simdgroup, K in blocks of 512. MLX's default NAX tile, and the int8 tile cider measured on an
M5 Pro (class 's'), where BK 512 beat BK 128 by 1.12x. MLX switches its float GEMM to 64-row
tiles on the 's', 'c', 'd' classes; nobody has measured that for int8, so int8nax keeps the
measured tile on every class until an M5 owner measures otherwise (metal_config takes the
class for that)."""

METAL_SMALL = NaxTileConfig("metal_32x128", bm=32, bn=128, bk=512, wm=1, wn=4)
"""Small-M tile (4 simdgroups, 128 threads): a 128-row tile would leave most simdgroups idle."""

METAL_CONFIGS = (METAL_SMALL, METAL_LARGE)
"""Every tile metal_config can return (the bounded set of GEMM builds is made of these)."""

METAL_SMALL_MAX_M = 64
"""Largest M that takes METAL_SMALL (cider's threshold)."""

METAL_QUANT_THREADS = 256
"""Threads per row of the activation-quantization kernel (one threadgroup per row)."""

METAL_MAX_IDLE_FRACTION = 8
"""metal_swizzle_log accepts grid-padding threadgroups (which decode past the last M tile and
leave at once) only up to 1/METAL_MAX_IDLE_FRACTION of the M tiles."""


def gpu_class(architecture: str | None) -> str | None:
    """The class letter of an Apple GPU architecture name ('applegpu_g17s' -> 's'), else None."""
    if architecture and architecture[-1:].isalpha() and architecture.startswith("applegpu_g"):
        return architecture[-1]
    return None


def metal_config(m: int, n: int = 0, k: int = 0, gpu: str | None = None) -> NaxTileConfig:
    """The tile for an [M, K] x [N, K] GEMM on a GPU of class `gpu` (None: unknown): small M
    takes METAL_SMALL, the rest METAL_LARGE on every class (see METAL_LARGE)."""
    return METAL_SMALL if m <= METAL_SMALL_MAX_M else METAL_LARGE


def metal_swizzle_log(tiles_m: int, gpu: str | None = None) -> int:
    """swizzle_log(tiles_m), lowered while the padding threadgroups it adds (T * ceil(tiles_m /
    T) - tiles_m of every T-wide column) exceed 1/METAL_MAX_IDLE_FRACTION of the M tiles: one M
    tile never swizzles, and 5 M tiles take 0 where swizzle_log's 1 would idle a sixth of the
    grid."""
    s = swizzle_log(tiles_m)
    while s and ((1 << s) * ceil_div(tiles_m, 1 << s) - tiles_m) * METAL_MAX_IDLE_FRACTION > tiles_m:
        s -= 1
    return s


METAL_GEMM_PARAMS = ("M", "N", "K", "SWIZZLE_LOG", "TILES_M")
"""The GEMM kernels' run-time scalars (the int32 `params` input), in order; nax_gemm.metal
names the positions PARAM_<name>."""


@dataclass(frozen=True)
class MetalGemmDispatch:
    """Everything one NAX GEMM launch needs, as mx.fast.metal_kernel takes it."""

    config: NaxTileConfig
    launch: Launch
    grid: tuple[int, int, int]
    """In threads (metal_kernel calls dispatchThreads): threadgroups * threadgroup size."""
    threadgroup: tuple[int, int, int]
    template: list[tuple[str, int]]
    params: tuple[int, int, int, int, int]
    """Run-time scalars, in the order METAL_GEMM_PARAMS names them."""


def metal_gemm_dispatch(m: int, n: int, k: int, gpu: str | None = None,
                        relaxed_precision: bool = True) -> MetalGemmDispatch:
    """The launch of an [M, K] x [N, K] NAX GEMM on a GPU of class `gpu` (see metal_config)."""
    cfg = metal_config(m, n, k, gpu)
    if cfg.relaxed_precision != relaxed_precision:
        cfg = replace(cfg, relaxed_precision=relaxed_precision)
    tiles_m, tiles_n = ceil_div(m, cfg.bm), ceil_div(n, cfg.bn)
    s = metal_swizzle_log(tiles_m, gpu)
    t = 1 << s
    lau = Launch(tiles_m, tiles_n, s, tiles_n * t, ceil_div(tiles_m, t))
    grid = (lau.grid_x * cfg.threads, lau.grid_y, 1)
    return MetalGemmDispatch(
        cfg, lau, grid, (cfg.threads, 1, 1), cfg.template(), (m, n, k, lau.swizzle_log, lau.tiles_m)
    )


METAL_MV_MAX_M = 4
"""Largest M that takes the small-M kernel (kernels/metal/gemv.metal) instead of a NAX tile:
decode-sized batches, where a 32-row tile would be mostly padding and the weights' bytes are
the cost. UNMEASURED on an M5: cider switches at M = 1; 4 keeps the per-lane accumulators
(MV_MAX_M x MV_ROWS) at 16."""

METAL_MV_ROWS = 4
"""Columns n (rows of B) per simdgroup of the small-M kernel."""

METAL_MV_SIMDGROUPS = 2
"""Simdgroups per threadgroup of the small-M kernel (cider's matrix-vector kernel: 2 x 4)."""


@dataclass(frozen=True)
class MetalGemvDispatch:
    """One small-M launch (kernels/metal/gemv.metal), as mx.fast.metal_kernel takes it."""

    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    template: list[tuple[str, int]]
    params: tuple[int, int, int, int, int]
    """The same run-time scalars as the NAX GEMM's (METAL_GEMM_PARAMS; no swizzle)."""

    @property
    def columns_per_threadgroup(self) -> int:
        return METAL_MV_ROWS * METAL_MV_SIMDGROUPS


def metal_uses_gemv(m: int) -> bool:
    """Whether an M-row GEMM takes the small-M kernel (else metal_gemm_dispatch's NAX tile)."""
    return m <= METAL_MV_MAX_M


def metal_gemv_dispatch(m: int, n: int, k: int) -> MetalGemvDispatch:
    """The small-M launch: one threadgroup per METAL_MV_ROWS * METAL_MV_SIMDGROUPS columns."""
    if not 1 <= m <= METAL_MV_MAX_M:
        raise ValueError(f"metal_gemv_dispatch: M must be in [1, {METAL_MV_MAX_M}], got {m}")
    threads = SIMD_WIDTH * METAL_MV_SIMDGROUPS
    groups = ceil_div(n, METAL_MV_ROWS * METAL_MV_SIMDGROUPS)
    template = [("MV_ROWS", METAL_MV_ROWS), ("MV_SG", METAL_MV_SIMDGROUPS), ("MV_MAX_M", METAL_MV_MAX_M),
                ("SIMD", SIMD_WIDTH), ("ROW_PIECE", NAX_ROW_PIECE)]
    return MetalGemvDispatch((groups * threads, 1, 1), (threads, 1, 1), template, (m, n, k, 0, 1))


@dataclass(frozen=True)
class MetalQuantDispatch:
    """Launch of the activation-quantization kernel: one threadgroup of QT threads per row."""

    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    template: list[tuple[str, int]]


def metal_quant_dispatch(rows: int) -> MetalQuantDispatch:
    qt = METAL_QUANT_THREADS
    return MetalQuantDispatch((qt, rows, 1), (qt, 1, 1),
                              [("QT", qt), ("SIMD", SIMD_WIDTH), ("QMAX", QMAX), ("TINY", TINY_SHIFT)])


# ----------------------------------------------------------------------------------------------
# CUDA (NVIDIA Hopper, sm_90a): wgmma tiles and the shape-aware plan
# ----------------------------------------------------------------------------------------------
#
# The CUDA GEMM runs warpgroups (4 warps, 128 threads) that issue wgmma m64nBNk32 s8 from shared
# memory. A block is WM warpgroups stacked along M (BM = 64 * WM, WN = 1: each warpgroup spans
# the whole BN). K advances BK = 128 bytes per pipeline stage: one 128-byte row per tile row is
# exactly the wgmma 128-byte swizzle atom. STAGES shared-memory stages are filled by cp.async,
# AHEAD stages ahead of the one being multiplied: STAGES - 2 lets one wgmma batch stay in flight
# across the next barrier, STAGES - 1 keeps one more stage of loads in flight instead
# (kernels/gemm_sm90.cuh).
#
# Split-K: grid z = splits, each split owns a contiguous range of K blocks and writes its int32
# partial sums to slice z of a [splits, M, N] workspace; a reduction kernel sums the slices
# (integer addition is exact in any order) and, for W8A8, dequantizes.

CUDA_WARPGROUP_ROWS = 64
"""Rows of A that one wgmma m64 instruction covers."""

CUDA_SWIZZLE_BYTES = 128
"""Bytes per shared-memory tile row (the 128-byte swizzle): BK must equal it for int8."""


@dataclass(frozen=True)
class CudaTileConfig(TileConfig):
    """A TileConfig whose WM x WN grid counts warpgroups (128 threads), plus the pipeline depth."""

    stages: int = 4
    ahead: int = 0  # 0: STAGES - 2

    def __post_init__(self):
        super().__post_init__()
        if self.bm != CUDA_WARPGROUP_ROWS * self.wm or self.wn != 1:
            raise ValueError(f"{self.name}: a CUDA tile stacks WM m64 warpgroups (BM = 64*WM, WN = 1)")
        if self.bk != CUDA_SWIZZLE_BYTES:
            raise ValueError(f"{self.name}: BK must be {CUDA_SWIZZLE_BYTES} (one swizzle row)")
        if self.bn % 8 or not 8 <= self.bn <= 256:
            raise ValueError(f"{self.name}: wgmma needs BN in 8..256, a multiple of 8")
        if self.stages < 3:
            raise ValueError(f"{self.name}: the pipeline needs at least 3 stages")
        if self.ahead not in (0, self.stages - 2, self.stages - 1):
            raise ValueError(f"{self.name}: loads run STAGES - 2 or STAGES - 1 stages ahead")

    @property
    def loads_ahead(self) -> int:
        return self.ahead or self.stages - 2

    @property
    def threads(self) -> int:
        return 128 * self.wm * self.wn

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory: the stages plus 1 KB so the kernel can align to 1024 bytes."""
        return self.stages * (self.bm + self.bn) * self.bk + 1024

    @property
    def tma_shared_bytes(self) -> int:
        """Dynamic shared memory of the TMA variant of this tile (kernels/gemm_tma.cuh,
        gemm_tma_simple): the stages, STAGES full mbarriers rounded up to 128 bytes, 256 bytes
        of tensor-map scratch, plus 1 KB so the kernel can align to 1024 bytes."""
        return self.stages * (self.bm + self.bn) * self.bk + 1024 + ceil_div(8 * self.stages, 128) * 128 + 256

    @property
    def epilogue_chunk(self) -> int:
        return epilogue_chunk(self.threads, blocks_per_sm(self))

    def template(self) -> list[tuple[str, int]]:
        return super().template() + [("STAGES", self.stages), ("AHEAD", self.loads_ahead),
                                     ("CHUNK", self.epilogue_chunk)]

    def tma_template(self) -> list[tuple[str, int]]:
        """Template arguments of the TMA variant (gemm_tma_simple; AHEAD as for cp.async)."""
        return [("BM", self.bm), ("BN", self.bn), ("BK", self.bk), ("WM", self.wm), ("STAGES", self.stages),
                ("AHEAD", self.loads_ahead), ("CHUNK", self.epilogue_chunk)]


EPILOGUE_CHUNK = 8
"""Column groups (8 columns each) whose epilogue factors (W8A8: s_w, bias) a thread loads before
storing any of them (kernels/gemm_sm90.cuh, store_accumulators): each chunk costs one L2 round trip,
since a load cannot pass a store to an output that might alias it."""


def epilogue_chunk(threads: int, blocks: int) -> int:
    """The CHUNK template argument of a kernel with `blocks` blocks of `threads` threads per SM:
    EPILOGUE_CHUNK, or 1 where the SM holds 512 threads or more (128 registers each). With 8 the
    wg2_128x128_x2 tile's W8A8 kernel took 138 registers and lost its second block per SM (H200,
    2026-12-01: 128 x 3584 x 18944 37.0 -> 50.2 µs); with two blocks per SM the other block's main
    loop covers an epilogue's waits anyway."""
    return 1 if threads * blocks >= 512 else EPILOGUE_CHUNK


CUDA_CONFIGS = {
    cfg.name: cfg
    for cfg in (
        # Large problems: 2 warpgroups x m64n256, 192 KB of stages, one block per SM.
        CudaTileConfig("wg2_128x256", bm=128, bn=256, bk=128, wm=2, wn=1, stages=4),
        # Mid-size problems: 96 KB of stages so that two blocks share an SM and one block's
        # wgmma overlaps the other's barrier and loads (loads 2 stages ahead, no wgmma in flight).
        CudaTileConfig("wg2_128x128_x2", bm=128, bn=128, bk=128, wm=2, wn=1, stages=3, ahead=2),
        # Small M (decode-like): one warpgroup, two blocks per SM.
        CudaTileConfig("wg1_64x64", bm=64, bn=64, bk=128, wm=1, wn=1, stages=6),
        # Narrower tiles for the TMA GEMM (tma_plan): 128 x 192 and 128 x 144 make the tile
        # count a multiple of the SMs where 128 x 256 / 128 x 128 leave a partial wave; 64 x 32
        # gives decode-sized M a block on every SM of a 4096-wide weight.
        CudaTileConfig("wg2_128x192", bm=128, bn=192, bk=128, wm=2, wn=1, stages=5),
        CudaTileConfig("wg2_128x144", bm=128, bn=144, bk=128, wm=2, wn=1, stages=6),
        CudaTileConfig("wg1_64x32", bm=64, bn=32, bk=128, wm=1, wn=1, stages=8),
        # Long K, few tiles (split-K): 3584 = 32 x 112, so 4 splits of 128 x 112 put a block on 128
        # of 132 SMs where 128 x 144 x 4 fills 100 (a weight-streaming problem: idle SMs pull no bytes).
        CudaTileConfig("wg2_128x112", bm=128, bn=112, bk=128, wm=2, wn=1, stages=7),
    )
}

CUDA_MAX_SHARED_BYTES = 232448
"""Hopper's largest dynamic shared memory per block (227 KB)."""

CUDA_SIMT_CONFIG = TileConfig("simt_64x64", bm=64, bn=64, bk=32, wm=2, wn=4)
"""The portable __dp4a GEMM (GPUs without wgmma): 8 warps of 32 x 16 outputs, K steps of 32."""


@dataclass(frozen=True)
class CudaPlan:
    """What one CUDA GEMM launch runs: a tile configuration and how many K splits."""

    cfg: TileConfig
    splits: int

    @property
    def name(self) -> str:
        return f"{self.cfg.name}_s{self.splits}"

    def grid(self, m: int, n: int) -> tuple[Launch, tuple[int, int, int], tuple[int, int, int]]:
        """(launch, grid in threads, block) as mx.fast.cuda_kernel wants them."""
        lau = launch(m, n, self.cfg)
        block = (self.cfg.threads, 1, 1)
        return lau, (lau.grid_x * self.cfg.threads, lau.grid_y, self.splits), block

    def map_bytes(self, m: int, n: int) -> int:
        """Bytes of a TMA launch's `maps` output: one TMA_MAP_SLOT_BYTES slot per block."""
        lau = launch(m, n, self.cfg)
        return lau.grid_x * lau.grid_y * self.splits * TMA_MAP_SLOT_BYTES


def split_ranges(k: int, bk: int, splits: int) -> list[tuple[int, int]]:
    """The [first, last) K blocks of each split, as the kernel computes them: balanced, and
    empty only when there are more splits than K blocks (an empty split writes zeros)."""
    blocks = ceil_div(k, bk)
    return [(blocks * z // splits, blocks * (z + 1) // splits) for z in range(splits)]


def tile_count(m: int, n: int, cfg: TileConfig) -> int:
    """Output tiles (blocks of one split) of an [M, N] result in cfg's tiles."""
    return ceil_div(m, cfg.bm) * ceil_div(n, cfg.bn)


def blocks_per_sm(cfg: TileConfig) -> int:
    """Blocks of this configuration that fit on one SM together (shared memory decides)."""
    shared = getattr(cfg, "shared_bytes", 0)
    return max(1, CUDA_SM_SHARED_BYTES // shared) if shared else 1


CUDA_SM_SHARED_BYTES = 233472
"""Shared memory of one Hopper SM available to blocks (228 KB)."""


def cuda_plan(m: int, n: int, k: int, sms: int = 132) -> CudaPlan:
    """Shape-aware choice of tile and split-K for an [M, K] x [N, K] product on `sms` SMs.

    Measured on the H200 (docs/cuda-notes.md): the 128x256 tile is fastest once it alone fills
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


MIN_SPLIT_BLOCKS = 8
"""Fewest K blocks (of BK) a split may own: shorter splits spend their time filling the pipeline."""


# ----------------------------------------------------------------------------------------------
# CUDA activation quantization (kernels/quantize.cuh; launched by backends/cuda.py)
# ----------------------------------------------------------------------------------------------
#
# One block per row. A row of whole 8-value groups (16-byte loads) that fits in THREADS * HELD
# groups is loaded into registers at once and read once; longer rows, K % 8 != 0 and misaligned
# bases take the kernel's two-pass loop (correct at any launch).

QUANT_GROUP = 8
"""Values in one of quantize.cuh's register groups: 16 bytes of float16/bfloat16, 32 of float32."""


@dataclass(frozen=True)
class CudaQuantLaunch:
    """A launch of the quantization kernel: `threads` per block (one block per row), each holding
    up to `held` groups of QUANT_GROUP values in registers (template THREADS, HELD)."""

    threads: int
    held: int

    def __post_init__(self):
        if self.threads % 32 or not 32 <= self.threads <= 1024:
            raise ValueError(f"threads={self.threads}: whole warps, at most 1024 (one block)")
        if self.held < 1:
            raise ValueError(f"held={self.held}: at least one group a thread")

    @property
    def capacity(self) -> int:
        """The longest row (in values) held in registers; longer rows are read twice."""
        return self.threads * self.held * QUANT_GROUP

    def template(self) -> list[tuple[str, int]]:
        return [("THREADS", self.threads), ("HELD", self.held)]

    def grid(self, m: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid in threads, block) for x [M, K]: one block per row."""
        return (m * self.threads, 1, 1), (self.threads, 1, 1)


CUDA_QUANT_LAUNCHES = (CudaQuantLaunch(128, 4), CudaQuantLaunch(256, 4), CudaQuantLaunch(512, 8))
"""Every launch cuda_quant_launch returns, shortest rows first (each is an NVRTC compile per dtype,
~8 s): rows up to 4096, 8192 and 32768 values in registers."""


def cuda_quant_launch(m: int, k: int, sms: int = 132) -> CudaQuantLaunch:
    """The quantization kernel's launch for x [M, K] (float16, bfloat16 or float32) on `sms` SMs.

    Why (H200: ~4 TB/s at ~0.7 µs of loaded DRAM latency, so ~2.8 MB in flight over the GPU,
    ~21 KB per SM, keeps HBM busy; 64K registers and 2048 threads per SM):
    - A block puts its whole row in flight (K * itemsize bytes: 8 KB at K = 4096 float16), so the
      bytes in flight per SM are (resident rows) x (row bytes), however a row is split over threads.
    - Many rows (M > sms): the fewest threads that hold the row, held 4, so that the most rows are
      resident. ptxas (CUDA 13.0): 38 registers at held 4 for 2-byte types (52 for float32), so
      12 blocks of 128 threads per SM: 12 rows x 8 KB = 96 KB in flight at K = 4096 (128, 4);
      6 rows of 256 threads x 16 KB = 96 KB at K = 8192 (256, 4). Longer rows take (512, 8):
      53 registers (80 for float32), two rows of up to 64 KB per SM (float32: one of up to
      128 KB): 76 KB in flight at K = 18944.
    - Few rows (M <= sms): one row per SM, all resident at once whatever the launch; the kernel is
      then one row's latency chain (load, block max, quantize, store), and more warps shorten
      its arithmetic tail (~7 instructions a value in SASS: 4096 values are ~900 warp
      instructions per SM, ~225 per scheduler): (512, 8), 16 warps, 4 per scheduler. Not (1024, 4): a 1024-thread
      block may use at most 64 registers a thread, and float32 at held 4 needs 52 already.
    - Few instantiations: three launches in all, and a model whose layers have one K <= 8192 and
      one longer K builds two of them per dtype (the long-row launch serves both layers at small M).
    Rows longer than 32768 values run (512, 8)'s two-pass loop.
    """
    if m > sms:
        for launch in CUDA_QUANT_LAUNCHES[:2]:
            if k <= launch.capacity:
                return launch
    return CUDA_QUANT_LAUNCHES[-1]


# ----------------------------------------------------------------------------------------------
# CUDA TMA GEMMs (kernels/gemm_tma.cuh; the dispatch: backends/cuda.py, gemm_kernel)
# ----------------------------------------------------------------------------------------------
#
# The three variants load their stages with cp.async.bulk.tensor.2d from tensor maps each block
# encodes on the device into its TMA_MAP_SLOT_BYTES slot of an extra uint8 output.
#   "tma_simple": one block per tile and split (tma_plan), TMA instead of cp.async.
#   "tma_ws":     warp-specialised (1 producer + 2 consumer warpgroups, 384 threads) and
#                 persistent (min(SMs, units) blocks walk the (tile, split) units of ws_unit);
#                 the consumers share each tile (ws_plan).
#   "tma_pp":     the same producer and units, each consumer on whole 128-row tiles, the two
#                 taking turns (pp_plan).
# cuda_gemm_kernel / persistent_kernel choose among them. The TMA needs a row stride that is a
# multiple of 16 bytes: K % TMA_K_MULTIPLE == 0 (a base address that is not 16-byte aligned makes
# the kernels load without the TMA, inside the kernel).

TMA_K_MULTIPLE = 16
TMA_MAP_SLOT_BYTES = 256
"""Bytes of the `maps` output per block: the tensor maps of A and B, 128 bytes each."""

CUDA_WS_THREADS = 384
"""Producer warpgroup + 2 consumer warpgroups (kernels/tma_bounds.cuh sets the launch bound)."""

CUDA_WS_REGISTERS = (40, 232)
"""setmaxnreg of the producer and of the consumers: 128 x 40 + 256 x 232 <= 65536."""


def tma_ok(k: int) -> bool:
    """Whether an [M, K] x [N, K] product can take the TMA kernels (else the cp.async one)."""
    return k > 0 and k % TMA_K_MULTIPLE == 0


TMA_MIN_M = 1
"""Smallest M at which int8_matmul takes the TMA kernel. It was 17 while the TMA kernel ran
cuda_plan's plans (at M = 16: 12.2 µs against the cp.async kernel's 11.6, 2026-12-01 noon); on
tma_plan's plan (64 x 64, one block per tile, no split-K) it measured 11.2-11.8 µs there (H200,
2026-12-01 evening and night, docs/results/cuda-h200-2026-12-01-waves.md), in one kernel where
the cp.async plan needs two (GEMM + split-K reduction). Decode-sized M (1-16) takes it too."""

TMA_MIN_M_W8A8 = 17
"""Smallest M at which w8a8_linear takes the TMA kernel. At M = 16 its pipeline measured 19.1 µs on
the TMA kernel's unsplit 64 x 64 plan (quantization + fused GEMM, 2026-12-01 night) against 15.3 on
the cp.async kernel's 4-split plan (quantization + GEMM + dequantizing reduction, evening), though
the raw GEMMs take the same time: with 4 splits the dequantization runs over 4x the blocks."""


TMA_FILL = 0.85
"""A tile of the TMA GEMM is taken when its tiles alone give this many blocks per SM."""

TMA_LONG_K_BLOCKS = 64
"""From this many K blocks (K >= 8192) the TMA GEMM splits K as cuda_plan does, unless the wave
rule's tile alone fills TMA_LONG_K_FILL of the SMs."""

TMA_LONG_K_FILL = 0.75
"""At long K the wave tile runs unsplit when its tiles alone give this many blocks per SM
(512 x 18944 x 3584: 100 tiles of 128 x 144 on 132 SMs, faster than cuda_plan's split)."""

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


_SPLIT_TILES = ("wg2_128x112",)
"""Tiles the long-K split plan weighs besides the wave tile (split_plan)."""


def split_plan(m: int, n: int, k: int, wave, sms: int = 132) -> CudaPlan:
    """The long-K split plan: the wave tile or a _SPLIT_TILES tile, each split by fill_splits,
    whichever puts blocks on the most SMs (ties to the wave tile). Few tiles at long K stream the
    weight, and an SM without a block pulls none of it: at 128 x 18944 x 3584, 4 splits of
    128 x 112 (32 tiles, 128 blocks) 28.7 µs against 128 x 144's (25 tiles, 100 blocks) 29.3
    (H200 sweep, 2026-12-01 20:08, docs/results/cuda-h200-2026-12-01-q.md)."""
    def busy(cfg):
        return min(sms * blocks_per_sm(cfg), tile_count(m, n, cfg) * fill_splits(m, n, k, cfg, sms))

    best = wave
    for cfg in (CUDA_CONFIGS[name] for name in _SPLIT_TILES):
        if busy(cfg) > busy(best):
            best = cfg
    return CudaPlan(best, fill_splits(m, n, k, best, sms))


def tma_plan(m: int, n: int, k: int, sms: int = 132, w8a8: bool = False) -> CudaPlan:
    """The plan of the TMA GEMM (gemm_tma_simple) for an [M, K] x [N, K] product on `sms` SMs;
    w8a8: for w8a8_linear's fused GEMM (below).

    Measured on the H200 (every tile x 1-8 splits at the 11 seed shapes, CUPTI kernel time,
    docs/results/cuda-h200-2026-12-01-default.md and -waves.md): one block per tile beat split-K
    wherever K < 8192 (the split's workspace round trip and reduction kernel cost more than idle
    SMs), and among the 128-row tiles the one whose tiles leave the least of a partial last wave
    (wave_tile): 512 x 3584 x 18944 on 128 x 192 (3 full waves) 68.6 µs against 84.5 on 128 x 256
    (2.24 waves); 512 x 4096 x 4096 and 128 x 3584 x 18944 on 128 x 144, one wave on 116 / 132 SMs
    with 6 stages, 17.7 / 24.7 µs against 21.8 / 28.9 on 128 x 128 (3 stages, sized for two blocks
    per SM). When the 128-row tiles cannot fill the SMs, 128 x 128 (two per SM) or 64 x 64. At long
    K (K >= 8192) the wave tile runs unsplit where it alone fills most SMs (512 x 18944 x 3584:
    128 x 144 unsplit 56.0 µs, cuda_plan's 2 splits 62.3), else its K is split until its blocks
    fill the SMs once (fill_splits; 128 x 18944 x 3584: 128 x 144 x 4 splits 29.4 µs, cuda_plan's
    128 x 128 x 8 splits 33.4, 2026-12-01 16:24, docs/results/cuda-h200-2026-12-01-late.md), on
    the tile whose splits fill the most SMs (split_plan: 128 x 112 there).

    W8A8 keeps the rule without the wave tile (128 x 256, 128 x 128, 64 x 64; cuda_plan at long
    K): its dequantizing epilogue runs after each block's main loop, an unhidden tail that grows
    with the outputs per block, so the one-block-per-SM wave tiles lost there (2026-12-01 night:
    128 x 3584 x 18944 43.4 µs on 128 x 144 against 37.5 on 128 x 128, two blocks per SM;
    512 x 18944 x 3584 89.9 unsplit against 78.9 with 2 splits and the dequantizing reduction).
    Where the int32 plan splits K, W8A8 takes it: its GEMM is then the int32 kernel, and the
    dequantization runs in the reduction, so the tail above does not arise (128 x 18944 x 3584,
    2026-12-01 19:20: the int32 GEMM 25.5 µs on 128 x 144 x 4 splits, against 28.7 on cuda_plan's
    128 x 128 x 8 that W8A8 took, whose reduction also read twice the partial sums).
    """
    long_k = ceil_div(k, CUDA_SWIZZLE_BYTES) >= TMA_LONG_K_BLOCKS
    wave = wave_tile(m, n, sms) if m > 64 and (long_k or not w8a8) else None
    if long_k:
        if wave is None:
            return cuda_plan(m, n, k, sms)
        if tile_count(m, n, wave) >= TMA_LONG_K_FILL * sms:
            return cuda_plan(m, n, k, sms) if w8a8 else CudaPlan(wave, 1)
        return split_plan(m, n, k, wave, sms)
    candidates = [wave or CUDA_CONFIGS[_TMA_TILES[0]]] + [CUDA_CONFIGS[name] for name in _TMA_TILES[1:]]
    for cfg in candidates:
        if cfg.bm > 64 and m <= 64:
            continue  # a 128-row tile for at most 64 rows: half of every stage would be padding
        if tile_count(m, n, cfg) >= TMA_FILL * sms:
            return CudaPlan(cfg, 1)
    return CudaPlan(CUDA_CONFIGS["wg1_64x64"], 1)


def cuda_gemm_kernel(m: int, n: int, k: int, w8a8: bool = False, sms: int = 132) -> str:
    """The sm_90a int8 GEMM for (M, N, K) by default (INT8NAX_CUDA_KERNEL unset or auto), for
    int8_matmul or (w8a8) w8a8_linear: where K % 16 == 0 and M >= TMA_MIN_M (TMA_MIN_M_W8A8) a TMA
    kernel: persistent_kernel's choice for problems of many tiles, else "tma_simple" (TMA loads +
    mbarrier pipeline, planned by tma_plan); elsewhere "wgmma" (the cp.async kernel)."""
    if not tma_ok(k) or m < (TMA_MIN_M_W8A8 if w8a8 else TMA_MIN_M):
        return "wgmma"
    return persistent_kernel(m, n, k, sms, w8a8) or "tma_simple"


PERSISTENT_MIN_TILES = 1.5
"""The persistent kernels are weighed once the 128 x 256 tiles number this many per SM: below,
tma_plan's one-block-per-tile grid has no second tile per SM whose work could hide a tile's
pipeline fill and epilogue."""

PERSISTENT_WAVE_FILL = 0.9
"""The cooperative kernel (128 x 256 tiles) is taken when its rounds of SMs tiles are filled this
much (tiles / (rounds x SMs)); below, the ping-pong kernel's half-size tiles even out the rounds."""


def persistent_kernel(m: int, n: int, k: int, sms: int = 132, w8a8: bool = False) -> str | None:
    """"tma_ws" (cooperative consumers on 128 x 256 tiles, ws_plan), "tma_pp" (ping-pong consumers
    on 128 x 128 tiles, pp_plan) or None (tma_plan's grid) for an [M, K] x [N, K] product, the
    int32 GEMM or (w8a8) W8A8's.

    Measured on the H200 (CUPTI kernel time, 2026-12-01 17:45, docs/results/cuda-h200-2026-12-01-pp.md),
    persistent against tma_plan's plan: 2048 x 4096^2 (256 tiles of 128 x 256 on 132 SMs, rounds
    97 % full) tma_ws 53.5 µs against 55.0, tma_pp 57.2; 8192^3 (97 %) tma_ws 740 against 782,
    tma_pp 853; 512 x 3584 x 18944 (296 tiles, 75 % full) tma_pp 64.0 against 68.6, tma_ws 71.6.
    Below PERSISTENT_MIN_TILES (1024 x 4096^2, the 18944-wide and -deep shapes at M <= 512, small
    M) tma_plan's plans were fastest. W8A8 where tma_pp is taken: 512 x 3584 x 18944 86.3 µs
    against 111.3 on tma_plan's W8A8 plan. W8A8 where tma_ws would be: only from
    W8A8_WS_MIN_ROUNDS rounds of tiles (the pipeline, 2026-12-01 21:00, same run,
    docs/results/cuda-h200-2026-12-01-q.md: 8192^3, 15.5 rounds, 815.5 µs against 860.0 on
    tma_plan's plan; 2048 x 4096^2, 2 rounds, 83.9 against 79.5).
    """
    large = CUDA_WS_CONFIGS["ws_128x256"]
    tiles = tile_count(m, n, large)
    if m <= 64 or tiles < PERSISTENT_MIN_TILES * sms:
        return None
    rounds = ceil_div(tiles, sms)
    if tiles / (rounds * sms) >= PERSISTENT_WAVE_FILL:
        return None if w8a8 and rounds < W8A8_WS_MIN_ROUNDS else "tma_ws"
    return "tma_pp"


W8A8_WS_MIN_ROUNDS = 8
"""Rounds of 128 x 256 tiles from which W8A8 takes the cooperative kernel (its fused epilogue is
each unit's unhidden tail, which a long walk of units amortises against the persistent grid's
gain). Measured at 2 rounds (slower than tma_plan's grid by 6 %) and 15.5 (faster by 5 %); 8 lies
between, unmeasured."""


@dataclass(frozen=True)
class CudaPersistentConfig(TileConfig):
    """What the persistent TMA GEMMs' tiles share (kernels/gemm_tma.cuh, persistent_start): 384
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
        """Stages, 2 x STAGES + EXTRA_BARRIERS mbarriers (8 bytes each) rounded up to 128 bytes, 256
        bytes of map scratch, 1 KB for the 1024-byte alignment."""
        barriers = ceil_div(8 * (2 * self.stages + self.EXTRA_BARRIERS), 128) * 128
        return self.stages * (self.bm + self.bn) * self.bk + 1024 + barriers + 256


@dataclass(frozen=True)
class CudaWsConfig(CudaPersistentConfig):
    """A tile of the cooperative warp-specialised TMA GEMM (gemm_tma_ws): BM = 128 (each consumer
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


CUDA_WS_CONFIGS = {
    cfg.name: cfg
    for cfg in (
        # Large: 2 x m64n256 consumers, 4 stages of 48 KB.
        CudaWsConfig("ws_128x256", bm=128, bn=256, bk=128, wm=2, wn=1, stages=4),
        # Mid: 2 x m64n128, 6 stages of 32 KB.
        CudaWsConfig("ws_128x128", bm=128, bn=128, bk=128, wm=2, wn=1, stages=6),
        # Small M: 64 rows, consumers side by side along N (2 x m64n64), 8 stages of 24 KB.
        CudaWsConfig("ws_64x128", bm=64, bn=128, bk=128, wm=1, wn=2, stages=8),
    )
}


@dataclass(frozen=True)
class CudaPingPongConfig(CudaPersistentConfig):
    """A tile of the ping-pong TMA GEMM (gemm_tma_pp): each consumer warpgroup owns whole BM = 128
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


CUDA_PP_CONFIGS = {
    cfg.name: cfg
    for cfg in (
        # cuBLASLt's tile at 2048 x 4096^2, 512 x 3584 x 18944 and 8192^3, 7 stages of 32 KB (224 KB,
        # the depth of cuBLASLt's 231 KB kernels; 0-2 % faster than 6 stages at every seed shape,
        # H200 2026-12-01 17:45).
        CudaPingPongConfig("pp_128x128", bm=128, bn=128, bk=128, wm=1, wn=1, stages=7),
        # Twice the tiles, for problems whose 128 x 128 tiles leave SMs idle: 8 stages of 24 KB.
        CudaPingPongConfig("pp_128x64", bm=128, bn=64, bk=128, wm=1, wn=1, stages=8),
    )
}


@dataclass(frozen=True)
class CudaWsPlan:
    """One launch of a persistent GEMM (gemm_tma_ws, or gemm_tma_pp with a CudaPingPongConfig):
    tile, K splits, raster band height, blocks."""

    cfg: CudaWsConfig | CudaPingPongConfig
    splits: int
    group: int
    blocks: int

    @property
    def name(self) -> str:
        return f"{self.cfg.name}_s{self.splits}_g{self.group}_b{self.blocks}"

    def plan_shape(self) -> tuple[int, int]:
        """The shape of the kernel's `plan` input: (splits, group)."""
        return (self.splits, self.group)

    def grid(self) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid in threads, block) as mx.fast.cuda_kernel wants them."""
        return (self.blocks * CUDA_WS_THREADS, 1, 1), (CUDA_WS_THREADS, 1, 1)


def ws_units(m: int, n: int, cfg: TileConfig, splits: int) -> int:
    return tile_count(m, n, cfg) * splits


def ws_group(tiles_m: int, cfg: TileConfig, sms: int) -> int:
    """Band height (M-tiles) of the raster: the largest power of two g with g * BM about the
    rows of B the other sms / g blocks touch (g^2 <= sms * BN / BM), at most tiles_m."""
    g = 1
    while (2 * g) ** 2 * cfg.bm <= sms * cfg.bn and 2 * g <= tiles_m:
        g *= 2
    return max(1, min(g, tiles_m))


def ws_plan(m: int, n: int, k: int, sms: int = 132) -> CudaWsPlan:
    """The cooperative persistent TMA GEMM's plan: the 64-row tile for M <= 64, 128 x 256 once its
    tiles alone fill the SMs, else 128 x 128; then K split in powers of two while the units
    still fit on the SMs at once and every split keeps MIN_SPLIT_BLOCKS K blocks (the partial
    sums go to a [splits, M, N] workspace, summed by the reduce kernel, which for W8A8 also
    dequantizes; W8A8 takes the same plans). The dispatch takes it only where persistent_kernel
    says "tma_ws" (128 x 256, unsplit there: int32 measured on the H200, W8A8 predicted,
    persistent_kernel's docstring); its other plans are the trial's (tools/tma_gemm_trial.py)."""
    large = CUDA_WS_CONFIGS["ws_128x256"]
    if m <= 64:
        cfg = CUDA_WS_CONFIGS["ws_64x128"]
    elif ws_units(m, n, large, 1) >= sms:
        cfg = large
    else:
        cfg = CUDA_WS_CONFIGS["ws_128x128"]
    k_blocks = ceil_div(k, cfg.bk)
    splits = 1
    while ws_units(m, n, cfg, splits * 2) <= sms and k_blocks // (splits * 2) >= MIN_SPLIT_BLOCKS:
        splits *= 2
    units = ws_units(m, n, cfg, splits)
    return CudaWsPlan(cfg, splits, ws_group(ceil_div(m, cfg.bm), cfg, sms), max(1, min(sms, units)))


def ws_unit(u: int, m: int, n: int, k: int, cfg: TileConfig, splits: int, group: int) -> tuple[int, int, int, int, int]:
    """(m0, n0, split, first K block, K blocks) of work unit u; mirrors gemm_tma.cuh's ws_unit."""
    tiles_m, tiles_n = ceil_div(m, cfg.bm), ceil_div(n, cfg.bn)
    tile, z = divmod(u, splits)
    band, r = divmod(tile, group * tiles_n)
    first_m = band * group
    rows = min(group, tiles_m - first_m)
    tile_m, tile_n = first_m + r % rows, r // rows
    k_blocks = ceil_div(k, cfg.bk)
    kb0, kb1 = k_blocks * z // splits, k_blocks * (z + 1) // splits
    return tile_m * cfg.bm, tile_n * cfg.bn, z, kb0, kb1 - kb0


def pp_plan(m: int, n: int, k: int, sms: int = 132, w8a8: bool = False) -> CudaWsPlan:
    """The ping-pong GEMM's plan: 128 x 128 tiles, or 128 x 64 where the 128 x 128 tiles give
    fewer units than SMs; K split (not for W8A8) in powers of two while the units still fit on
    the SMs at once and every split keeps MIN_SPLIT_BLOCKS K blocks; ws_group's raster;
    min(SMs, units) blocks. The dispatch takes it only where persistent_kernel says "tma_pp"
    (128 x 128 unsplit there, the sweep's fastest at 512 x 3584 x 18944: H200, 2026-12-01 17:45,
    docs/results/cuda-h200-2026-12-01-pp.md)."""
    cfg = CUDA_PP_CONFIGS["pp_128x128"]
    if ws_units(m, n, cfg, 1) < sms:
        cfg = CUDA_PP_CONFIGS["pp_128x64"]
    k_blocks = ceil_div(k, cfg.bk)
    splits = 1
    while (not w8a8 and ws_units(m, n, cfg, splits * 2) <= sms
           and k_blocks // (splits * 2) >= MIN_SPLIT_BLOCKS):
        splits *= 2
    units = ws_units(m, n, cfg, splits)
    return CudaWsPlan(cfg, splits, ws_group(ceil_div(m, cfg.bm), cfg, sms), max(1, min(sms, units)))
