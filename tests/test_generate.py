"""The generation benchmark (int8nax.bench.generate, bench.model_folder), `int8nax compare
--generate` and benchmarks/bench_generate.py: the saved folder is a model mlx-lm loads and runs,
the figures are mlx-lm's, the agreement count and the projection check can fail, usage errors
exit 2, the JSON carries every field.

A tiny configuration (2 layers, hidden 64, a 256-id vocabulary) keeps each test to seconds on
the 2-core CPU box."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import mlx.core as mx
import pytest

pytest.importorskip("mlx_lm", reason="mlx-lm (the `bench` and `test` extras) is not installed")
pytest.importorskip("transformers", reason="mlx-lm's generation front end needs transformers")

from int8nax.commands import cli, compare_model  # noqa: E402
from int8nax.bench import generate, generate_breakdown, model_folder, models, saved  # noqa: E402
from int8nax.bench.checks import MismatchError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import bench_generate  # noqa: E402

TINY = models.Config("tiny-gen", "qwen2", 64, 128, 2, 1, 32, depth=2, vocab=256, tied=True)
TINY3 = models.Config("tiny-gen3", "qwen3", 64, 128, 2, 1, 32, depth=2, vocab=300, tied=False)


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("INT8NAX_BENCH_PROFILE", "cpu")
    monkeypatch.setenv(model_folder.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "models"))
    monkeypatch.setitem(models.CONFIGS, TINY.name, TINY)


def _measure(**kw):
    args = dict(forms=("bf16", "w8a8", "cider"), prompt_tokens=(12,), generation_tokens=6, batches=(1,), trials=1)
    args.update(kw)
    return generate.measure(TINY, **args)


# --- the folder ---------------------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [TINY, TINY3], ids=["qwen2-tied", "qwen3-untied"])
def test_the_folder_is_a_model_mlx_lm_loads_with_the_seeded_weights(cfg):
    from mlx.utils import tree_flatten
    from mlx_lm import load

    path = model_folder.folder(cfg)
    config = json.loads((path / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["vocab_size"]) == (cfg.family, 2, cfg.vocab)
    assert sorted(p.name for p in path.glob("*.safetensors")) == ["model-00001-of-00001.safetensors"]
    model, tokenizer = load(str(path))
    assert type(model).__module__ == f"mlx_lm.models.{cfg.family}"
    params = tree_flatten(model.parameters())
    assert ("lm_head.weight" in dict(params)) == (not cfg.tied)
    # the saved weights are the measuring layer's seeded ones, in the order a fresh model lists them
    fresh = models.mlx_lm_module(cfg.family).Model(
        models.mlx_lm_module(cfg.family).ModelArgs.from_dict(model_folder.hf_config(cfg, 2, cfg.vocab)))
    for i, (name, value) in enumerate(tree_flatten(fresh.parameters())):
        want = models.random_weight(name, value.shape, i).astype(mx.bfloat16)
        assert mx.array_equal(dict(params)[name], want).item(), name
    # every id of the model decodes to printable text; nothing else is below vocab
    texts = [tokenizer.decode([i]) for i in range(cfg.vocab)]
    assert all(t and set(t) <= set(model_folder.ALPHABET.replace("Ġ", " ")) for t in texts)
    assert len(set(texts)) == cfg.vocab
    assert all(i < cfg.vocab for i in tokenizer.encode("hello world 42"))


def test_mlx_lms_own_benchmark_runs_on_the_folder():
    import subprocess

    path = model_folder.folder(TINY)
    done = subprocess.run([sys.executable, "-m", "mlx_lm", "benchmark", "--model", str(path), "-p", "8", "-g", "3",
                           "-n", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Averages: prompt_tps=" in done.stdout and "peak_memory=" in done.stdout


def test_the_folder_is_cached_by_what_goes_into_it(tmp_path):
    first = model_folder.folder(TINY, cache=tmp_path)
    stamp = (first / "config.json").stat().st_mtime_ns
    assert model_folder.folder(TINY, cache=tmp_path) == first
    assert (first / "config.json").stat().st_mtime_ns == stamp  # reused, not rewritten
    assert model_folder.folder(TINY, cache=tmp_path, seed=models.SEED + 1) != first
    assert model_folder.folder(TINY, layers=1, cache=tmp_path) != first
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_the_real_configurations_default_to_their_real_depth_and_vocabulary():
    cfg = models.CONFIGS["qwen2.5-7b"]
    assert (cfg.depth, cfg.vocab, cfg.tied) == (28, 152064, False)
    assert models.CONFIGS["qwen3-8b"].depth == 36
    assert model_folder.hf_config(cfg, cfg.depth, cfg.vocab)["num_hidden_layers"] == 28


@pytest.mark.parametrize("bad", [{"layers": 0}, {"vocab": 10}, {"layers": True}])
def test_a_bad_folder_request_names_the_argument(bad, tmp_path):
    with pytest.raises(ValueError, match=next(iter(bad))):
        model_folder.folder(TINY, cache=tmp_path, **bad)


# --- the measurement ----------------------------------------------------------------------------

def test_every_form_is_measured_with_mlx_lms_figures_and_checked():
    rows = _measure(forms=("bf16", "fp16", "mlx-q8", "w8a8", "cider"))
    by = {r.form: r for r in rows}
    assert list(by) == ["bf16", "fp16", "mlx-q8", "w8a8", "cider"]
    for form in ("bf16", "fp16", "mlx-q8", "w8a8"):
        r = by[form]
        assert r.prompt_tps.median > 0 and r.generation_tps.median > 0 and r.peak_memory_gb > 0, form
        assert r.prompt_tps.low <= r.prompt_tps.median <= r.prompt_tps.high
        assert len(r.trials) == 1 and 0 <= r.agree_tokens <= 6
        assert r.ratios["prompt_vs_bf16"] == pytest.approx(r.prompt_tps.median / by["bf16"].prompt_tps.median)
        assert "prompt_vs_mlx-q8" in r.ratios
    assert by["bf16"].agree_tokens == 6
    assert by["w8a8"].check.endswith("ulp") and "rel" in by["bf16"].check
    assert by["cider"].unavailable and "cider" in by["cider"].unavailable and by["cider"].prompt_tps is None
    assert not generate.failed(rows)


def test_batches_run_batch_generate_and_memory_is_reset_per_cell():
    heard = []
    rows = _measure(forms=("bf16", "cider"), prompt_tokens=(8, 24), batches=(1, 3),
                    on_form=lambda got: heard.append([r.form for r in got]))
    assert heard == [["bf16"] * 4, ["bf16"] * 4 + ["cider"] * 4]  # a caller can save after every form
    # W8A8 is measured right after bf16 (a run cut short keeps it); rows still come in FORMS order
    heard.clear()
    _measure(forms=("mlx-q8", "w8a8", "bf16"), on_form=lambda got: heard.append(sorted({r.form for r in got})))
    assert heard == [["bf16"], ["bf16", "w8a8"], ["bf16", "mlx-q8", "w8a8"]]
    rows = rows[:4]
    assert [(r.prompt_tokens, r.batch) for r in rows] == [(8, 1), (8, 3), (24, 1), (24, 3)]
    assert all(r.prompt_tps and r.generation_tps for r in rows)
    # a batch of 3 holds 3 caches: more memory than one sequence of the same prompt
    assert rows[3].peak_memory_gb > rows[2].peak_memory_gb


@pytest.mark.parametrize("bad, name", [({"forms": ("bf16", "q3")}, "forms"), ({"trials": 0}, "trials"),
                                       ({"prompt_tokens": ()}, "prompt_tokens"), ({"batches": (1, -2)}, "batches")])
def test_bad_measure_arguments_name_the_argument(bad, name):
    with pytest.raises(ValueError, match=f"^{name}: "):
        _measure(**bad)


def test_agreement_counts_leading_tokens():
    assert generate.agreement([1, 2, 3, 4], [1, 2, 5, 4]) == 2
    assert generate.agreement([7], [8]) == 0
    assert generate.agreement([1, 2], [1, 2]) == 2


def test_a_form_that_generates_other_tokens_agrees_less(monkeypatch):
    real = models.convert

    def flipped(model, form):
        if form == "fp16":  # another model: the embedding (and so the tied LM head) negated
            model.model.embed_tokens.weight = -model.model.embed_tokens.weight
        return real(model, form)

    monkeypatch.setattr(models, "convert", flipped)
    rows = {r.form: r for r in _measure(forms=("bf16", "fp16"))}
    assert rows["bf16"].agree_tokens == 6
    assert rows["fp16"].agree_tokens < 6


def test_a_wrong_projection_is_a_mismatch_and_nothing_is_timed(monkeypatch):
    from int8nax.nn import W8A8Linear

    real = W8A8Linear.__call__
    monkeypatch.setattr(W8A8Linear, "__call__", lambda self, x: real(self, x) * 1.5)
    rows = {r.form: r for r in _measure(forms=("bf16", "w8a8"))}
    assert rows["w8a8"].mismatch and "ulp" in rows["w8a8"].mismatch
    assert rows["w8a8"].prompt_tps is None and rows["w8a8"].trials == []
    assert rows["bf16"].prompt_tps is not None
    assert generate.failed(list(rows.values()))


# --- the command --------------------------------------------------------------------------------

def _cli(capsys, *argv):
    rc = cli.main(["compare", "--progress", "none", *argv])
    return rc, capsys.readouterr()


def test_compare_generate_prints_mlx_lms_table_and_writes_json(tmp_path, capsys):
    out_json = tmp_path / "gen.json"
    rc, got = _cli(capsys, "--generate", "--model", TINY.name, "--prompt-tokens", "12", "--generation-tokens", "5",
                   "--trials", "1", "--layers", "2", "--vocab", "256", "--forms", "bf16,mlx-q4,w8a8,cider",
                   "--json", str(out_json), "--markdown")
    assert rc == 0, got.err
    lines = got.out.splitlines()
    header = next(line for line in lines if line.startswith("| Precision"))
    assert header == ("| Precision | Prompt (12) tok/sec | Generation (5) tok/sec | Memory GB | P vs bf16 | G vs bf16 | "
                      "P vs mlx-q8 | G vs mlx-q8 | agree |")
    table = lines[lines.index(header) + 2:]
    rows = [line.split(" | ")[0].lstrip("| ") for line in table[:4]]
    assert rows == ["bf16", "mlx-q4", "w8a8", "cider"]
    assert table[3].startswith("| cider | n/a | n/a | n/a |")
    assert any(line.startswith("- cider: n/a: cider is not installed") for line in lines)
    assert any(line.startswith("- w8a8: checked before timing") and line.endswith("ulp") for line in lines)
    data = json.loads(out_json.read_text())
    assert data["meta"]["settings"]["prompt_tokens"] == [12] and data["meta"]["mlx_lm"]
    assert {"date", "mlx", "backend", "command", "driver"} <= set(data["meta"])
    row = data["generate"][0]
    for key in ("config", "form", "prompt_tokens", "generation_tokens", "batch", "layers", "vocab", "prompt_tps",
                "generation_tps", "peak_memory_gb", "trials", "agree_tokens", "check", "ratios", "first_request_s"):
        assert key in row, key
    assert set(row["prompt_tps"]) == {"median", "low", "high"}
    assert set(row["trials"][0]) == {"prompt_tps", "generation_tps", "peak_memory", "seconds"}
    rc, again = _cli(capsys, "--generate", "--render", str(out_json), "--markdown")
    assert rc == 0, again.err
    shown = [line for line in lines if line.startswith(("| ", "- ", "### "))]
    assert shown and [line for line in again.out.splitlines() if line.startswith(("| ", "- ", "### "))] == shown
    assert again.out.startswith("saved run: int8nax ") and f"mlx {mx.__version__}" in again.out.splitlines()[0]


@pytest.mark.parametrize("content, words", [
    ("{", "cannot read"), ('{"meta": {}}', 'holds no "generate" rows'), ('{"generate": [{"form": 1}]}', "cannot read")])
def test_compare_generate_render_names_what_it_cannot_read(tmp_path, capsys, content, words):
    path = tmp_path / "saved.json"
    path.write_text(content)
    rc, got = _cli(capsys, "--generate", "--render", str(path))
    assert rc == 2 and words in got.err and "Traceback" not in got.err


def test_compare_generate_render_of_an_empty_path_reads_nothing_and_measures_nothing(capsys, monkeypatch):
    from int8nax.bench import problems

    monkeypatch.setattr(problems, "choose_profile", lambda: pytest.fail("--render '' went on to measure"))
    rc, got = _cli(capsys, "--generate", "--render", "")
    assert rc == 2 and "--render: cannot read ''" in got.err and "Traceback" not in got.err


@pytest.mark.parametrize("argv, words", [
    (("--generate", "--prompt-tokens", "0"), "--prompt-tokens"),
    (("--generate", "--batch", "1,x"), "--batch"),
    (("--generate", "--forms", "bf16,bogus"), "--forms"),
    (("--generate", "--tokens", "16"), "--generate does not take --tokens"),
    (("--generate", "--shapes", "16x512x512"), "--generate does not take --shapes"),
    (("--prompt-tokens", "64"), "--prompt-tokens needs --generate"),
    (("--first-token",), "--first-token needs --generate"),
    (("--model", "qwen2.5-0.5b", "--forms", "mlx-q4"), "--model without --generate takes"),
])
def test_bad_options_exit_2_with_one_line(argv, words, capsys):
    try:
        rc, got = _cli(capsys, *argv)
    except SystemExit as exc:
        rc, got = exc.code, capsys.readouterr()
    assert rc == 2
    assert got.err.count("\n") == 1 and words in got.err, got.err


def test_the_table_shows_failures():
    row = generate.Row("qwen2.5-7b", "w8a8", 512, 128, 8, 28, 152064, error="RuntimeError: out of memory")
    text = compare_model.generate_render([row], markdown=False)
    assert "qwen2.5-7b (28 layers, vocab 152064): prompt 512, generation 128, batch 8 (batch_generate" in text
    assert "failed" in text and "w8a8: failed: RuntimeError: out of memory" in text
    assert generate.failed([row])


# --- the asv suite ------------------------------------------------------------------------------

def test_the_suite_reads_each_cell_and_says_why_one_is_not_measured(monkeypatch):
    case = "qwen2.5-0.5b p64 g16 b1"
    assert case in generate.ALL_CASES and "qwen2.5-7b p4096 g128 b8" in generate.ALL_CASES
    figures = {(case, "bf16"): {"prompt_tps": 100.0, "generation_tps": 10.0, "peak_memory_gb": 0.5,
                                "ratios": {"prompt_vs_bf16": 1.0, "generation_vs_bf16": 1.0}},
               (case, "w8a8"): {"prompt_tps": 150.0, "generation_tps": 12.0, "peak_memory_gb": 0.25,
                                "ratios": {"prompt_vs_bf16": 1.5, "generation_vs_bf16": 1.2}},
               (case, "fp16"): {"mismatch": "projection x: off by 3 ulp"},
               (case, "mlx-q8"): {"skip": generate.skip_reason("cpu", "mlx-q8")}}
    bench = bench_generate.GenerateFigures()
    bench.setup(figures, case, "w8a8")
    assert bench.track_prompt_tps(figures, case, "w8a8") == 150.0
    assert bench.track_peak_memory(figures, case, "w8a8") == 0.25e9
    ratio = bench_generate.GenerateRatio()
    ratio.setup(figures, case)
    assert ratio.track_w8a8_prompt_vs_bf16(figures, case) == 1.5
    with pytest.raises(NotImplementedError, match="quantized_matmul"):
        bench.setup(figures, case, "mlx-q8")
    with pytest.raises(MismatchError, match="3 ulp"):
        bench.setup(figures, case, "fp16")
    with pytest.raises(NotImplementedError, match="not in the 'cpu' profile"):
        bench.setup(figures, "qwen2.5-7b p512 g128 b1", "bf16")
    assert bench_generate.GenerateFigures.version and bench_generate.GenerateRatio.version
    # one setup_cache for both classes: asv keys it by the function's source line
    assert bench_generate.GenerateRatio.setup_cache is bench_generate.GenerateFigures.setup_cache


def test_the_suite_can_measure_one_model_of_the_profile(monkeypatch):
    monkeypatch.setenv(generate.CONFIGS_ENV, "qwen2.5-7b")
    figures = generate.profile_figures("cpu")
    assert figures[("qwen2.5-0.5b p64 g16 b1", "bf16")] == {
        "skip": f"qwen2.5-0.5b is not in {generate.CONFIGS_ENV}=qwen2.5-7b"}


def test_the_suite_can_measure_some_forms_and_names_a_wrong_one(monkeypatch):
    measured = []
    monkeypatch.setattr(generate, "measure", lambda config, forms, *a, **k: measured.append(forms) or [])
    monkeypatch.setenv(generate.FORMS_ENV, "w8a8, bf16")
    figures = generate.profile_figures("cpu")
    assert measured == [["bf16", "w8a8"]]
    assert figures[("qwen2.5-0.5b p64 g16 b1", "fp16")] == {
        "skip": f"fp16 is not in {generate.FORMS_ENV}=w8a8,bf16"}
    monkeypatch.setenv(generate.FORMS_ENV, "bf16,int4")
    figures = generate.profile_figures("cpu")
    assert figures[("qwen2.5-0.5b p64 g16 b1", "bf16")]["error"].startswith(f"{generate.FORMS_ENV}: expected forms of")
    assert "'int4'" in figures[("qwen2.5-0.5b p64 g16 b1", "w8a8")]["error"] and len(measured) == 1


def test_the_suite_saves_the_whole_rows_where_asked(monkeypatch, tmp_path):
    def measure(config, forms, *a, on_form=None, **k):
        rows = [generate.Row(config, f, 64, 16, 1, 2, models.VOCAB, prompt_tps=generate.Figure(10.0 + i, 9.0, 12.0),
                             generation_tps=generate.Figure(5.0, 4.0, 6.0), peak_memory_gb=1.0)
                for i, f in enumerate(forms)]
        on_form(rows)
        return rows

    monkeypatch.setattr(generate, "measure", measure)
    monkeypatch.setenv(generate.FORMS_ENV, "bf16,w8a8")
    monkeypatch.setenv(saved.SAVE_ENV, str(tmp_path))
    generate.profile_figures("cpu")
    got = json.loads((tmp_path / "generate-qwen2.5-0.5b.json").read_text())
    assert [(r["form"], r["prompt_tps"]["median"]) for r in got["generate"]] == [("bf16", 10.0), ("w8a8", 11.0)]
    assert got["meta"]["profile"] == "cpu"


# --- the breakdown (compare --generate --breakdown) ----------------------------------------------

def _stack_calls(monkeypatch) -> list[int]:
    """Token counts of every call of the tiny model's decoder stack, from now on."""
    cls = models.mlx_lm_module("qwen2").Qwen2Model
    real, seen = cls.__call__, []

    def recorded(self, inputs, *args, **kw):
        seen.append(inputs.shape[1])
        return real(self, inputs, *args, **kw)

    monkeypatch.setattr(cls, "__call__", recorded)
    return seen


