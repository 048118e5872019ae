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
# The emulator (int8nax.nax_emulator) walks exactly this grid with these constants.

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
"""The default tile for M > METAL_SMALL_MAX_M: 16 simdgroups (512 threads), 32 x 32 per
simdgroup, K in blocks of 512. MLX's default NAX tile, and the int8 tile cider measured on an
M5 Pro (class 's'), where BK 512 beat BK 128 by 1.12x. The backend times it against the other
METAL_LARGE_CANDIDATES on the device at first use and serves the fastest
(backends/metal/tiles.py); this one serves until then, and whenever nothing could be timed."""

METAL_SMALL = NaxTileConfig("metal_32x128", bm=32, bn=128, bk=512, wm=1, wn=4)
"""Small-M tile (4 simdgroups, 128 threads): a 128-row tile would leave most simdgroups idle."""

METAL_MEDIUM = NaxTileConfig("metal_64x128", bm=64, bn=128, bk=256, wm=2, wn=4)
"""8 simdgroups (256 threads) of the same 32 x 32 sub-tile: the tile MLX's float NAX GEMM takes
on the larger M5 classes ('s', 'c', 'd': BM 64, WM 2, BK 256), a candidate of the on-device tile
choice, and the 256-thread form a 512-thread tile falls back to when a pipeline allows fewer
threads (metal_fallback_config)."""

METAL_WIDE8 = NaxTileConfig("metal_128x128_8sg", bm=128, bn=128, bk=512, wm=4, wn=2)
"""8 simdgroups (256 threads) of 32 x 64 each over cider's 128 x 128 x 512 tile: the best int8
form of the M5 Max study used 8 simdgroups; a candidate of the on-device tile choice."""

METAL_LARGE_CANDIDATES = (METAL_LARGE, METAL_MEDIUM, METAL_WIDE8)
"""The tiles timed against each other at first use on the GPU for M > METAL_SMALL_MAX_M
(backends/metal/tiles.py); METAL_LARGE, the measured one, comes first and is the default."""

METAL_CONFIGS = (METAL_SMALL, METAL_LARGE, METAL_MEDIUM, METAL_WIDE8)
"""Every tile the Metal GEMMs can launch (the bounded set of GEMM builds is made of these)."""

METAL_FALLBACK_THREADS = METAL_MEDIUM.threads
"""Threads of the tile a larger one falls back to when a pipeline allows fewer threads per
threadgroup (MLX raises "Thread group size ... is greater than the maximum allowed")."""


def metal_fallback_config(cfg: NaxTileConfig, max_threads: int) -> NaxTileConfig | None:
    """The tile to launch instead of `cfg` when its pipeline allows only `max_threads` threads per
    threadgroup: the largest of METAL_MEDIUM (256 threads) and METAL_SMALL (128) that fits, both
    made of the 32 x 32 sub-tile, so no thread holds more than in cider's tile; None when none fits
    (or `cfg` already fits). relaxed_precision is kept."""
    if cfg.threads <= max_threads:
        return None
    for smaller in (METAL_MEDIUM, METAL_SMALL):
        if smaller.threads <= max_threads and smaller.threads < cfg.threads:
            return replace(smaller, relaxed_precision=cfg.relaxed_precision)
    return None

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
    """The default tile for an [M, K] x [N, K] GEMM on a GPU of class `gpu` (None: unknown):
    small M takes METAL_SMALL, the rest METAL_LARGE on every class (the backend replaces it by
    the tile chosen on the device: metal_gemm_dispatch's `config`)."""
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
                        relaxed_precision: bool = True, config: NaxTileConfig | None = None) -> MetalGemmDispatch:
    """The launch of an [M, K] x [N, K] NAX GEMM on a GPU of class `gpu` (see metal_config), or in
    tile `config` when given (the tile chosen on the device, or a threadgroup-limit fallback)."""
    cfg = config or metal_config(m, n, k, gpu)
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


METAL_DECODE_PIECE = 8
"""Contiguous weight bytes each lane reads per step in the W8A8 decode kernel
(kernels/metal/w8a8_decode.metal): cider's decode kernel reads 8 a lane (VPT = 8)."""


def metal_decode_dispatch(m: int, n: int, k: int) -> MetalGemvDispatch:
    """The W8A8 decode launch (M <= METAL_MV_MAX_M): the small-M kernel's threadgroups and columns,
    METAL_DECODE_PIECE bytes a lane, and the quantizer's constants (it quantizes in registers)."""
    d = metal_gemv_dispatch(m, n, k)
    template = [("MV_ROWS", METAL_MV_ROWS), ("MV_SG", METAL_MV_SIMDGROUPS), ("MV_MAX_M", METAL_MV_MAX_M),
                ("SIMD", SIMD_WIDTH), ("MV_PIECE", METAL_DECODE_PIECE), ("QMAX", QMAX), ("TINY", TINY_SHIFT)]
    return MetalGemvDispatch(d.grid, d.threadgroup, template, d.params)


@dataclass(frozen=True)
class MetalQuantDispatch:
    """Launch of the activation-quantization kernel: one threadgroup of QT threads per row."""

    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    template: list[tuple[str, int]]


METAL_QUANT_FALLBACK_THREADS = SIMD_WIDTH
"""Threads per row of the quantizer when a pipeline refuses METAL_QUANT_THREADS: one simdgroup,
which every Metal pipeline allows."""


def metal_quant_dispatch(rows: int, threads: int = METAL_QUANT_THREADS) -> MetalQuantDispatch:
    """One threadgroup of `threads` (METAL_QUANT_THREADS, or METAL_QUANT_FALLBACK_THREADS) per row."""
    if threads not in (METAL_QUANT_THREADS, METAL_QUANT_FALLBACK_THREADS):
        raise ValueError(f"metal_quant_dispatch: threads must be {METAL_QUANT_THREADS} or "
                         f"{METAL_QUANT_FALLBACK_THREADS}, got {threads}")
    qt = threads
    return MetalQuantDispatch((qt, rows, 1), (qt, 1, 1),
                              [("QT", qt), ("SIMD", SIMD_WIDTH), ("QMAX", QMAX), ("TINY", TINY_SHIFT)])
