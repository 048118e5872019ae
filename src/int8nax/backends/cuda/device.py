"""The CUDA device as MLX reports it: compute capability and the GEMM family it allows
(cuda_choice.RUNS). Asks device_info, launches nothing."""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx


def _device_info() -> dict:
    return mx.device_info(mx.gpu)


def compute_capability() -> tuple[int, int]:
    info = _device_info()
    return int(info.get("compute_capability_major", 0)), int(info.get("compute_capability_minor", 0))


def family_for(cc: tuple[int, int]) -> str:
    """The GEMM family for a compute capability (cuda_choice.RUNS): wgmma exists only on 9.0
    (sm_90a), mma.sync from 8.0."""
    return "sm90" if cc == (9, 0) else "sm80" if cc >= (8, 0) else "simt"


@lru_cache(maxsize=1)
def _family() -> str:
    """This process's GPU's GEMM family (asked once: device_info is not free per call)."""
    return family_for(compute_capability())