def test_the_breakdown_times_every_rung_of_every_form_interleaved():
    result = generate_breakdown.breakdown(TINY, ("bf16", "w8a8"), (12, 20), trials=2)
    assert [(c.prompt_tokens, c.rung, c.form) for c in result.rungs] == [
        (p, r, f) for p in (12, 20) for r in generate_breakdown.RUNGS for f in ("bf16", "w8a8")]
    for c in result.rungs:
        assert len(c.trials) == 2 and all(t > 0 for t in c.trials)
        assert c.prompt_tps.low <= c.prompt_tps.median <= c.prompt_tps.high
        assert c.peak_memory_gb > 0
    by = {(c.form, c.prompt_tokens, c.rung): c for c in result.rungs}
    for p in (12, 20):
        for r in generate_breakdown.RUNGS:
            assert by[("bf16", p, r)].vs_bf16 == 1.0
            assert by[("w8a8", p, r)].vs_bf16 == pytest.approx(
                by[("w8a8", p, r)].prompt_tps.median / by[("bf16", p, r)].prompt_tps.median)
    # the peak counts each form's own parameters: W8A8's int8 weights are smaller than bf16's
    assert by[("w8a8", 12, "forward")].peak_memory_gb < by[("bf16", 12, "forward")].peak_memory_gb
    assert result.forms["w8a8"]["check"].endswith("ulp") and "W8A8Linear" in result.forms["w8a8"]["detail"]


