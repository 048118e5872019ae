"""The GPU record keeps up with the code: the newest change to a CUDA kernel, plan rule or epilogue
is in a commit that a committed GPU asv record covers (the record's commit has it in its history),
or a CUDA results page names it as pending. A commit that changes only the docstrings and comments
of the Python files among them changes nothing that runs, and needs no record. Read from git: a
copy without history skips."""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_MACHINES = ("h100", "h200")
KERNEL_PATHS = ("src/int8nax/kernels/cuda", "src/int8nax/backends/cuda_plans.py", "src/int8nax/backends/cuda_choice.py",
                "src/int8nax/backends/cuda/plans.py", "src/int8nax/backends/cuda/plans",
                "src/int8nax/backends/cuda/choice.py", "src/int8nax/backends/cuda/source.py",
                "src/int8nax/backends/cuda/graphs.py")
"""What decides which GPU code runs and how: the kernels' sources (headers and the bodies
source.py writes), the plan rules, the dispatch, the launches (graphs.py)."""


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def history_or_skip() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("no git history here")
    if git("rev-parse", "--is-shallow-repository") == "true":
        pytest.skip("a shallow clone: the kernels' history is cut")


class _NoStrings(ast.NodeTransformer):
    def visit_Expr(self, node):
        return None if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str) else node


def same_code(before: str, after: str) -> bool:
    """Whether two versions of a Python file run the same: equal but for docstrings (a module's,
    a class's, a function's or an attribute's string) and comments."""
    return ast.dump(_NoStrings().visit(ast.parse(before))) == ast.dump(_NoStrings().visit(ast.parse(after)))


def changes_code(commit: str, paths: list[str]) -> bool:
    """Whether `commit` changes what runs under `paths`: any change to a kernel source, a Python
    file's beyond its docstrings and comments (a first commit, or a file added or removed, counts)."""
    try:
        changed = git("diff", "--name-only", f"{commit}^", commit, "--", *paths).splitlines()
        return any(not path.endswith(".py")
                   or not same_code(git("show", f"{commit}^:{path}"), git("show", f"{commit}:{path}"))
                   for path in changed)
    except subprocess.CalledProcessError:
        return True


def newest_kernel_change(paths: list[str]) -> str:
    """The newest commit that changes what runs under `paths` ("" for none)."""
    commits = git("log", "--format=%H", "--", *paths).splitlines()
    return next((c for c in commits if changes_code(c, paths)), "")


def recorded_commits() -> set[str]:
    found = set()
    for machine in GPU_MACHINES:
        for path in (ROOT / ".asv" / "results" / machine).glob("*.json"):
            if path.name != "machine.json":
                found.add(json.loads(path.read_text())["commit_hash"])
    return found


def covered(change: str, records: set[str]) -> bool:
    known = [r for r in records if subprocess.run(["git", "cat-file", "-e", f"{r}^{{commit}}"], cwd=ROOT).returncode == 0]
    return any(subprocess.run(["git", "merge-base", "--is-ancestor", change, r], cwd=ROOT).returncode == 0
               for r in known)


def pending_on_results_pages(change: str) -> bool:
    short = change[:7]
    for page in (ROOT / "docs" / "results").glob("cuda-*.md"):
        for line in page.read_text().splitlines():
            if short in line and re.search(r"\bpending\b", line, re.I):
                return True
    return False


def test_the_newest_kernel_change_has_its_gpu_record_or_is_pending():
    history_or_skip()
    paths = [p for p in KERNEL_PATHS if (ROOT / p).exists()]
    change = newest_kernel_change(paths)
    assert change, "no commit touches the CUDA kernels"
    records = recorded_commits()
    assert records, "no GPU machine has a committed asv record"
    assert covered(change, records) or pending_on_results_pages(change), (
        f"{change[:7]} ({git('log', '-1', '--format=%s', change)}) changed the CUDA kernels or their plans after "
        f"every committed GPU record: run `tools/hopper_verify.sh record` on a GPU and commit .asv/results/<card>, "
        f"or name {change[:7]} as pending on docs/results/cuda-<card>.md")


def test_the_check_sees_a_change_no_record_covers(tmp_path):
    # the rule can fail: a record at the change's parent does not cover the change
    history_or_skip()
    change = git("log", "-1", "--format=%H", "--", "src/int8nax/kernels/cuda")
    parent = git("rev-parse", f"{change}^")
    assert not covered(change, {parent}) and covered(change, {change})
    assert not pending_on_results_pages("0" * 40)


def test_only_a_change_to_what_runs_needs_a_record():
    code = 'X = 1\n"""X, measured at 1."""\n\n\ndef f():\n    """Doc."""\n    return X  # one\n'
    assert same_code(code, code.replace("measured at 1", "the rule").replace("Doc.", "Said").replace("# one", ""))
    assert not same_code(code, code.replace("X = 1", "X = 2"))
    assert not same_code(code, code.replace("return X", "return -X"))
