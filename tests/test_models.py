"""int8nax.bench.models, benchmarks/bench_model.py and `int8nax compare --model`: the models are
mlx-lm's, built as configured; every form is checked before it is timed, and a wrong projection
fails the check; decode keeps its context; what cannot run says why.

Most tests use a tiny configuration of each family (prepare takes any Config), so they run in
seconds on the 2-core CPU box; the real configurations are built once, with one layer."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

pytest.importorskip("mlx_lm", reason="mlx-lm (the `bench` and `test` extras) is not installed")

from int8nax.bench import models  # noqa: E402
from int8nax.bench.checks import MismatchError  # noqa: E402
from int8nax.bench.models import prepared  # noqa: E402
from int8nax.bench.peers import Unavailable  # noqa: E402
from int8nax.nn import W8A8Linear  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import bench_model  # noqa: E402

TINY = {"qwen2": models.Config("tiny-qwen2", "qwen2", 128, 256, 4, 2, 32),
        "qwen3": models.Config("tiny-qwen3", "qwen3", 128, 192, 4, 2, 32)}


@pytest.fixture(autouse=True)
def _cpu(monkeypatch):
    monkeypatch.setenv("INT8NAX_BENCH_PROFILE", "cpu")


def test_model_classes_import_without_transformers_and_the_package_still_works():
    code = ("import sys\nfrom int8nax.bench import models\nmodels.mlx_lm_module('qwen3')\n"
            "models.mlx_lm_module('cache')\nprint('transformers' in sys.modules)\n"
            "import mlx_lm\nprint(bool(mlx_lm.__version__), callable(mlx_lm.generate))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}).stdout.split("\n")
    assert out[0] == "False"  # the model classes came without mlx-lm's front end
    assert out[1] == "True True"  # and the full package runs its __init__ when asked


@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_built_model_is_mlx_lms_with_the_configured_shapes(family):
    cfg = TINY[family]
    model = models.build(cfg, 2)
    assert type(model).__module__ == f"mlx_lm.models.{family}"
    layer = model.model.layers[1].self_attn
    assert layer.q_proj.weight.shape == (cfg.heads * cfg.head_dim, cfg.hidden)
    assert layer.k_proj.weight.shape == (cfg.kv_heads * cfg.head_dim, cfg.hidden)
    assert model.model.layers[0].mlp.up_proj.weight.shape == (cfg.intermediate, cfg.hidden)
    assert ("bias" in layer.q_proj) == (family == "qwen2")
    assert hasattr(layer, "q_norm") == (family == "qwen3")
    assert layer.q_proj.weight.dtype == mx.bfloat16
    # seeded: a second build is the same model; weights keep a projection's scale (std ~ 1/sqrt(fan_in))
    again = models.build(cfg, 2)
    assert mx.array_equal(again.model.layers[1].mlp.down_proj.weight, model.model.layers[1].mlp.down_proj.weight)
    w = np.array(model.model.layers[0].mlp.down_proj.weight.astype(mx.float32))
    assert abs(w.std() * np.sqrt(cfg.intermediate) - 1) < 0.1


def test_the_real_configurations_build_with_mlx_lms_args():
    model = models.build(models.CONFIGS["qwen2.5-0.5b"], 1)
    args = model.args
    assert (args.hidden_size, args.intermediate_size, args.num_attention_heads, args.num_key_value_heads) == \
        (896, 4864, 14, 2)
    assert model.model.layers[0].self_attn.q_proj.weight.shape == (14 * 64, 896)
    assert "bias" in model.model.layers[0].self_attn.q_proj


def test_each_profiles_models_are_named_once():
    # models.PROFILE_CONFIGS is the one list: the model and generation suites and the CUDA plan
    # sweep's model layers read it (the first-token suite takes one model of it).
    from int8nax.bench import first_token, generate, problems
    from int8nax.bench.kernel import plans

    assert set(models.PROFILE_CONFIGS) == set(problems.PROFILES)
    for name, configs in models.PROFILE_CONFIGS.items():
        assert set(configs) <= set(models.CONFIGS)
        assert models.PROFILES[name].configs == generate.PROFILES[name].configs == configs
        assert set(first_token.PROFILES[name].configs) <= set(configs)
    layers = {label.split()[0] for names in plans.model_shapes(tokens=(1,)).values() for label in names}
    assert layers == set(models.PROFILE_CONFIGS["full"])


@pytest.mark.parametrize("form", ["bf16", "fp16", "mlx-q8", "w8a8"])
@pytest.mark.parametrize("family", ["qwen2", "qwen3"])
def test_every_form_passes_its_check_at_prefill_and_decode(family, form):
    p = models.prepare(TINY[family], form, layers=2, context=8, error_vs_bf16=True)
    for tokens in (1, 40):
        p.prepare(tokens)
        assert tokens in p.first_call_s and p.first_call_s[tokens] > 0
        assert p.check[tokens]
        out = p.run(tokens)
        assert out.shape == (1, tokens, TINY[family].hidden)
    assert (p.rel_error_vs_bf16 == 0) == (form == "bf16")
    assert p.rel_error_vs_bf16 < 0.2
    if form == "w8a8":
        assert sum(isinstance(m, W8A8Linear) for _, m in p.model.named_modules()) == 14
        assert "ulp" in p.check[40]


def test_decode_steps_all_see_the_same_context():
    p = models.prepare(TINY["qwen2"], "bf16", layers=1, context=8)
    p.prepare(1)
    first = np.array(p.run(1).astype(mx.float32))
    for _ in range(3):
        again = np.array(p.run(1).astype(mx.float32))
    assert p._cache[0].offset == 8
    assert np.array_equal(first, again)


class _Off(nn.Linear):
    """A projection that computes the wrong thing: its output 20% too large."""

    def __call__(self, x):
        return super().__call__(x) * 1.2


class _OffW8A8(W8A8Linear):
    """A W8A8 projection off by 2^-6 (a few ulp of bfloat16)."""

    def __call__(self, x):
        return super().__call__(x) * (1 + 2.0**-6)


@pytest.mark.parametrize("form", ["bf16", "w8a8"])
def test_a_wrong_projection_fails_the_check_and_is_named(form):
    p = models.prepare(TINY["qwen2"], form, layers=2, context=8)
    mlp = p.model.model.layers[1].mlp
    good = mlp.up_proj
    if form == "bf16":
        bad = _Off(good.weight.shape[1], good.weight.shape[0], bias=False)
        bad.weight = good.weight
    else:
        bad = _OffW8A8(good.input_dims, good.output_dims, bias=False)
        bad.weight, bad.scales = good.weight, good.scales
    mlp.up_proj = bad
    with pytest.raises(MismatchError, match=r"model\.layers\.1\.mlp\.up_proj"):
        p.prepare(16)
    assert 16 not in p.first_call_s


def test_w8a8_check_is_tight_within_one_ulp():
    p = models.prepare(TINY["qwen3"], "w8a8", layers=1, context=4)
    p.prepare(24)
    worst = float(p.check[24].split()[0])
    assert worst <= models.W8A8_MAX_ULP


def test_compiled_is_checked_against_eager_in_prefill_and_decode():
    eager = models.prepare(TINY["qwen2"], "bf16", layers=2, context=4)
    compiled = eager.with_mode("compiled")
    compiled.prepare(16)
    assert "from eager" in compiled.check[16]
    compiled.prepare(1)
    assert "from eager" in compiled.check[1]
    eager.prepare(1)
    want = eager.run(1)
    # Every compiled step sees the same context as eager decode: the same bits, step after step,
    # and the caches' offsets stay at the prompt's length.
    for _ in range(3):
        assert mx.array_equal(compiled.run(1), want).item()
    assert [c.offset for c in compiled._cache] == [4, 4]
    assert compiled.peak_bytes(1) > compiled.weight_bytes


def test_a_wrong_compiled_decode_step_fails_its_check(monkeypatch):
    real = prepared._compiled_decode_step

    def off_by_one(model, context, cache_module):  # a step that attends at the wrong position
        step = real(model, context + 40, cache_module)
        return lambda ids, buffers: 2 * step(ids, buffers)

    monkeypatch.setattr(prepared, "_compiled_decode_step", off_by_one)
    compiled = models.prepare(TINY["qwen3"], "bf16", "compiled", layers=1, context=4)
    with pytest.raises(MismatchError, match="decode after 4.*from the same form run eager"):
        compiled.prepare(1)


def test_compiled_decode_of_a_model_without_mlx_lms_kvcache_says_why(monkeypatch):
    cache_module = models.mlx_lm_module("cache")
    compiled = models.prepare(TINY["qwen2"], "bf16", "compiled", layers=1, context=4)
    monkeypatch.setattr(type(compiled.model), "make_cache",
                        lambda self: [cache_module.RotatingKVCache(max_size=64) for _ in self.layers], raising=False)
    with pytest.raises(Unavailable, match="KVCache only; this model's cache is RotatingKVCache"):
        compiled.prepare(1)


def test_w8a8_compiles_on_the_cpu_backend_and_is_checked_against_eager():
    # the CPU backend's cpu_graph path inside mx.compile: prefill and the compiled decode step
    compiled = models.prepare(TINY["qwen2"], "w8a8", "compiled", layers=1, context=4)
    for tokens in (16, 1):
        compiled.prepare(tokens)
        assert "from eager" in compiled.check[tokens]


def test_cider_is_unavailable_off_an_m5_with_the_reason():
    with pytest.raises(Unavailable, match="cider"):
        models.prepare(TINY["qwen2"], "cider", layers=1)


def test_peak_memory_counts_the_weights_and_quantized_weights_are_smaller():
    bf16 = models.prepare(TINY["qwen2"], "bf16", layers=2, context=4)
    q8 = models.prepare(TINY["qwen2"], "mlx-q8", layers=2, context=4)
    w8 = models.prepare(TINY["qwen2"], "w8a8", layers=2, context=4)
    for p in (bf16, q8, w8):
        p.prepare(32)
        assert p.peak_bytes(32) > p.weight_bytes
    assert q8.weight_bytes < 0.7 * bf16.weight_bytes and w8.weight_bytes < 0.7 * bf16.weight_bytes


@pytest.mark.parametrize("bad, match", [
    (dict(config="qwen9"), "config"), (dict(form="int4"), "form"), (dict(mode="jit"), "mode"),
    (dict(layers=0), "layers"), (dict(context=0), "context")])
def test_bad_arguments_name_themselves(bad, match):
    args = dict(config=TINY["qwen2"], form="bf16", mode="eager", layers=1, context=4) | bad
    with pytest.raises(ValueError, match=match):
        models.prepare(**args)


def test_too_many_tokens_is_refused():
    p = models.prepare(TINY["qwen2"], "bf16", layers=1, context=4)
    with pytest.raises(ValueError, match="tokens"):
        p.prepare(models.MAX_TOKENS + 1)


# --- the asv suite ---------------------------------------------------------------------------

TIMES = [c for c in vars(bench_model).values()
         if isinstance(c, type) and issubclass(c, bench_model.ModelTime) and c is not bench_model.ModelTime]
FIGURES = [c for c in vars(bench_model).values()
           if isinstance(c, type) and issubclass(c, bench_model.ModelFigures) and c is not bench_model.ModelFigures]


def test_two_classes_per_form_and_mode_with_the_four_figures():
    every = sorted((f, m) for f in models.FORMS for m in models.MODES)
    assert sorted((c.form, c.mode) for c in TIMES) == every == sorted((c.form, c.mode) for c in FIGURES)
    for cls in TIMES:
        (timed,) = [getattr(cls, n) for n in vars(cls) if n.startswith("time_")]
        assert timed.timer is bench_model.per_layer_clock
        assert cls.params == [list(models.CONFIGS), list(models.ALL_TOKENS)]
    keys = set()
    for cls in FIGURES:
        units = sorted(getattr(cls, n).unit for n in vars(cls) if n.startswith("track_"))
        assert units == ["bytes", "seconds", "seconds", "tokens/s"]
        assert "setup_cache" in vars(cls)  # its own: asv keys a cache by its source line
        keys.add(cls.setup_cache.__code__.co_firstlineno)
    assert len(keys) == len(FIGURES)


def test_the_suite_skips_outside_the_profile_and_says_why():
    b = bench_model.Bf16Model()
    with pytest.raises(NotImplementedError, match="not in the 'cpu' profile"):
        b.setup("qwen2.5-7b", 16)
    with pytest.raises(NotImplementedError, match="compiled forms are not in the cpu profile"):
        bench_model.W8A8ModelCompiled().setup("qwen2.5-0.5b", 16)
    with pytest.raises(NotImplementedError, match="decode only"):
        bench_model.Fp16Model().setup("qwen2.5-0.5b", 16)
    with pytest.raises(NotImplementedError, match="mlx-q8 is not in the cpu profile"):
        bench_model.MlxQ8Model().setup("qwen2.5-0.5b", 1)
    with pytest.raises(NotImplementedError, match="cider"):
        bench_model.CiderModel().setup("qwen2.5-0.5b", 1)


def test_a_timed_benchmark_runs():
    b = bench_model.W8A8Model()
    b.setup("qwen2.5-0.5b", 1)
    b.time_w8a8("qwen2.5-0.5b", 1)
    assert b.model.check[1]


def test_figures_are_measured_once_per_class_and_read_per_run(monkeypatch):
    f = bench_model.W8A8ModelFigures()
    figures = f.setup_cache()
    assert set(figures) == {(c, t) for c in models.CONFIGS if c in models.PROFILES["cpu"].configs
                            for t in models.PROFILES["cpu"].tokens}
    f.setup(figures, "qwen2.5-0.5b", 16)
    assert f.track_w8a8_tokens_per_s(figures, "qwen2.5-0.5b", 16) > 0
    assert f.track_w8a8_peak_bytes(figures, "qwen2.5-0.5b", 16) > 0
    assert f.track_w8a8_first_call_s(figures, "qwen2.5-0.5b", 16) > 0
    with pytest.raises(NotImplementedError, match="not in the 'cpu' profile"):
        f.setup(figures, "qwen3-8b", 16)
    # a failed check fails the benchmark (not n/a), a skip says why
    with pytest.raises(MismatchError, match="off by"):
        f.setup({("qwen2.5-0.5b", 16): {"mismatch": "off by 3 ulp"}}, "qwen2.5-0.5b", 16)
    compiled = bench_model.W8A8ModelCompiledFigures()
    skipped = compiled.setup_cache()
    with pytest.raises(NotImplementedError, match="compiled"):
        compiled.setup(skipped, "qwen2.5-0.5b", 16)
    cider = bench_model.CiderModelFigures()
    with pytest.raises(NotImplementedError, match="cider"):
        cider.setup(cider.setup_cache(), "qwen2.5-0.5b", 1)


def test_the_model_ratio_is_the_fastest_forward_ratio_in_swapped_blocks(monkeypatch):
    from benchmarks import bench_ratio

    now = [0.0]
    monkeypatch.setattr(bench_ratio.time, "perf_counter", lambda: now[0])
    order = []

    class Fake:
        def __init__(self, name, seconds):
            self.name, self.seconds = name, iter(seconds)

        def run(self, tokens):
            order.append((self.name, tokens))
            now[0] += next(self.seconds)

    k = bench_ratio.MODEL_BLOCK_CALLS
    bench = bench_ratio.ModelRatio()
    # Two samples (the gate's repeat rule, through its variable), the second with W8A8 slower.
    monkeypatch.setenv(bench_ratio.RATIO_REPEAT_ENV, "2")
    bench.num = Fake("w8a8", [9.0] + [3.0] * (3 * k - 1) + [4.0] * 3 * k)
    bench.den = Fake("bf16", [2.0] * (6 * k))
    bench.blocks = 3
    got = bench.track_w8a8_model_ratio("qwen2.5-0.5b", 16)
    # asv's timing form, so the gate's significance test has the samples' spread to work with
    assert got == {"samples": [pytest.approx(1.5), pytest.approx(2.0)], "number": 1}
    one = [(n, 16) for n in ["w8a8"] * k + ["bf16"] * 2 * k + ["w8a8"] * 2 * k + ["bf16"] * k]
    assert order == one + one


def test_a_bogus_profile_makes_every_figure_na_instead_of_failing(monkeypatch):
    monkeypatch.setenv("INT8NAX_BENCH_PROFILE", "bogus")
    bench_model.model_profile.cache_clear()
    bench_model.profile.cache_clear()
    try:
        f = bench_model.Bf16ModelFigures()
        figures = f.setup_cache()
        with pytest.raises(NotImplementedError, match="INT8NAX_BENCH_PROFILE"):
            f.setup(figures, "qwen2.5-0.5b", 1)
    finally:
        bench_model.model_profile.cache_clear()
        bench_model.profile.cache_clear()


# --- int8nax compare --model ---------------------------------------------------------------

def _cli(*argv):
    from int8nax.commands import cli

    return cli.main(list(argv))


def test_compare_model_prints_the_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "m.json"
    rc = _cli("compare", "--model", "qwen2.5-0.5b", "--tokens", "1,8", "--forms", "bf16,w8a8,cider",
              "--layers", "1", "--context", "8", "--repeat", "1", "--json", str(out))
    text = capsys.readouterr().out
    assert rc == 0
    assert "qwen2.5-0.5b, 1 layers, eager" in text and "1 (decode)" in text
    assert "cider (eager): n/a: cider" in text
    assert re.search(r"checked before timing .* w8a8 1: [0-9.e-]+ ulp, 8: [0-9.e-]+ ulp", text)
    assert re.search(r"\nw8a8 ran as: int8nax\.nn\.quantize_linears: 7 W8A8Linear on the cpu backend .*; SwiGLU MLPs: "
                     r"swiglu, then the quantization \(1\)\n", text)
    rows = json.loads(out.read_text())["models"]
    by = {(r["form"], r["tokens"]): r for r in rows}
    assert by[("bf16", 8)]["speed_vs_bf16"] == 1.0
    w = by[("w8a8", 8)]
    assert w["tokens_per_s"] == pytest.approx(8 / w["seconds"]) and w["ms_per_layer"] == pytest.approx(w["seconds"] * 1e3)
    assert w["speed_vs_bf16"] == pytest.approx(by[("bf16", 8)]["seconds"] / w["seconds"])
    assert 0 < w["rel_error_vs_bf16"] < 0.2 and "ulp" in w["check"]
    assert by[("cider", 1)]["unavailable"] and by[("cider", 1)]["seconds"] is None


def test_compare_model_counts_progress_across_configurations(monkeypatch, capsys):
    # each configuration is measured, printed and saved on its own; the [n/total] count runs on
    from int8nax.commands import compare_model

    def fake(configs, tokens, forms, modes, layers, context, repeat, progress, breakdown=False):
        rows = []
        for t in tokens:
            progress(f"{configs[0]} bf16 eager {t}")
            rows.append(compare_model.Row(configs[0], "eager", "bf16", t, layers, context, unavailable="stub"))
        return rows

    monkeypatch.setattr(compare_model, "measure", fake)
    rc = _cli("compare", "--model", "qwen2.5-0.5b,qwen3-8b", "--tokens", "1,16", "--forms", "bf16",
              "--layers", "1", "--context", "8", "--repeat", "1")
    assert rc == 0
    err = capsys.readouterr().err
    assert [line.split(" ", 1)[0] for line in err.splitlines() if line.startswith("[")] == \
        ["[1/4]", "[2/4]", "[3/4]", "[4/4]"]
    assert "[3/4] qwen3-8b bf16 eager 1" in err


@pytest.mark.parametrize("argv, match", [
    (("--tokens", "16"), "--tokens needs --model"),
    (("--model", "qwen2.5-0.5b", "--shapes", "16x512x512"), "does not take"),
])
def test_compare_model_usage_errors(argv, match, capsys):
    assert _cli("compare", *argv) == 2
    assert match in capsys.readouterr().err


@pytest.mark.parametrize("argv", [("--model", "llama"), ("--model", "qwen2.5-0.5b", "--tokens", "0"),
                                  ("--model", "qwen2.5-0.5b", "--model-modes", "jit")])
def test_compare_model_rejects_bad_values(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        _cli("compare", *argv)
    assert exc.value.code == 2
    assert "expected" in capsys.readouterr().err


def test_asvs_install_step_pins_the_mlx_lm_of_the_bench_extra():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = [d for d in extras["bench"] if d.startswith("mlx-lm")]
    assert pin in extras["test"] and re.fullmatch(r"mlx-lm==[\d.]+", pin)
    for conf in ("asv.conf.json", "asv.cuda.conf.json", "asv.m5.conf.json"):
        text = (ROOT / conf).read_text()
        assert f"python -m pip install --no-deps {pin}" in text, conf


class CiderLinear(nn.Module):
    """A stand-in with cider's conventions (per-channel W8A8 of int8nax's math, x and bias cast to
    float16, float16 out), to test the check's cider path off an M5; `off` makes it wrong."""

    def __init__(self, linear, off=1.0):
        super().__init__()
        from int8nax import quantize_weight_int8

        self.w, self.s = quantize_weight_int8(linear.weight)
        self.b = linear.get("bias")
        self.off = off

    def __call__(self, x):
        from int8nax import w8a8_linear

        bias = None if self.b is None else self.b.astype(mx.float16)
        return w8a8_linear(x.astype(mx.float16), self.w, self.s, bias) * self.off


