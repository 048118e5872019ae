"""int8_matmul's atomic split-K: plans with reduce="atomic" (cuda_plans.REDUCTIONS), whose K splits
add their partial sums into one zero-filled [M, N] output (kernels/cuda/epilogue/atomic_add.cuh)
instead of a [splits, M, N] workspace and the reduction kernel.

On any machine: the plans' validation and names, the kernels' sources and specs, their launches
over a recording stand-in for the kernel objects (one output, init_value 0, no reduction, each row
chunk its own), W8A8's refusal, the plans sweep's candidates and the compile check's catalogue. On
an sm_90 GPU: the sums bit for bit against the int64 product (INT8NAX_REQUIRE_GPU makes a missing
GPU a failure)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from int8nax.backends.cuda import choice as cuda_choice, plans as cuda_plans, source as cuda_source
from int8nax.bench.kernel import plans as kp
from int8nax.bench import problems

from test_tma_plan import recorded  # noqa: F401 (the fixture: recording kernel objects, sm90, 132 SMs)

TOOLS = Path(__file__).resolve().parents[1] / "tools"

ATOMIC_VARIANTS = (cuda_choice.CPASYNC, cuda_choice.TMA, cuda_choice.COOPERATIVE, cuda_choice.PINGPONG)
"""The variants with an atomic int32 kernel: every wgmma GEMM whose raw plans can split K."""

LONG_K = (128, 18944, 3584)
"""(M, K, N) of the trial's reason: 4 splits of 128 x 112 on the TMA kernel (32.0 + 6.4 us for the
GEMM and the reduction against cuBLASLt's 36.7, H100)."""


def atomic(plan):
    return replace(plan, reduce=cuda_plans.ATOMIC)


def split_plans(m, k, n):
    """(variant, a split plan) on every variant with an atomic kernel for an [M, K] x [N, K] problem:
    the rules' plans where they split, else a 3-way split of the rule's tile."""
    out = []
    for variant in ATOMIC_VARIANTS:
        row = cuda_choice.VARIANTS[variant]
        plan = row.plan(cuda_choice.Problem(m, n, k))
        out.append((variant, plan if plan.splits > 1 else replace(plan, splits=3)))
    return out


# ---- the plans -----------------------------------------------------------------------------------

def test_reduce_takes_the_workspace_or_atomic_and_says_what_came():
    cfg, ws = cuda_plans.CUDA_CONFIGS["wg2_128x112"], cuda_plans.COOPERATIVE_CONFIGS["ws_128x128"]
    for make in (lambda r, s: cuda_plans.CudaPlan(cfg, s, r), lambda r, s: cuda_plans.PersistentPlan(ws, s, 1, 7, r)):
        with pytest.raises(ValueError, match=r"'reduce' must be one of \('workspace', 'atomic'\), got 'l2'"):
            make("l2", 4)
        with pytest.raises(ValueError, match=r"'reduce'='atomic' adds the partial sums of K splits, but 'splits' is 1"):
            make("atomic", 1)
        assert make("workspace", 1).reduce == make("workspace", 4).reduce == cuda_plans.WORKSPACE


def test_an_atomic_plan_is_another_plan_with_another_name():
    cfg, pp = cuda_plans.CUDA_CONFIGS["wg2_128x112"], cuda_plans.PINGPONG_CONFIGS["pp_128x64"]
    for plan in (cuda_plans.CudaPlan(cfg, 4), cuda_plans.PersistentPlan(pp, 2, 1, 112)):
        twin = atomic(plan)
        assert twin != plan and twin.name == plan.name + "_atomic"
        assert len({plan, twin}) == 2  # plans key caches: the two never share an entry
        ws, at = cuda_choice.Choice(cuda_choice.TMA, plan), cuda_choice.Choice(cuda_choice.TMA, twin)
        assert at.describe() == ws.describe().replace(f"splits={plan.splits}", f"splits={plan.splits} reduce=atomic")
        assert "reduce" not in ws.describe()


