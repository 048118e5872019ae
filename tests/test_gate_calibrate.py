"""int8nax.commands.gate_calibrate's existing-environment variant (--existing, for a GPU box without
network): the order of the commits in the interleaved rounds, the pairs a repetition yields, the
asv run command of one round, each commit's sources on the path, the budget, the raw points
and --merge; and one short calibration end to end in this Python, from a copy of the working
tree without git history, as a GPU box gets it (asv, no virtualenv, no network; ~20 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import types
from collections import Counter
from pathlib import Path

import pytest

from int8nax.commands import gate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from int8nax.commands.gate_calibrate import existing, reporting, sandbox  # noqa: E402
from int8nax.commands.gate_calibrate.points import Point  # noqa: E402

A, A2, B12, B11 = (existing.Commit("A", 1.0, "a" * 40), existing.Commit("A'", 1.0, "b" * 40),
                   existing.Commit("B 1.2", 1.2, "c" * 40), existing.Commit("B 1.1", 1.1, "d" * 40))
NAME = "bench_ratio.GemmRatio.track_int8nax_gemm_ratio((16, 1344, 256))"


def test_round_orders_rotate_so_every_commit_takes_every_position():
    commits = [A, A2, B12, B11]
    orders = existing.round_orders(commits, 0, 8)
    assert orders[0] == commits and orders[1] == [A2, B12, B11, A]
    assert all(sorted(o, key=commits.index) == commits for o in orders)  # each commit once a round
    for position in range(4):  # over 8 rounds, every commit twice in every position
        assert Counter(o[position].label for o in orders) == {c.label: 2 for c in commits}
    # Two commits alternate, as asv continuous --interleave-rounds does.
    assert existing.round_orders([A, A2], 0, 3) == [[A, A2], [A2, A], [A, A2]]
    # The rotation counts on across repetitions: 3 commits in 2 rounds a repetition still take
    # every position equally over 3 repetitions.
    orders = [o for rep in range(3) for o in existing.round_orders([A, A2, B12], rep, 2)]
    assert existing.round_orders([A, A2, B12], 1, 2)[0] == [B12, A, A2]
    for position in range(3):
        assert Counter(o[position].label for o in orders) == {"A": 2, "A'": 2, "B 1.2": 2}


def test_a_repetition_pairs_every_commit_with_the_same_a():
    pairs = existing.repetition_pairs([A, A2, B12, B11])
    assert [(kind, planted) for kind, planted, _, _ in pairs] == [("A/A", 1.0), ("A/B 1.2", 1.2), ("A/B 1.1", 1.1)]
    assert all(base is A for _, _, base, _ in pairs)
    assert [head for _, _, _, head in pairs] == [A2, B12, B11]


def point(center, rng, spread=0.005, n=40):
    samples = [center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]
    median = sorted(samples)[n // 2]
    return Point(median, {"ci_99_a": min(samples), "ci_99_b": max(samples), "q_25": median,
                          "q_75": median, "repeat": n, "number": 1}, samples)


def test_pair_status_is_asvs_rule_and_unmeasured_when_a_call_failed():
    rng = random.Random(3)
    base, same, slow = {NAME: point(1.0, rng)}, {NAME: point(1.0, rng)}, {NAME: point(1.2, rng)}
    ok = {"A": True, "A'": True, "B 1.2": True}
    assert existing.pair_status(ok, A, A2, base, same, 1.08) == gate.QUIET
    assert existing.pair_status(ok, A, B12, base, slow, 1.08) == gate.REGRESSION
    assert existing.pair_status(ok, A, B12, base, slow, 1.25) == gate.QUIET  # 1.2x is below the factor
    assert existing.pair_status({**ok, "B 1.2": False}, A, B12, base, slow, 1.08) == gate.UNMEASURED
    assert existing.pair_status({**ok, "A": False}, A, A2, base, same, 1.08) == gate.UNMEASURED
    assert existing.pair_status(ok, A, A2, base, {}, 1.08) == gate.UNMEASURED  # nothing measured at both


def test_existing_command_is_one_round_of_asv_run_with_the_gate_settings(tmp_path):
    settings = gate.Settings(factor=1.1, rounds=6, repeat="(5,50,0.5)", bench=("^x", "^y"),
                             cpu_affinity=None, launch="persistent")
    launcher = tmp_path / "asv_persistent.py"
    first = existing.existing_command(settings, "c" * 40, config="asv.cuda.conf.json", machine="int8nax-cuda",
                                python="/usr/bin/python3", launcher=launcher, append=False)
    assert first[:3] == [sys.executable, str(launcher), "run"]
    text = " ".join(first)
    for part in ("--config asv.cuda.conf.json", "-E existing:/usr/bin/python3", f"--set-commit-hash {'c' * 40}",
                 "--machine int8nax-cuda", "-a rounds=1", "-a repeat=(5,50,0.5)", "--bench ^x --bench ^y"):
        assert part in text, part
    assert "--record-samples" in first and "--append-samples" not in first  # the first round: fresh
    assert "--cpu-affinity" not in first and "--launch-method" not in first
    later = existing.existing_command(settings, "c" * 40, config="c", machine="m", python="p", launcher=launcher,
                                append=True)
    assert "--append-samples" in later and "--record-samples" not in later
    spawn = existing.existing_command(gate.Settings(cpu_affinity="1", launch="forkserver"), "c" * 40, config="c",
                                machine="m", python="p", launcher=launcher, append=False)
    assert spawn[1:4] == ["-m", "asv", "run"]
    assert spawn[spawn.index("--cpu-affinity") + 1] == "1" and "forkserver" in spawn


def test_commit_env_puts_that_commits_sources_first_instead_of_this_checkouts(tmp_path):
    clone = types.SimpleNamespace(env={"PYTHONPATH": os.pathsep.join(["/tmp/site", str(ROOT / "src")]),
                                       "HOME": "/h"})
    env = existing.commit_env(clone, gate.Settings(threads=1), tmp_path / "tree")
    assert env["PYTHONPATH"] == env["ASV_PYTHONPATH"] == os.pathsep.join([str(tmp_path / "tree" / "src"), "/tmp/site"])
    assert env["OMP_NUM_THREADS"] == "1" and env["HOME"] == "/h"


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        return self.now

    def strftime(self, fmt):
        return "00:00:00"


def fake_experiment(tmp_path, monkeypatch, per_call_s, slow_factor=1.2):
    """measure_existing over a fake asv: each call takes `per_call_s` of a fake clock and records
    (commit label, append?); the points: A and A' at 1.0, B at `slow_factor`."""
    clock = FakeClock()
    monkeypatch.setattr(existing, "time", clock)
    rng = random.Random(5)
    commits = {A.sha: "A", A2.sha: "A'", B12.sha: "B 1.2"}
    calls = []

    def run_logged(command, env, cwd, log, timeout):
        sha = command[command.index("--set-commit-hash") + 1]
        calls.append((commits[sha], "--append-samples" in command, env["PYTHONPATH"].split(os.pathsep)[0]))
        clock.now += per_call_s
        return 0, per_call_s, "ok\n"

    monkeypatch.setattr(existing, "run_logged", run_logged)
    monkeypatch.setattr(existing, "load_points", lambda results, sha: {
        NAME: point(slow_factor if sha == B12.sha else 1.0, rng)})
    results = tmp_path / "clone" / ".asv" / "results" / "m"
    results.mkdir(parents=True)
    clone = types.SimpleNamespace(path=tmp_path / "clone", base=A.sha, same=A2.sha, slow={1.2: B12.sha},
                                  env={}, tree=lambda sha: tmp_path / "trees" / sha[:4])
    return clock, calls, clone, results


