"""Every CUDA kernel variant, not only the ones the dispatch picks: each tile configuration with
and without split-K, the byte-wise (unaligned) load path, row chunking and the W8A8 epilogues.
Skipped where MLX has no CUDA device."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from int8nax import backends, tiling
from int8nax.reference import int8_matmul_ref, to_numpy, ulp, w8a8_linear_ref

from conftest import random_int8

CUDA = backends.probe("cuda")
pytestmark = pytest.mark.skipif(not CUDA.available, reason=f"backend cuda unavailable here: {CUDA.reason}")

if CUDA.available:
    from int8nax.backends import cuda

    FAMILY = cuda.family_for(cuda.compute_capability())
    PLANS = [tiling.CudaPlan(tiling.CUDA_SIMT_CONFIG, s) for s in (1, 3)]
    if FAMILY == "sm90":
        PLANS += [tiling.CudaPlan(c, s) for c in tiling.CUDA_CONFIGS.values() for s in (1, 3)]
else:
    PLANS = []


def family_of(plan):
    return "simt" if plan.cfg == tiling.CUDA_SIMT_CONFIG else "sm90"


def plan_id(plan):
    return f"{plan.cfg.name}/{plan.splits}"


def assert_exact(got, a, b):
    ref = int8_matmul_ref(a, b)
    bad = np.argwhere(np.array(got).astype(np.int64) != ref)
    assert bad.size == 0, f"{len(bad)} wrong elements, first at {bad[0].tolist()}"


# M, K, N straddling every tile edge; K = 16 * j keeps the cp.async path, other K take the byte path.
SHAPES = [(1, 1, 1), (65, 300, 257), (130, 1040, 100), (200, 4112, 520), (3, 16, 8)]


@pytest.mark.parametrize("plan", PLANS, ids=plan_id)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_plan_is_exact(plan, rng, m, k, n):
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    assert_exact(cuda.gemm_int32(mx.array(a), mx.array(b), plan, family_of(plan)), a, b)


@pytest.mark.parametrize("plan", PLANS, ids=plan_id)
def test_minus_128_everywhere(plan):
    a = np.full((70, 4096), -128, np.int8)
    b = np.full((136, 4096), -128, np.int8)
    assert_exact(cuda.gemm_int32(mx.array(a), mx.array(b), plan, family_of(plan)), a, b)


@pytest.mark.parametrize("plan", PLANS, ids=plan_id)
def test_unaligned_base_pointer(plan, rng):
    # A row-contiguous view 3 bytes into its buffer: MLX passes it without a copy, so the
    # kernel must notice the misalignment and load byte-wise.
    m, k, n = 37, 160, 45
    flat = random_int8(rng, (m * k + 3,))
    a = mx.array(flat)[3:].reshape(m, k)
    b = random_int8(rng, (n, k))
    assert_exact(cuda.gemm_int32(a, mx.array(b), plan, family_of(plan)), flat[3:].reshape(m, k), b)


def test_tall_problems_are_launched_in_row_chunks(monkeypatch, rng):
    monkeypatch.setattr(cuda, "MAX_GRID_Y", 2)
    a, b = random_int8(rng, (300, 48)), random_int8(rng, (20, 48))
    plan = cuda.default_plan(300, 20, 48)
    assert len(cuda._row_chunks(300, plan.cfg)) > 1
    assert_exact(cuda.gemm_int32(mx.array(a), mx.array(b)), a, b)


# Every plan with float16 output; the three output types on the first and last plan (each
# dtype is another NVRTC compile of the GEMM, ~10 s apiece for the wgmma tiles).
W8A8_CASES = [(p, mx.float16) for p in PLANS] + [(p, d) for p in PLANS[:1] + PLANS[-1:] for d in (mx.bfloat16, mx.float32)]


@pytest.mark.parametrize("plan,dtype", W8A8_CASES, ids=lambda v: plan_id(v) if isinstance(v, tiling.CudaPlan) else str(v))
def test_w8a8_epilogues(plan, rng, dtype):
    m, k, n = 70, 1040, 136
    x = mx.array(rng.standard_normal((m, k)).astype(np.float32)).astype(dtype)
    w = random_int8(rng, (n, k))
    s_w = (rng.random(n).astype(np.float32) + 0.5) / 2000
    bias = rng.standard_normal(n).astype(np.float32)
    y = cuda.w8a8(x, mx.array(w), mx.array(s_w), mx.array(bias), plan, family_of(plan))
    assert y.dtype == dtype and y.shape == (m, n)
    ref = w8a8_linear_ref(x, w, s_w, bias)
    got = to_numpy(y, np.float64)
    name = str(dtype).split(".")[-1]
    # Computed in double and rounded once: within 1 ulp (the test suite's bound) of the model.
    assert np.all(np.abs(got - ref) <= np.maximum(ulp(ref, name), ulp(got, name)))


def test_sm_count_is_plausible():
    assert 1 <= cuda.sm_count() <= cuda.SM_ID_CAPACITY