@pytest.mark.parametrize("off, ok", [(1.0, True), (1 + 2.0**-7, False)])
def test_ciders_projections_are_checked_against_the_source_weights(off, ok):
    from mlx.utils import tree_map_with_path

    model = models.build(TINY["qwen2"], 1)
    sources = models._projections(model)
    leaves = model.leaf_modules()
    model.update_modules(tree_map_with_path(
        lambda path, m: CiderLinear(m, off) if path in sources else m, leaves, is_leaf=lambda m: isinstance(m, nn.Module)))
    p = models.Prepared(TINY["qwen2"], "cider", "eager", 1, 4, model, "stand-in", 0, sources=sources)
    if ok:
        p.prepare(16)
        assert "ulp" in p.check[16]
    else:
        with pytest.raises(MismatchError, match="ulp"):
            p.prepare(16)


def test_fast_cells_are_sampled_for_a_minimum_time(monkeypatch):
    # A 1 ms forward: 5 samples would span 5 ms; the median comes from enough samples to cover
    # MIN_SAMPLE_SECONDS (at most MAX_REPEAT), after MIN_WARMUP_SECONDS of untimed runs.
    now = [0.0]
    monkeypatch.setattr(prepared.time, "perf_counter", lambda: now[0])

    class Fake:
        runs = 0

        def run(self, tokens):
            Fake.runs += 1
            now[0] += 0.001 if Fake.runs % 2 else 0.003

    got = models.Prepared.seconds(Fake(), 1, repeat=5, warmup=1, min_seconds=0.1, max_repeat=1000)
    warm = int(models.MIN_WARMUP_SECONDS / 0.002)
    assert Fake.runs >= warm + 50
    assert 0.001 <= got <= 0.003
    Fake.runs = 0
    models.Prepared.seconds(Fake(), 1, repeat=5, warmup=1, min_seconds=10.0, max_repeat=30)
    assert Fake.runs <= 60
    Fake.runs = 0
    slow = models.Prepared.seconds(Fake(), 1, repeat=3, warmup=1, min_seconds=0.0)
    assert Fake.runs >= 4 and 0.001 <= slow <= 0.003