def test_measure_existing_interleaves_fresh_then_appended_rounds_and_pairs_each_repetition(tmp_path, monkeypatch):
    clock, calls, clone, results = fake_experiment(tmp_path, monkeypatch, per_call_s=10)
    (results / f"{A.sha[:8]}-existing-py.json").write_text("{}")  # an earlier repetition's file
    args = argparse.Namespace(machine="m", config="asv.conf.json", runs=2, slowdowns=[1.2], existing="/py",
                              factor_ran=1.08, budget_min=None)
    settings = gate.Settings(rounds=3)
    written = []
    runs, command = existing.measure_existing(clone, args, settings, tmp_path, lambda text: None, None,
                                        after_each=lambda runs, command: written.append(len(runs)))
    assert not (results / f"{A.sha[:8]}-existing-py.json").exists()  # fresh samples each repetition
    assert len(calls) == 2 * 3 * 3
    # Round 1 of each repetition records fresh samples, rounds 2 and 3 append; every commit once a round.
    for rep in range(2):
        for r in range(3):
            chunk = calls[rep * 9 + r * 3: rep * 9 + r * 3 + 3]
            assert sorted(c[0] for c in chunk) == ["A", "A'", "B 1.2"]
            assert all(c[1] == (r > 0) for c in chunk)
    # Each commit's calls have its own tree's sources first.
    assert {label: tree for label, _, tree in calls} == {
        "A": str(tmp_path / "trees" / "aaaa" / "src"), "A'": str(tmp_path / "trees" / "bbbb" / "src"),
        "B 1.2": str(tmp_path / "trees" / "cccc" / "src")}
    assert [(r.kind, r.status) for r in runs] == [("A/A", 0), ("A/B 1.2", 1)] * 2
    assert runs[0].raw[0] is runs[1].raw[0]  # A/A and A/B of a repetition share A's samples
    assert runs[1].points[NAME][0] == pytest.approx(1.2, rel=0.02)
    assert runs[0].seconds == 60  # the pair's asv calls: 2 commits x 3 rounds x 10 s
    assert written == [2, 4] and args.repetition_minutes == [1.5, 1.5]
    assert "--set-commit-hash" in command


