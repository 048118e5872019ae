"""The TMA GEMMs (kernels/cuda/gemm_tma_*.cuh) on a GPU, every plan of the three variants, exact.

tma-unspecialized (old name tma_simple) is the default dispatch's kernel for most shapes, the
persistent tma-ws-cooperative (tma_ws) and tma-ws-pingpong (tma_pp) for problems of many tiles
(cuda_choice.auto_variant). Runs where MLX has a compute capability 9.0 device, unless
INT8NAX_CUDA_KERNEL=wgmma asks for the cp.async kernel only. A base that is not 16-byte aligned
sends tma_simple to the cp.async main loop (in the kernel) and the persistent kernels' consumers
to their own loads.
"""

from __future__ import annotations

import os

import mlx.core as mx
import numpy as np
import pytest

from int8nax import backends
from int8nax.backends.cuda import choice as cuda_choice, plans as cuda_plans
from int8nax.reference import int8_matmul_ref, to_numpy

from conftest import random_int8, within_one_ulp

CUDA = backends.probe("cuda")
CPASYNC_ONLY = os.environ.get("INT8NAX_CUDA_KERNEL", "").strip().lower() in ("wgmma", "cpasync")
pytestmark = [
    pytest.mark.skipif(not CUDA.available, reason=f"backend cuda unavailable here: {CUDA.reason}"),
    pytest.mark.skipif(CPASYNC_ONLY, reason="INT8NAX_CUDA_KERNEL asks for the cp.async kernel only"),
]

if CUDA.available:
    from int8nax.backends.cuda import device as cuda_device, probe as cuda_probe, backend as cuda

    SM90 = cuda_device.family_for(cuda_device.compute_capability()) == "sm90"
    SMS = cuda_probe.sm_count() if SM90 else 132
else:
    SM90, SMS = False, 132

# K % 16 == 0 everywhere (the TMA paths' requirement); M, N straddle every tile edge.
SHAPES = [(1, 16, 1), (3, 48, 8), (65, 4096, 257), (130, 1040, 100), (200, 4112, 520), (16, 4096, 4096)]


def assert_exact(got, a, b):
    bad = np.argwhere(np.array(got).astype(np.int64) != int8_matmul_ref(a, b))
    assert bad.size == 0, f"{len(bad)} wrong elements, first at {bad[0].tolist()}"


def plans():
    out = [("tma_simple", cuda_plans.CudaPlan(c, s)) for c in cuda_plans.CUDA_CONFIGS.values() for s in (1, 3)]
    for c in cuda_plans.COOPERATIVE_CONFIGS.values():
        for splits in (1, 3):
            for blocks in (1, 7, SMS):
                out.append(("tma_ws", cuda_plans.PersistentPlan(c, splits, 2, blocks)))
    # One block walking every unit (the consumers' turns many times over), an odd count, all SMs.
    for c in cuda_plans.PINGPONG_CONFIGS.values():
        for splits in (1, 3):
            for blocks in (1, 7, SMS):
                out.append(("tma_pp", cuda_plans.PersistentPlan(c, splits, 2, blocks)))
    return out


def plan_id(p):
    if isinstance(p, cuda_plans.PersistentPlan):
        return f"{p.cfg.name}_s{p.splits}_b{p.blocks}"
    return getattr(p, "name", None) or str(p)


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("variant,plan", plans(), ids=plan_id)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_tma_plan_is_exact(variant, plan, rng, m, k, n):
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    assert_exact(cuda.gemm_int32(mx.array(a), mx.array(b), variant, plan), a, b)


