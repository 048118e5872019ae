"""The written record holds together: every repository path the code and the docs cite exists,
nothing points outside the repository, and docs/results stays one current page per platform."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CITING = ["README.md", "docs", "src", "benchmarks", "tools", ".github", ".ci", "pyproject.toml"]
"""Where committed text cites files (tests/ is left out: its fixtures name made-up paths)."""

TEXT = {".md", ".py", ".sh", ".json", ".yml", ".yaml", ".toml", ".cuh", ".metal", ".txt", ""}


def cited_files() -> list[Path]:
    files = []
    for entry in CITING:
        path = REPO / entry
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        # node_modules: npm's; *.egg-info: what `pip install -e` writes (PKG-INFO is an old README)
        files += [p for p in candidates if p.suffix in TEXT and "node_modules" not in p.parts
                  and not any(part.endswith(".egg-info") for part in p.parts)]
    return files


DOCS_PATH = re.compile(r"(?<![\w/.:-])docs/[\w/.-]*\w\.(?:md|png)")
"""A repository path under docs/. One written as COMMIT:docs/... (what `git show` takes) names a
file in git history and is not checked."""
MD_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")


def test_every_docs_path_cited_in_code_and_docs_exists():
    missing = []
    for path in cited_files():
        text = path.read_text(errors="replace")
        for ref in DOCS_PATH.findall(text):
            if not (REPO / ref).exists():
                missing.append(f"{path.relative_to(REPO)}: {ref}")
    assert not missing, "cited but absent:\n" + "\n".join(missing)


def test_every_relative_markdown_link_resolves():
    broken = []
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for target in MD_LINK.findall(path.read_text()):
            if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(REPO)}: {target}")
    assert not broken, "broken links:\n" + "\n".join(broken)


@pytest.mark.parametrize("outside", ["shared/notes", "../shared", "/work/"])
def test_no_committed_text_points_outside_the_repository(outside):
    found = [str(p.relative_to(REPO)) for p in cited_files() if outside in p.read_text(errors="replace")]
    assert not found, f"{outside!r} in: {', '.join(found)}"


def test_the_link_checks_can_fail(tmp_path, monkeypatch):
    # The checks above read the real tree; this shows their patterns catch what they exist for.
    text = ("see docs/results/cuda-h200-2026-12-01-q.md and [x](results/gone.md), (docs/cuda.md); "
            "history: c3d7ce5:docs/results/cpu-2026-12-01.md")
    assert DOCS_PATH.findall(text) == ["docs/results/cuda-h200-2026-12-01-q.md", "docs/cuda.md"]
    assert MD_LINK.findall(text) == ["results/gone.md"]


def test_results_hold_one_current_page_per_platform():
    results = REPO / "docs" / "results"
    files = sorted(p.name for p in results.rglob("*") if p.is_file())
    assert len(files) <= 15, files
    assert {"cuda-h200.md", "cpu.md", "m5.md"} <= set(files)
    assert not [f for f in files if re.search(r"\d{4}-\d{2}-\d{2}", f)], "dated reports belong to git history"
    for page in ("cuda-h200.md", "cpu.md"):
        text = (results / page).read_text()
        for field in ("date", "hardware", "versions", "commit", "raw data"):
            assert re.search(rf"^\| [^|]*{field}", text, re.M), f"{page}: no row of {field!r}"
        assert "```bash" in text, f"{page}: no command that reproduces it"


def test_the_cuda_design_stays_short():
    # docs/cuda.md is the design as it is now (issue 24: at most 250 lines); figures go to the
    # results page, history to git.
    lines = (REPO / "docs" / "cuda.md").read_text().splitlines()
    assert len(lines) <= 250, f"docs/cuda.md has {len(lines)} lines, more than 250"