def test_the_breakdown_times_the_generation_phase_of_every_form_interleaved(monkeypatch):
    order = []
    real = generate_breakdown.decode_call
    monkeypatch.setattr(generate_breakdown, "decode_call",
                        lambda model, tok, prompt, n: order.append((len(prompt), n)) or real(model, tok, prompt, n))
    result = generate_breakdown.breakdown(TINY, ("bf16", "w8a8"), (12, 20), trials=2, generation_tokens=4)
    # per prompt: a warm-up of each form, then 2 rounds of each form in turn
    assert order == [(p, 4) for p in (12, 20) for _ in range(2 + 2 * 2)]
    assert [(d.prompt_tokens, d.form) for d in result.decode] == [(p, f) for p in (12, 20) for f in ("bf16", "w8a8")]
    for d in result.decode:
        assert len(d.trials) == 2 and d.ms_per_token.low <= d.ms_per_token.median <= d.ms_per_token.high
        assert d.gpu_ms_per_token is None and d.idle is None and "GPU" in d.gpu_why
        # both measured (separate medians on a shared box: neither bounds the other in every run)
        assert d.graph_ms > 0 and d.step_ms > 0
        assert set(d.phases) == set(generate_breakdown.PHASES) and d.phases["graph"] > 0
    bf16, w8a8 = result.decode[:2]
    assert bf16.vs["bf16"] == 1.0 and w8a8.vs["bf16"] == pytest.approx(bf16.ms_per_token.median / w8a8.ms_per_token.median)
    assert "mlx-q8" not in w8a8.vs  # not measured here
    assert generate_breakdown.breakdown(TINY, ("bf16",), (8,), trials=1).decode == []
    with pytest.raises(ValueError, match="^generation_tokens: "):
        generate_breakdown.breakdown(TINY, ("bf16",), (8,), generation_tokens=-1)


