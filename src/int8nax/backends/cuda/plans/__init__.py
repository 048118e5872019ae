"""The CUDA kernels' tiles and plans. Pure Python: no MLX, no GPU, so every rule runs on any
machine with the SM count as an argument (132, the H200's, by default).

Which variant runs a problem is backends/cuda/choice.py's business; this package says how each
variant tiles a problem once chosen, one concern a module:

    tiles       the tile configurations, tile and split counting, what the TMA asks of K
    grid        one block per tile and split: the cp.async and TMA kernels' plans
    persistent  the warp-specialised persistent kernels' tiles and plans
    gemv        the small-M GEMV's plan
    quant       the quantization kernels' launches (plain, SwiGLU, staged SwiGLU)

Every name is also this package's, so callers write `cuda_plans.<name>` without knowing the
module. The generic launch math (ceil_div, TileConfig, the swizzled grid) is int8nax.tiling's,
shared with the Metal kernels and the emulator.
"""

from __future__ import annotations

from ....tiling import ceil_div  # the plans' rounding, which their callers use beside them
# gemv.GEMV_QUANTIZE_INSIDE is read through gemv_inside (one binding: a test or a run that sets it
# sets the module's)
from .gemv import (GEMV_CONFIGS, GEMV_MAX_M, GEMV_TRIALS, GEMV_UNROLL, GEMV_WARPS, GEMV_X_MAX_BYTES, ITEMSIZE,
                   GemvConfig, GemvPlan, gemv_inside, gemv_ok, gemv_plan, gemv_x_ok)
from .grid import (_SPLIT_TILES, _TMA_TILES, _WAVE_TILES, ONE_WAVE_FILL, TMA_FILL, TMA_LONG_K_BLOCKS,
                   TMA_LONG_K_FILL, W8A8_COMPUTE_MIN_M, W8A8_NARROW_MAX_M, WAVE_MARGIN, CudaPlan, cpasync_plan,
                   fill_splits, long_k, one_wave_tile, split_plan, tma_plan, w8a8_small_tile, w8a8_wave_tile,
                   wave_cost, wave_tile)
from .persistent import (COOPERATIVE_CONFIGS, CUDA_WS_REGISTERS, CUDA_WS_THREADS, PINGPONG_CONFIGS,
                         CooperativeConfig, PersistentConfig, PersistentPlan, PingPongConfig, cooperative_plan,
                         persistent_plan, pingpong_plan, ws_group, ws_unit, ws_units)
from .quant import (CUDA_QUANT_LAUNCHES, QUANT_GROUP, SMEM_PER_BLOCK, STAGED_MAX_HELD, STAGED_STATIC_SMEM,
                    STAGED_THREADS, SWIGLU_HELD_BYTES, SWIGLU_PAIR_LAUNCH, SWIGLU_QUANT_LAUNCHES, CudaQuantLaunch,
                    CudaStagedLaunch, cuda_quant_launch, cuda_swiglu_quant_launch, cuda_swiglu_staged_launch,
                    staged_max_hidden, swiglu_held_bytes)
from .tiles import (ATOMIC, CUDA_CONFIGS, CUDA_MAX_SHARED_BYTES, CUDA_SIMT_CONFIG, CUDA_SM_SHARED_BYTES,
                    CUDA_SWIZZLE_BYTES, CUDA_WARPGROUP_ROWS, EPILOGUE_CHUNK, MIN_SPLIT_BLOCKS, REDUCTIONS,
                    TMA_K_MULTIPLE, TMA_MAP_SLOT_BYTES, WORKSPACE, CudaTileConfig, blocks_per_sm, epilogue_chunk,
                    reduce_of, reduce_suffix, split_ranges, tile_count, tma_ok, tma_shared_bytes)

__all__ = [
    "ATOMIC", "COOPERATIVE_CONFIGS", "CUDA_CONFIGS", "CUDA_MAX_SHARED_BYTES", "CUDA_QUANT_LAUNCHES", "CUDA_SIMT_CONFIG",
    "CUDA_SM_SHARED_BYTES", "CUDA_SWIZZLE_BYTES", "CUDA_WARPGROUP_ROWS", "CUDA_WS_REGISTERS", "CUDA_WS_THREADS",
    "CooperativeConfig", "CudaPlan", "CudaQuantLaunch", "CudaStagedLaunch", "CudaTileConfig", "EPILOGUE_CHUNK",
    "GEMV_CONFIGS", "GEMV_MAX_M", "GEMV_TRIALS", "GEMV_UNROLL", "GEMV_WARPS", "GEMV_X_MAX_BYTES", "GemvConfig",
    "GemvPlan", "ITEMSIZE", "MIN_SPLIT_BLOCKS", "ONE_WAVE_FILL", "PINGPONG_CONFIGS", "PersistentConfig",
    "PersistentPlan", "PingPongConfig", "QUANT_GROUP", "REDUCTIONS", "SMEM_PER_BLOCK", "STAGED_MAX_HELD",
    "STAGED_STATIC_SMEM", "STAGED_THREADS", "SWIGLU_HELD_BYTES", "SWIGLU_PAIR_LAUNCH", "SWIGLU_QUANT_LAUNCHES",
    "TMA_FILL", "TMA_K_MULTIPLE", "TMA_LONG_K_BLOCKS", "TMA_LONG_K_FILL", "TMA_MAP_SLOT_BYTES", "W8A8_COMPUTE_MIN_M",
    "W8A8_NARROW_MAX_M", "WAVE_MARGIN", "WORKSPACE", "blocks_per_sm", "ceil_div", "cooperative_plan", "cpasync_plan",
    "cuda_quant_launch", "cuda_swiglu_quant_launch", "cuda_swiglu_staged_launch", "epilogue_chunk", "fill_splits",
    "gemv_inside", "gemv_ok", "gemv_plan", "gemv_x_ok", "long_k", "one_wave_tile", "persistent_plan", "pingpong_plan",
    "reduce_of", "reduce_suffix", "split_plan", "split_ranges", "staged_max_hidden", "swiglu_held_bytes", "tile_count",
    "tma_ok", "tma_plan", "tma_shared_bytes", "w8a8_small_tile", "w8a8_wave_tile", "wave_cost", "wave_tile", "ws_group",
    "ws_unit", "ws_units",
    "_SPLIT_TILES", "_TMA_TILES", "_WAVE_TILES",  # the TMA plan's tile lists, which the tests walk
]
