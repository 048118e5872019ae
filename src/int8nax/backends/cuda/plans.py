"""The CUDA kernels' tiles and plans: tile configurations, the grid and persistent plans, split-K
and the quantization kernel's launch. Pure Python: no MLX, no GPU, so every rule runs on any
machine with the SM count as an argument (132, the H200's, by default).

Which variant runs a problem is backends/cuda/choice.py's business; this module says how each
variant tiles a problem once chosen. The generic launch math (ceil_div, TileConfig, the swizzled
grid) is int8nax.tiling's, shared with the Metal kernels and the emulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ...tiling import Launch, TileConfig, ceil_div, launch

# The CUDA GEMM runs warpgroups (4 warps, 128 threads) that issue wgmma m64nBNk32 s8 from shared
# memory. A block is WM warpgroups stacked along M (BM = 64 * WM, WN = 1: each warpgroup spans
# the whole BN). K advances BK = 128 bytes per pipeline stage: one 128-byte row per tile row is
# exactly the wgmma 128-byte swizzle atom. STAGES shared-memory stages are filled by cp.async,
# AHEAD stages ahead of the one being multiplied: STAGES - 2 lets one wgmma batch stay in flight
# across the next barrier, STAGES - 1 keeps one more stage of loads in flight instead
# (kernels/cuda/gemm/cpasync.cuh).
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
        """Dynamic shared memory of this tile in the TMA kernel (kernels/cuda/gemm/tma_unspecialized.cuh):
        the stages, STAGES full mbarriers rounded up to 128 bytes, 256 bytes of tensor-map scratch,
        plus 1 KB so the kernel can align to 1024 bytes."""
        return tma_shared_bytes(self, self.stages)

    @property
    def epilogue_chunk(self) -> int:
        return epilogue_chunk(self.threads, blocks_per_sm(self))

    def template(self) -> list[tuple[str, int]]:
        return super().template() + [("STAGES", self.stages), ("AHEAD", self.loads_ahead),
                                     ("CHUNK", self.epilogue_chunk)]

    def tma_template(self) -> list[tuple[str, int]]:
        """Template arguments of this tile in the TMA kernel (gemm_tma_unspecialized; AHEAD as for
        cp.async)."""
        return [("BM", self.bm), ("BN", self.bn), ("BK", self.bk), ("WM", self.wm), ("STAGES", self.stages),
                ("AHEAD", self.loads_ahead), ("CHUNK", self.epilogue_chunk)]


def tma_shared_bytes(cfg, barriers: int) -> int:
    """Dynamic shared memory of a TMA kernel's tile: cfg.stages stages of (BM + BN) x BK bytes,
    `barriers` mbarriers (8 bytes each) rounded up to 128 bytes, 256 bytes of tensor-map scratch,
    1 KB so the kernel can align to 1024 bytes."""
    return cfg.stages * (cfg.bm + cfg.bn) * cfg.bk + 1024 + ceil_div(8 * barriers, 128) * 128 + 256


EPILOGUE_CHUNK = 8
"""Column groups (8 columns each) whose epilogue factors (W8A8: s_w, bias) a thread loads before
storing any of them (kernels/cuda/epilogue/store_accumulators.cuh): each chunk costs one L2 round trip,
since a load cannot pass a store to an output that might alias it."""


def epilogue_chunk(threads: int, blocks: int) -> int:
    """The CHUNK template argument of a kernel with `blocks` blocks of `threads` threads per SM:
    EPILOGUE_CHUNK, or 1 where the SM holds 512 threads or more (128 registers each): with 8 the
    wg2_128x128_x2 tile's W8A8 kernel needs more registers than two blocks per SM leave it and
    loses its second block (tests/data/cuda_dispatch_evidence.json); with two blocks per SM the
    other block's main loop covers an epilogue's waits anyway."""
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


MIN_SPLIT_BLOCKS = 8
"""Fewest K blocks (of BK) a split may own: shorter splits spend their time filling the pipeline."""


# ----------------------------------------------------------------------------------------------
# CUDA activation quantization (kernels/cuda/quant/quantize.cuh; launched by backends/cuda/graphs.py)
# ----------------------------------------------------------------------------------------------
#
# One block per row. A row of whole 8-value groups (16-byte loads) that fits in THREADS * HELD
# groups is loaded into registers at once and read once; longer rows, K % 8 != 0 and misaligned
# bases take the kernel's two-pass loop (correct at any launch).

QUANT_GROUP = 8
"""Values in one of quant/quantize.cuh's register groups: 16 bytes of float16/bfloat16, 32 of float32."""


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