def test_gpu_time_is_na_with_the_reason_off_cuda_and_the_busy_time_on_it(monkeypatch):
    from int8nax.bench import model_breakdown
    from int8nax.bench.kernel import cupti

    class Entry(bench_model.Bf16ModelFigures):
        pass

    fig = Entry()
    fig.entry = models.gpu_time(object(), 16)  # this box: no CUDA
    assert "gpu_ms_per_layer" not in fig.entry
    from asv_runner.benchmarks.mark import SkipNotImplemented

    with pytest.raises(SkipNotImplemented, match="GPU time: needs"):  # asv's n/a from a benchmark's body
        fig.gpu_seconds_per_layer()
    monkeypatch.setattr(cupti, "skip_reason", lambda: None)
    monkeypatch.setattr(model_breakdown, "breakdown",
                        lambda model, tokens, forwards: model_breakdown.Breakdown(2.0, 1.5, {}))
    fig.entry = models.gpu_time(object(), 16)
    assert fig.gpu_seconds_per_layer() == pytest.approx(1.5e-3)
    monkeypatch.setattr(model_breakdown, "breakdown",
                        lambda model, tokens, forwards: model_breakdown.Breakdown(2.0, 0.0, {}))
    assert models.gpu_time(object(), 16) == {"gpu_na": "GPU time: CUPTI saw no kernel"}