def test_a_failing_host_measure_leaves_the_loops_figures(monkeypatch, capsys):
    def boom(model, prompt):
        raise MemoryError("no room")

    monkeypatch.setattr(generate_breakdown, "decode_host", boom)
    result = generate_breakdown.breakdown(TINY, ("bf16",), (8,), trials=1, generation_tokens=2)
    (d,) = result.decode
    assert d.ms_per_token.median > 0 and d.graph_ms is None and d.phases is None and d.host_why == "MemoryError: no room"
    from int8nax.commands import compare_model

    assert "- bf16: graph and step n/a: MemoryError: no room" in compare_model.decode_lines(result, 8, True)


def test_decode_call_is_ms_a_generated_token_of_mlx_lms_loop(monkeypatch):
    from types import SimpleNamespace

    asked = []

    def fake_stream(model, tokenizer, prompt, max_tokens):
        asked.append(max_tokens)
        yield SimpleNamespace(generation_tps=0.0)
        yield SimpleNamespace(generation_tps=250.0)

    monkeypatch.setattr(generate.front_end(), "stream_generate", fake_stream)
    assert generate_breakdown.decode_call(None, None, [1, 2, 3], 9) == pytest.approx(4.0) and asked == [9]


def test_decode_host_times_graphs_without_touching_the_prompts_cache(monkeypatch):
    import mlx.core as core
    from mlx_lm import load

    model, _ = load(str(model_folder.folder(TINY)))
    prompt = generate.prompts(12, 1, TINY.vocab)[0]
    caches, evals = [], []
    real_make = models.mlx_lm_module("cache").make_prompt_cache
    monkeypatch.setattr(models.mlx_lm_module("cache"), "make_prompt_cache",
                        lambda m: caches.append(real_make(m)) or caches[-1])
    real_eval = core.eval
    monkeypatch.setattr(core, "eval", lambda *a: evals.append(len(a)) or real_eval(*a))
    graph, step = generate_breakdown.decode_host(model, prompt, steps=3)
    assert 0 < graph < step
    (cache,) = caches
    # the prompt (11 tokens), then the 3 timed steps: the 3 graphs built on copies never reached it
    assert [c.offset for c in cache] == [11 + 3] * TINY.depth
    assert len(evals) == 1 + 3  # the prompt's cache, then each step; no graph was evaluated
    # the same steps on a fresh cache give the same keys: the graph copies wrote nothing into it
    fresh = real_make(model)
    model(core.array(prompt[:-1])[None], cache=fresh)
    y = core.array([prompt[-1:]])
    for _ in range(3):
        y = model(y, cache=fresh)[:, -1, :].argmax(axis=-1)[None]
    for a, b in zip(cache, fresh):
        assert core.array_equal(a.state[0], b.state[0]).item() and core.array_equal(a.state[1], b.state[1]).item()
    # a one-token prompt has no cache to build graphs on: the step figure alone
    graph, step = generate_breakdown.decode_host(model, prompt[:1], steps=2)
    assert graph is None and step > 0