def view(x, shift):
    """A row-contiguous view of x `shift` bytes past the start of its allocation (MLX passes it
    to a kernel without a copy)."""
    flat = mx.array(np.concatenate([np.zeros(shift, np.int8), x.ravel()]))
    return flat[shift:].reshape(x.shape)


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("shift_a,shift_b", [(0, 0), (3, 0), (0, 5), (8, 1)])
def test_public_int8_matmul_on_the_tma_kernel_with_offset_views(rng, shift_a, shift_b):
    import int8nax
    from int8nax.backends.cuda import backend as cuda

    m, k, n = 77, 4096, 200
    assert cuda.choice(m, n, k).variant == cuda_choice.TMA
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    assert_exact(int8nax.int8_matmul(view(a, shift_a), view(b, shift_b), backend="cuda"), a, b)


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("plan", [p for v, p in plans() if v == "tma_simple"], ids=lambda p: p.name)
@pytest.mark.parametrize("shift_a,shift_b", [(3, 0), (0, 5)])
def test_tma_simple_misaligned_base_takes_the_cpasync_loop(plan, rng, shift_a, shift_b):
    m, k, n = 130, 1040, 100
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    assert_exact(cuda.gemm_int32(view(a, shift_a), view(b, shift_b), "tma_simple", plan), a, b)


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("plan", [p for v, p in plans() if v == "tma_simple"], ids=lambda p: p.name)
def test_w8a8_on_the_tma_kernel_matches_the_cpasync_kernel(plan, rng):
    # Same codes, same scales, same epilogue: the two kernels' outputs must be bit-identical,
    # aligned and through the misaligned fallback.
    m, k, n = 70, 1040, 136
    q, w = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    sx = mx.array(rng.uniform(1e-3, 1e-1, m).astype(np.float32))
    sw = mx.array(rng.uniform(1e-3, 1e-1, n).astype(np.float32))
    bias = mx.array(rng.standard_normal(n).astype(np.float32))
    want = np.array(cuda.dequant_gemm(mx.array(q), sx, mx.array(w), sw, bias, mx.float16, "cpasync", plan))
    for qv, wv in ((mx.array(q), mx.array(w)), (mx.array(q), view(w, 7))):
        got = np.array(cuda.dequant_gemm(qv, sx, wv, sw, bias, mx.float16, "tma_simple", plan))
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


PERSISTENT_PLANS = [(v, p) for v, p in plans() if v in ("tma_ws", "tma_pp") and p.blocks == 7]


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("variant,plan", PERSISTENT_PLANS, ids=plan_id)
@pytest.mark.parametrize("shift_a,shift_b", [(3, 0), (0, 5), (8, 1)])
def test_persistent_misaligned_base_takes_the_consumers_own_loads(variant, plan, rng, shift_a, shift_b):
    m, k, n = 200, 1040, 130
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    assert_exact(cuda.gemm_int32(view(a, shift_a), view(b, shift_b), variant, plan), a, b)


def w8a8_problem(rng, m, k, n):
    """Codes q [M, K], w [N, K] and float32 scale_x [M], scale_w [N], bias [N] of a W8A8 GEMM."""
    q, w = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    sx = rng.uniform(1e-3, 1e-1, m).astype(np.float32)
    sw = rng.uniform(1e-3, 1e-1, n).astype(np.float32)
    return q, w, sx, sw, rng.standard_normal(n).astype(np.float32)


def bits(y):
    """The bits of a float16, bfloat16 or float32 array as numpy unsigned integers (numpy has no
    bfloat16)."""
    return np.array(y.view({2: mx.uint16, 4: mx.uint32}[y.itemsize]))


def cpasync_w8a8(q, sx, w, sw, bias, out_dtype, epilogue=None):
    """The bits of the cp.async kernel's W8A8 (one plan for every shape here): the reference the
    TMA kernels' outputs must equal bit for bit (the same dequantization; epilogue None: the
    default one, which the kernels under test take too)."""
    plan = cuda_plans.CudaPlan(cuda_plans.CUDA_CONFIGS["wg2_128x128_x2"], 1)
    return bits(cuda.dequant_gemm(mx.array(q), mx.array(sx), mx.array(w), mx.array(sw),
                                  None if bias is None else mx.array(bias), out_dtype, "cpasync", plan,
                                  epilogue=epilogue))


def beyond_one_ulp(y, q, w, sx, sw, bias):
    """Where y (W8A8 of these codes and scales) is more than 1 ulp of its type from the float64
    model acc * s_x * s_w (+ bias) (conftest.within_one_ulp: inf where the model rounds to inf)."""
    acc = int8_matmul_ref(q, w).astype(np.float64)
    with np.errstate(over="ignore"):
        ref = acc * sx.astype(np.float64)[:, None] * sw.astype(np.float64)[None, :]
    if bias is not None:
        ref = ref + bias.astype(np.float64)[None, :]
    return np.argwhere(~within_one_ulp(y, ref, str(y.dtype).split(".")[-1]))