def test_no_rule_chooses_an_atomic_plan():
    shapes = list(problems.SEED_SHAPES + problems.EXTRA_SHAPES) + [LONG_K, (16, 4096, 4096), (200, 4112, 259)]
    for m, k, n in shapes:
        for w8a8 in (False, True):
            for override in ["auto"] + [v for v in ATOMIC_VARIANTS]:
                plan = cuda_choice.choose(m, n, k, w8a8=w8a8, override=override).plan
                assert cuda_plans.reduce_of(plan) == cuda_plans.WORKSPACE, (m, k, n, override)


# ---- the kernels' sources ------------------------------------------------------------------------

@pytest.mark.parametrize("variant", ATOMIC_VARIANTS)
def test_the_atomic_kernels_add_into_one_output_and_the_workspace_kernels_never_reach_the_adds(variant):
    row = cuda_choice.VARIANTS[variant]
    for cfg in row.configs:
        specs = row.specs(cfg)
        spec, ws = specs.int32_atomic, specs.int32
        assert spec.output_names == ("out",) and spec.input_names == ws.input_names
        assert "int8nax::AddInt32{" in spec.source and "StoreInt32" not in spec.source
        assert "SplitInt32" not in spec.source and "blockIdx.z" not in spec.source
        assert spec.shared_memory == ws.shared_memory and spec.name != ws.name
        assert ("map_slots_after_sums(out, a_shape[0], b_shape[0])" in spec.source) == row.maps
        assert "red.global.add.s32" in cuda_source.header_text(cuda_source.atomic_part(_kind(variant)))
        # the workspace kernel's text (so its digest, name and compiled module) has no atomic add
        assert "AddInt32" not in cuda_source.header_text(_kind(variant)) and "AddInt32" not in ws.source
    for other in set(cuda_choice.VARIANTS) - set(ATOMIC_VARIANTS):
        row = cuda_choice.VARIANTS[other]
        assert row.specs(row.configs[0]).int32_atomic is None


def _kind(variant):
    """The header part of a variant's GEMM (source._HEADERS)."""
    return {cuda_choice.CPASYNC: "cpasync", cuda_choice.TMA: "tma", cuda_choice.COOPERATIVE: "cooperative",
            cuda_choice.PINGPONG: "pingpong"}[variant]


def test_the_atomic_parts_are_their_kinds_with_the_adds_and_keep_the_kinds_launch_bounds():
    for kind in cuda_source.ATOMIC_PARTS:
        part = cuda_source.atomic_part(kind)
        assert cuda_source._HEADERS[part] == cuda_source._HEADERS[kind] + (cuda_source.ATOMIC_ADD,)
        assert cuda_source.launch_bound_lines(part) == cuda_source.launch_bound_lines(kind)
        assert cuda_source.digest(part) != cuda_source.digest(kind)
        assert cuda_source.ATOMIC_ADD not in cuda_source.walk(kind)


def test_the_headers_map_slot_is_the_plans():
    text = cuda_source._read(cuda_source.ATOMIC_ADD)
    (slot,) = re.findall(r"constexpr int MAP_SLOT_BYTES = (\d+);", text)
    assert int(slot) == cuda_plans.TMA_MAP_SLOT_BYTES


# ---- the launches (recorded) ---------------------------------------------------------------------