def test_decode_phases_runs_mlx_lms_overlapped_steps_on_its_generation_stream():
    import sys
    from mlx_lm import load

    model, _ = load(str(model_folder.folder(TINY)))
    prompt = generate.prompts(12, 1, TINY.vocab)[0]
    stream = sys.modules["mlx_lm.generate"].generation_stream
    core = generate_breakdown.mx
    calls = []
    real_call = type(model).__call__

    class Counted(type(model)):
        def __call__(self, inputs, cache=None, **kw):
            calls.append((inputs.shape, core.default_stream(core.default_device())))
            return real_call(self, inputs, cache=cache, **kw)

    model.__class__ = Counted
    phases = generate_breakdown.decode_phases(model, prompt, steps=3)
    assert list(phases) == list(generate_breakdown.PHASES)
    assert phases["graph"] > 0 and phases["launch"] > 0 and phases["wait"] >= 0
    # the prompt's 11 tokens, the first step, then the 3 timed steps, each one token, all on the generation stream
    assert [shape for shape, _ in calls] == [(1, 11)] + [(1, 1)] * 4
    with core.stream(stream):
        generation = core.default_stream(core.default_device())
    assert generation != core.default_stream(core.default_device())
    assert all(s == generation for _, s in calls)


def test_gpu_busy_a_token_is_the_longer_requests_extra_busy_time():
    # request 1 (1 token): 100 + 50 us busy (overlapping kernels count once); request 2 (1 + 4 tokens):
    # the same 150 us, then 4 steps of 250 us
    ranges = [{"ts": 0.0, "dur": 1000.0}, {"ts": 2000.0, "dur": 3000.0}]
    gpu = [{"ts": 10.0, "dur": 100.0}, {"ts": 60.0, "dur": 100.0}]
    gpu += [{"ts": 2010.0, "dur": 150.0}] + [{"ts": 2200.0 + 300 * i, "dur": 250.0} for i in range(4)]
    assert generate_breakdown.busy_per_token_ms(gpu, ranges, 4) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="2 requests"):
        generate_breakdown.busy_per_token_ms(gpu, ranges[:1], 4)


