"""The large tile timed on the device (time_tiles); the choice and its cache are tiles.py's."""

from __future__ import annotations

import time

import mlx.core as mx
import numpy as np

from . import tiles as metal_tiles
from .source import KernelVariant
from . import kernel_set, launch


# ---------------------------------------------------------------------------------------------
# The tile chosen on the device (the choice and its cache: tiles.py)
# ---------------------------------------------------------------------------------------------

TUNE_VALUE_RANGE = (-11, 12)
"""int8 values of the timed operands: |a * b| <= 121, so sums over K = 4096 stay below 2^24 and
MLX's float32 CPU matmul is an exact reference for them."""


def time_tiles(kernels: kernel_set.KernelSet, variant: KernelVariant, gpu: str | None, candidates,
               shape=metal_tiles.TUNE_SHAPE, repeat: int = metal_tiles.TUNE_REPEAT,
               budget: float = metal_tiles.TUNE_BUDGET_S) -> dict:
    """{candidate name: median seconds of an int8 GEMM at `shape` (M, K, N), or why it was not
    timed}: each candidate is launched once (its build, and the threadgroup check), checked bit
    for bit against an exact reference, then timed `repeat` times (call + mx.eval); once the
    timed calls of all candidates exceed `budget` seconds the rest are not timed. A candidate
    MLX refuses for its threadgroup size is left out (it would be timed as its fallback)."""
    m, k, n = shape
    lo, hi = TUNE_VALUE_RANGE
    a = mx.random.randint(lo, hi, (m, k), key=mx.random.key(1)).astype(mx.int8)
    b = mx.random.randint(lo, hi, (n, k), key=mx.random.key(2)).astype(mx.int8)
    mx.eval(a, b)
    reference = None
    results, spent = {}, 0.0
    for cfg in candidates:
        if spent > budget:
            results[cfg.name] = f"not timed: the {budget:g} s budget was spent"
            continue
        ops = launch.VariantOps(kernels, variant, gpu, cfg)
        refused = len(kernels.thread_limits())
        try:
            got = np.array(ops.int8_matmul(a, b))
        except Exception as exc:  # a build error of this tile: the others may still serve
            results[cfg.name] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
            continue
        if len(kernels.thread_limits()) > refused:
            results[cfg.name] = "over the pipeline's threadgroup limit"
            continue
        if reference is None:
            ref = mx.matmul(a.astype(mx.float32), b.astype(mx.float32).T, stream=mx.cpu)
            reference = np.array(ref).astype(np.int64)
        if not np.array_equal(got.astype(np.int64), reference):
            results[cfg.name] = "not exact at the timing shape: left out"
            continue
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            mx.eval(ops.int8_matmul(a, b))
            times.append(time.perf_counter() - start)
        spent += sum(times)
        results[cfg.name] = float(np.median(times))
    return results
