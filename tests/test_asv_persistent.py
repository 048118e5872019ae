"""asv through src/int8nax/commands/asv_persistent.py: asv's results from one long-lived worker, and a
benchmark that crashes its worker or runs past its timeout fails alone.

A toy suite (no MLX) in a throwaway git repository, run with asv's "existing" environment (this
Python), so the test needs asv but neither network nor a virtualenv build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

asv = pytest.importorskip("asv", reason="asv is not installed (pip install -e '.[test]')")

LAUNCHER = Path(__file__).resolve().parents[1] / "src" / "int8nax" / "commands" / "asv_persistent.py"

SUITE = '''
import os
import time


def track_a_pid():
    return os.getpid()


def track_b_pid():
    return os.getpid()


def track_c_crash():
    os._exit(3)


def track_d_pid_after_crash():
    return os.getpid()


def track_e_raises():
    raise SystemExit(4)


def track_f_pid_after_exit():
    return os.getpid()


def track_g_hangs():
    time.sleep(120)


track_g_hangs.timeout = 3


def track_h_pid_after_hang():
    return os.getpid()


class TimeSleep:
    params = [[1, 2]]
    param_names = ["ms"]

    def time_sleep(self, ms):
        time.sleep(ms / 1000)
'''


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("persistent")
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "__init__.py").write_text("")
    (root / "benchmarks" / "bench_toy.py").write_text(SUITE)
    (root / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": "toy", "repo": ".", "branches": ["main"],
        "environment_type": "existing", "benchmark_dir": "benchmarks",
        "results_dir": "results", "html_dir": "html", "env_dir": "env"}))
    env = dict(os.environ, HOME=str(root), GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "toy"]):
        subprocess.run(["git", *args], cwd=root, env=env, check=True)
    subprocess.run([sys.executable, "-m", "asv", "machine", "--yes", "--machine", "toy"],
                   cwd=root, env=env, check=True, capture_output=True)
    proc = subprocess.run([sys.executable, str(LAUNCHER), "run", "-E", f"existing:{sys.executable}",
                           "--machine", "toy", "--quick", "--show-stderr", "--set-commit-hash",
                           "HEAD"], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    [path] = [p for p in (root / "results" / "toy").glob("*.json") if p.name != "machine.json"]
    results = json.loads(path.read_text())["results"]
    # asv keeps a list of results per benchmark (one per parameter; one for a plain function)
    # asv keeps a list of results per benchmark (one per parameter; one for a plain function;
    # None when it failed)
    def unwrap(name, value):
        plain = "." not in name
        return value[0][0] if plain and value[0] is not None else value[0]

    return proc, {name.split(".", 1)[1]: unwrap(name.split(".", 1)[1], value)
                  for name, value in results.items()}


def test_one_worker_runs_consecutive_benchmarks(recorded):
    proc, results = recorded
    assert results["track_a_pid"] == results["track_b_pid"], proc.stdout
    # asv's own timing loop ran in the worker: the sleeps come back as times of 1 and 2 ms.
    one, two = results["TimeSleep.time_sleep"]
    assert 0.001 <= one < 0.0015 and 0.002 <= two < 0.0025, results


def test_a_crash_fails_that_benchmark_only_and_a_new_worker_carries_on(recorded):
    proc, results = recorded
    assert results["track_c_crash"] is None
    assert "worker died" in proc.stdout and "worker exit status 3" in proc.stdout
    after = results["track_d_pid_after_crash"]
    assert isinstance(after, int) and after != results["track_a_pid"]


def test_a_benchmark_exiting_fails_without_ending_the_worker(recorded):
    proc, results = recorded
    assert results["track_e_raises"] is None
    assert results["track_f_pid_after_exit"] == results["track_d_pid_after_crash"]


def test_a_hang_times_out_and_the_next_benchmark_runs(recorded):
    proc, results = recorded
    assert results["track_g_hangs"] is None
    assert "ran past its timeout" in proc.stdout
    after = results["track_h_pid_after_hang"]
    assert isinstance(after, int) and after != results["track_f_pid_after_exit"]
    assert proc.returncode == 2, proc.stdout[-2000:]  # asv: some benchmarks failed


def test_worker_usage_error():
    proc = subprocess.run([sys.executable, str(LAUNCHER), "--int8nax-worker"], capture_output=True,
                          text=True)
    assert proc.returncode == 2 and "usage" in proc.stderr