def test_each_rung_is_the_call_it_names(monkeypatch):
    import mlx.core as core
    import mlx_lm.generate  # noqa: F401 - the module the rungs patch

    original = core.clear_cache
    clears = []
    monkeypatch.setattr(core, "clear_cache", lambda: clears.append(1) or original())
    monkeypatch.setattr(generate, "PREFILL_STEP_SIZE", 5)
    from mlx_lm import load

    model, tokenizer = load(str(model_folder.folder(TINY)))
    prompt = generate.prompts(12, 1, TINY.vocab)[0]
    seen = _stack_calls(monkeypatch)
    got = {}
    for rung in generate_breakdown.RUNGS:
        seen.clear(), clears.clear()
        assert generate_breakdown.rung_call(model, tokenizer, prompt, rung) > 0
        got[rung] = (list(seen), len(clears))
    # loop: mlx-lm's chunks of 5 of the first 11 tokens, a clear after each, the last token, the next step
    assert got["loop"] == ([5, 5, 1, 1, 1], 3)
    assert got["no-clear"] == ([5, 5, 1, 1, 1], 0)
    assert got["one-chunk"] == ([11, 1, 1], 0)
    assert got["forward"] == ([12], 0)
    assert sys.modules["mlx_lm.generate"].mx is core


def test_no_clear_is_restored_after_an_exception():
    import mlx.core as core

    module = generate.front_end() and sys.modules["mlx_lm.generate"]
    original = core.clear_cache
    with pytest.raises(RuntimeError, match="boom"):
        with generate_breakdown.no_clear() as proxy:
            assert module.mx is proxy and module.mx.clear_cache is not original
            module.mx.clear_cache()
            assert proxy.skipped == 1 and module.mx.array is core.array
            raise RuntimeError("boom")
    assert module.mx is core and core.clear_cache is original


def test_the_loop_rungs_time_to_first_token_is_split_by_part(monkeypatch):
    """rung_call's parts: every PROMPT_PARTS part, adding up to the call's own time to the first
    token (mlx-lm's prompt_tps); clear_cache timed in the loop rung only (a no-op in the others);
    the forward rung, which runs no stream_generate, has none. Rendered per rung and form."""
    from int8nax.commands import compare_model

    timers = []
    real = generate_breakdown.timed_parts.__enter__

    def kept(self):
        timers.append(real(self))
        return timers[-1]

    monkeypatch.setattr(generate_breakdown.timed_parts, "__enter__", kept)
    result = generate_breakdown.breakdown(TINY, ("bf16", "w8a8"), (12,), trials=2)
    # each call timed up to its first token only: one 11-token chunk, its clear (the loop's), the
    # last-token step's and the next step's launches, the first token's wait
    for t in timers:
        assert t.calls == {"chunks": 1, "clear": 1 if t.skipped == 0 else 0, "launch": 2, "wait": 1}, t.calls
    for c in result.rungs:
        if c.rung == "forward":
            assert c.parts is None and c.part_trials == []
            continue
        assert list(c.parts) == list(generate_breakdown.PROMPT_PARTS) and len(c.part_trials) == 2
        for tps, parts in zip(c.trials, c.part_trials):
            assert all(v >= 0 for v in parts.values())
            assert sum(parts.values()) == pytest.approx(12 / tps * 1e3, rel=1e-6)
            assert parts["chunks"] > 0 and parts["launch"] > 0 and (parts["clear"] > 0) == (c.rung == "loop")
        assert len(c.cached_trials) == 2 and all(g >= 0 for g in c.cached_trials)
        assert c.cached_gb == statistics.median(c.cached_trials)
    text = compare_model.breakdown_render(result, False)
    assert "the time to the first token by part, ms (chunks / clear / launch / wait / other" in text
    loop_row = next(line for line in text.splitlines() if line.strip().startswith("loop") and line.count(" / ") >= 8)
    assert loop_row.count(" / ") == 8 and loop_row.count(" GB)") == 2  # two forms' five parts and cache
    cells = {(c.form, c.rung): c for c in result.rungs}
    for form in ("bf16", "w8a8"):  # issue 48's measure: the loop's tokens/s against no-clear's
        loop, kept = cells[(form, "loop")], cells[(form, "no-clear")]
        cost = 100 * (1 - loop.prompt_tps.median / kept.prompt_tps.median)
        assert (f"{form}: mlx-lm's clear_cache costs the loop {cost:.1f} % of its prompt tokens/s against "
                f"no-clear's; the call itself {loop.parts['clear']:.2f} ms a prompt, freeing {loop.cached_gb:.2f} GB"
                in text)


