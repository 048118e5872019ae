"""W8A8 with a float16 / bfloat16 bias read by the CUDA kernels in its own type
(INT8NAX_CUDA_BIAS=own, kernels/cuda/epilogue/epilogue.cuh's load_pair and to_float) on a GPU: bit for bit
the outputs of the same bias cast to float32 first, on every kind of dequantizing launch (each
variant's fused epilogue, the split-K reduction, the GEMV with and without its own quantization),
with the bias's base aligned and 2 bytes off (the pair loads need 4).

Every value of a 16-bit bias is a float32 value, so the two must agree exactly; the cast path is
itself checked against the float64 model elsewhere (test_cuda_tma.py, test_cuda_kernels.py).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from int8nax import backends
from int8nax.backends.cuda import choice as cuda_choice, plans as cuda_plans

from conftest import random_int8

CUDA = backends.probe("cuda")
pytestmark = pytest.mark.skipif(not CUDA.available, reason=f"backend cuda unavailable here: {CUDA.reason}")

if CUDA.available:
    from int8nax.backends.cuda import device as cuda_device, settings as cuda_settings, backend as cuda

    SM90 = cuda_device.family_for(cuda_device.compute_capability()) == "sm90"
else:
    SM90 = False


def cases():
    """(variant, plan, M, K, N): one launch of each kind; None plans take the dispatch's choice."""
    out = [("cpasync", cuda_plans.CudaPlan(cuda_plans.CUDA_CONFIGS["wg1_64x64"], 1), 70, 512, 200),
           ("cpasync", cuda_plans.CudaPlan(cuda_plans.CUDA_CONFIGS["wg1_64x64"], 3), 70, 1536, 200)]
    if SM90:
        coop = next(iter(cuda_plans.COOPERATIVE_CONFIGS.values()))
        pingpong = next(iter(cuda_plans.PINGPONG_CONFIGS.values()))
        out += [("tma_simple", cuda_plans.CudaPlan(cuda_plans.CUDA_CONFIGS["wg2_128x256"], 1), 300, 1024, 520),
                ("tma_ws", cuda_plans.PersistentPlan(coop, 1, 2, 7), 300, 1024, 520),
                ("tma_pp", cuda_plans.PersistentPlan(pingpong, 1, 2, 7), 300, 1024, 520)]
    for cfg in cuda_plans.GEMV_CONFIGS.values():
        for fused in (True, False):
            out.append((cuda_choice.GEMV, cuda_plans.GemvPlan(cfg, fused), 5, 1024, 264))
    return out


def case_id(case):
    variant, plan, m, k, n = case
    name = getattr(plan, "name", None) or f"{plan.cfg.name}_{'fused' if plan.fused else 'codes'}"
    return f"{variant}-{name}-{m}x{k}x{n}"


@pytest.fixture
def own_bias(monkeypatch):
    monkeypatch.setenv(cuda_settings.BIAS_ENV, "own")
    cuda.clear_caches()
    yield
    monkeypatch.delenv(cuda_settings.BIAS_ENV)
    cuda.clear_caches()


@pytest.mark.parametrize("case", cases(), ids=case_id)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("offset", [0, 1])
def test_a_16_bit_bias_in_its_own_type_gives_the_cast_bias_bits(rng, own_bias, case, dtype, offset):
    variant, plan, m, k, n = case
    dtype = getattr(mx, dtype)
    x = mx.array((random_int8(rng, (m, k)).astype(np.float32) * 0.01)).astype(dtype)
    w = mx.array(random_int8(rng, (n, k)))
    s = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
    # Offset 1: the bias a view 2 bytes past an allocation, so its pairs take the one-value loads.
    # Values up to 2^7 against outputs of ~1: large enough to matter, some cancelling.
    whole = mx.array(rng.uniform(-4, 4, n + 1).astype(np.float32)).astype(dtype)
    bias = whole[offset:offset + n]
    mx.eval(x, w, s, bias)
    got = cuda.w8a8(x, w, s, bias, variant, plan)
    want = cuda.w8a8(x, w, s, bias.astype(mx.float32), variant, plan)
    got, want = np.array(got.astype(mx.float32)), np.array(want.astype(mx.float32))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (
        f"{int(np.sum(got.view(np.uint32) != want.view(np.uint32)))} of {got.size} outputs differ")


@pytest.mark.parametrize("m,k,n", [(1, 3584, 4608), (16, 4096, 4096), (512, 4096, 4096), (128, 18944, 3584)])
def test_the_public_call_with_a_16_bit_bias(rng, own_bias, m, k, n):
    # the default dispatch (fused epilogues, a split-K reduction at 128 x 18944 x 3584) through
    # int8nax.w8a8_linear: own-type reads against the same call with the bias in float32
    import int8nax

    x = mx.array((random_int8(rng, (m, k)).astype(np.float32) * 0.01)).astype(mx.bfloat16)
    w = mx.array(random_int8(rng, (n, k)))
    s = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
    bias = mx.array(rng.uniform(-1, 1, n).astype(np.float32)).astype(mx.bfloat16)
    got = np.array(int8nax.w8a8_linear(x, w, s, bias, backend="cuda").astype(mx.float32))
    want = np.array(int8nax.w8a8_linear(x, w, s, bias.astype(mx.float32), backend="cuda").astype(mx.float32))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