def test_the_budget_stops_before_a_repetition_that_would_not_finish(tmp_path, monkeypatch):
    clock, calls, clone, _ = fake_experiment(tmp_path, monkeypatch, per_call_s=10)
    said = []
    args = argparse.Namespace(machine="m", config="asv.conf.json", runs=5, slowdowns=[1.2], existing="/py",
                              factor_ran=1.08, budget_min=4)
    # A repetition takes 90 s (9 calls): after two (180 s), a third would end at 270 s > 240 s: stop.
    runs, _ = existing.measure_existing(clone, args, gate.Settings(rounds=3), tmp_path, said.append, 240.0)
    assert len(runs) == 4 and len(calls) == 18
    assert any("stops here" in s for s in said)


def test_the_budget_abandons_a_repetition_that_reaches_it(tmp_path, monkeypatch):
    clock, calls, clone, _ = fake_experiment(tmp_path, monkeypatch, per_call_s=10)
    said = []
    args = argparse.Namespace(machine="m", config="asv.conf.json", runs=5, slowdowns=[1.2], existing="/py",
                              factor_ran=1.08, budget_min=1)
    runs, _ = existing.measure_existing(clone, args, gate.Settings(rounds=3), tmp_path, said.append, 60.0)
    assert runs == [] and len(calls) == 6  # the first repetition needs 90 s: left out, nothing half-counted
    assert any("left out" in s for s in said)