SWIGLU_HELD_BYTES = 256
"""Most bytes of g and u one thread of the SwiGLU quantization may hold in registers (below)."""


def swiglu_held_bytes(launch: CudaQuantLaunch, itemsize: int) -> int:
    """Bytes of g and u a thread holds at `launch` (two inputs of `held` groups each)."""
    return 2 * launch.held * QUANT_GROUP * itemsize


SWIGLU_PAIR_LAUNCH = CudaQuantLaunch(512, 5)
"""The SwiGLU kernel's launch for many long rows of a 2-byte type: two rows an SM. ptxas (CUDA 13.0,
sm_90a) gives it 59 registers a thread for float16 and bfloat16, allocated as 64: 2 x 512 x 64 =
65536, an SM's whole register file; it holds rows up to 20480 values (Qwen2.5-7B's 18944)."""

SWIGLU_QUANT_LAUNCHES = CUDA_QUANT_LAUNCHES + (SWIGLU_PAIR_LAUNCH,)
"""Every launch cuda_swiglu_quant_launch returns."""


def cuda_swiglu_quant_launch(m: int, hidden: int, itemsize: int, sms: int = 132) -> CudaQuantLaunch:
    """The SwiGLU quantization kernel's launch (kernels/cuda/quant/swiglu_quantize.cuh) for y [M, 2H]
    (H = hidden; itemsize 2 for float16/bfloat16, 4 for float32) on `sms` SMs: one of
    SWIGLU_QUANT_LAUNCHES.

    Why: the kernel is the quantization kernel over h [M, H], with each held group of h loaded as
    a group of g and one of u, so cuda_quant_launch(m, hidden)'s reasoning carries over (a row
    of h fits the launch's capacity in registers; every row's 2H loads in flight), with twice
    the bytes in flight per resident row, and twice the held registers per thread. ptxas (CUDA
    13.0, sm_90a; tools/cuda_compile_check.py) gives, in registers a thread, no spills:
    - float16 / bfloat16: 64 / 54 at (128, 4) and (256, 4), 80 at (512, 8): 128 bytes held at
      held 4, 256 at held 8; every launch fits 64K registers (512 x 80 = 40960: one row per SM,
      2 x 18944 x 2 = 76 KB in flight at Qwen2.5-7B's H = 18944, 48 KB at Qwen3-8B's 12288;
      Qwen2.5-0.5B's 4864 takes (256, 4) at M > sms, 4 rows x 19 KB);
    - float32: 80 at held 4 (256 bytes held), but 144 at (512, 8) (512 bytes): 512 x 144 =
      73728 registers, more than an SM has, so that launch would fail. A launch that holds more
      than SWIGLU_HELD_BYTES a thread is replaced by (256, 4), the widest that fits: rows up to
      8192 held, longer ones read twice (float32 is not a model's serving type).
    - Many long rows of a 2-byte type (M > sms, 8192 < H <= 20480): SWIGLU_PAIR_LAUNCH, two rows
      an SM, where (512, 8)'s 80 registers fit one. On the H200 (2026-12-05) the kernel at (512, 8)
      took 0.252 ms a layer at 4096 tokens of Qwen2.5-7B, 1.5 TB/s over the 388 MB it must move:
      with one row an SM, nothing loads while a row's maximum is reduced and its codes are
      computed and stored. A second row an SM loads meanwhile: 0.161 ms at (512, 5) (H200,
      2026-12-05; ~0.15 predicted), against 0.226 for swiglu and the quantization kernel.
    """
    launch = cuda_quant_launch(m, hidden, sms)
    pair = SWIGLU_PAIR_LAUNCH
    if itemsize == 2 and m > sms and launch.held > pair.held and hidden <= pair.capacity:
        return pair
    if swiglu_held_bytes(launch, itemsize) <= SWIGLU_HELD_BYTES:
        return launch
    return max((x for x in CUDA_QUANT_LAUNCHES if swiglu_held_bytes(x, itemsize) <= SWIGLU_HELD_BYTES),
               key=lambda x: (x.threads, x.capacity))