@pytest.mark.parametrize("m,k,n", [LONG_K, (200, 4112, 259), (16, 4096, 4096)])
def test_an_atomic_plan_launches_one_gemm_into_a_zero_filled_output_and_no_reduction(recorded, m, k, n):
    import mlx.core as mx

    from int8nax.backends.cuda import graphs as cuda_graphs

    cuda, launches = recorded
    a, b = mx.zeros((m, k), dtype=mx.int8), mx.zeros((n, k), dtype=mx.int8)
    for variant, plan in split_plans(m, k, n):
        row = cuda_choice.VARIANTS[variant]
        launches.clear()
        mx.eval(cuda.gemm_int32(a, b, variant, plan))
        assert [x["name"] for x in launches] == [row.specs(plan.cfg).int32.name, cuda_source.reduce_int32().name]
        assert launches[0]["outputs"][0] == (plan.splits, m, n) and launches[0]["init_value"] is None

        launches.clear()
        y = cuda.gemm_int32(a, b, variant, atomic(plan))
        mx.eval(y)
        assert y.shape == (m, n) and y.dtype == mx.int32
        (gemm,) = launches
        extra = cuda_graphs.map_rows(row, plan, m, n)
        assert gemm["name"] == row.specs(plan.cfg).int32_atomic.name and gemm["init_value"] == 0
        assert gemm["outputs"] == [(m + extra, n)] and gemm["template"] == row.template(plan.cfg)
        assert (gemm["grid"], gemm["block"]) == (plan.grid() if row.persistent else plan.grid(m, n))
        assert gemm["inputs"][:2] == [(m, k), (n, k)]
        if row.persistent:
            assert gemm["inputs"][2] == plan.plan_shape()
        assert (extra > 0) == row.maps