def test_timed_parts_sorts_mlx_lms_calls_and_stops_at_the_first_token():
    import mlx.core as core

    module = generate.front_end() and sys.modules["mlx_lm.generate"]
    with generate_breakdown.timed_parts() as timer:
        x = module.mx.array([1.0])
        module.mx.eval(x + 1)  # a chunk's KV cache
        module.mx.clear_cache()
        module.mx.async_eval(x + 2)  # the last-token step
        module.mx.eval(x + 3)  # the first token
        spent = dict(timer.spent)
        timer.stop()
        module.mx.eval(x + 4)
        module.mx.clear_cache()
    assert module.mx is core and timer.spent == spent and timer.skipped == 0
    assert all(spent[p] > 0 for p in ("chunks", "clear", "launch", "wait"))
    with generate_breakdown.timed_parts(clear=False) as timer:
        module.mx.clear_cache()
    assert timer.skipped == 1 and timer.spent["clear"] == 0


@pytest.mark.parametrize("clear", [True, False], ids=["loop", "no-clear"])
def test_timed_parts_counts_what_mlx_lms_clear_frees_or_would(clear):
    import mlx.core as core

    module = generate.front_end() and sys.modules["mlx_lm.generate"]
    core.clear_cache()
    x = core.ones((1 << 18,))  # 1 MB, then 2 MB, freed into MLX's buffer cache
    core.eval(x + 1, x * 2)
    del x
    held = core.get_cache_memory()
    assert held > 0
    with generate_breakdown.timed_parts(clear=clear) as timer:
        module.mx.clear_cache()
        after = core.get_cache_memory()
        module.mx.clear_cache()
        timer.stop()
        module.mx.clear_cache()  # after the first token: not the prompt's
    assert timer.cached == held + after
    assert after == (0 if clear else held)
    core.clear_cache()


def test_the_breakdown_of_a_form_that_cannot_run_says_why():
    result = generate_breakdown.breakdown(TINY, ("bf16", "mlx-q8"), (8,), trials=1)
    assert set(result.forms) == {"bf16", "mlx-q8"} and "check" in result.forms["mlx-q8"]
    with pytest.raises(ValueError, match="^forms: "):
        generate_breakdown.breakdown(TINY, ("bf16", "cider"), (8,))
    with pytest.raises(ValueError, match="^prompt_tokens: "):
        generate_breakdown.breakdown(TINY, ("bf16",), (0,))


def test_compare_generate_breakdown_prints_the_ladder_and_writes_json(tmp_path, capsys):
    out_json = tmp_path / "gap.json"
    rc, got = _cli(capsys, "--generate", "--breakdown", "--model", TINY.name, "--prompt-tokens", "12",
                   "--generation-tokens", "5", "--trials", "1", "--layers", "2", "--vocab", "256",
                   "--json", str(out_json), "--markdown")
    assert rc == 0, got.err
    lines = got.out.splitlines()
    header = next(line for line in lines if line.startswith("| rung"))
    assert header == ("| rung | w8a8 vs bf16 | bf16 tok/s | w8a8 tok/s | bf16 peak GB | w8a8 peak GB |")
    table = lines[lines.index(header) + 2:][:4]
    assert [line.split(" | ")[0].lstrip("| ") for line in table] == list(generate_breakdown.RUNGS)
    data = json.loads(out_json.read_text())
    assert data["meta"]["settings"]["breakdown"] is True and data["meta"]["settings"]["forms"] == ["bf16", "w8a8"]
    (result,) = data["breakdown"]
    assert len(result["rungs"]) == 8 and set(result["forms"]) == {"bf16", "w8a8"}
    assert set(result["rungs"][0]) >= {"form", "prompt_tokens", "rung", "prompt_tps", "peak_memory_gb", "trials",
                                       "vs_bf16"}
    # the generation phase: a row per form, its ms a token; no GPU here, so its busy time says why
    head = next(line for line in lines if line.startswith("| form | ms a token"))
    rows = [line.split(" | ") for line in lines[lines.index(head) + 2:][:2]]
    assert [r[0].lstrip("| ") for r in rows] == ["bf16", "w8a8"] and rows[1][4] == "n/a"
    assert any(line.startswith("- GPU busy n/a: ") for line in lines)
    assert result["generation_tokens"] == 5 and [d["form"] for d in result["decode"]] == ["bf16", "w8a8"]
    assert float(rows[1][1].split()[0]) == pytest.approx(result["decode"][1]["ms_per_token"]["median"], abs=1e-3)


