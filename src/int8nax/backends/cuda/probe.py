"""The SM count of this process's GPU, counted once by a kernel that notes where its blocks land,
and the SM count the choice weighs."""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx

from . import choice as cuda_choice
from . import device, kernels
from . import source as cuda_source
from .choice import SIMT

SM_ID_CAPACITY = 1024
"""Size of the flag array the SM-count probe writes (well above any GPU's SM count)."""


@lru_cache(maxsize=1)
def sm_count() -> int:
    """Streaming multiprocessors of the GPU, counted once per process by where blocks land."""
    flags = kernels._kernel(cuda_source.count_sms())(
        inputs=[mx.zeros((1,), dtype=mx.int32)],
        output_shapes=[(SM_ID_CAPACITY,)],
        output_dtypes=[mx.int32],
        grid=(32 * 8 * SM_ID_CAPACITY, 1, 1),
        threadgroup=(32, 1, 1),
        template=[("CAPACITY", SM_ID_CAPACITY)],
        init_value=0,
    )[0]
    return max(1, int(mx.sum(flags).item()))


def known_sm_count() -> int | None:
    """The SM count if this process has counted it already (sm_count runs a kernel), else None."""
    info = getattr(sm_count, "cache_info", None)  # tests may stand in a plain function
    return sm_count() if info is None or info().currsize else None


def _sms() -> int:
    """The SM count the choice weighs on this GPU: sm_count(), or DEFAULT_SMS on a SIMT-only GPU
    (whose single variant does not depend on it)."""
    return sm_count() if device._family() != SIMT else cuda_choice.DEFAULT_SMS