def test_runs_json_round_trips_and_merge_makes_one_report(tmp_path, monkeypatch):
    clock, calls, clone, _ = fake_experiment(tmp_path, monkeypatch, per_call_s=10)
    args = argparse.Namespace(machine="m", config="asv.conf.json", runs=1, slowdowns=[1.2], existing="/py",
                              factor_ran=1.08, budget_min=None, argv=["--existing"], factors=[1.05, 1.10],
                              machine_info=["- machine: `m` (the GPU box)"])
    settings = gate.Settings(rounds=2, source="test")
    runs, command = existing.measure_existing(clone, args, settings, tmp_path, lambda text: None, None)
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "runs.json").write_text(reporting.runs_json(runs, args, settings, command, "today", (1, 1, 1)))
    back, meta = reporting.load_runs(tmp_path / "one" / "runs.json")
    assert [(r.kind, r.status, r.points) for r in back] == [(r.kind, r.status, r.points) for r in runs]
    assert back[1].raw[1][NAME] == runs[1].raw[1][NAME]
    merged_args = argparse.Namespace(argv=["--merge"], factors=[1.05, 1.10])
    merged, msettings, _, started, _ = reporting.merge([tmp_path / "one", tmp_path / "two" / "runs.json"], merged_args)
    assert len(merged) == 4 and msettings == settings and merged_args.runs == 2 and started == "today"
    text, _ = reporting.report(merged, merged_args, msettings, command, started, (1, 1, 1))
    assert "| A/A | 2 | 2 | 0 | 0 |" in text and "| A/B 1.2 | 2 | 0 | 2 | 0 |" in text
    assert "the GPU box" in text and "Existing-environment variant" in text  # the measuring machine's lines
    other = reporting.runs_json(runs, argparse.Namespace(**{**vars(args), "slowdowns": [1.1]}), settings, command,
                                "today", (1, 1, 1))
    (tmp_path / "other.json").write_text(other)
    with pytest.raises(SystemExit, match="another machine, measuring settings or slowdowns"):
        reporting.merge([tmp_path / "one", tmp_path / "other.json"], argparse.Namespace())
    # A new note or factor (gate.json edited between two device calls) does not change the samples...
    renoted = gate.Settings(rounds=2, source="test", note="recalibrated", factor=1.15)
    (tmp_path / "renoted.json").write_text(reporting.runs_json(runs, args, renoted, command, "today", (1, 1, 1)))
    assert len(reporting.merge([tmp_path / "one", tmp_path / "renoted.json"], argparse.Namespace(argv=[]))[0]) == 4
    # ...other rounds do.
    rerounded = gate.Settings(rounds=3, source="test")
    (tmp_path / "rerounded.json").write_text(reporting.runs_json(runs, args, rerounded, command, "today", (1, 1, 1)))
    with pytest.raises(SystemExit, match="measuring settings"):
        reporting.merge([tmp_path / "one", tmp_path / "rerounded.json"], argparse.Namespace(argv=[]))


