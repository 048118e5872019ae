"""The scripts the benchmark workflows run (.github/scripts): the PR gate's verdict, the results
branch (against a local bare repository standing in for GitHub), and the asv machine file."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / ".github" / "scripts"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(f"ci_{name}", SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


asv_gate = load_script("asv_gate")
results_branch = load_script("results_branch")

# Tails of real `asv continuous` logs (asv 0.6.6 on a toy project, 2026-11-29).
LOG_REGRESSION = """\
[100.00%] ··· bench_toy.Work.time_work                               10.2±0.01ms
| Change   | Before [8bc5a01b] <broken~1>   | After [47013bd6] <main>   |   Ratio | Benchmark (Parameter)    |
|----------|--------------------------------|---------------------------|---------|--------------------------|
| +        | 10.2±0.01ms                    | 20.2±0.02ms               |    1.98 | bench_toy.Work.time_work |

SOME BENCHMARKS HAVE CHANGED SIGNIFICANTLY.
PERFORMANCE DECREASED.
"""
LOG_FAILURE = """\
[75.00%] ··· bench_toy.Work.time_work                                    failed
[75.00%] ···· Traceback (most recent call last):
              RuntimeError: boom
              asv: benchmark failed (exit status 1)
[100.00%] ··· bench_toy.Work.time_work                               10.2±0.01ms
"""
LOG_UNCHANGED = """\
[100.00%] ··· bench_toy.Work.time_work                               10.2±0.01ms

