"""The CUDA kernel choice (backends/cuda/choice.py): pure Python, so it runs on every machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from int8nax.backends.cuda import choice as cuda_choice, plans as cuda_plans

DATA = Path(__file__).resolve().parent / "data"


def _old_choices():
    doc = json.loads((DATA / "cuda_choices_c3d7ce5.json").read_text())
    return [dict(zip(doc["columns"], row)) for row in doc["rows"]]


def _one_wave_since(r, have) -> str | None:
    """"one wave" where the choice `have` is the TMA kernel on cuda_plans.one_wave_tile's tile, unsplit,
    at a long K where that tile fills the SMs in one wave (int8_matmul and W8A8 alike; the H100
    measurement behind it: tests/data/cuda_dispatch_evidence.json), else None."""
    m, n, k, sms = r["m"], r["n"], r["k"], r["sms"]
    if r["family"] != "sm90" or r["override"] not in ("", "tma_simple") or not cuda_plans.long_k(k) or m <= 64:
        return None
    one = cuda_plans.one_wave_tile(m, n, sms)
    if one is None or have[:3] != [cuda_choice.TMA, one.name, 1]:
        return None
    return "one wave"


def _narrow_since(r, have) -> str | None:
    """"narrow" where the choice `have` is W8A8 on the TMA kernel's 64 x 32 tile (cuda_plans.w8a8_small_tile,
    M <= W8A8_NARROW_MAX_M) where the row recorded 64 x 64, else None."""
    if not r["w8a8"] or r["family"] != "sm90" or r["m"] > cuda_plans.W8A8_NARROW_MAX_M or r["tile"] != "wg1_64x64":
        return None
    if have[:3] != [r["variant"], "wg1_64x32", 1] or r["variant"] != cuda_choice.TMA:
        return None
    return "narrow" if cuda_plans.w8a8_small_tile(r["m"], r["n"], r["sms"]).name == "wg1_64x32" else None


def _w8a8_rule_since(r, have) -> str | None:
    """Which W8A8 rule set by the H200 measurements of 2026-12-04 (tests/data/cuda_dispatch_evidence.json)
    explains the choice `have` ([variant, tile, splits, group, blocks]) where row r recorded another,
    worked out here from the problem alone; None where none does. The rules, all at M >= 512
    (cuda_plans.W8A8_COMPUTE_MIN_M) but the rounds one:
      "long K": K >= 8192 and cooperative_plan unsplit -> the cooperative kernel on that plan;
      "one round": cooperative_plan unsplit with its units fitting the SMs once -> the same;
      "rounds": 128 x 256 tiles in 3 to 7 rounds at least 90 % full (many tiles) -> the same
                (W8A8_WS_MIN_ROUNDS was 8);
      "wave": short K on the TMA kernel -> the wave tile where its blocks fit one wave."""
    m, n, k, sms = r["m"], r["n"], r["k"], r["sms"]
    if not r["w8a8"] or r["family"] != "sm90" or m < 17 or k % 16:
        return None
    coop = cuda_plans.cooperative_plan(m, n, k, sms)
    as_coop = [cuda_choice.COOPERATIVE, coop.cfg.name, coop.splits, coop.group, coop.blocks]
    if r["override"] == "" and have == as_coop:
        units = cuda_plans.ws_units(m, n, coop.cfg, coop.splits)
        if m >= 512 and coop.splits == 1 and k >= 8192:
            return "long K"
        if m >= 512 and coop.splits == 1 and units <= sms:
            return "one round"
        tiles = cuda_plans.tile_count(m, n, cuda_plans.COOPERATIVE_CONFIGS["ws_128x256"])
        rounds = -(-tiles // sms)
        if m > 64 and tiles >= 1.5 * sms and tiles >= 0.9 * rounds * sms and 3 <= rounds < 8:
            return "rounds"
    if r["variant"] == have[0] == cuda_choice.TMA and m >= 512 and k < 8192 and have[2] == 1:
        wave = cuda_plans.wave_tile(m, n, sms)
        if have[1] == wave.name and cuda_plans.tile_count(m, n, wave) <= sms * cuda_plans.blocks_per_sm(wave):
            return "wave"
    return None


@pytest.mark.parametrize("gemv_on", [False, True], ids=["shipped", "gemv-default"])
def test_every_recorded_choice_is_unchanged_but_for_the_w8a8_rules_since(monkeypatch, gemv_on):
    monkeypatch.setattr(cuda_choice, "GEMV_DEFAULT", gemv_on)
    # The choice before the refactor (commit c3d7ce5, recorded by running its cuda.gemm_plan) for
    # 936 shapes x W8A8 on 132 SMs, a subset on 114 SMs, every INT8NAX_CUDA_KERNEL value (by its
    # old name) and the SIMT family: the same variant and the same plan, field by field.
    rows = _old_choices()
    assert len(rows) == 3882
    assert sum(1 for r in rows if r["override"] == "" and r["sms"] == 132 and r["family"] == "sm90") == 936
    # Changes since, each on purpose:
    # - where cuda_choice.GEMV_DEFAULT is on: W8A8 at M <= 16 takes the GEMV by default on sm90
    #   (auto only: every override keeps its recorded kernel there), with 16-row slices where
    #   N / 16 >= 1.5 x SMs (those with four steps unrolled); int8_matmul too (cuda_choice.GEMV_RAW_DEFAULT);
    # - W8A8's rules from the H200 measurements of 2026-12-04 (_w8a8_rule_since), and the one-wave
    #   tile at long K for both ops (_one_wave_since), W8A8's 64 x 32 tile at M <= 64 (_narrow_since):
    #   every other change is one of them, and each
    #   of them changes some recorded choice.
    differ, gemv, raw_gemv, since = [], 0, 0, {}
    for r in rows:
        got = cuda_choice.choose(r["m"], r["n"], r["k"], w8a8=r["w8a8"], sms=r["sms"], family=r["family"],
                                 override=r["override"])
        plan = got.plan
        have = [got.variant, plan.cfg.name, plan.splits, getattr(plan, "group", None), getattr(plan, "blocks", None)]
        want = [r["variant"], r["tile"], r["splits"], r["group"], r["blocks"]]
        slices = "gemv_16x16_u4" if -(-r["n"] // 16) >= 3 * r["sms"] // 2 else "gemv_16x8"
        if gemv_on and r["w8a8"] and r["m"] <= 16 and r["override"] == "" and r["family"] == "sm90":
            gemv += 1
            want = [cuda_choice.GEMV, slices, 1, None, None]
        if not r["w8a8"] and r["m"] <= 16 and r["override"] == "" and r["family"] == "sm90":
            raw_gemv += 1  # cuda_choice.GEMV_RAW_DEFAULT: int8_matmul at M <= 16 on the GEMV
            want = [cuda_choice.GEMV, slices, 1, None, None]
        if have != want:
            why = _w8a8_rule_since(r, have) or _one_wave_since(r, have) or _narrow_since(r, have)
            if why is None:
                differ.append((r, have))
            since[why] = since.get(why, 0) + 1
    assert not differ, differ[:5]
    assert gemv >= 100 if gemv_on else gemv == 0, gemv
    assert raw_gemv >= 100, raw_gemv
    # the counts pin the change: a rule that fires more or less widely than these must say so here
    assert since == {"long K": 58, "one round": 19, "rounds": 19, "wave": 5, "one wave": 4, "narrow": 56}, since


@pytest.mark.parametrize("value,want", [
    ("", "auto"), ("auto", "auto"), ("wgmma", "cpasync"), ("cpasync", "cpasync"), ("CPASYNC", "cpasync"),
    ("tma_simple", "tma-unspecialized"), ("tma-unspecialized", "tma-unspecialized"),
    ("tma", "tma-ws-cooperative"), ("tma_ws", "tma-ws-cooperative"), ("tma-ws-cooperative", "tma-ws-cooperative"),
    ("tma_pp", "tma-ws-pingpong"), ("tma-ws-pingpong", "tma-ws-pingpong"),
])
def test_override_names_and_aliases(value, want):
    assert cuda_choice.override_name(value) == want


@pytest.mark.parametrize("value", ["fast", "simt", "tma-ws"])
def test_a_bad_override_is_refused(value):
    with pytest.raises(ValueError, match="INT8NAX_CUDA_KERNEL="):
        cuda_choice.override_name(value)


def test_every_variant_has_one_row_with_its_plan_kind():
    for name, v in cuda_choice.VARIANTS.items():
        assert v.name == name
        plan = v.plan(cuda_choice.Problem(512, 4096, 4096))
        assert isinstance(plan, cuda_plans.PersistentPlan) == v.persistent
    aliases = [a for v in cuda_choice.VARIANTS.values() for a in v.aliases]
    assert len(aliases) == len(set(aliases)) and not set(aliases) & set(cuda_choice.VARIANTS)


def test_an_override_the_problem_cannot_take_falls_back_to_cpasync():
    for override in ("tma_simple", "tma-ws-cooperative", "tma-ws-pingpong"):
        got = cuda_choice.choose(512, 4096, 4104, override=override)  # K % 16 != 0: no TMA
        assert got.variant == cuda_choice.CPASYNC
        assert got.plan == cuda_plans.cpasync_plan(512, 4096, 4104)


def test_the_choice_depends_on_the_sm_count():
    # 8192^2 on 132 SMs: 2048 tiles of 128 x 256 fill 16 rounds 97 %; the plan's block count is the SMs
    big = cuda_choice.choose(8192, 8192, 8192, sms=132)
    assert (big.variant, big.plan.blocks) == (cuda_choice.COOPERATIVE, 132)
    assert cuda_choice.choose(8192, 8192, 8192, sms=114).plan.blocks == 114


def test_describe_names_variant_tile_and_splits():
    assert cuda_choice.choose(8192, 8192, 8192).describe() == "tma-ws-cooperative 128x256 splits=1"
    assert cuda_choice.choose(17, 4096, 4104).describe() == "cpasync 64x64 splits=4"
    assert cuda_choice.choose(16, 4096, 4104).describe() == "gemv 16x16 u4 splits=1"  # the GEMV takes any K
    assert cuda_choice.choose(16, 3000, 4104).describe() == "gemv 16x8 splits=1"  # 188 blocks of 16 rows: 8
    assert cuda_choice.choose(16, 4096, 4096, family="simt").describe() == "simt 64x64 splits=1"


def test_backend_describe_launches_nothing(monkeypatch):
    pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import kernels as cuda_kernels, probe as cuda_probe, backend as cuda

    launched = []
    monkeypatch.setattr(cuda_kernels, "_kernel", lambda spec: launched.append(spec))
    got = cuda.BACKEND.describe("w8a8_linear", 8192, 8192, 8192, bias=True, dtype="float16")
    assert got.startswith("cuda tma-ws-cooperative 128x256 splits=1") and not launched
    if cuda_probe.known_sm_count() is None:
        assert got.endswith("(132 SMs assumed)")
    assert cuda.BACKEND.describe("int8_matmul", 17, 4096, 4104).startswith("cuda cpasync 64x64 splits=")
    with pytest.raises(ValueError, match="op: expected"):
        cuda.BACKEND.describe("matmul", 1, 1, 1)


def test_a_call_may_name_any_variant_but_the_environment_only_sm90_ones():
    assert cuda_choice.variant_name("simt") == cuda_choice.SIMT
    assert cuda_choice.variant_name("TMA_PP") == cuda_choice.PINGPONG
    for bad in ("auto", "", "fast"):
        with pytest.raises(ValueError, match="variant: expected one of"):
            cuda_choice.variant_name(bad)


# ---- W8A8's own rules (the measurements: tests/data/cuda_dispatch_evidence.json) ----

@pytest.mark.parametrize("m,k,n,sms,want", [
    # long K: cooperative_plan unsplit, on 128 x 128 (128 x 256 tiles fewer than the SMs) or 128 x 256
    (512, 12288, 4096, 132, True), (2048, 18944, 3584, 132, True),
    (512, 18944, 3584, 132, False),  # 128 blocks of 128 x 112 in one wave against 112 units: the TMA kernel
    (4096, 18944, 3584, 132, True), (4096, 12288, 4096, 132, True),
    (512, 18944, 1024, 132, False),  # 32 units of 128 x 128: cooperative_plan splits K 4 ways
    (128, 18944, 3584, 132, False),  # below W8A8_COMPUTE_MIN_M (and split 4 ways)
    # short K: 128 x 128 units that fit the SMs once
    (512, 3584, 3584, 132, True),  # 112 units
    (512, 4096, 4096, 132, True),  # 128 units
    (512, 4096, 4096, 114, False),  # the same 128 units on 114 SMs: two rounds
    (512, 3584, 4608, 132, False),  # 144 units: two rounds
    (1024, 4096, 4096, 132, False),  # 256 units
    (511, 4096, 4096, 132, True),  # 128 units: 511 rows launch 512's grid (mlx-lm's 512-token chunk)
    (384, 4096, 4096, 132, False),  # 96 units, below W8A8_COMPUTE_MIN_M
    (256, 4096, 4096, 132, False), (128, 4096, 4096, 132, False), (128, 3584, 18944, 132, False),
    (2048, 4096, 4096, 132, False),  # 256 units of 128 x 256 in 2 rounds: persistent_variant's rounds rule decides
])
def test_w8a8_cooperative_where_its_plan_runs_unsplit_at_long_k_or_in_one_round(m, k, n, sms, want):
    assert cuda_choice.w8a8_cooperative(m, n, k, sms) is want
    got = cuda_choice.choose(m, n, k, w8a8=True, sms=sms)
    if want:
        assert got == cuda_choice.Choice(cuda_choice.COOPERATIVE, cuda_plans.cooperative_plan(m, n, k, sms))
        assert got.plan.splits == 1
        # int8_matmul keeps its own rule
        assert cuda_choice.choose(m, n, k, sms=sms).variant == (
            cuda_choice.persistent_variant(m, n, k, sms) or cuda_choice.TMA)
    else:
        assert got.variant == (cuda_choice.persistent_variant(m, n, k, sms, w8a8=True) or cuda_choice.TMA)


@pytest.mark.parametrize("m,k,n,want", [
    (2048, 4096, 4096, None),  # 256 tiles of 128 x 256: 2 rounds, 97 % full
    (512, 4096, 24576, cuda_choice.COOPERATIVE),  # 384: 3 rounds, 97 %
    (4096, 4096, 4096, cuda_choice.COOPERATIVE),  # 512: 4 rounds
    (4096, 4096, 6144, cuda_choice.COOPERATIVE),  # 768: 6 rounds
    (512, 3584, 18944, cuda_choice.PINGPONG),  # 296: 3 rounds 75 % full: the ping-pong kernel, as int8_matmul
    (2048, 3584, 3584, cuda_choice.PINGPONG),  # 224: 2 rounds 85 % full
])
def test_w8a8_takes_the_cooperative_kernel_from_w8a8_ws_min_rounds(m, k, n, want):
    assert cuda_choice.persistent_variant(m, n, k, 132, w8a8=True) == want
    tiles = cuda_plans.tile_count(m, n, cuda_plans.COOPERATIVE_CONFIGS["ws_128x256"])
    if want == cuda_choice.COOPERATIVE:
        assert -(-tiles // 132) >= cuda_choice.W8A8_WS_MIN_ROUNDS
    elif cuda_choice.persistent_variant(m, n, k, 132) == cuda_choice.COOPERATIVE:
        assert -(-tiles // 132) < cuda_choice.W8A8_WS_MIN_ROUNDS  # declined: too few rounds


@pytest.mark.parametrize("m,n,sms,want", [
    (512, 4608, 132, "wg2_128x144"),  # 128 tiles in one wave, where 128 x 128 gives 144
    (512, 6144, 132, "wg2_128x192"),  # 128 tiles in one wave, where 128 x 128 gives 192
    (512, 4096, 132, "wg2_128x144"),  # 116 tiles
    (512, 18944, 132, None),  # the wave rule's 128 x 192 takes 3 waves
    (128, 18944, 132, None),  # below W8A8_COMPUTE_MIN_M (132 tiles of 128 x 144: one wave)
    (511, 4608, 132, "wg2_128x144"),  # 511 rows launch 512's grid: four 128-row tiles
    (385, 4608, 132, "wg2_128x144"),
    (384, 4608, 132, None),  # three 128-row tiles: below W8A8_COMPUTE_MIN_M
    (512, 4608, 114, "wg2_128x192"),  # on 114 SMs: 96 tiles of 128 x 192, one wave
    (512, 8192, 132, "wg2_128x256"),  # 128 tiles of 128 x 256 in one wave: the default tile
    (512, 8192, 114, None),  # on 114 SMs the wave rule's 128 x 144 takes 2 waves (228 tiles)
])
def test_w8a8_wave_tile_at_large_m_in_one_wave(m, n, sms, want):
    got = cuda_plans.w8a8_wave_tile(m, n, sms)
    assert (got.name if got else None) == want
    if want:
        assert got == cuda_plans.wave_tile(m, n, sms)
    # tma_plan at short K: the wave tile where there is one, else the rule without it, which never
    # takes the one-block-per-SM 128 x 192 / 128 x 144 tiles
    plan = cuda_plans.tma_plan(m, n, 4096, sms, w8a8=True)
    if want and cuda_plans.tile_count(m, n, got) >= cuda_plans.TMA_FILL * sms:
        assert plan == cuda_plans.CudaPlan(got, 1)
    else:
        assert plan.cfg.name in cuda_plans._TMA_TILES and plan.splits == 1
    # int8_matmul's plan is untouched by W8A8's rule
    assert cuda_plans.tma_plan(m, n, 4096, sms).cfg in (cuda_plans.wave_tile(m, n, sms),
                                                        *(cuda_plans.CUDA_CONFIGS[t] for t in cuda_plans._TMA_TILES))