def test_copy_calibrates_the_working_tree_over_a_stale_head(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    run = lambda *a: subprocess.run(a, cwd=repo, check=True, capture_output=True,  # noqa: E731
                                    env={**os.environ, **sandbox.sandbox_env(tmp_path, "t")})
    (repo / "code.py").write_text("old\n")
    run("git", "init", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "stale")
    (repo / "code.py").write_text("new\n")  # the files differ from HEAD, as on the device
    real = sandbox.Clone.run
    # Only git runs: asv_machine.py is not in this toy repository.
    monkeypatch.setattr(sandbox.Clone, "run", lambda self, *a, cwd=None: real(self, *a, cwd=cwd) if a[0] == "git" else "")
    for copy, want in ((False, "old\n"), (True, "new\n")):
        root = tmp_path / f"clone-{copy}"
        root.mkdir()
        clone = sandbox.Clone(root, "m", source=repo, copy=copy)
        assert (clone.path / "code.py").read_text() == want and clone.copied == copy


def test_a_calibration_in_the_existing_environment_from_a_copy_without_git(tmp_path):
    """The H200 command's path on this box: a copy of the working tree without .git (what a
    device call gets), --existing in this Python, the GPU entry's settings (persistent launch)
    narrowed to one CPU-profile ratio benchmark, two rounds, one repetition, a planted 2x."""
    pytest.importorskip("asv", reason="asv is not installed (pip install -e '.[test]')")
    copy = tmp_path / "tree"
    shutil.copytree(ROOT, copy, ignore=sandbox.COPY_LEFT_OUT, symlinks=True)
    out = tmp_path / "out"
    # the copy's package first; an MLX installed through PYTHONPATH (the H200's /tmp/site) after it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(copy / "src"), os.environ.get("PYTHONPATH")) if p),
           "INT8NAX_BENCH_PROFILE": "cpu",
           "INT8NAX_BACKEND": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-m", "int8nax.commands.gate_calibrate", "--existing", "--machine", "int8nax-cuda", "--runs", "1",
         "--slowdowns", "2.0", "--budget-min", "5", "--out-dir", str(out), "--",
         "--rounds", "2", "--bench", r"GemmRatio\.track_int8nax_gemm_ratio\(\(16, 1344, 256\)\)"],
        cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # Four files, as a device call brings back at most eight: the logs come packed.
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["calibrate.log", "logs.tar.gz", "runs.json", next(out.glob("gate-*.md")).name])
    with tarfile.open(out / "logs.tar.gz") as tar:
        logs = sorted(m.name for m in tar.getmembers() if m.isfile())
        first = tar.extractfile("logs/rep01-round1-A.log").read().decode()
    assert len(logs) == 6 and "logs/rep01-round2-Ap.log" in logs, logs  # 3 commits x 2 rounds
    assert "asv_persistent.py run" in first and "--record-samples" in first
    [report] = out.glob("gate-int8nax-cuda-*.md")
    text = report.read_text()
    assert "Existing-environment variant" in text and "a copy without git history" in text
    assert "partial" not in text and "stopped by" not in text
    document = json.loads((out / "runs.json").read_text())
    aa, ab = document["runs"]
    assert aa["kind"] == "A/A" and aa["status"] in (0, 1) and ab["kind"] == "A/B 2.0"
    [(name, (ratio, significant))] = ab["points"].items()
    assert name == NAME and ratio > 1.5 and significant and ab["status"] == 1, document
    # Both rounds' samples are in each commit's result: about twice one round's.
    assert len(ab["base"][NAME]["samples"]) >= 2 * 5
    assert "calibrating int8nax-cuda" in (out / "calibrate.log").read_text()


def test_a_call_past_the_budget_is_interrupted_then_reported(tmp_path):
    # The child restores Python's SIGINT handler: a shell that starts jobs in the background
    # (nohup ... &) hands them SIGINT ignored, and Python keeps it so.
    code = ("import signal, time\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "try:\n    time.sleep(60)\nfinally:\n    print('cleaned up', flush=True)")
    status, seconds, out = existing.run_logged([sys.executable, "-c", code], dict(os.environ), tmp_path,
                                         tmp_path / "call.log", timeout=1.0)
    # SIGINT first, so that asv's finally blocks (closing its benchmark worker) run.
    assert status == -9 and seconds < 20 and "cleaned up" in out and "--budget-min" in out
    assert "cleaned up" in (tmp_path / "call.log").read_text()


def test_the_console_names_a_benchmark_by_its_method_and_parameters_dots_included():
    assert existing._method("bench_ratio.GemmRatio.track_int8nax_gemm_ratio((16, 512, 512))") == \
        "track_int8nax_gemm_ratio((16, 512, 512))"
    assert existing._method("bench_ratio.ModelRatio.track_w8a8_model_ratio('qwen2.5-0.5b', 1)") == \
        "track_w8a8_model_ratio('qwen2.5-0.5b', 1)"
    assert existing._method("bench_gemm.Int8naxGemm.time_gemm") == "time_gemm"


def test_sandbox_env_keeps_no_int8nax_source_tree_for_the_benchmark_processes(tmp_path, monkeypatch):
    # A developer's PYTHONPATH=src (relative here, as typed) would make asv's benchmark
    # processes import that tree instead of the commit asv built.
    tree, other = tmp_path / "checkout", tmp_path / "site"
    (tree / "src" / "int8nax").mkdir(parents=True)
    (tree / "src" / "int8nax" / "__init__.py").write_text("")
    other.mkdir()
    monkeypatch.chdir(tree)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["src", str(other), str(tree / "src")]))
    env = sandbox.sandbox_env(tmp_path / "home", "t")
    assert env["ASV_PYTHONPATH"] == str(other)
    assert env["PYTHONPATH"] == os.environ["PYTHONPATH"]  # the gate's own process keeps it