BENCHMARKS NOT SIGNIFICANTLY CHANGED.
"""
LOG_UNKNOWN_COMMIT = "· Unknown commit nosuchref\n"


@pytest.mark.parametrize(
    "returncode, log, passed, reason",
    [
        (0, LOG_UNCHANGED, True, "No benchmark slowed down"),
        (1, LOG_REGRESSION, False, "Performance decreased"),
        (2, LOG_FAILURE, False, "A benchmark failed"),
        # A failure the exit status does not show (a benchmark failing on both commits).
        (0, LOG_FAILURE + LOG_UNCHANGED, False, "A benchmark failed"),
        (1, LOG_UNKNOWN_COMMIT, False, "usage error"),
        (137, "", False, "Unexpected asv exit status 137"),
    ],
)
def test_gate_verdict(returncode, log, passed, reason):
    result = asv_gate.verdict(returncode, log)
    assert result.passed is passed
    assert reason in result.reason


def test_gate_quotes_the_failure_lines():
    result = asv_gate.verdict(2, LOG_FAILURE)
    assert any("time_work" in line and "failed" in line for line in result.evidence)
    assert "```" in result.markdown()


def test_gate_cli_exit_status_and_job_summary(tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    log = tmp_path / "asv.log"
    log.write_text(LOG_REGRESSION)
    assert asv_gate.main(["--returncode", "1", "--log", str(log)]) == 1
    log.write_text(LOG_UNCHANGED)
    assert asv_gate.main(["--returncode", "0", "--log", str(log)]) == 0
    text = summary.read_text()
    assert "Benchmark gate FAILED" in text and "Benchmark gate passed" in text


# ---------------------------------------------------------------------------------------------
# The results branch, with a bare repository as "origin" and two clones as two runners.


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def origin_and_runners(tmp_path):
    origin = tmp_path / "origin.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(origin)], check=True)
    seed = tmp_path / "seed"
    subprocess.run(["git", "init", "-q", "-b", "main", str(seed)], check=True)
    (seed / "README").write_text("main branch\n")
    git(seed, "add", "README")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "main")
    git(seed, "push", "-q", str(origin), "main")
    runners = []
    for name in ("m5", "cuda"):
        clone = tmp_path / f"runner-{name}"
        subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)
        runners.append(clone)
    return origin, runners


def write_results(results_dir: Path, machine: str, sha: str, value: float, suite: str) -> None:
    machine_dir = results_dir / machine
    machine_dir.mkdir(parents=True, exist_ok=True)
    (machine_dir / "machine.json").write_text(json.dumps({"machine": machine}))
    (machine_dir / f"{sha}-virtualenv-py3.12.json").write_text(json.dumps({"value": value}))
    (results_dir / "benchmarks.json").write_text(suite)


def branch_files(origin: Path, branch: str = "asv-results") -> dict[str, str]:
    names = git(origin, "ls-tree", "-r", "--name-only", branch).split()
    return {name: git(origin, "show", f"{branch}:{name}") for name in names}


def test_results_branch_created_shared_and_restored(origin_and_runners, tmp_path):
    origin, (m5, cuda) = origin_and_runners
    save = results_branch.save
    write_results(m5 / ".asv/results", "int8nax-m5", "aaaaaaaa", 1.0, "suite v1")
    first = save(m5, "origin", "asv-results", m5 / ".asv/results", "int8nax-m5", "m5 results")
    write_results(cuda / ".asv/results", "int8nax-cuda", "aaaaaaaa", 2.0, "suite v2")
    save(cuda, "origin", "asv-results", cuda / ".asv/results", "int8nax-cuda", "cuda results")

    files = branch_files(origin)
    assert set(files) == {
        "benchmarks.json",
        "int8nax-m5/machine.json",
        "int8nax-m5/aaaaaaaa-virtualenv-py3.12.json",
        "int8nax-cuda/machine.json",
        "int8nax-cuda/aaaaaaaa-virtualenv-py3.12.json",
    }
    assert files["benchmarks.json"] == "suite v2"  # the last run's description of the suite
    # A branch of its own: its history starts at the first results commit, not at main.
    assert git(origin, "rev-list", "--max-parents=0", "asv-results").strip() == first
    assert git(origin, "log", "--format=%s", "main").strip() == "main"

    # Nothing new: no commit.
    before = git(origin, "rev-parse", "asv-results")
    assert save(cuda, "origin", "asv-results", cuda / ".asv/results", "int8nax-cuda", "again") is None
    assert git(origin, "rev-parse", "asv-results") == before

    # Restore one machine into a fresh results dir, then everything.
    one = tmp_path / "restored-one"
    assert results_branch.restore(m5, "origin", "asv-results", one, "int8nax-m5") == 2
    assert sorted(p.name for p in one.rglob("*") if p.is_file()) == [
        "aaaaaaaa-virtualenv-py3.12.json",
        "machine.json",
    ]
    everything = tmp_path / "restored-all"
    assert results_branch.restore(m5, "origin", "asv-results", everything, None) == 5
    assert json.loads((everything / "int8nax-cuda/aaaaaaaa-virtualenv-py3.12.json").read_text()) == {"value": 2.0}


def test_results_branch_push_race_rebuilds_on_the_new_tip(origin_and_runners, monkeypatch):
    origin, (m5, cuda) = origin_and_runners
    write_results(m5 / ".asv/results", "int8nax-m5", "bbbbbbbb", 1.0, "suite")
    write_results(cuda / ".asv/results", "int8nax-cuda", "bbbbbbbb", 2.0, "suite")
    real_push = results_branch.push_commit
    attempts = []  # the M5 runner's pushes

    def push_after_the_other_runner(repo, remote, commit, branch):
        if repo == m5:
            if not attempts:  # the CUDA runner pushes between the M5 runner's fetch and push
                results_branch.save(cuda, "origin", "asv-results", cuda / ".asv/results", "int8nax-cuda", "c")
            attempts.append(commit)
        return real_push(repo, remote, commit, branch)

    monkeypatch.setattr(results_branch, "push_commit", push_after_the_other_runner)
    pushed = results_branch.save(
        m5, "origin", "asv-results", m5 / ".asv/results", "int8nax-m5", "m5", backoff_s=0
    )
    assert len(attempts) == 2, "the first push must be rejected, the second accepted"
    assert pushed == attempts[1] == git(origin, "rev-parse", "asv-results").strip()
    files = branch_files(origin)
    assert "int8nax-cuda/bbbbbbbb-virtualenv-py3.12.json" in files
    assert "int8nax-m5/bbbbbbbb-virtualenv-py3.12.json" in files
    assert git(origin, "rev-list", "--count", "asv-results").strip() == "2"  # linear, no merge commit


def test_results_branch_restore_before_any_results(origin_and_runners, tmp_path):
    _, (m5, _) = origin_and_runners
    assert results_branch.restore(m5, "origin", "asv-results", tmp_path / "r", "int8nax-m5") == 0


def test_results_branch_save_without_results_names_the_missing_folder(origin_and_runners, tmp_path):
    _, (m5, _) = origin_and_runners
    with pytest.raises(FileNotFoundError, match="int8nax-m5"):
        results_branch.save(m5, "origin", "asv-results", tmp_path, "int8nax-m5", "m")


def test_results_branch_unreachable_remote_raises(origin_and_runners, tmp_path):
    _, (m5, _) = origin_and_runners
    git(m5, "remote", "set-url", "origin", str(tmp_path / "nowhere.git"))
    with pytest.raises(RuntimeError, match="ls-remote"):
        results_branch.restore(m5, "origin", "asv-results", tmp_path / "r", None)


# ---------------------------------------------------------------------------------------------
# The asv machine file (needs asv: the `bench` extra).


def test_machine_file_has_every_field_under_the_fixed_name(tmp_path, monkeypatch):
    pytest.importorskip("asv", reason="asv is in the `bench` extra, not installed here")
    asv_machine = load_script("asv_machine")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert asv_machine.main(["--name", "int8nax-cuda", "--gpu", "NVIDIA H200"]) == 0
    stored = json.loads((tmp_path / ".asv-machine.json").read_text())
    entry = stored["int8nax-cuda"]
    assert set(entry) == {"machine", "os", "arch", "cpu", "num_cpu", "ram", "gpu"}
    assert entry["machine"] == "int8nax-cuda" and entry["gpu"] == "NVIDIA H200"
    assert all(str(value).strip() for value in entry.values()), entry
    with pytest.raises(SystemExit):
        asv_machine.main(["--name", "a/b"])


def test_a_gpu_machine_is_named_by_its_card_and_described_with_driver_and_cuda(tmp_path, monkeypatch, capsys):
    pytest.importorskip("asv", reason="asv is in the `bench` extra, not installed here")
    asv_machine = load_script("asv_machine")
    monkeypatch.setenv("HOME", str(tmp_path))
    smi = {("--query-gpu=name,driver_version", "--format=csv,noheader"): "NVIDIA H100 80GB HBM3, 580.65.06\n",
           (): "| NVIDIA-SMI 580.65.06   Driver Version: 580.65.06   CUDA Version: 13.0 |\n"}
    monkeypatch.setattr(asv_machine, "_nvidia_smi", lambda *args: smi[args])
    assert asv_machine.main(["--name", "card", "--print-name"]) == 0
    assert capsys.readouterr().out == "h100\n"
    assert not (tmp_path / ".asv-machine.json").exists()  # --print-name records nothing
    assert asv_machine.main(["--name", "card"]) == 0
    entry = json.loads((tmp_path / ".asv-machine.json").read_text())["h100"]
    assert (entry["machine"], entry["gpu"], entry["gpu_driver"], entry["cuda"]) == (
        "h100", "NVIDIA H100 80GB HBM3", "580.65.06", "13.0")
    # an H100's figures never join the H200's history, and an unknown card has no card name
    with pytest.raises(SystemExit, match="another card"):
        asv_machine.main(["--name", "h200"])
    with pytest.raises(SystemExit, match="no machine is named for the GPU 'NVIDIA A100-SXM4-80GB'"):
        asv_machine.main(["--name", "card", "--gpu", "NVIDIA A100-SXM4-80GB"])
    assert asv_machine.main(["--name", "h200", "--gpu", "NVIDIA H200", "--print-name"]) == 0