@pytest.mark.parametrize("argv, words", [
    (("--breakdown",), "--breakdown needs --model"),
    (("--generate", "--breakdown", "--batch", "1,8"), "does not take --batch other than 1"),
    (("--generate", "--breakdown", "--first-token"), "does not take --first-token"),
    (("--generate", "--breakdown", "--forms", "bf16,cider"), "does not take --forms with cider"),
    (("--generate", "--breakdown", "--tokens", "16"), "--generate does not take --tokens"),
])
def test_bad_breakdown_options_exit_2_with_one_line(argv, words, capsys):
    test_bad_options_exit_2_with_one_line(argv, words, capsys)


def test_every_cell_has_its_own_warm_up_right_before_its_trials(monkeypatch):
    # the first request (the check's) is not the first cell's warm-up: after the check's forward
    # each cell runs one untimed request, then its trials
    calls = []
    real = generate.request

    def counted(model, tokenizer, batch_prompts, generation_tokens):
        calls.append((len(batch_prompts), len(batch_prompts[0])))
        return real(model, tokenizer, batch_prompts, generation_tokens)

    monkeypatch.setattr(generate, "request", counted)
    rows = _measure(forms=("bf16",), prompt_tokens=(8, 24), batches=(1, 2), trials=2)
    assert len(rows) == 4 and all(len(r.trials) == 2 for r in rows)
    per_cell = [(b, p) for p in (8, 24) for b in (1, 2) for _ in range(3)]  # warm-up + 2 trials
    assert calls == [(1, 8)] + per_cell


def test_a_suite_case_name_reads_back():
    assert generate.parse_case(generate.case_name("qwen3-8b", 512, 128, 8)) == ("qwen3-8b", 512, 128, 8)
    assert all(generate.parse_case(c) for c in generate.ALL_CASES)
    for bad in ("qwen3-8b p512 g128", "qwen3-8b p512 g128 bx", "qwen3-8b g128 p512 b1", ""):
        assert generate.parse_case(bad) is None, bad


# --- how settled a ratio is: the median's interval over trial-by-trial ratios --------------------

def test_median_interval_takes_the_widest_order_statistics_that_cover_enough():
    # n = 5: (1st, 5th) cover 1 - 2/32 = 93.75 %; (2nd, 4th) only 62.5 %
    assert generate.median_interval([5, 1, 4, 2, 3]) == (1, 5, pytest.approx(0.9375))
    # n = 9: (2nd, 8th) cover 1 - 2 (1 + 9) / 512 = 96.1 %; (3rd, 7th) 82 %
    low, high, cover = generate.median_interval(range(1, 10))
    assert (low, high) == (2, 8) and cover == pytest.approx(1 - 20 / 512)
    # n = 20: (6th, 15th) cover 95.9 %, (7th, 14th) 88.5 %
    assert generate.median_interval(range(20))[:2] == (5, 14)
    assert generate.median_interval([1.0, 2.0, 3.0, 4.0]) is None  # 87.5 % at best


def test_paired_ratios_pair_trial_by_trial_or_give_none():
    assert generate.paired_ratios([2.0, 6.0], [1.0, 2.0]) == [2.0, 3.0]
    assert generate.paired_ratios([2.0], [1.0, 2.0]) == []
    assert generate.paired_ratios([2.0], [0.0]) == []


def test_the_breakdown_gives_each_ratio_its_interval_from_five_trials(capsys, monkeypatch):
    result = generate_breakdown.breakdown(TINY, ("bf16", "w8a8"), (12,), trials=5, generation_tokens=2)
    by = {(c.form, c.rung): c for c in result.rungs}
    for r in generate_breakdown.RUNGS:
        w8a8, bf16 = by[("w8a8", r)], by[("bf16", r)]
        pairs = sorted(a / b for a, b in zip(w8a8.trials, bf16.trials))
        assert w8a8.vs_bf16_interval == (pairs[0], pairs[-1], pytest.approx(0.9375))
        assert bf16.vs_bf16_interval[:2] == (1.0, 1.0)
    bf16_d, w8a8_d = result.decode
    pairs = sorted(b / a for a, b in zip(w8a8_d.trials, bf16_d.trials))
    assert w8a8_d.vs_interval["bf16"][:2] == (pairs[0], pairs[-1])
    text = compare_model.breakdown_render(result, markdown=False)
    loop = next(line for line in text.splitlines() if line.strip().startswith("loop"))
    lo, hi, _ = by[("w8a8", "loop")].vs_bf16_interval
    assert f"{by[('w8a8', 'loop')].vs_bf16:.2f} [{lo:.2f}-{hi:.2f}]" in loop
    assert "interval for the median of the trial-by-trial ratios" in text
    # issue 48's clear_cache measure carries the interval of its trial-by-trial cost too
    loop_w, kept_w = by[("w8a8", "loop")], by[("w8a8", "no-clear")]
    pairs = sorted(a / b for a, b in zip(loop_w.trials, kept_w.trials))
    cost = 100 * (1 - loop_w.prompt_tps.median / kept_w.prompt_tps.median)
    assert (f"w8a8: mlx-lm's clear_cache costs the loop {cost:.1f} % [{100 * (1 - pairs[-1]):.1f}-"
            f"{100 * (1 - pairs[0]):.1f} %] of its prompt tokens/s") in text
    # under 5 trials: no interval, and no note
    short = generate_breakdown.breakdown(TINY, ("bf16", "w8a8"), (12,), trials=2)
    assert all(c.vs_bf16_interval is None for c in short.rungs)
    assert "trial-by-trial" not in compare_model.breakdown_render(short, markdown=False)