@pytest.mark.parametrize("m,n", [(128, 3584), (200, 259), (1, 1), (3, 8), (65, 100000), (4096, 7)])
def test_the_map_slots_fit_after_the_sums_on_a_slot_boundary_in_the_fewest_rows(m, n):
    from int8nax.backends.cuda import graphs as cuda_graphs

    slot = cuda_plans.TMA_MAP_SLOT_BYTES
    for variant, plan in split_plans(m, 4096, n):
        row = cuda_choice.VARIANTS[variant]
        extra = cuda_graphs.map_rows(row, plan, m, n)
        if not row.maps:
            assert extra == 0
            continue
        first = -(-m * n * 4 // slot) * slot  # the first slot boundary at or after the sums' bytes
        assert first + plan.map_bytes(m, n) <= (m + extra) * n * 4  # every slot inside the output
        assert first + plan.map_bytes(m, n) > (m + extra - 1) * n * 4  # and not a row more


def test_each_row_chunk_is_its_own_zero_filled_launch(recorded, monkeypatch):
    import mlx.core as mx

    from int8nax.backends.cuda import graphs as cuda_graphs

    cuda, launches = recorded
    monkeypatch.setattr(cuda_graphs, "MAX_GRID_Y", 2)
    m, k, n = 700, 4096, 200
    a, b = mx.zeros((m, k), dtype=mx.int8), mx.zeros((n, k), dtype=mx.int8)
    for variant in (cuda_choice.TMA, cuda_choice.CPASYNC):
        row = cuda_choice.VARIANTS[variant]
        plan = cuda_plans.CudaPlan(cuda_plans.CUDA_CONFIGS["wg2_128x112"], 3, cuda_plans.ATOMIC)
        chunks = cuda_graphs._row_chunks(m, plan.cfg)
        assert len(chunks) > 1
        launches.clear()
        y = cuda.gemm_int32(a, b, variant, plan)
        mx.eval(y)
        assert y.shape == (m, n)
        assert [x["name"] for x in launches] == [row.specs(plan.cfg).int32_atomic.name] * len(chunks)
        assert [x["init_value"] for x in launches] == [0] * len(chunks)
        assert [x["outputs"] for x in launches] == [[(r1 - r0 + cuda_graphs.map_rows(row, plan, r1 - r0, n), n)]
                                                     for r0, r1 in chunks]
        assert [x["inputs"][0] for x in launches] == [(r1 - r0, k) for r0, r1 in chunks]


def test_w8a8_refuses_an_atomic_plan_before_launching(recorded):
    import mlx.core as mx

    cuda, launches = recorded
    m, k, n = LONG_K
    plan = atomic(cuda_plans.tma_plan(m, n, k))
    x, w, s = mx.zeros((m, k), dtype=mx.bfloat16), mx.zeros((n, k), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)
    with pytest.raises(ValueError, match=r"plan: W8A8 dequantizes the exact sum .* reduce='workspace' .*"
                                         r"wg2_128x112_s4_atomic"):
        cuda.dequant_gemm(mx.zeros((m, k), dtype=mx.int8), mx.ones((m,)), w, s, None, mx.bfloat16, "tma", plan)
    assert launches == []
    with pytest.raises(ValueError, match="reduce='atomic' is int8_matmul's"):
        cuda.w8a8(x, w, s, None, "tma", plan)


def test_a_variant_without_an_atomic_kernel_refuses_an_atomic_plan(recorded):
    import mlx.core as mx

    cuda, launches = recorded
    plan = cuda_plans.CudaPlan(cuda_plans.CUDA_SIMT_CONFIG, 3, cuda_plans.ATOMIC)
    with pytest.raises(ValueError, match=r"reduce='atomic' runs on the variants \[.*'tma-unspecialized'.*\], got 'simt'"):
        cuda.gemm_int32(mx.zeros((70, 256), dtype=mx.int8), mx.zeros((40, 256), dtype=mx.int8), "simt", plan)
    assert launches == []


# ---- the plans sweep and the compile check ---------------------------------------------------------

SWEEP_SHAPES = list(problems.SEED_SHAPES) + [LONG_K, (16, 4096, 4096), (1, 18944, 3584), (65, 16384, 4096)]


@pytest.mark.parametrize("m,k,n", SWEEP_SHAPES)
def test_the_sweep_times_every_raw_split_plan_also_atomic_right_after_it(m, k, n):
    cands = kp.plan_candidates(m, n, k, 132, False)
    for i, c in enumerate(cands):
        plan, row = c.choice.plan, cuda_choice.VARIANTS[c.choice.variant]
        reduce = cuda_plans.reduce_of(plan)
        splits_with_adds = plan.splits > 1 and row.specs(plan.cfg).int32_atomic is not None
        if reduce == cuda_plans.WORKSPACE:
            twin = cands[i + 1] if i + 1 < len(cands) else None
            has_twin = (twin is not None and twin.choice.variant == c.choice.variant
                        and cuda_plans.reduce_of(twin.choice.plan) == cuda_plans.ATOMIC
                        and replace(twin.choice.plan, reduce=cuda_plans.WORKSPACE) == plan)
            assert has_twin == splits_with_adds, c.describe()
            if has_twin:
                assert twin.names == tuple(f"{name} atomic" for name in c.names)
        else:
            assert reduce == cuda_plans.ATOMIC and splits_with_adds and i > 0
            assert cands[i - 1].choice == cuda_choice.Choice(c.choice.variant, replace(plan, reduce=cuda_plans.WORKSPACE))
    # W8A8's sweep offers none: its reduction dequantizes the exact sum
    w8a8 = kp.plan_candidates(m, n, k, 132, True, out_dtype="bfloat16")
    assert all(cuda_plans.reduce_of(c.choice.plan) == cuda_plans.WORKSPACE for c in w8a8)


def test_the_sweep_at_the_trials_shape_times_the_default_atomic():
    m, k, n = LONG_K
    cands = kp.plan_candidates(m, n, k, 132, False)
    default = cuda_choice.choose(m, n, k, sms=132)
    assert default.plan.splits > 1  # the trial's reason: the rule splits K here
    by_plan = {c.choice: c.names for c in cands}
    assert "default atomic" in by_plan[cuda_choice.Choice(default.variant, atomic(default.plan))]
    atomics = [c for c in cands if cuda_plans.reduce_of(c.choice.plan) == cuda_plans.ATOMIC]
    assert {c.choice.variant for c in atomics} == {cuda_choice.TMA, cuda_choice.COOPERATIVE, cuda_choice.PINGPONG}


def test_the_compile_checks_catalogue_holds_every_atomic_kernel():
    sys.path.insert(0, str(TOOLS))
    try:
        import cuda_compile_check
    finally:
        sys.path.remove(str(TOOLS))
    found = {label: spec for label, spec, *_ in cuda_compile_check.instances("sm_90a")}
    want = {f"{v} i32atomic {cfg.name}": cuda_choice.VARIANTS[v].specs(cfg).int32_atomic
            for v in ATOMIC_VARIANTS for cfg in cuda_choice.VARIANTS[v].configs}
    assert {label: found.get(label) for label in want} == want
    assert not [label for label in found if "i32atomic" in label and label not in want]


# ---- on a GPU: the sums, bit for bit ---------------------------------------------------------------

def _sm90_or_skip():
    from int8nax import backends

    probe = backends.probe("cuda")
    if not probe.available:
        if os.environ.get("INT8NAX_REQUIRE_GPU"):
            pytest.fail(f"INT8NAX_REQUIRE_GPU is set but the CUDA backend is unavailable: {probe.reason}")
        pytest.skip(f"backend cuda unavailable here: {probe.reason}")
    from int8nax.backends.cuda import backend as cuda, device as cuda_device

    if cuda_device.family_for(cuda_device.compute_capability()) != "sm90":
        pytest.skip("the atomic kernels are wgmma GEMMs: compute capability 9.0")
    return cuda


def _assert_exact(got, a, b):
    from int8nax.reference import int8_matmul_ref

    bad = np.argwhere(np.array(got).astype(np.int64) != int8_matmul_ref(a, b))
    assert bad.size == 0, f"{len(bad)} wrong elements, first at {bad[0].tolist()}"


def _gpu_plans(m, k, n):
    """The sweep's atomic candidates where it offers some, and each atomic variant's split plan."""
    from int8nax.backends.cuda import probe as cuda_probe

    sms = cuda_probe.sm_count()
    found = [(c.choice.variant, c.choice.plan) for c in kp.plan_candidates(m, n, k, sms, False)
             if cuda_plans.reduce_of(c.choice.plan) == cuda_plans.ATOMIC]
    return list(dict.fromkeys(found + [(v, atomic(p)) for v, p in split_plans(m, k, n)]))


# LONG_K: the trial's shape. 200 x 4112 x 259: M and N past every tile's edge (N odd: the last
# column of a pair alone), 33 K blocks in uneven splits (3: 11 each; 4: 8, 8, 8, 9; 2: 16, 17).
@pytest.mark.parametrize("m,k,n", [LONG_K, (200, 4112, 259)])
def test_atomic_plans_give_the_int64_product(rng, m, k, n):
    import mlx.core as mx

    from conftest import random_int8

    cuda = _sm90_or_skip()
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    a_mx, b_mx = mx.array(a), mx.array(b)
    for variant, plan in _gpu_plans(m, k, n):
        _assert_exact(cuda.gemm_int32(a_mx, b_mx, variant, plan), a, b)


def test_atomic_plans_in_row_chunks_and_on_offset_views_give_the_int64_product(rng, monkeypatch):
    import mlx.core as mx

    from conftest import random_int8
    from int8nax.backends.cuda import graphs as cuda_graphs

    cuda = _sm90_or_skip()
    m, k, n = 300, 4112, 136
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    shifted = mx.array(np.concatenate([np.zeros(3, np.int8), a.ravel()]))[3:].reshape(m, k)  # TMA: cp.async loop
    monkeypatch.setattr(cuda_graphs, "MAX_GRID_Y", 1)  # one 128-row tile a launch: three chunks
    for variant, plan in split_plans(m, k, n):
        got = cuda.gemm_int32(mx.array(a), mx.array(b), variant, atomic(plan))
        _assert_exact(got, a, b)
        _assert_exact(cuda.gemm_int32(shifted, mx.array(b), variant, atomic(plan)), a, b)