def assert_same_bits(got, want):
    """got: an MLX array; want: cpasync_w8a8's bits."""
    got = bits(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    bad = np.argwhere(got != want)
    assert bad.size == 0, f"{len(bad)} elements differ, first at {bad[0].tolist()}"


# N = 520: two whole 256-column tiles, so the 128 x 256 tiles' interior takes the fast path too.
W8A8_SHAPE = (300, 1040, 520)


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("variant,plan", [(v, p) for v, p in plans() if v in ("tma_ws", "tma_pp")], ids=plan_id)
def test_w8a8_on_the_persistent_kernels_matches_the_cpasync_kernel(variant, plan, rng):
    # The fused epilogue (splits 1) or the workspace and the dequantizing reduction (splits 3),
    # on 1, 7 and all SMs' blocks, aligned and through the misaligned loads: bit-identical to the
    # cp.async kernel's W8A8.
    m, k, n = W8A8_SHAPE
    q, w, sx, sw, bias = w8a8_problem(rng, m, k, n)
    want = cpasync_w8a8(q, sx, w, sw, bias, mx.float16)
    args = mx.array(sx), mx.array(sw), mx.array(bias)
    for qv, wv in ((mx.array(q), mx.array(w)), (mx.array(q), view(w, 7))):
        assert_same_bits(cuda.dequant_gemm(qv, args[0], wv, args[1], args[2], mx.float16, variant, plan), want)


WS_UNSPLIT = cuda_plans.PersistentPlan(cuda_plans.COOPERATIVE_CONFIGS["ws_128x256"], 1, 2, 7)  # the dispatch's tile


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("dtype,with_bias", [("bfloat16", False), ("float32", True)])
def test_w8a8_on_the_ws_kernel_in_every_output_dtype(rng, dtype, with_bias):
    # float16 with a bias runs above; these two add the other output types and no bias, fused and
    # (splits 2) through the dequantizing reduction, each bit-identical to the cp.async kernel's.
    out = getattr(mx, dtype)
    m, k, n = W8A8_SHAPE
    q, w, sx, sw, bias = w8a8_problem(rng, m, k, n)
    bias = bias if with_bias else None
    want = cpasync_w8a8(q, sx, w, sw, bias, out)
    for plan in (WS_UNSPLIT, cuda_plans.PersistentPlan(WS_UNSPLIT.cfg, 2, 2, 7)):
        got = cuda.dequant_gemm(mx.array(q), mx.array(sx), mx.array(w), mx.array(sw),
                                None if bias is None else mx.array(bias), out, "tma_ws", plan)
        assert_same_bits(got, want)


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("variant,plan", [(v, p) for v, p in PERSISTENT_PLANS if p.splits == 1], ids=plan_id)
def test_w8a8_rare_pairs_inside_a_persistent_tile(variant, plan, rng):
    # Pairs that need the exact path in the interior of whole tiles, among pairs that do not: a
    # row whose scale product falls below 2^-100, one above 2^90, a zero column scale, and biases
    # that cancel single products. gemm_tma_ws_cooperative takes the exact path per chunk of columns, the
    # others per thread's share: every output still bit-identical to the cp.async kernel's.
    m, k, n = W8A8_SHAPE
    q, w, sx, sw, bias = w8a8_problem(rng, m, k, n)
    sx[5], sx[140] = 1e-30, 1e30
    sw[300] = 0.0
    acc = int8_matmul_ref(q, w)
    for r, c in ((9, 3), (70, 130), (200, 257), (100, 511)):
        bias[c] = -np.float32(np.float64(acc[r, c]) * np.float64(sx[r]) * np.float64(sw[c]))
    want = cpasync_w8a8(q, sx, w, sw, bias, mx.float16)
    got = cuda.dequant_gemm(mx.array(q), mx.array(sx), mx.array(w), mx.array(sw), mx.array(bias), mx.float16, variant,
                            plan)
    assert_same_bits(got, want)


def simt_w8a8(q, sx, w, sw, bias, out_dtype, epilogue):
    """The bits of the SIMT kernel's W8A8, which stores every pair on the exact path
    (DequantStore::store2): the reference for pairs the tiled kernels store on the branch-free one."""
    plan = cuda_plans.CudaPlan(cuda_plans.CUDA_SIMT_CONFIG, 1)
    return bits(cuda.dequant_gemm(mx.array(q), mx.array(sx), mx.array(w), mx.array(sw), mx.array(bias), out_dtype,
                                  "simt", plan, epilogue=epilogue))


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("variant,plan", [(v, p) for v, p in plans() if p.splits == 1
                                          and (v == "tma_simple" or p.blocks == 7)], ids=plan_id)
@pytest.mark.parametrize("epilogue", ["eft", "narrow"])
def test_w8a8_rows_of_a_bottom_edge_tile_have_the_exact_paths_bits(variant, plan, rng, epilogue):
    # M = 300 ends every plan's last row tile 20 to 108 rows short: its rows below M are stored
    # pair by pair on the branch-free path (store_accumulators), rows past M not at all. Their
    # bits must be the exact path's, which the SIMT kernel takes for every pair, including rare
    # pairs inside that edge tile (a row whose scale products fall below 2^-100, a bias that
    # cancels a product), which go to the exact path there too.
    m, k, n = W8A8_SHAPE
    q, w, sx, sw, bias = w8a8_problem(rng, m, k, n)
    sx[290] = 1e-30
    acc = int8_matmul_ref(q, w)
    bias[77] = -np.float32(np.float64(acc[297, 77]) * np.float64(sx[297]) * np.float64(sw[77]))
    got = cuda.dequant_gemm(mx.array(q), mx.array(sx), mx.array(w), mx.array(sw), mx.array(bias), mx.bfloat16,
                            variant, plan, epilogue=epilogue)
    assert_same_bits(got, simt_w8a8(q, sx, w, sw, bias, mx.bfloat16, epilogue))


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("variant,plan", [(v, p) for v, p in plans() if v == "tma_simple" or p.blocks == 7],
                         ids=plan_id)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_narrow_epilogue_on_every_tma_plan(variant, plan, rng, dtype):
    # INT8NAX_CUDA_EPILOGUE=narrow's path (kernels/cuda/epilogue/dequantize.cuh, dequantize_narrow), fused or in
    # the dequantizing reduction: within 1 ulp of the float64 model and, since each narrow output
    # is one function of its inputs on every path (DequantStore::value), bit-identical to the
    # cp.async kernel's narrow W8A8 on another plan.
    out = getattr(mx, dtype)
    m, k, n = W8A8_SHAPE
    q, w, sx, sw, bias = w8a8_problem(rng, m, k, n)
    want = cpasync_w8a8(q, sx, w, sw, bias, out, epilogue="narrow")
    got = cuda.dequant_gemm(mx.array(q), mx.array(sx), mx.array(w), mx.array(sw), mx.array(bias), out, variant,
                            plan, epilogue="narrow")
    bad = beyond_one_ulp(got, q, w, sx, sw, bias)
    assert bad.size == 0, f"{len(bad)} beyond 1 ulp, first at {bad[0].tolist()}"
    assert_same_bits(got, want)


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("variant,plan", [("tma_simple", cuda_plans.CudaPlan(cuda_plans.CUDA_CONFIGS["wg2_128x256"], 1))]
                         + [(v, p) for v, p in PERSISTENT_PLANS if p.splits == 1], ids=plan_id)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_narrow_epilogue_sends_its_rare_pairs_to_the_exact_path(variant, plan, rng, dtype):
    # Pairs the narrow path refuses inside whole tiles: a bias that cancels a product exactly
    # (s_x, s_w powers of two: y = 0 against |b| ~ 10), a row that overflows float16, and for
    # bfloat16 a row whose scale products fall below 2^-100 and a zero column scale. They must
    # take the eft path (their bits equal the eft epilogue's); at [5, 301] (acc = 127^2 K,
    # s ~ 3e-45, no bias) the narrow arithmetic alone would be ~17 bfloat16 ulps off.
    out = getattr(mx, dtype)
    m, k, n = W8A8_SHAPE
    q, w, sx, sw, bias = w8a8_problem(rng, m, k, n)
    q[5], w[301] = 127, 127
    sx[5], sx[140], sx[9] = 1e-30, 5e4, 2.0 ** -7
    sw[300], sw[3], sw[301], bias[301] = 0.0, 2.0 ** -6, 3e-15, 0.0
    acc = int8_matmul_ref(q, w)
    bias[3] = -np.float32(acc[9, 3] * 2.0 ** -13)
    got = cuda.dequant_gemm(mx.array(q), mx.array(sx), mx.array(w), mx.array(sw), mx.array(bias), out, variant,
                            plan, epilogue="narrow")
    bad = beyond_one_ulp(got, q, w, sx, sw, bias)
    assert bad.size == 0, f"{len(bad)} beyond 1 ulp, first at {bad[0].tolist()}"
    assert to_numpy(got, np.float64)[9, 3] == 0.0
    rare = np.zeros((m, n), bool)
    rare[9, 3] = True
    if dtype == "float16":  # the overflowing values of row 140
        rare[140] = np.abs(acc[140] * np.float64(sx[140]) * sw.astype(np.float64) + bias) > 65536
    else:
        rare[5], rare[:, 300] = True, True
    eft = cpasync_w8a8(q, sx, w, sw, bias, out, epilogue="eft")
    assert np.array_equal(bits(got)[rare], eft[rare])


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("m,k,n", [(2048, 4096, 4096), (512, 3584, 18944)])
def test_public_calls_on_the_persistent_kernels_with_offset_views(rng, m, k, n):
    # the shapes the default dispatch sends to tma_ws and tma_pp, through the public API, with
    # bases 3 and 5 bytes off; W8A8 bit-identical to the cp.async kernel's
    import int8nax

    assert cuda.choice(m, n, k).variant in (cuda_choice.COOPERATIVE, cuda_choice.PINGPONG)
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    assert_exact(int8nax.int8_matmul(view(a, 3), view(b, 5), backend="cuda"), a, b)
    x = mx.array((a.astype(np.float32) * 0.01).astype(np.float16))
    s = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
    got = np.array(cuda.w8a8(x, view(b, 5), s, None))
    want = np.array(cuda.w8a8(x, mx.array(b), s, None, "cpasync", cuda_plans.tma_plan(m, n, k, SMS, w8a8=True)))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.skipif(not SM90, reason="the TMA kernels need compute capability 9.0")
@pytest.mark.parametrize("m,k,n,variant", [
    (512, 4096, 4096, cuda_choice.COOPERATIVE),  # w8a8_cooperative: 128 units of 128 x 128 in one round
    (512, 18944, 3584, cuda_choice.COOPERATIVE),  # w8a8_cooperative: long K, unsplit
    (512, 4096, 24576, cuda_choice.COOPERATIVE),  # W8A8_WS_MIN_ROUNDS: 3 rounds of 128 x 256
    (512, 3584, 4608, cuda_choice.TMA),  # w8a8_wave_tile: 128 x 144 in one wave
])
def test_w8a8_rules_choices_through_the_public_call(rng, m, k, n, variant):
    # the plans W8A8's own rules choose on the H200 (132 SMs), with a bias: bit-identical to the
    # cp.async kernel's W8A8 on the plan the TMA kernel's rule gives W8A8
    import int8nax

    if SMS == 132:
        assert cuda.choice(m, n, k, w8a8=True).variant == variant
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    x = mx.array((a.astype(np.float32) * 0.01).astype(np.float16))
    s = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
    bias = mx.array(rng.uniform(-1, 1, n).astype(np.float32))
    got = np.array(int8nax.w8a8_linear(x, mx.array(b), s, bias, backend="cuda"))
    want = np.array(cuda.w8a8(x, mx.array(b), s, bias, "cpasync", cuda_plans.tma_plan(m, n, k, SMS, w8a8=True)))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
