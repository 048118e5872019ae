"""The README's API example runs as written (on the CPU here)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_api_example_runs(capsys):
    text = README.read_text()
    api = text[text.index("## API"):]
    code = re.search(r"```python\n(.*?)```", api, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "README.md (API example)", "exec"), namespace)
    assert namespace["c"].shape == (512, 1024)
    assert namespace["y"].shape == (512, 1024)
    assert namespace["n_swapped"] == 2
    assert "(512, 256)" in capsys.readouterr().out


def test_a_newcomer_reads_it_in_minutes():
    # Detail lives in docs/: the README stays short enough to read, with no wall-of-text rows.
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"{len(lines)} lines"
    long = [i + 1 for i, line in enumerate(lines) if len(line) > 300]
    assert not long, f"lines over 300 characters: {long}"


def test_one_results_row_per_platform_each_with_its_page():
    text = README.read_text()
    results = text[text.index("## Results"):text.index("## API")]
    table = results[results.index("| platform"):].split("\n\n")[0]  # the first table (a model table may follow)
    rows = [l for l in table.splitlines() if l.startswith("| ") and not l.startswith("| platform")]
    assert [r.split("|")[1].strip() for r in rows] == ["NVIDIA H100", "NVIDIA H200", "2-core CPU box", "Apple M5"]
    for row in rows:
        page = re.search(r"\]\((docs/results/[\w-]+\.md)\)", row)
        assert page and (README.parent / page.group(1)).is_file(), row
