"""Every CUDA kernel variant, not only the ones the dispatch picks: each tile configuration with
and without split-K, the byte-wise (unaligned) load path, row chunking and the W8A8 epilogues.
Skipped where MLX has no CUDA device."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from int8nax import backends, quant
from int8nax.backends.cuda import plans as cuda_plans, source as cuda_source
from int8nax.reference import int8_matmul_ref, to_numpy, ulp, w8a8_linear_ref

from conftest import random_int8, within_one_ulp

CUDA = backends.probe("cuda")
pytestmark = pytest.mark.skipif(not CUDA.available, reason=f"backend cuda unavailable here: {CUDA.reason}")

if CUDA.available:
    from int8nax.backends.cuda import (
        device as cuda_device, kernels as cuda_kernels, probe as cuda_probe,
        settings as cuda_settings, graphs as cuda_graphs, backend as cuda,
    )

    FAMILY = cuda_device.family_for(cuda_device.compute_capability())
    PLANS = [cuda_plans.CudaPlan(cuda_plans.CUDA_SIMT_CONFIG, s) for s in (1, 3)]
    if FAMILY == "sm90":
        PLANS += [cuda_plans.CudaPlan(c, s) for c in cuda_plans.CUDA_CONFIGS.values() for s in (1, 3)]
else:
    PLANS = []


def variant_of(plan):
    """The one-block-per-tile variant a plan's tile belongs to: the SIMT kernel's, else cp.async."""
    return "simt" if plan.cfg == cuda_plans.CUDA_SIMT_CONFIG else "cpasync"


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
    assert_exact(cuda.gemm_int32(mx.array(a), mx.array(b), variant_of(plan), plan), a, b)


@pytest.mark.parametrize("plan", PLANS, ids=plan_id)
def test_minus_128_everywhere(plan):
    a = np.full((70, 4096), -128, np.int8)
    b = np.full((136, 4096), -128, np.int8)
    assert_exact(cuda.gemm_int32(mx.array(a), mx.array(b), variant_of(plan), plan), a, b)


@pytest.mark.parametrize("plan", PLANS, ids=plan_id)
def test_unaligned_base_pointer(plan, rng):
    # A row-contiguous view 3 bytes into its buffer: MLX passes it without a copy, so the
    # kernel must notice the misalignment and load byte-wise.
    m, k, n = 37, 160, 45
    flat = random_int8(rng, (m * k + 3,))
    a = mx.array(flat)[3:].reshape(m, k)
    b = random_int8(rng, (n, k))
    assert_exact(cuda.gemm_int32(a, mx.array(b), variant_of(plan), plan), flat[3:].reshape(m, k), b)


def test_tall_problems_are_launched_in_row_chunks(monkeypatch, rng):
    monkeypatch.setattr(cuda_graphs, "MAX_GRID_Y", 2)
    a, b = random_int8(rng, (300, 48)), random_int8(rng, (20, 48))
    plan = cuda.choice(300, 20, 48).plan
    assert len(cuda_graphs._row_chunks(300, plan.cfg)) > 1
    assert_exact(cuda.gemm_int32(mx.array(a), mx.array(b)), a, b)


@pytest.mark.parametrize("splits", [1, 3])
def test_tall_w8a8_problems_run_in_row_chunks_with_the_same_bits(monkeypatch, rng, splits):
    # Each row chunk's GEMM reads its own activation pack (codes and scales of its rows, packed by
    # a copy, with its own tensor-map scratch): the chunks' bits are the whole problem's.
    m, k, n = 300, 1040, 136
    x = mx.array(rng.standard_normal((m, k)).astype(np.float16))
    w, s_w = mx.array(random_int8(rng, (n, k))), mx.array((rng.random(n).astype(np.float32) + 0.5) / 2000)
    bias = mx.array(rng.standard_normal(n).astype(np.float32))
    plan = PLANS[-1 if splits > 1 else -2]
    whole = cuda.w8a8(x, w, s_w, bias, variant_of(plan), plan)
    monkeypatch.setattr(cuda_graphs, "MAX_GRID_Y", 2)
    assert len(cuda_graphs._row_chunks(m, plan.cfg)) > 1
    chunked = cuda.w8a8(x, w, s_w, bias, variant_of(plan), plan)
    assert np.array_equal(np.array(chunked), np.array(whole))
    assert within_one_ulp(chunked, w8a8_linear_ref(x, np.array(w), np.array(s_w), np.array(bias)), "float16").all()


# Every plan with float16 output; the three output types on the first and last plan (each
# dtype is another NVRTC compile of the GEMM, ~10 s apiece for the wgmma tiles).
W8A8_CASES = [(p, mx.float16) for p in PLANS] + [(p, d) for p in PLANS[:1] + PLANS[-1:] for d in (mx.bfloat16, mx.float32)]


@pytest.mark.parametrize("plan,dtype", W8A8_CASES, ids=lambda v: plan_id(v) if isinstance(v, cuda_plans.CudaPlan) else str(v))
def test_w8a8_epilogues(plan, rng, dtype):
    m, k, n = 70, 1040, 136
    x = mx.array(rng.standard_normal((m, k)).astype(np.float32)).astype(dtype)
    w = random_int8(rng, (n, k))
    s_w = (rng.random(n).astype(np.float32) + 0.5) / 2000
    bias = rng.standard_normal(n).astype(np.float32)
    y = cuda.w8a8(x, mx.array(w), mx.array(s_w), mx.array(bias), variant_of(plan), plan)
    assert y.dtype == dtype and y.shape == (m, n)
    ref = w8a8_linear_ref(x, w, s_w, bias)
    got = to_numpy(y, np.float64)
    name = str(dtype).split(".")[-1]
    # float32 error-free transformations, one final rounding: within 1 ulp of the float64 model.
    assert np.all(np.abs(got - ref) <= np.maximum(ulp(ref, name), ulp(got, name)))


def test_sm_count_is_plausible():
    assert 1 <= cuda_probe.sm_count() <= cuda_probe.SM_ID_CAPACITY


def test_kernel_objects_do_not_grow_with_the_token_count(rng):
    # Serving meets every token count M: w8a8_linear at M = 1 .. 96 on one layer builds one kernel
    # object per (variant, tile) its choices meet, whatever M, and a second pass over the same M
    # builds none (each object is compiled by NVRTC once per template instance).
    from int8nax.backends.cuda import choice as cuda_choice

    n, k = 512, 1024
    w = mx.array(random_int8(rng, (n, k)))
    s = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
    x = mx.array(rng.standard_normal((96, k)).astype(np.float16))
    mx.eval(w, s, x)
    family, sms = cuda_device.family_for(cuda_device.compute_capability()), cuda_probe.sm_count()
    specs = {cuda_source.quantize().name}
    for m in range(1, 97):
        c = cuda_choice.choose(m, n, k, w8a8=True, sms=sms, family=family, override=cuda_settings.kernel_choice())
        row = cuda_choice.VARIANTS[c.variant]
        if row.quantizing is not None and cuda_plans.gemv_inside(m, k, 2):  # the GEMV quantizing x itself
            specs.add(row.quantizing().name)
            continue
        kernels = row.specs(c.plan.cfg)
        specs |= {kernels.w8a8.name} if c.plan.splits == 1 else {kernels.int32_packed.name, cuda_source.reduce_w8a8().name}
    before = cuda_kernels.kernels_built()
    counts = []
    for _ in range(2):
        for m in range(1, 97):
            mx.eval(cuda.w8a8(x[:m], w, s, None))
        counts.append(cuda_kernels.kernels_built())
    assert counts[0] - before <= len(specs) <= 6, (counts, before, sorted(specs))
    assert counts[1] == counts[0] and set(cuda_kernels._built) >= specs


# ---- the float32 W8A8 epilogue at the edges of float32 (the numerics spec) ----------------

# Smallest magnitude that rounds to inf in each output format.
# The dp4a kernel, a split plan (the reduction's epilogue) and the large wgmma tile, whose
# interior warpgroups take the branch-free path (M = 192: rows 128..191 interior, 192..255 edge).
EDGE_PLANS = ([p for p in PLANS if p.splits == 1][:1] + [p for p in PLANS if p.splits > 1][-1:]
              + [p for p in PLANS if p.cfg.name == "wg2_128x256" and p.splits == 1])


@pytest.mark.parametrize("plan", EDGE_PLANS, ids=plan_id)
@pytest.mark.parametrize("dtype,epilogue", [(mx.float32, "eft"), (mx.bfloat16, "eft"), (mx.float16, "eft"),
                                            (mx.bfloat16, "narrow"), (mx.float16, "narrow")])  # float32: eft only
@pytest.mark.parametrize("case", ["random", "huge_sx", "subnormal_sx", "cancelling_bias", "mixed"])
def test_epilogue_edges_are_within_one_ulp(plan, rng, dtype, case, epilogue):
    m, k, n = 192, 1040, 512
    q = random_int8(rng, (m, k))
    q[q == -128] = -127
    w = random_int8(rng, (n, k))
    acc = int8_matmul_ref(q, w)
    s_x = (rng.random(m).astype(np.float32) + 0.5) / 100
    s_w = ((rng.random(n).astype(np.float32) + 0.5) / 2000).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    if case == "huge_sx":  # a bfloat16 row near 1e36 quantizes to s_x ~ 1e34
        s_x = (s_x * np.float32(1e36)).astype(np.float32)
        bias = (bias * np.float32(1e30)).astype(np.float32)
    elif case == "subnormal_sx":  # rows of magnitude ~1e-38: s_x below 2^-126
        s_x = (s_x * np.float32(1e-37)).astype(np.float32)
        bias = (bias * np.float32(1e-43)).astype(np.float32)
    elif case == "cancelling_bias":  # bias = -fl32(acc s_x s_w) of row 0: y is the rounding error
        bias = (-(acc[0] * s_x[0].astype(np.float64) * s_w.astype(np.float64))).astype(np.float32)
    elif case == "mixed":
        s_x[::3] *= np.float32(1e-37)
        s_x[1::3] *= np.float32(1e30)
        s_w[::2] *= np.float32(1e5)
    # The exact value (to 2^-64): at this depth of cancellation (|y| ~ 2^-33 |acc s_x s_w|) the
    # float64 model's own rounding error is several float32 ulps of y, so it cannot be the judge.
    ld = np.longdouble
    ref = (acc.astype(ld) * s_x.astype(ld)[:, None] * s_w.astype(ld)[None, :] + bias.astype(ld)).astype(np.float64)
    name = str(dtype).split(".")[-1]
    y = cuda.dequant_gemm(mx.array(q), mx.array(s_x), mx.array(w), mx.array(s_w), mx.array(bias), dtype, variant_of(plan),
                          plan, epilogue=epilogue)
    ok = within_one_ulp(y, ref, name)
    bad = np.argwhere(~ok)
    assert bad.size == 0, f"{len(bad)} beyond 1 ulp, first {bad[0].tolist()}: got {to_numpy(y, np.float64)[tuple(bad[0])]!r}, ref {ref[tuple(bad[0])]!r}"


def test_epilogue_without_bias_and_with_zero_or_nonfinite_scales():
    m, k, n = 8, 64, 16
    rng = np.random.default_rng(5)
    q, w = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    acc = int8_matmul_ref(q, w)
    s_x = np.array([1e-3, 0.0, np.inf, np.nan, 1e-40, 3e38, 1.0, 2.0], np.float32)
    s_w = np.full(n, 1e-3, np.float32)
    s_w[3] = 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        ref = acc * s_x.astype(np.float64)[:, None] * s_w.astype(np.float64)[None, :]
    y = cuda.dequant_gemm(mx.array(q), mx.array(s_x), mx.array(w), mx.array(s_w), None, mx.float32)
    assert within_one_ulp(y, ref, "float32").all()


# ---- quantization of tiny rows (the numerics spec) ----------------------------------------

def _spec_codes(x32):
    """The spec's codes in float32 numpy: k = 64 for a subnormal scale (int8nax.quant's rule)."""
    s = (np.max(np.abs(x32), axis=1) / np.float32(127)).astype(np.float32)
    s[s == 0] = 1
    up = np.where(s < np.float32(2.0 ** -126), np.float32(2.0 ** 64), np.float32(1)).astype(np.float32)
    inv = (np.float32(1) / (s * up)).astype(np.float32)
    v = ((x32 * up[:, None]).astype(np.float32) * inv[:, None]).astype(np.float32)
    r = np.rint(v)
    d = v - r
    r += (d == 0.5) & (v > 0)
    r -= (d == -0.5) & (v < 0)
    return np.clip(r, -127, 127).astype(np.int8), s


def test_tiny_row_example_of_the_spec():
    x = mx.array(np.array([[1e-37, 1e-38, 0.0, 5e-39]], np.float32))
    q, s = cuda.quantize(x)
    assert np.array(q).tolist() == [[127, 13, 0, 6]]
    assert np.array(s)[0] == np.float32(np.float32(1e-37) / np.float32(127))


@pytest.mark.parametrize("k", [8, 1000, 4096])
def test_tiny_and_normal_rows_follow_the_spec(rng, k):
    mags = np.array([1e-38, 1e-40, 1e-44, 1.0, 1e30, 1e37, 2.0 ** -126 * 127, 2.0 ** -126 * 126.99], np.float64)
    x32 = (rng.standard_normal((len(mags), k)) * mags[:, None]).astype(np.float32)
    q, s = cuda.quantize(mx.array(x32))
    want_q, want_s = _spec_codes(x32)
    assert np.array_equal(np.array(s), want_s)
    assert np.array_equal(np.array(q), want_q)
    # ... and int8nax.quant, the definition, agrees with this test's reading of the spec.
    ref_q, ref_s = quant.quantize_activations_np(x32)
    assert np.array_equal(ref_q, want_q) and np.array_equal(ref_s, want_s)


# ---- every launch of the quantization kernel, and its two-pass fallback -------------------
#
# Each (threads, held) of cuda_plans.CUDA_QUANT_LAUNCHES (the register path at its full, a partial and
# a one-group row), and the fallback inside each: a row one group too long for the registers
# (16-byte loads, read twice), K % 8 != 0 (one value at a time), a base 3 elements into its buffer
# (MLX passes the row-contiguous view as it is) and a column slice (MLX copies it first).

QUANT_DTYPES = [mx.float16, mx.bfloat16, mx.float32]
QUANT_CASES = ["full", "partial", "one_group", "too_long", "odd_k", "offset_base", "column_slice"]


def _quant_k(launch, case):
    return {"full": launch.capacity, "partial": launch.capacity - 8 * (launch.threads + 3), "one_group": 8,
            "too_long": launch.capacity + 8, "odd_k": launch.capacity // 2 + 3, "offset_base": launch.capacity // 2,
            "column_slice": launch.capacity // 2}[case]


def _quant_rows(rng, k, dtype):
    """float32 [R, K]: a row of each kind the kernel must quantize bit for bit (as `dtype` rounds
    it): normal, a NaN, +inf, -inf, all zero, tiny (subnormal values; a subnormal scale where the
    type has float32's exponent), -huge at the end, exact ties (scale 1), and a lone maximum at
    the first, a middle and the last position (each thread and warp of the reduction wins once)."""
    huge, tinies = {mx.float16: (65504.0, (1e-6, 3e-5)), mx.bfloat16: (3.0e38, (1e-39, 1e-37)),
                    mx.float32: (3.0e38, (1e-39, 1e-37))}[dtype]
    base = rng.standard_normal((12, k)).astype(np.float32)
    rows = [base[0]]
    for i, special in enumerate((np.nan, np.inf, -np.inf)):
        r = base[1 + i].copy()
        r[(k * (i + 1)) // 4] = special
        rows.append(r)
    rows.append(np.zeros(k, np.float32))
    rows += [base[4] * np.float32(t) for t in tinies]
    r = base[6] * np.float32(huge / 1e3)
    r[-1] = -huge
    rows.append(r)
    ties = [127.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 63.5]
    if dtype == mx.float32:
        ties += [0.49999997, -0.49999997]
    rows.append(np.resize(np.array(ties, np.float32), k))
    for i, at in enumerate((0, k // 2, k - 1)):
        r = base[9 + i] * np.float32(0.01)
        r[at] = 5.0 if i % 2 else -5.0
        rows.append(r)
    return np.stack(rows).astype(np.float32)


def _quant_input(x32, dtype, case):
    """x [R, K] in `dtype` holding x32's rows, as `case` lays it out in memory."""
    r, k = x32.shape
    if case == "offset_base":
        flat = mx.concatenate([mx.zeros((3,), dtype=dtype), mx.array(x32.ravel()).astype(dtype)])
        return flat[3:].reshape(r, k)
    if case == "column_slice":
        return mx.concatenate([mx.zeros((r, 1), dtype=dtype), mx.array(x32).astype(dtype)], axis=1)[:, 1:]
    return mx.array(x32).astype(dtype)


def _assert_quantized_per_spec(q, s, x):
    x32 = to_numpy(x, np.float32)
    want_q, want_s = quant.quantize_activations_np(x32)
    got_q, got_s = np.array(q), np.array(s)
    bad_s = np.flatnonzero(got_s.view(np.uint32) != want_s.view(np.uint32))
    assert bad_s.size == 0, f"scales differ in rows {bad_s.tolist()}: {got_s[bad_s]} vs {want_s[bad_s]}"
    bad_q = np.argwhere(got_q != want_q)
    assert bad_q.size == 0, f"{len(bad_q)} codes differ, first at {bad_q[0].tolist()}"


@pytest.mark.parametrize("case", QUANT_CASES)
@pytest.mark.parametrize("dtype", QUANT_DTYPES, ids=lambda d: str(d).split(".")[-1])
@pytest.mark.parametrize("launch", cuda_plans.CUDA_QUANT_LAUNCHES, ids=lambda v: f"{v.threads}x{v.held}")
def test_quantize_launch_is_bit_exact(rng, launch, dtype, case):
    k = _quant_k(launch, case)
    x = _quant_input(_quant_rows(rng, k, dtype), dtype, case)
    q, s = cuda_graphs._quantize_graph(x, launch)
    _assert_quantized_per_spec(q, s, x)


# The dispatch's own launch at the seed shapes (and a few more rows than SMs), random rows with
# the special ones mixed in.
@pytest.mark.parametrize("m,k", [(16, 4096), (128, 3584), (133, 4096), (2048, 4096), (512, 3584), (128, 18944),
                                 (300, 8192), (4, 40000)])
@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=lambda d: str(d).split(".")[-1])
def test_quantize_dispatch_is_bit_exact(rng, m, k, dtype):
    x32 = rng.standard_normal((m, k)).astype(np.float32) * rng.uniform(0.01, 100, (m, 1)).astype(np.float32)
    special = _quant_rows(rng, k, dtype)
    x32[:len(special)] = special[:m]
    x = mx.array(x32).astype(dtype)
    q, s = cuda.quantize(x)
    _assert_quantized_per_spec(q, s, x)
