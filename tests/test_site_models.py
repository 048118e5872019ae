"""The comparison page's model section (int8nax.commands.site.model_section), from synthetic asv result files:
tokens/s per form and machine at the latest commit, the speed-ups over bf16 computed here from
the inputs, and model results kept out of the GEMM contenders' section."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

from int8nax.commands import site
from int8nax.commands.site import model_section

NAN = float("nan")
COLUMNS = ["result", "params", "version", "started_at", "duration"]
CONFIGS = ["'qwen2.5-0.5b'", "'qwen2.5-7b'", "'qwen3-8b'"]
TOKENS = ["1", "16", "512"]


def grid(**values):
    """A result list over CONFIGS x TOKENS: NaN except {(config, tokens): value}."""
    out = []
    for c in CONFIGS:
        for t in TOKENS:
            out.append(values.get(f"{c.strip(chr(39))}@{t}", NAN))
    return out


def write(folder: Path, commit: str, date: int, results: dict):
    folder.mkdir(parents=True, exist_ok=True)
    data = {"commit_hash": commit, "date": date, "env_name": "existing", "params": {}, "result_columns": COLUMNS,
            "results": {b: [v, [CONFIGS, TOKENS] if b.startswith("bench_model.") else [["(16, 512, 512)"]], "1",
                            1000, 1.0] for b, v in results.items()}, "version": 2}
    (folder / f"{commit[:8]}-existing.json").write_text(json.dumps(data))


def results(root: Path) -> Path:
    h200 = root / "h200"
    write(h200, "a" * 40, 1000, {"bench_model.Bf16ModelFigures.track_bf16_tokens_per_s": grid(**{"qwen2.5-7b@1": 1.0})})
    write(h200, "b" * 40, 2000, {
        "bench_model.Bf16ModelFigures.track_bf16_tokens_per_s": grid(**{"qwen2.5-7b@1": 700.0, "qwen2.5-7b@512": 9000.0}),
        "bench_model.W8A8ModelFigures.track_w8a8_tokens_per_s": grid(**{"qwen2.5-7b@1": 350.0, "qwen2.5-7b@512": 12000.0}),
        "bench_model.W8A8ModelCompiledFigures.track_w8a8_compiled_tokens_per_s":
            grid(**{"qwen2.5-7b@512": 15000.0}),
        "bench_model.W8A8Model.time_w8a8": grid(**{"qwen2.5-7b@512": 1e-2}),
        "bench_model.CiderModelFigures.track_cider_tokens_per_s": grid(),  # n/a everywhere
        "bench_gemm.Int8naxGemm.time_int8nax_gemm": [1e-3],
    })
    (h200 / "machine.json").write_text(json.dumps({"machine": "h200", "gpu": "NVIDIA H200"}))
    write(root / "cpu", "c" * 40, 3000, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [1e-3]})  # no model results
    return root


def test_latest_commit_speedups_and_missing_cells(tmp_path):
    (block,) = model_section.read(results(tmp_path))
    assert block.name == "h200" and block.commit == "b" * 40
    assert block.tokens_per_s[("qwen2.5-7b", "eager", "w8a8", 512)] == 12000.0
    assert model_section.speedup(block, "qwen2.5-7b", "eager", "w8a8", 512) == 12000.0 / 9000.0
    assert model_section.speedup(block, "qwen2.5-7b", "eager", "w8a8", 1) == 0.5
    # compiled has no bf16 compiled reference here: no speed-up rather than a wrong one
    assert model_section.speedup(block, "qwen2.5-7b", "compiled", "w8a8", 512) is None
    assert ("qwen2.5-7b", "eager", "cider", 1) not in block.tokens_per_s  # n/a is missing, not zero
    html = model_section.section(tmp_path)
    assert "h200" in html and "cpu</h3>" not in html
    # one figure per cell: tokens/s and the same as ms per forward (512 tokens at 12,000 tok/s)
    assert "1.33x" in html and "0.50x" in html and "12,000.0 tok/s" in html and "42.7 ms a forward" in html
    assert "ms/layer" not in html
    # cider: one column saying no M5 has reported, with the command
    assert f"{model_section.M5_ONLY}</b>: an M5 owner runs <code>{escape(model_section.M5_COMMAND)}</code>" in html
    assert html.count("<polyline") == 3  # bf16, w8a8, w8a8 compiled
    rows = model_section.to_json([block])["h200"]["rows"]
    (w,) = [r for r in rows if (r["form"], r["mode"], r["tokens"]) == ("w8a8", "eager", 512)]
    assert w["ms_per_layer"] == 10.0 and w["speed_vs_bf16"] == 12000.0 / 9000.0


def published(tmp_path: Path, root: Path) -> tuple[str, dict]:
    """compare.html and compare.json that `int8nax site` writes from the results at `root`."""
    html_dir = tmp_path / "html"
    html_dir.mkdir()
    (html_dir / "index.html").write_text('<ul><li id="nav-li-regressions"><a>R</a></li></ul>')
    site.publish(html_dir, root)
    return (html_dir / "compare.html").read_text(), json.loads((html_dir / "compare.json").read_text())


def test_the_page_gets_the_model_section_and_keeps_models_out_of_the_contenders(tmp_path):
    page, data = published(tmp_path, results(tmp_path / "results"))
    assert page.index('<section id="models">') > page.index('<section class="machine"')
    contenders = page[:page.index('<section id="loop">')]
    assert "qwen" not in contenders and "w8a8" not in re.sub(r"W8A8", "", contenders)
    assert data["models"]["h200"]["commit"] == "b" * 40


def test_no_model_results_says_so(tmp_path):
    assert "No model results yet" in model_section.section(tmp_path / "absent")


def test_every_form_of_the_benchmarks_has_a_colour_and_a_name_stem():
    from int8nax.bench import models

    assert model_section.FORMS == models.FORMS and set(model_section.COLORS) == set(models.FORMS)
    assert set(model_section.STEMS.values()) == set(models.FORMS)
