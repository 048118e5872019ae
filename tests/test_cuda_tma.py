"""The TMA GEMMs (kernels/gemm_tma.cuh) on a GPU, every plan of both variants, exact.

Opt-in, like the kernels: runs only where MLX has a compute capability 9.0 device AND
INT8NAX_CUDA_KERNEL is set to a TMA variant (tma, tma_ws, tma_simple), so a kernel that faults
or hangs before its first device verification cannot take the rest of the suite down with it.
"""

from __future__ import annotations

import os

import mlx.core as mx
import numpy as np
import pytest

from int8nax import backends, tiling
from int8nax.reference import int8_matmul_ref

from conftest import random_int8

CUDA = backends.probe("cuda")
OPTED_IN = os.environ.get("INT8NAX_CUDA_KERNEL", "").strip().lower() in ("tma", "tma_ws", "tma_simple")
pytestmark = [
    pytest.mark.skipif(not CUDA.available, reason=f"backend cuda unavailable here: {CUDA.reason}"),
    pytest.mark.skipif(not OPTED_IN, reason="TMA kernels are opt-in: set INT8NAX_CUDA_KERNEL=tma to test them"),
]

if CUDA.available and OPTED_IN:
    from int8nax.backends import cuda

    SM90 = cuda.family_for(cuda.compute_capability()) == "sm90"
    SMS = cuda.sm_count() if SM90 else 132
else:
    SM90, SMS = False, 132

# K % 16 == 0 everywhere (the TMA paths' requirement); M, N straddle every tile edge.
SHAPES = [(1, 16, 1), (3, 48, 8), (65, 4096, 257), (130, 1040, 100), (200, 4112, 520), (16, 4096, 4096)]


def assert_exact(got, a, b):
    bad = np.argwhere(np.array(got).astype(np.int64) != int8_matmul_ref(a, b))
    assert bad.size == 0, f"{len(bad)} wrong elements, first at {bad[0].tolist()}"


def plans():
    out = [("tma_simple", tiling.CudaPlan(c, s)) for c in tiling.CUDA_CONFIGS.values() for s in (1, 3)]
    for c in tiling.CUDA_WS_CONFIGS.values():
        for splits in (1, 3):
            for blocks in (1, 7, SMS):
                out.append(("tma_ws", tiling.CudaWsPlan(c, splits, 2, blocks)))
    return out


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("variant,plan", plans(), ids=lambda p: getattr(getattr(p, "cfg", None), "name", str(p)))
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_tma_plan_is_exact(variant, plan, rng, m, k, n):
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    assert_exact(cuda.tma_gemm_int32(mx.array(a), mx.array(b), variant, plan), a, b)


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("variant", ["tma_simple", "tma_ws"])
def test_tma_dispatch_and_misaligned_base(variant, rng):
    m, k, n = 77, 4096, 200
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    flat = mx.array(np.concatenate([np.zeros(3, np.int8), a.ravel()]))
    view = flat[3:].reshape(m, k)  # a row-contiguous view 3 bytes past its allocation
    assert_exact(cuda.tma_gemm_int32(view, mx.array(b), variant), a, b)
    assert_exact(cuda.tma_gemm_int32(mx.array(a), mx.array(b), variant), a, b)