SMEM_PER_BLOCK = 227 * 1024
"""The most dynamic shared memory one block may ask for on compute capability 9.0."""

STAGED_THREADS = 512
"""Threads of a staged block: the fused kernel's long-row launch (cuda_quant_launch's reasoning)."""

STAGED_STATIC_SMEM = 4 * (STAGED_THREADS // 32)
"""The staged kernel's static shared memory (a word a warp for the row maximum): it counts
against SMEM_PER_BLOCK with the buffers."""

STAGED_MAX_HELD = 8
"""The most groups a thread of a staged block holds (h's row held in registers, read from shared
memory once); longer rows take the one-row-a-block kernel."""


@dataclass(frozen=True)
class CudaStagedLaunch:
    """The staged SwiGLU quantization's launch (kernels/cuda/quant/swiglu_quantize_staged.cuh): `blocks`
    persistent blocks of `threads`, each quantizing every blocks-th row with up to `held` groups a
    thread in registers, over two row buffers of 2H values of `itemsize` bytes in shared memory."""

    threads: int
    held: int
    hidden: int
    itemsize: int
    blocks: int

    @property
    def capacity(self) -> int:
        return self.threads * self.held * QUANT_GROUP

    @property
    def stage_bytes(self) -> int:
        """Both buffers: the kernel's dynamic shared memory."""
        return 2 * 2 * self.hidden * self.itemsize

    def template(self) -> list[tuple[str, int]]:
        return [("THREADS", self.threads), ("HELD", self.held), ("STAGE_BYTES", self.stage_bytes)]

    def grid(self, m: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(grid in threads, block) for y [M, 2H]: min(M, blocks) blocks."""
        return (min(m, self.blocks) * self.threads, 1, 1), (self.threads, 1, 1)


def staged_max_hidden(itemsize: int) -> int:
    """The longest row H (a multiple of 8) whose two buffers of 2H values fit a staged block."""
    return (SMEM_PER_BLOCK - STAGED_STATIC_SMEM) // (4 * itemsize) // QUANT_GROUP * QUANT_GROUP


def cuda_swiglu_staged_launch(m: int, hidden: int, itemsize: int, sms: int = 132) -> CudaStagedLaunch | None:
    """The staged SwiGLU quantization's launch for y [M, 2H] (H = hidden) on `sms` SMs, or None
    where it does not apply (then cuda_swiglu_quant_launch's one-row-a-block kernel runs).

    Why (quant/swiglu_quantize_staged.cuh): the one-row-a-block kernel's blocks load, then compute,
    and an SM's blocks do so in step, so its time is the loads' plus the arithmetic's; a
    persistent block that copies its next row into shared memory while it quantizes this one
    overlaps them. Predicted at 4096 tokens of Qwen2.5-7B on the H200: ~0.09 ms a layer (the
    larger of ~0.08 ms of loads and ~0.08 of arithmetic, plus a row's start), against 0.161.
    - 2-byte types (float16, bfloat16: what models serve in) whose rows are whole 16-byte groups
      (H % 8 == 0), two buffers and the kernel's static words within one block's shared memory
      (staged_max_hidden: H <= 29048), and h's row held in registers (H <= 512 x 8 x 8).
    - 512 threads (the fused kernel's long-row launch), held = the fewest groups a thread that
      hold the row, one block an SM: ptxas wants 112-136 registers a thread (CUDA 13.0, sm_90a),
      so the kernel's launch bound (cuda_source.LAUNCH_BOUNDS) bounds it to 128, an SM's whole register file.
      Qwen2.5-7B's H = 18944 stages 148 KB; Qwen3-8B's 12288, 96 KB.
    - At least two rows a block (M >= 2 x SMs): with one, nothing is loaded while it computes,
      and the one-row-a-block kernel does as well.
    """
    if itemsize != 2 or hidden % QUANT_GROUP:
        return None
    held = ceil_div(hidden, STAGED_THREADS * QUANT_GROUP)
    if held > STAGED_MAX_HELD or hidden > staged_max_hidden(itemsize) or m < 2 * sms:
        return None
    return CudaStagedLaunch(STAGED_THREADS, held, hidden, itemsize, sms)


# ----------------------------------------------------------------------------------------------
# CUDA TMA GEMMs (kernels/cuda/gemm_tma_*.cuh; which one runs: backends/cuda/choice.py)
# ----------------------------------------------------------------------------------------------
#
# The three variants load their stages with cp.async.bulk.tensor.2d from tensor maps each block
# encodes on the device into its TMA_MAP_SLOT_BYTES slot of an extra uint8 output.
#   tma-unspecialized:   one block per tile and split (tma_plan), TMA instead of cp.async.
#   tma-ws-cooperative:  warp-specialised (1 producer + 2 consumer warpgroups, 384 threads) and
#                        persistent (min(SMs, units) blocks walk the (tile, split) units of
#                        ws_unit); the consumers share each tile (cooperative_plan).
#   tma-ws-pingpong:     the same producer and units, each consumer on whole 128-row tiles, the
#                        two taking turns (pingpong_plan).
# The TMA needs a row stride that is a
# multiple of 16 bytes: K % TMA_K_MULTIPLE == 0 (a base address that is not 16-byte aligned makes
# the kernels load without the TMA, inside the kernel).

TMA_K_MULTIPLE = 16
TMA_MAP_SLOT_BYTES = 256
"""Bytes of the `maps` output per block: the tensor maps of A and B, 128 bytes each."""

CUDA_WS_THREADS = 384
"""Producer warpgroup + 2 consumer warpgroups (cuda_source.LAUNCH_BOUNDS sets the launch
bound)."""

CUDA_WS_REGISTERS = (40, 232)
"""setmaxnreg of the producer and of the consumers: 128 x 40 + 256 x 232 <= 65536."""


def tma_ok(k: int) -> bool:
    """Whether an [M, K] x [N, K] product can take the TMA kernels (else the cp.async one)."""
    return k > 0 and k % TMA_K_MULTIPLE == 0


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


W8A8_COMPUTE_MIN_M = 512
"""Smallest M at which W8A8 takes the plans that pay off only where each weight tile feeds several
128-row tiles: the wave tile at short K (w8a8_wave_tile) and the cooperative kernel wherever its
plan runs unsplit (cuda_choice.w8a8_cooperative). Below, the GEMM streams the weight, and two
128 x 128 blocks per SM (more loads in flight) measured faster: at 128 x 3584 x 18944 (H200,
W8A8 pipeline, bf16 x) 35.1 us against 43.2 on the one-wave 128 x 144 and 40.7 on the cooperative
kernel; at M = 512 the wave tile won (512 x 3584 x 4608: 128 x 144 22.2 against 28.0; 512 x 4096 x
6144: 128 x 192 29.8 against 33.6), and so did the cooperative kernel (w8a8_cooperative).
M from 129 to 511 is unmeasured where these plans would apply, and keeps the rules without them."""

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
"""Tiles the long-K split plan weighs besides the wave tile (split_plan)."""


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


def tma_plan(m: int, n: int, k: int, sms: int = 132, w8a8: bool = False) -> CudaPlan:
    """The plan of the TMA GEMM (tma-unspecialized) for an [M, K] x [N, K] product on `sms` SMs;
    w8a8: for w8a8_linear's fused GEMM (below). The measurements behind each step:
    tests/data/cuda_dispatch_evidence.json (rule "tma_plan").

    One block per tile, no split-K, wherever K < 8192: the split's workspace round trip and
    reduction kernel cost more than idle SMs. Among the 128-row tiles the one whose tiles leave the
    least of a partial last wave (wave_tile: 128 x 192 or 128 x 144 where 128 x 256 would leave a
    mostly idle last wave, one block per SM with deep pipelines); when the 128-row tiles cannot
    fill the SMs, 128 x 128 (two per SM) or 64 x 64. At long K (K >= 8192) the wave tile runs
    unsplit where it alone fills most SMs (TMA_LONG_K_FILL), else its K is split until its blocks
    fill the SMs once, on the tile whose splits fill the most SMs (split_plan).

    W8A8 at short K takes the wave tile only where w8a8_wave_tile does (M >= W8A8_COMPUTE_MIN_M, one
    wave), else the rule without it (128 x 256, 128 x 128, 64 x 64): its dequantizing epilogue runs
    after each block's main loop, an unhidden tail that grows with the outputs per block. At long K
    it takes cpasync_plan where the wave tile would run unsplit, and the int32 plan where that
    splits K: its GEMM is then the int32 kernel and the dequantization runs in the reduction, so
    that tail does not arise (the int32 split plan also beat cpasync_plan's, whose reduction reads
    twice the partial sums; 128 x 18944 x 3584 on 128 x 112 x 4 splits: 33.8 us, the cooperative
    kernel's 4 splits 34.5). The dispatch sends much of W8A8's long K to the cooperative kernel
    instead (cuda_choice.w8a8_cooperative).
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
        if tile_count(m, n, wave) >= TMA_LONG_K_FILL * sms:
            return cpasync_plan(m, n, k, sms) if w8a8 else CudaPlan(wave, 1)
        return split_plan(m, n, k, wave, sms)
    candidates = [wave or CUDA_CONFIGS[_TMA_TILES[0]]] + [CUDA_CONFIGS[name] for name in _TMA_TILES[1:]]
    for cfg in candidates:
        if cfg.bm > 64 and m <= 64:
            continue  # a 128-row tile for at most 64 rows: half of every stage would be padding
        if tile_count(m, n, cfg) >= TMA_FILL * sms:
            return CudaPlan(cfg, 1)
    return CudaPlan(CUDA_CONFIGS["wg1_64x64"], 1)


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
    tile, K splits, raster band height, blocks."""

    cfg: CooperativeConfig | PingPongConfig
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


# ---- the small-M GEMV (kernels/cuda/gemm/gemv_w8a8.cuh) ----
#
# At M <= 16 a GEMM is a stream of the int8 weight. A block of GEMV_WARPS warps owns 8 x NT rows
# of w (NT tiles of mma.m16n8k32's eight columns) and its warps split K in 64-byte steps; the
# grid is one-dimensional, ceil(N / (8 NT)) blocks.

GEMV_MAX_M = 16
"""Activation rows the GEMV takes (one mma.m16n8k32's M)."""

GEMV_WARPS = 8
"""Warps of a GEMV block; they split K between them."""

GEMV_UNROLL = 2
"""64-byte steps whose loads a GEMV warp issues before multiplying."""

GEMV_X_MAX_BYTES = 64 << 10
"""The GEMV with the quantization fused (one kernel a call) takes x up to this size: every block
reads x twice from the caches, which costs less than the quantization kernel only while x is small
against the weight (M = 1 at any K of Qwen2.5-7B; M = 16 up to K = 2048 in bfloat16). A guess until
the H200 measures it."""

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4}
"""Bytes of an activation of each W8A8 dtype (by name)."""


@dataclass(frozen=True)
class GemvConfig:
    """A GEMV block's share of the output: BM = 16 activation rows by BN = 8 NT rows of w."""

    name: str
    nt: int
    bm: ClassVar[int] = GEMV_MAX_M
    threads: ClassVar[int] = 32 * GEMV_WARPS

    @property
    def bn(self) -> int:
        return 8 * self.nt

    def template(self) -> list:
        return [("NT", self.nt), ("WARPS", GEMV_WARPS), ("UNROLL", GEMV_UNROLL)]


GEMV_CONFIGS = {c.name: c for c in (GemvConfig("gemv_16x8", 1), GemvConfig("gemv_16x16", 2))}


@dataclass(frozen=True)
class GemvPlan:
    """The GEMV's launch: its config, and for W8A8 whether x is quantized inside the GEMV (fused:
    one kernel) or by the quantization kernel first; fused None: decided at the launch from x's
    item size (gemv_x_ok)."""

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


def gemv_plan(m: int, n: int, k: int, sms: int = 132, dtype: str | None = None) -> GemvPlan:
    """16 rows of w a block (NT = 2) where that still gives every SM a block and a half (N = 3584
    on 132 SMs: 224 blocks of 16 rows), else 8; fused: gemv_x_ok for x of `dtype` (a name), None
    where no float dtype is given (decided at the launch)."""
    cfg = GEMV_CONFIGS["gemv_16x16" if ceil_div(n, 16) >= 3 * sms // 2 else "gemv_16x8"]
    return GemvPlan(cfg, gemv_x_ok(m, k, ITEMSIZE[dtype]) if dtype in ITEMSIZE else None)
