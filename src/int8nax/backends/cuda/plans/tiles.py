"""What every CUDA GEMM plan is made of: the tile configurations (the wgmma kernels' and the
portable SIMT kernel's), how many of them an output and an SM hold, how K splits into ranges, and
what the TMA asks of an operand. The plans themselves: grid.py (one block per tile), persistent.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from ....tiling import TileConfig, ceil_div

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
# (integer addition is exact in any order) and, for W8A8, dequantizes. int8_matmul's trial plans
# (reduce="atomic", REDUCTIONS below) add them into one zero-filled [M, N] output instead.

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


MIN_SPLIT_BLOCKS = 8
"""Fewest K blocks (of BK) a split may own: shorter splits spend their time filling the pipeline."""


WORKSPACE, ATOMIC = "workspace", "atomic"
REDUCTIONS = (WORKSPACE, ATOMIC)
"""How a split plan's K splits meet (a plan's `reduce`). WORKSPACE: split z writes slice z of a
[splits, M, N] int32 workspace and the reduction kernel sums the slices (every rule's plans; W8A8's
only, since its reduction dequantizes the exact sum). ATOMIC: every split adds its partial sums
into one zero-filled int32 [M, N] output (red.global.add.s32, kernels/cuda/epilogue/atomic_add.cuh):
no workspace, no reduction launch, the same bits (integer addition is associative). int8_matmul's
trial, which the plans sweep times beside the workspace form and no rule takes: at 128 x 18944 x
3584 (4 splits of 128 x 112, H100, Nsight) the split GEMM took 32.0 us and the reduction 6.4 us,
against cuBLASLt's 36.7 us for the whole product."""


def reduce_of(plan) -> str:
    """How `plan`'s K splits meet (REDUCTIONS): its `reduce`, or WORKSPACE for plans without the
    field (the GEMV's, the SIMT kernel's), which never add into their output."""
    return getattr(plan, "reduce", WORKSPACE)


def reduce_suffix(owner: str, reduce: str, splits: int) -> str:
    """The plan name's suffix for `reduce` ("" for WORKSPACE, "_atomic"); ValueError naming the
    argument where `reduce` is not one of REDUCTIONS, or is ATOMIC on an unsplit plan (nothing to
    add: its one split stores its sums)."""
    if reduce not in REDUCTIONS:
        raise ValueError(f"{owner}: 'reduce' must be one of {REDUCTIONS}, got {reduce!r}")
    if reduce == ATOMIC and splits < 2:
        raise ValueError(f"{owner}: 'reduce'={ATOMIC!r} adds the partial sums of K splits, but 'splits' is "
                         f"{splits!r}: an unsplit plan stores its sums ('reduce'={WORKSPACE!r})")
    return "" if reduce == WORKSPACE else f"_{reduce}"


# ---- what the TMA GEMMs ask (kernels/cuda/gemm/tma_*.cuh; which one runs: backends/cuda/choice.py) ----
#
# The three variants load their stages with cp.async.bulk.tensor.2d from tensor maps each block
# encodes on the device into its TMA_MAP_SLOT_BYTES slot of an extra uint8 output.
#   tma-unspecialized:   one block per tile and split (grid.tma_plan), TMA instead of cp.async.
#   tma-ws-cooperative:  warp-specialised (1 producer + 2 consumer warpgroups, 384 threads) and
#                        persistent (min(SMs, units) blocks walk the (tile, split) units of
#                        ws_unit); the consumers share each tile (persistent.cooperative_plan).
#   tma-ws-pingpong:     the same producer and units, each consumer on whole 128-row tiles, the
#                        two taking turns (persistent.pingpong_plan).
# The TMA needs a row stride that is a multiple of 16 bytes: K % TMA_K_MULTIPLE == 0 (a base
# address that is not 16-byte aligned makes the kernels load without the TMA, inside the kernel).

TMA_K_MULTIPLE = 16
TMA_MAP_SLOT_BYTES = 256
"""Bytes of the `maps` output per block: the tensor maps of A and B, 128 bytes each."""


def tma_ok(k: int) -> bool:
    """Whether an [M, K] x [N, K] product can take the TMA kernels (else the cp.async one)."""
    return k > 0 and k % TMA_K_MULTIPLE == 0
