"""The comparison page's headline model section (int8nax.commands.site.loop_section), from synthetic
asv result files: mlx-lm's loop per form and machine at the latest commit with its results, W8A8's
ratios computed here from the figures, the first token of a fresh process and the one-time warm."""

from __future__ import annotations

import json
import re
from pathlib import Path

from int8nax.commands.site import loop_section, model_section

from test_site_models import published

NAN = float("nan")
COLUMNS = ["result", "params", "version", "started_at", "duration"]
CASES = ["'qwen3-8b p512 g128 b1'", "'qwen3-8b p4096 g128 b8'"]
FORMS = ["'bf16'", "'mlx-q8'", "'w8a8'", "'cider'"]
FIRST_CASES = ["'qwen3-8b p300'", "'qwen3-8b p4096'"]


def cells(values: dict, rows: list[str], cols: list[str]) -> list:
    """A result list over rows x cols: NaN except {(row, col): value} (names unquoted)."""
    return [values.get((r.strip("'"), c.strip("'")), NAN) for r in rows for c in cols]


def write(folder: Path, commit: str, date: int, results: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = {"commit_hash": commit, "date": date, "env_name": "existing", "params": {}, "result_columns": COLUMNS,
            "results": {b: [v, p, "1", 1000, 1.0] for b, (v, p) in results.items()}, "version": 2}
    (folder / f"{commit[:8]}-existing.json").write_text(json.dumps(data))


def generate(prompt: dict, generation: dict | None = None, memory: dict | None = None) -> dict:
    params = [CASES, FORMS]
    out = {"bench_generate.GenerateFigures.track_prompt_tps": (cells(prompt, CASES, FORMS), params)}
    if generation is not None:
        out["bench_generate.GenerateFigures.track_generation_tps"] = (cells(generation, CASES, FORMS), params)
    if memory is not None:
        out["bench_generate.GenerateFigures.track_peak_memory"] = (cells(memory, CASES, FORMS), params)
    return out


def results(root: Path) -> Path:
    h100 = root / "h100"
    old = "qwen3-8b p512 g128 b1"
    write(h100, "a" * 40, 1000, generate({(old, "bf16"): 1.0, (old, "w8a8"): 1.0}))
    new = {(old, "bf16"): 15000.0, (old, "mlx-q8"): 7500.0, (old, "w8a8"): 18000.0,
           ("qwen3-8b p4096 g128 b8", "bf16"): 20000.0}
    write(h100, "b" * 40, 2000, {
        **generate(new, {(old, "bf16"): 150.0, (old, "mlx-q8"): 180.0, (old, "w8a8"): 165.0},
                   {(old, "w8a8"): 11.07e9}),
        "bench_first_token.FirstTokenFigures.track_first_token_s": (
            cells({("qwen3-8b p300", "bf16"): 0.3, ("qwen3-8b p300", "w8a8"): 0.5}, FIRST_CASES, ["'bf16'", "'w8a8'"]),
            [FIRST_CASES, ["'bf16'", "'w8a8'"]]),
        "bench_first_token.FirstTokenWarm.track_w8a8_warm_s": ([59.6, NAN], [["'qwen3-8b'", "'qwen2.5-0.5b'"]]),
        "bench_gemm.Int8naxGemm.time_int8nax_gemm": ([1e-3], [["(16, 512, 512)"]]),
    })
    (h100 / "machine.json").write_text(json.dumps({"machine": "h100", "gpu": "NVIDIA H100"}))
    write(root / "cpu", "c" * 40, 3000, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": ([1e-3], [["(16, 512, 512)"]])})
    return root


def test_the_latest_commit_and_ratios_computed_from_its_figures(tmp_path):
    (block,) = loop_section.read(results(tmp_path))
    assert block.name == "h100" and block.generate.commit == "b" * 40 and block.first_token.commit == "b" * 40
    cell = ("qwen3-8b", 512, 128, 1)
    assert loop_section.ratio(block, cell, "w8a8", "bf16", "prompt_tps") == 18000.0 / 15000.0
    assert loop_section.ratio(block, cell, "w8a8", "mlx-q8", "generation_tps") == 165.0 / 180.0
    assert loop_section.ratio(block, ("qwen3-8b", 4096, 128, 8), "w8a8", "bf16", "prompt_tps") is None
    rows = loop_section.to_json([block])["h100"]["generate"]["rows"]
    w8a8 = next(r for r in rows if r["form"] == "w8a8" and r["prompt_tokens"] == 512)
    assert w8a8["peak_memory_gb"] == 11.07 and w8a8["prompt_vs_mlx-q8"] == 18000.0 / 7500.0
    assert not any(r["form"] == "cider" for r in rows)  # NaN everywhere: no row


def test_the_section_shows_each_table_the_m5_column_and_the_warm(tmp_path):
    text = loop_section.section(results(tmp_path), first="h100")
    assert "h100 (your run)" in text and "(commit <code>bbbbbbbb</code>)" in text
    table = re.search(r'<table class="loop" data-config="qwen3-8b">.*?</table>', text, re.S).group(0)
    header = re.findall(r"<th>([\w.-]+)<br>", table)
    assert header == ["bf16", "mlx-q8", "w8a8"]
    row = re.search(r"<tr><th>prompt 512, generation 128, batch 1</th>(.*?)</tr>", table).group(1)
    assert "18,000 / 165.0<br><span class='small'>11.1 GB" in row and "<b>1.20x</b> / <b>1.10x</b>" in row
    assert "<b>2.40x</b> / <b>0.92x</b>" in row and model_section.M5_ONLY in row
    first = re.search(r'<table class="first-token" data-config="qwen3-8b">.*?</table>', text, re.S).group(0)
    assert "<tr><th>300</th><td>0.30 s</td><td>0.50 s</td><td>+0.20 s</td></tr>" in first
    assert "<tr><th>4096</th><td>- </td>" not in first and "4096" not in first  # n/a cells: no row
    assert "int8nax warm</code> to the longest prompt: 59.6 s" in text


def test_no_results_say_what_to_run(tmp_path):
    assert "No results of mlx-lm's loop yet" in loop_section.section(tmp_path / "none")


def test_the_page_puts_the_loop_before_the_diagnostic(tmp_path):
    page, data = published(tmp_path, results(tmp_path / "results"))
    assert page.index('<section class="machine"') < page.index('<section id="loop">') < page.index('<section id="models">')
    assert "Models, the diagnostic" in page
    assert data["loop"]["h100"]["first_token"]["warm_s"] == {"qwen3-8b": 59.6}
