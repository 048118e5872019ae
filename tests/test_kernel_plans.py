"""int8nax.bench.kernel.plans (`int8nax compare --mode kernel --plans`) on a CPU box: the plan
candidates, the default shapes, the items, the worker's checks (CPU stand-in for the GPU), the
tables from recorded H200 records (tests/data/kernel_plans_h200.json), and the command line."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import mlx.core as mx
import pytest

from int8nax.commands import cli
from int8nax.backends.cuda import choice as C
from int8nax.backends.cuda import plans as P
from int8nax.bench.kernel import cupti
from int8nax.bench.kernel import mode as kt
from int8nax.bench.kernel import plans as kp
from int8nax.bench.kernel import worker as kw
from int8nax.bench import models, problems

FIXTURE = Path(__file__).parent / "data" / "kernel_plans_h200.json"


def describes(cands):
    return [c.describe() for c in cands]


def by_name(cands):
    return {name: c for c in cands for name in c.names}


# ---- candidates --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", list(problems.SEED_SHAPES) + [(4096, 3584, 37888), (65, 4096, 4096), (1, 64, 48)])
@pytest.mark.parametrize("w8a8", [True, False])
def test_candidates_are_distinct_plans_the_default_first_and_each_from_the_dispatch(shape, w8a8):
    m, k, n = shape
    cands = kp.plan_candidates(m, n, k, 132, w8a8, out_dtype="bfloat16" if w8a8 else None)
    assert len(set(describes(cands))) == len(cands)
    default = C.choose(m, n, k, w8a8=w8a8, out_dtype="bfloat16" if w8a8 else None, sms=132)
    assert cands[0].choice == default and "default" in cands[0].names
    if w8a8:
        assert C.choose(m, n, k, sms=132).describe() in describes(cands)
        assert "raw GEMM's" in by_name(cands)
    for c in cands:
        row = C.VARIANTS[c.choice.variant]
        assert row.supports(C.Problem(m, n, k, w8a8, sms=132))
        # a tile the variant is built for, or one of the GEMV's trial schedules (timed, never chosen)
        assert c.choice.plan.cfg in row.configs or (row.name == C.GEMV and c.choice.plan.cfg in P.GEMV_TRIALS.values())


def test_coinciding_candidates_merge_their_names():
    # 16 x 4096 x 4096, W8A8: the dispatch runs the GEMV (cuda_choice.GEMV_DEFAULT), and so does the
    # raw GEMM (GEMV_RAW_DEFAULT); the TMA kernel and the cp.async split plan are candidates of their own.
    cands = kp.plan_candidates(16, 4096, 4096, 132, True, out_dtype="bfloat16")
    named = {c.describe(): c.names for c in cands}
    assert named["gemv 16x16 u4 splits=1"] == ("default", "raw GEMM's", "gemv", "gemv gemv_16x16_u4")
    assert named["gemv 16x16 splits=1"] == ("gemv gemv_16x16",)  # the two-step unroll, a trial now
    assert named["tma-unspecialized 64x64 splits=1"] == ("tma wg1_64x64",)
    assert named["cpasync 64x64 splits=4"] == ("cp.async",)


def test_small_m_takes_no_128_row_tile_and_no_persistent_kernel_but_the_cpasync_and_gemv_plans():
    for m in (1, 16, 64):
        cands = kp.plan_candidates(m, 4096, 4096, 132, True, out_dtype="bfloat16")
        assert all(c.choice.plan.cfg.bm <= 64 or c.choice.variant == C.GEMV for c in cands), describes(cands)
        assert not {C.COOPERATIVE, C.PINGPONG} & {c.choice.variant for c in cands}
        assert "cp.async" in by_name(cands)
        assert ("gemv" in by_name(cands)) == (m <= P.GEMV_MAX_M)
    # Every GEMV width and trial schedule, W8A8 with x quantized apart and inside, where x fits in
    # GEMV_X_MAX_BYTES (the rule's bound) and where it does not.
    for m, fits in ((1, True), (16, False)):
        for w8a8 in (True, False):
            names = by_name(kp.plan_candidates(m, 3584, 4096, 132, w8a8, out_dtype="bfloat16"))
            for cfg in (*P.GEMV_CONFIGS.values(), *P.GEMV_TRIALS.values()):
                assert names[f"gemv {cfg.name}"].choice.plan.cfg is cfg
                assert (f"gemv {cfg.name} fused" in names) == w8a8
                assert P.gemv_x_ok(m, 4096, 2) == fits
                if w8a8:
                    assert "quantize=fused" in names[f"gemv {cfg.name} fused"].choice.describe()
    cands = kp.plan_candidates(65, 4096, 4096, 132, True, out_dtype="bfloat16")
    names = by_name(cands)
    assert {"cooperative", "cooperative 128x256 unsplit", "ping-pong", "tma wg2_128x256"} <= set(names)
    assert "cp.async" not in names and "gemv" not in names
    assert names["cooperative"].choice.plan == P.cooperative_plan(65, 4096, 4096, 132)
    assert names["ping-pong"].choice.plan == P.pingpong_plan(65, 4096, 4096, 132, w8a8=True)
    unsplit = names["cooperative 128x256 unsplit"].choice.plan
    assert (unsplit.cfg.name, unsplit.splits) == ("ws_128x256", 1)
    assert {c.choice.plan.cfg.name for c in cands if c.choice.variant == C.TMA} == set(P.CUDA_CONFIGS)


def test_every_tma_tile_is_a_candidate_unsplit_at_large_m():
    cands = kp.plan_candidates(512, 4608, 3584, 132, True, out_dtype="bfloat16")
    tma = {c.describe() for c in cands if c.choice.variant == C.TMA and c.choice.plan.splits == 1}
    assert tma == {f"tma-unspecialized {cfg.bm}x{cfg.bn} splits=1" for cfg in P.CUDA_CONFIGS.values()}


def test_long_k_adds_the_tma_kernels_split_and_cpasync_plans():
    for m, k, n in [(128, 18944, 3584), (512, 18944, 3584), (512, 12288, 4096)]:
        names = by_name(kp.plan_candidates(m, n, k, 132, True, out_dtype="bfloat16"))
        split = P.split_plan(m, n, k, P.wave_tile(m, n, 132), 132)
        assert names["tma split"].choice == C.Choice(C.TMA, split)
        assert names["tma on cp.async's plan"].choice == C.Choice(C.TMA, P.cpasync_plan(m, n, k, 132))
    names = by_name(kp.plan_candidates(512, 4096, 4096, 132, True))
    assert "tma split" not in names and "tma on cp.async's plan" not in names


def test_what_the_problem_or_the_gpu_cannot_run_is_left_out():
    # K % 16 != 0: no TMA kernel, so neither tile nor persistent candidates, only cp.async.
    assert {c.choice.variant for c in kp.plan_candidates(512, 4096, 4100, 132, True)} == {C.CPASYNC}
    assert {c.choice.variant for c in kp.plan_candidates(8, 4096, 4100, 132, True)} == {C.CPASYNC, C.GEMV}
    # A GPU without wgmma: the SIMT kernel, and the GEMV where M <= 16 on sm80.
    assert describes(kp.plan_candidates(512, 4096, 4096, 132, True, family="simt")) == ["simt 64x64 splits=1"]
    # sm80: the GEMV (W8A8's and the raw GEMM's default at M <= 16) and nothing else of the sm90 kinds
    assert {c.choice.variant for c in kp.plan_candidates(8, 4096, 4096, 132, True, family="sm80")} == {C.GEMV}
    assert {c.choice.variant for c in kp.plan_candidates(17, 4096, 4096, 132, True, family="sm80")} == {C.SIMT}


def test_an_override_is_the_default():
    cands = kp.plan_candidates(512, 4096, 4096, 132, True, override="tma-ws-pingpong")
    assert cands[0].choice.variant == C.PINGPONG and "default" in cands[0].names
    assert "ping-pong" in cands[0].names


@pytest.mark.parametrize("kw,message", [
    ({"m": 0}, "'m' must be a positive int, got 0"),
    ({"k": 4096.0}, "'k' must be a positive int"),
    ({"sms": True}, "'sms' must be a positive int"),
    ({"family": "sm70"}, "family"),
    ({"override": "fastest"}, "INT8NAX_CUDA_KERNEL"),
])
def test_bad_arguments_are_named(kw, message):
    args = {"m": 512, "n": 4096, "k": 4096, "sms": 132, **kw}
    with pytest.raises(ValueError, match=message):
        kp.plan_candidates(args.pop("m"), args.pop("n"), args.pop("k"), args.pop("sms"), True, **args)


# ---- shapes and items --------------------------------------------------------------------------

def test_model_layer_shapes_are_the_projections_mlx_lm_builds_fused_as_int8nax_fuses_them():
    # The real model classes, one layer, weights never evaluated (MLX builds them lazily); their
    # nn.Linear layers grouped as nn.quantize_linears groups siblings (one K, widths added).
    pytest.importorskip("mlx_lm")
    from int8nax import nn as inn
    from int8nax.bench import models

    for config in models.CONFIGS.values():
        model = models.mlx_lm_module(config.family).Model(models.model_args(config, 1))
        fused = {}
        for path, mod in _linears(model.layers[0]):
            parent, name = path.rsplit(".", 1)
            group = next((g for g in inn.SIBLINGS if name in g), (name,))
            n, k = mod.weight.shape
            k0, width = fused.get((parent, group), (k, 0))
            assert k0 == k
            fused[(parent, group)] = (k, width + n)
        assert sorted((k, n) for _, k, n in kp.layer_shapes(config)) == sorted(fused.values()), config.name


def _linears(module, prefix=""):
    import mlx.nn as nn

    for name, child in module.children().items():
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(child, nn.Linear):
            yield path, child
        elif isinstance(child, nn.Module):
            yield from _linears(child, path)


def test_default_shapes_are_the_seed_then_the_models_layers_once_each():
    shapes, labels = kp.default_shapes()
    assert shapes[:len(problems.SEED_SHAPES)] == list(problems.SEED_SHAPES)
    assert len(shapes) == len(set(shapes))
    assert set(shapes) == set(problems.SEED_SHAPES) | set(labels)
    assert labels[(512, 3584, 4608)] == ["qwen2.5-7b q|k|v"]
    assert labels[(2048, 12288, 4096)] == ["qwen3-8b down"]
    assert labels[(4096, 3584, 37888)] == ["qwen2.5-7b gate|up"]
    assert {m for m, _, _ in labels} == set(kp.MODEL_TOKENS)
    assert len(labels) == len(models.PROFILE_CONFIGS["full"]) * len(kp.MODEL_TOKENS) * 4  # no two layers share a shape
    assert (512, 4096, 4096) in labels and shapes.count((512, 4096, 4096)) == 1  # qwen3-8b o is a seed shape


def test_items_go_shape_by_shape_raw_first():
    items = kp.plan_items([(16, 64, 48), (32, 64, 48)], ("bfloat16", "bfloat16+bias"))
    assert [i.key for i in items] == ["int8_matmul 16x64x48", "plans:bfloat16 16x64x48", "plans:bfloat16+bias 16x64x48",
                                      "int8_matmul 32x64x48", "plans:bfloat16 32x64x48", "plans:bfloat16+bias 32x64x48"]
    items = kp.plan_items([(16, 64, 48)], (), raw=True)
    assert [i.key for i in items] == ["int8_matmul 16x64x48", "plans:int8_matmul 16x64x48"]


# ---- the worker's measurement and checks (the CPU backend stands in; the profiler is a stub) ----

class WallClock:
    def time(self, launch, launches):
        for i in range(launches):
            launch(i)
        return 5.0, [["stub", 5.0]]


class CpuDispatch:
    """The CUDA dispatch's plans, each run by the CPU backend (same bits for every plan) unless
    named in `wrong` (its output off by one ulp) or `broken` (it raises)."""

    def __init__(self, wrong=(), broken=()):
        self.wrong, self.broken = wrong, broken

    sms = 132

    def candidates(self, m, n, k, w8a8, bias=False, dtype=None):
        name = None if dtype is None else str(dtype).split(".")[-1]
        cands = kp.plan_candidates(m, n, k, 132, w8a8, bias=bias, out_dtype=name)
        return cands[0].choice, cands

    def call(self, ops, choice):
        import int8nax

        if choice.describe() in self.broken:
            raise RuntimeError("NVRTC: no")
        if len(ops) == 2:
            y = int8nax.int8_matmul(*ops, backend="cpu")
        else:
            y = int8nax.w8a8_linear(*ops, backend="cpu")
        if choice.describe() in self.wrong:
            y = (y.view(mx.uint16) + 1).view(y.dtype) if y.dtype == mx.bfloat16 else y + 1
        return y


def ctx(dispatch):
    return {"profiler": WallClock(), "launches": 2, "l2_bytes": 1 << 16, "dispatch": dispatch}


SHAPE = (80, 64, 48)  # M > 64: tiles, persistent kernels


def test_every_plan_is_timed_and_checked_against_the_default():
    rec = kp.measure(kw.Item("plans:bfloat16+bias", SHAPE), ctx(CpuDispatch()))
    cands = rec["candidates"]
    want = kp.plan_candidates(80, 48, 64, 132, True, bias=True, out_dtype="bfloat16")
    assert [c["plan"] for c in cands] == describes(want)
    assert cands[0]["default"] and not any(c["default"] for c in cands[1:])
    assert rec["default"] == cands[0]["plan"] and rec["sms"] == 132
    assert all(c["us"] == 5.0 and c["parts"] for c in cands)
    assert "within 1 ulp (bfloat16)" in rec["check"] and rec["copies"] >= 2
    assert not kp.failed([rec])


def test_a_plan_with_other_bits_is_a_mismatch_and_one_that_raises_an_error():
    cands = kp.plan_candidates(80, 48, 64, 132, True, out_dtype="bfloat16")
    wrong, broken = cands[2].describe(), cands[3].describe()
    rec = kp.measure(kw.Item("plans:bfloat16", SHAPE), ctx(CpuDispatch(wrong=(wrong,), broken=(broken,))))
    got = {c["plan"]: c for c in rec["candidates"]}
    assert "us" not in got[wrong] and got[wrong]["timed_us"] == 5.0
    assert got[wrong]["mismatch"] == f"{80 * 48} of {80 * 48} outputs differ in bits from the default plan's"
    assert got[broken]["error"] == "RuntimeError: NVRTC: no" and "us" not in got[broken]
    assert sum("us" in c for c in rec["candidates"]) == len(cands) - 2
    assert kp.failed([rec])
    text = kp.render([rec])
    assert "MISMATCH" in text and "RuntimeError: NVRTC: no" in text


def test_a_default_off_the_model_leaves_nothing_measured():
    default = kp.plan_candidates(80, 48, 64, 132, True, out_dtype="bfloat16")[0].describe()
    rec = kp.measure(kw.Item("plans:bfloat16", SHAPE), ctx(CpuDispatch(wrong=(default,))))
    assert all("us" not in c for c in rec["candidates"])
    assert "ulp" in rec["candidates"][0]["mismatch"]
    assert all(c["unchecked"].startswith("the default plan's output is wrong (off by") and "us" not in c
               for c in rec["candidates"][1:])
    assert kp.failed([rec]) and "unchecked: the default plan's output is wrong" in kp.render([rec])
    # The default raising leaves the others unchecked, their time dropped.
    rec = kp.measure(kw.Item("plans:bfloat16", SHAPE), ctx(CpuDispatch(broken=(default,))))
    assert rec["candidates"][0]["error"] == "RuntimeError: NVRTC: no"
    assert all(c["unchecked"] == "the default plan did not run: nothing to compare with" for c in rec["candidates"][1:])


def test_the_raw_gemms_plans_are_checked_against_the_int64_product_and_the_default():
    cands = kp.plan_candidates(80, 48, 64, 132, False)
    assert "raw GEMM's" not in by_name(cands) and cands[0].choice == C.choose(80, 48, 64, sms=132)
    rec = kp.measure(kw.Item("plans:int8_matmul", SHAPE), ctx(CpuDispatch(wrong=(cands[1].describe(),))))
    assert [c["plan"] for c in rec["candidates"]] == describes(cands)
    assert rec["check"].startswith("the default plan bit-exact against the int64 product")
    assert "us" in rec["candidates"][0] and "mismatch" in rec["candidates"][1]
    assert all("us" in c for c in rec["candidates"][2:])
    rec = kp.measure(kw.Item("plans:int8_matmul", SHAPE), ctx(CpuDispatch(wrong=(cands[0].describe(),))))
    assert rec["candidates"][0]["mismatch"] == f"{80 * 48} of {80 * 48} checked outputs differ from the int64 product"


def test_the_cuda_dispatch_glue_asks_the_backend_for_its_choice_and_calls_each_plan(monkeypatch):
    # backends.cuda on an H200 as this process would see it (SM count, family, override), no GPU.
    from int8nax.backends.cuda import (
        device as cuda_device, probe as cuda_probe, settings as cuda_settings, backend as cuda,
    )

    monkeypatch.setattr(cuda_probe, "sm_count", lambda: 132)
    monkeypatch.setattr(cuda_device, "_family", lambda: "sm90")
    monkeypatch.setattr(cuda_device, "compute_capability", lambda: (9, 0))
    monkeypatch.setattr(cuda_settings, "kernel_choice", lambda: "auto")
    calls = []
    monkeypatch.setattr(cuda, "w8a8", lambda x, w, s, b, variant, plan: calls.append(("w8a8", b, variant, plan)))
    monkeypatch.setattr(cuda, "gemm_int32", lambda a, b, variant, plan: calls.append(("int32", variant, plan)))
    glue = kp.CudaDispatch()
    default, cands = glue.candidates(512, 4608, 3584, True, True, mx.bfloat16)
    assert default == C.choose(512, 4608, 3584, w8a8=True, bias=True, out_dtype="bfloat16", sms=132)
    assert cands == kp.plan_candidates(512, 4608, 3584, 132, True, bias=True, out_dtype="bfloat16")
    default, cands = glue.candidates(512, 4608, 3584, False)
    assert default == C.choose(512, 4608, 3584, sms=132) == cands[0].choice and glue.sms == 132
    glue.call(("x", "w", "s", "bias"), cands[1].choice)
    glue.call(("a", "b"), cands[2].choice)
    assert calls == [("w8a8", "bias", cands[1].choice.variant, cands[1].choice.plan),
                     ("int32", cands[2].choice.variant, cands[2].choice.plan)]


def test_the_raw_gemm_is_kernel_times_item():
    rec = kp.measure(kw.Item("int8_matmul", (20, 64, 48)),
                     {"profiler": WallClock(), "launches": 2, "l2_bytes": 1 << 16, "backend": "cpu"})
    assert rec["exact"] and rec["us"] == 5.0 and rec["check"] == "bit-exact against the int64 product"


# ---- tables from recorded H200 records -----------------------------------------------------------

def records():
    return copy.deepcopy(json.loads(FIXTURE.read_text())["results"])


def test_summary_gives_default_fastest_gain_and_ratios_to_the_raw_gemm():
    sums = {(tuple(s["shape"]), s["variant"]): s for s in kp.summary(records())}
    s = sums[((512, 3584, 4608), "bfloat16")]
    assert (s["default"], s["default_us"]) == ("tma-unspecialized 128x128 splits=1", 28.03)
    assert (s["fastest"], s["fastest_us"]) == ("tma-unspecialized 128x144 splits=1", 22.24)
    assert s["gain"] == pytest.approx(28.03 / 22.24) and s["raw_us"] == 16.096
    assert s["fastest_vs_raw"] == pytest.approx(22.24 / 16.096) and s["measured"] == s["of"] == 8
    s = sums[((2048, 4096, 4096), "bfloat16")]
    assert s["default"] == s["fastest"] and s["gain"] == 1.0
    assert ((512, 3584, 4608), "bfloat16+bias") in sums and ((512, 4096, 4096), "bfloat16+bias") not in sums


def test_render_sorts_plans_by_time_marks_default_and_fastest_and_sums_up():
    text = kp.render(records(), kp.default_shapes()[1])
    block = text.split("512x3584x4608 (M x K x N) (qwen2.5-7b q|k|v): int8_matmul 16.1 µs on cuda "
                       "tma-unspecialized 128x144 splits=1")[1].split("bfloat16+bias")[0]
    times = [float(line.split()[0]) for line in block.splitlines()[2:] if line.strip()[:1].isdigit()]
    assert times == sorted(times) and len(times) == 8
    assert "22.2  1.38x   tma-unspecialized 128x144 splits=1  fastest  raw GEMM's" in block
    assert "28.0  1.74x   tma-unspecialized 128x128 splits=1  default  default" in block
    assert ("bfloat16: default 28.0 µs (tma-unspecialized 128x128 splits=1), fastest 22.2 µs "
            "(tma-unspecialized 128x144 splits=1): 1.26x") in text
    assert "bfloat16: the default is the fastest, 73.2 µs (tma-unspecialized 128x256 splits=1)" in text
    assert "the default is the fastest at 2 of 6; geometric mean gain 1.123x, largest 1.31x" in text
    assert "Not measured" not in text and not kp.failed(records())
    md = kp.render(records(), markdown=True)
    assert "### 16x4096x4096" in md and "| bfloat16 | /raw | plan |" in md
    # at M <= 16 a GEMM streams its weight: each plan's rate, K x N bytes over its time
    small = text.split("16x4096x4096 (M x K x N)")[1].split("64x4096x4096")[0]
    row = next(line for line in small.splitlines() if "default" in line and line.strip()[:1].isdigit())
    us, rate = float(row.split()[0]), float(row.split()[2])
    assert "weight TB/s" in small and rate == pytest.approx(4096 * 4096 / (us * 1e6), abs=0.006)
    assert "weight TB/s" not in block


def test_a_recorded_mismatch_loses_its_time_and_fails_the_run():
    recs = records()
    plans = next(r for r in recs if r["subject"] == "plans:bfloat16" and r["shape"] == [512, 3584, 4608])
    fastest = min((c for c in plans["candidates"] if "us" in c), key=lambda c: c["us"])
    fastest["mismatch"] = "3 of 2359296 outputs differ in bits from the default plan's"
    fastest["timed_us"] = fastest.pop("us")
    text = kp.render(recs)
    assert "plans:bfloat16 512x3584x4608 tma-unspecialized 128x144 splits=1: MISMATCH: 3 of" in text
    assert "fastest 25.6 µs (tma-unspecialized 128x192 splits=1)" in text  # the next one
    assert kp.failed(recs)
    recs.append({"subject": "plans:bfloat16", "shape": [1, 2, 3], "not_run": "the run's budget was spent first"})
    assert "plans:bfloat16 1x2x3: not run: the run's budget" in kp.render(recs)


# ---- the command ---------------------------------------------------------------------------------

def has_cuda() -> bool:
    return getattr(mx, "cuda", None) is not None and mx.cuda.is_available()


def test_without_cuda_one_clear_line_and_exit_2(capsys, tmp_path):
    if has_cuda():
        pytest.skip("a CUDA device is present: the command would run")
    rc = cli.main(["compare", "--mode", "kernel", "--plans", "--json", str(tmp_path / "never-written.json")])
    out, err = capsys.readouterr()
    assert rc == kt.NO_CUDA_EXIT and out == ""
    assert err.count("\n") == 1 and err.startswith("int8nax compare --mode kernel --plans: needs ")
    assert not (tmp_path / "never-written.json").exists()


@pytest.mark.parametrize("argv,message", [
    (["--plans"], "--plans needs --mode kernel"),
    (["--plans", "--mode", "call"], "--plans needs --mode kernel"),
    (["--plans", "--mode", "kernel", "--bf16"], "--plans does not take --bf16"),
    (["--plans", "--mode", "kernel", "--w8a8", "none"], "--plans needs a W8A8 variant (--w8a8) or --raw-plans"),
    (["--mode", "kernel", "--raw-plans"], "--raw-plans needs --plans"),
])
def test_options_that_do_not_go_with_plans_are_one_line_usage_errors(argv, message, capsys):
    assert cli.main(["compare", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"int8nax compare: error: {message}") and err.count("\n") == 1


def test_bad_values_are_argparse_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", "--mode", "kernel", "--plans", "--w8a8", "bfloat16,fp8"])
    assert exc.value.code == 2 and "got 'fp8'" in capsys.readouterr().err


def test_the_command_runs_its_items_in_its_own_worker_and_prints_and_writes_the_records(monkeypatch, capsys, tmp_path):
    seen = {}

    def run_items(items, budget, launches, spawn):
        seen.update(items=items, budget=budget, launches=launches, spawn=spawn)
        return records()

    monkeypatch.setattr(cupti, "skip_reason", lambda: None)
    monkeypatch.setattr(kt, "environment", lambda: {"mlx": "0", "settings": {}})
    monkeypatch.setattr(kw, "run_items", run_items)
    out = tmp_path / "plans.json"
    rc = cli.main(["compare", "--mode", "kernel", "--plans", "--shapes", "512x3584x4608,16x4096x4096",
                   "--w8a8", "bfloat16,bfloat16+bias", "--launches", "7", "--time-limit", "99", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    assert [i.key for i in seen["items"]] == [
        "int8_matmul 512x3584x4608", "plans:bfloat16 512x3584x4608", "plans:bfloat16+bias 512x3584x4608",
        "int8_matmul 16x4096x4096", "plans:bfloat16 16x4096x4096", "plans:bfloat16+bias 16x4096x4096"]
    assert (seen["budget"], seen["launches"]) == (99.0, 7)
    assert seen["spawn"].keywords == {"module": "int8nax.bench.kernel.plans"}
    assert "6 items over 2 shapes, plans of bfloat16, bfloat16+bias; " in text
    assert "geometric mean gain" in text
    doc = json.loads(out.read_text())
    assert doc["results"] == records() and len(doc["summary"]) == 6
    assert doc["meta"]["labels"] == {"512x3584x4608": ["qwen2.5-7b q|k|v"]} and doc["meta"]["launches"] == 7


def test_the_worker_entry_point_runs_as_a_module():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", kp.WORKER_MODULE, "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "--worker" in proc.stdout, proc.stderr


def test_raw_plans_alone(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(cupti, "skip_reason", lambda: None)
    monkeypatch.setattr(kt, "environment", lambda: {"mlx": "0", "settings": {}})
    monkeypatch.setattr(kw, "run_items", lambda items, *a, **k: seen.setdefault("items", items) and [])
    assert cli.main(["compare", "--mode", "kernel", "--plans", "--raw-plans", "--w8a8", "none",
                     "--shapes", "16x64x48"]) == 0
    assert [i.key for i in seen["items"]] == ["int8_matmul 16x64x48", "plans:int8_matmul 16x64x48"]


def test_the_default_is_bfloat16_over_the_default_shapes(monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(cupti, "skip_reason", lambda: None)
    monkeypatch.setattr(kt, "environment", lambda: {"mlx": "0", "settings": {}})
    monkeypatch.setattr(kw, "run_items", lambda items, *a, **k: seen.setdefault("items", items) and [])
    assert cli.main(["compare", "--mode", "kernel", "--plans"]) == 0
    shapes = kp.default_shapes()[0]
    assert seen["items"] == kp.plan_items(shapes, ("bfloat16",))


@pytest.mark.parametrize("argv,subjects", [
    ([], {"int8_matmul", "cublaslt", *(f"w8a8:{v}" for v in kt.W8A8_DTYPE_BIAS)}),
    (["--w8a8", "none"], {"int8_matmul", "cublaslt"}),
    (["--w8a8", "float16"], {"int8_matmul", "cublaslt", "w8a8:float16"}),
])
def test_kernel_mode_without_plans_keeps_its_w8a8_default(monkeypatch, capsys, argv, subjects):
    seen = {}
    monkeypatch.setattr(kt, "skip_reason", lambda: None)
    monkeypatch.setattr(kt, "environment", lambda: {"mlx": "0", "settings": {}})
    monkeypatch.setattr(kt, "run_items", lambda items, *a, **k: seen.setdefault("items", items) and [])
    assert cli.main(["compare", "--mode", "kernel", "--shapes", "16x64x48", *argv]) == 0
    assert {i.subject for i in seen["items"]} == subjects


def test_on_cuda_a_small_run_times_and_checks_every_plan(tmp_path):
    # The whole pipeline on the device (worker, CUPTI, every candidate built and bit-compared); GPU only.
    if not has_cuda():
        pytest.skip("needs MLX's CUDA backend: unverified here")
    import os
    import subprocess
    import sys

    out = tmp_path / "plans.json"
    proc = subprocess.run([sys.executable, "-m", "int8nax", "compare", "--mode", "kernel", "--plans", "--raw-plans",
                           "--shapes", "16x512x256,130x1040x200", "--w8a8", "bfloat16+bias", "--launches", "5",
                           "--json", str(out)], capture_output=True, text=True, timeout=500, env=os.environ)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    plans = [r for r in doc["results"] if r["subject"].startswith(kp.PLANS)]
    assert len(plans) == 4 and len(doc["summary"]) == 4
    for r in plans:
        assert r["candidates"][0]["default"] and all("us" in c and c["parts"] for c in r["candidates"]), r
    variants = {(r["subject"], tuple(r["shape"])): {c["variant"] for c in r["candidates"]} for r in plans}
    for subject in ("plans:int8_matmul", "plans:bfloat16+bias"):
        assert {C.TMA, C.COOPERATIVE, C.PINGPONG} <= variants[(subject, (130, 1040, 200))]
        assert {C.TMA, C.CPASYNC, C.GEMV} <= variants[(subject, (16, 512, 256))]
    assert "geometric mean gain" in proc.stdout
