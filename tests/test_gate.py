"""The regression gate (`int8nax gate`, src/int8nax/commands/gate.py), its settings file, the ratio
benchmarks' clock and the calibration script's planted slowdown, without running asv: a fake
`python -m asv` stands in for it (what it prints and its exit status are asv 0.6.6's, as seen
in tests/test_ci_scripts.py and docs/workflows.md). tests/test_asv.py runs the gate on asv itself.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from int8nax.commands import cli, gate

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))

TABLE = """\
| Change   | Before [aaaaaaaa]   | After [bbbbbbbb]   |   Ratio | Benchmark (Parameter)                                        |
|----------|---------------------|--------------------|---------|--------------------------------------------------------------|
| +        | 1.22±0.01s          | 1.47±0.01s         |    1.2  | bench_ratio.GemmRatio.track_int8nax_gemm_ratio((16, 512, 512))    |
|          | 270±5μs             | 271±5μs            |    1.00 | bench_gemm.Int8naxGemm.time_int8nax_gemm((16, 512, 512))             |
|          | 210±5μs             | 211±5μs            |    1.00 | bench_linear.NumpySgemm.time_numpy_sgemm((16, 512, 512))     |
"""
# What asv compare prints besides: a shape of another profile, and a benchmark that failed.
COMPARE_TABLE = TABLE + """\
|          | n/a                 | n/a                |     n/a | bench_gemm.Int8naxGemm.time_int8nax_gemm((16, 4096, 4096))           |
| !        | 370±5μs             | failed             |     n/a | bench_gemm.Int8naxGemm.time_int8nax_gemm((16, 1344, 256))            |
"""
LOGS = {  # scenario -> (asv continuous's exit status, its output)
    "quiet": (0, "[100.00%] ··· bench_ratio.GemmRatio.track_int8nax_gemm_ratio  ok\n\nBENCHMARKS NOT SIGNIFICANTLY CHANGED.\n"),
    "regression": (1, TABLE + "\nSOME BENCHMARKS HAVE CHANGED SIGNIFICANTLY.\nPERFORMANCE DECREASED.\n"),
    "failed": (2, "[ 50.00%] ··· bench_ratio.GemmRatio.track_int8nax_gemm_ratio   failed\n"
                  "[ 50.00%] ···· Traceback (most recent call last):\n  MismatchError: wrong\n"),
    "hidden-failure": (0, "[ 50.00%] ··· bench_gemm.Int8naxGemm.time_int8nax_gemm   failed\n\nBENCHMARKS NOT SIGNIFICANTLY CHANGED.\n"),
    "no-machine": (1, "· No information stored about machine 'x'. I know about nothing.\n"),
}


def test_classify_maps_asv_statuses_to_quiet_regression_and_unmeasured():
    assert gate.classify(*LOGS["quiet"]).status == gate.QUIET
    assert gate.classify(*LOGS["regression"]).status == gate.REGRESSION
    failed = gate.classify(*LOGS["failed"])
    assert failed.status == gate.UNMEASURED and any("failed" in line for line in failed.evidence)
    # A benchmark failing at both commits: asv says 0, the gate says it could not measure.
    assert gate.classify(*LOGS["hidden-failure"]).status == gate.UNMEASURED
    # asv's usage errors also exit 1: not a regression.
    assert "asv machine --yes" in gate.classify(*LOGS["no-machine"]).reason
    usage = gate.classify(1, "· Unknown commit nosuchref\n")
    assert usage.status == gate.UNMEASURED and "usage error" in usage.reason
    # A regression next to a failure is not trusted either.
    assert gate.classify(1, LOGS["regression"][1] + LOGS["failed"][1]).status == gate.UNMEASURED
    assert gate.classify(137, "").status == gate.UNMEASURED


def write_settings(path: Path, machines: dict) -> Path:
    path.write_text(json.dumps({"//": "test", "machines": machines}))
    return path


def test_settings_machine_entry_over_default_over_builtins(tmp_path):
    path = write_settings(tmp_path / "gate.json", {
        "default": {"factor": 1.2, "rounds": 3, "note": "defaults"},
        "box": {"factor": 1.07, "repeat": "(5,50,0.5)", "cpu_affinity": "1", "calibration": "docs/results/x.md"},
    })
    box = gate.load_settings(path, "box")
    assert (box.factor, box.rounds, box.repeat, box.cpu_affinity) == (1.07, 3, "(5,50,0.5)", "1")
    assert box.bench == gate.Settings().bench and box.threads == 1
    assert "[box]" in box.source and box.note == "docs/results/x.md"
    other = gate.load_settings(path, "elsewhere")
    assert (other.factor, other.rounds, other.repeat) == (1.2, 3, gate.Settings().repeat)
    assert "[default]" in other.source
    assert gate.load_settings(tmp_path / "missing.json", "box") == gate.Settings(
        source=f"built-in defaults ({tmp_path / 'missing.json'} not found)")


@pytest.mark.parametrize("entry, message", [
    ({"factr": 1.1}, "unknown setting 'factr'"),
    ({"factor": 0.9}, "'factor' must be > 1"),
    ({"rounds": "6"}, "'rounds' has the wrong type"),
    ({"launch": "fork"}, "'launch' takes one of spawn, forkserver, persistent, got 'fork'"),
    ({"threads": True}, "'threads' has the wrong type"),
    ({"repeat": "abc"}, r"'repeat': expected N \(a whole number >= 1\) or \(min,max,seconds\).*got 'abc'"),
    ({"cpu_affinity": "0-x"}, r"'cpu_affinity': expected CPU numbers and ranges.*got '0-x'"),
])
def test_bad_settings_name_the_file_entry_and_key(tmp_path, entry, message):
    path = write_settings(tmp_path / "gate.json", {"box": entry})
    with pytest.raises(gate.GateError, match=message) as info:
        gate.load_settings(path, "box")
    assert "machines.box" in str(info.value)


def test_the_repository_settings_file_is_valid_and_gates_the_ratio_benchmarks_only():
    import re

    from int8nax.bench import problems

    document = json.loads((ROOT / gate.SETTINGS_FILE).read_text())
    shapes = [f"({m}, {k}, {n})" for m, k, n in problems.ALL_SHAPES]
    ratio = [f"bench_ratio.GemmRatio.track_int8nax_gemm_ratio({s})" for s in shapes]
    ungated = [f"bench_gemm.Int8naxGemm.track_int8nax_gemm_tops({s})" for s in shapes] + \
        [f"bench_linear.MlxQ8.time_mlx_q8_matmul({s})" for s in shapes] + \
        [f"bench_ratio.GemmRatio.track_x({s})" for s in shapes] + \
        [f"bench_ratio.GemmRatio.time_int8nax_gemm_ratio({s})" for s in shapes]
    assert "default" in document["machines"]
    for machine in document["machines"]:
        settings = gate.load_settings(ROOT / gate.SETTINGS_FILE, machine)
        assert 1.0 < settings.factor < 1.2, machine
        patterns = [re.compile(b) for b in settings.bench]
        assert not any(p.search(n) for p in patterns for n in ungated), machine
        assert any(p.search(n) for p in patterns for n in ratio), machine  # the drift-free ratio is gated


def test_continuous_command_base_first_with_the_settings():
    settings = gate.Settings(factor=1.07, rounds=8, repeat="(5,50,0.5)", bench=("a", "b"), cpu_affinity="1")
    command = gate.continuous_command(settings, "BASE", "HEAD", config="c.json", machine="m", python="py")
    assert command[:4] == ["py", "-m", "asv", "continuous"] and command[-2:] == ["BASE", "HEAD"]
    text = " ".join(command)
    for piece in ("--config c.json", "--machine m", "--factor 1.07", "--interleave-rounds", "-a rounds=8",
                  "-a repeat=(5,50,0.5)", "--cpu-affinity 1", "--bench a --bench b"):
        assert piece in text, piece
    unpinned = gate.Settings(cpu_affinity=None)
    assert "--cpu-affinity" not in gate.continuous_command(unpinned, "B", "H", config="c", machine="m")
    assert "--launch-method" not in text


def test_continuous_command_launch_methods():
    fork = gate.continuous_command(gate.Settings(launch="forkserver"), "B", "H", config="c", machine="m",
                                   python="py")
    assert fork[:4] == ["py", "-m", "asv", "continuous"] and "--launch-method forkserver" in " ".join(fork)
    kept = gate.continuous_command(gate.Settings(launch="persistent"), "B", "H", config="c", machine="m",
                                   python="py")
    assert kept[0] == "py" and kept[2] == "continuous" and "--launch-method" not in kept
    assert Path(kept[1]).is_file() and Path(kept[1]).name == "asv_persistent.py"
    # the GPU runners' entry uses it: a new process costs ~10 s there
    assert gate.load_settings(ROOT / gate.SETTINGS_FILE, "int8nax-cuda").launch == "persistent"


def test_benchmark_env_pins_every_thread_pool():
    env = gate.benchmark_env(gate.Settings(threads=1), {"PATH": "/bin", "OMP_NUM_THREADS": "8"})
    assert all(env[v] == "1" for v in gate.THREAD_VARIABLES) and env["PATH"] == "/bin"
    assert gate.benchmark_env(gate.Settings(threads=None), {"OMP_NUM_THREADS": "8"}) == {"OMP_NUM_THREADS": "8", "INT8NAX_RATIO_REPEAT": "(5,50,0.5)"}


def test_gated_table_keeps_the_header_and_the_gated_rows():
    table = gate.gated_table(COMPARE_TABLE, (r"\.time_int8nax_gemm", r"\.track_int8nax_gemm_ratio"))
    assert "Benchmark (Parameter)" in table and "|----------" in table
    assert "GemmRatio" in table and "Int8naxGemm.time_int8nax_gemm((16, 512" in table and "NumpySgemm" not in table
    assert "(16, 4096, 4096)" not in table, "a shape measured at neither commit is left out"
    assert "failed" in table, "a failed benchmark stays in"


# --- run() end to end, with a fake asv ------------------------------------------------------

FAKE_ASV = textwrap.dedent('''\
    #!{python}
    """Stands in for `python -m asv`: records its call, prints the scenario's output."""
    import json, os, sys
    record = os.environ["FAKE_ASV_RECORD"]
    calls = json.load(open(record)) if os.path.exists(record) else []
    calls.append({{"argv": sys.argv[1:], "cwd": os.getcwd(),
                   "threads": os.environ.get("OPENBLAS_NUM_THREADS")}})
    json.dump(calls, open(record, "w"))
    logs = json.loads(os.environ["FAKE_ASV_LOGS"])
    status, text = logs[os.environ["FAKE_ASV_SCENARIO"]]
    if sys.argv[1:3] == ["-c", "import asv"]:
        sys.exit(int(os.environ.get("FAKE_ASV_MISSING", "0")))
    if sys.argv[1:3] == ["-m", "asv"] and sys.argv[3] == "compare":
        print(os.environ["FAKE_ASV_TABLE"])
        sys.exit(0)
    print(text)
    sys.exit(status)
''')


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A git repository with an asv.conf.json, benchmarks/gate.json, two commits; and a fake asv."""
    repo = tmp_path / "repo"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "asv.conf.json").write_text("{}\n")
    write_settings(repo / "benchmarks" / "gate.json",
                   {"default": {"factor": 1.3}, "box": {"factor": 1.08, "bench": [r"\.time_int8nax_gemm", r"\.track_int8nax_gemm_ratio"]}})
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "base"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "head"], check=True)
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_ASV.format(python=sys.executable))
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_ASV_RECORD", str(tmp_path / "calls.json"))
    monkeypatch.setenv("FAKE_ASV_LOGS", json.dumps(LOGS))
    monkeypatch.setenv("FAKE_ASV_TABLE", COMPARE_TABLE)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    return repo, fake, tmp_path / "calls.json"


def gate_main(repo, fake, *extra):
    return cli.main(["gate", "--config", str(repo / "asv.conf.json"), "--machine", "box",
                     "--python", str(fake), *extra])


@pytest.mark.parametrize("scenario, status", [("quiet", 0), ("regression", 1), ("failed", 2),
                                              ("hidden-failure", 2), ("no-machine", 2)])
def test_gate_exit_status_and_the_table_either_way(project, monkeypatch, capsys, scenario, status):
    repo, fake, record = project
    monkeypatch.setenv("FAKE_ASV_SCENARIO", scenario)
    summary = repo.parent / "summary.md"
    assert gate_main(repo, fake, "--summary", str(summary), "--log", str(repo.parent / "asv.log"),
                     "main~1", "main") == status
    out = capsys.readouterr().out
    # asv continuous prints no table when a benchmark failed: the gate's asv compare does.
    assert "GemmRatio.track_int8nax_gemm_ratio((16, 512, 512))" in out.split("comparison table")[1]
    assert "NumpySgemm" not in out.split("comparison table")[1]  # not gated on machine "box"
    assert f"(exit {status})" in out
    continuous, compare = [c for c in json.loads(record.read_text()) if c["argv"][:2] == ["-m", "asv"]]
    assert continuous["argv"][1:3] == ["asv", "continuous"] and compare["argv"][1:3] == ["asv", "compare"]
    base, head = (subprocess.run(["git", "-C", str(repo), "rev-parse", r], capture_output=True, text=True,
                                 check=True).stdout.strip() for r in ("main~1", "main"))
    assert continuous["argv"][-2:] == [base, head] and compare["argv"][-2:] == [base, head]
    assert "--factor" in continuous["argv"] and continuous["argv"][continuous["argv"].index("--factor") + 1] == "1.08"
    assert continuous["threads"] == "1" and Path(continuous["cwd"]) == repo
    assert LOGS[scenario][1].strip() in (repo.parent / "asv.log").read_text()
    assert f"exit status {status}" in summary.read_text()


def test_gate_overrides_and_dry_run(project, monkeypatch, capsys):
    repo, fake, record = project
    monkeypatch.setattr(gate.os, "cpu_count", lambda: 1)
    assert gate_main(repo, fake, "--dry-run", "--cpu-affinity", "1") == 0
    out = capsys.readouterr().out
    assert "cpu_affinity '1' dropped" in out and "--cpu-affinity" not in out
    assert gate_main(repo, fake, "--dry-run", "--cpu-affinity", "0") == 0
    assert "--cpu-affinity 0" in capsys.readouterr().out
    assert gate_main(repo, fake, "--dry-run", "--factor", "1.5", "--rounds", "2", "--bench", "X", "main~1", "main") == 0
    out = capsys.readouterr().out
    assert "--factor 1.5" in out and "-a rounds=2" in out and "--bench X" in out and "overrides" in out
    assert not record.exists(), "a dry run starts no asv"


@pytest.mark.parametrize("argv, message", [
    (["--rounds", "0"], "argument --rounds: expected a whole number >= 1, got '0'"),
    (["--rounds", "two"], "argument --rounds: expected a whole number >= 1, got 'two'"),
    (["--repeat", "abc"], "argument --repeat: expected N (a whole number >= 1) or (min,max,seconds)"),
    (["--repeat", "0"], "argument --repeat: expected N"),  # asv's own default rule; the ratio benchmarks refuse it
    (["--repeat", "(5,2,1)"], "argument --repeat: expected N"),  # min above max
    (["--repeat", "(1.5,5,1)"], "argument --repeat: expected N"),  # asv takes whole min and max only
    (["--repeat", "(1,5)"], "argument --repeat: expected N"),
    (["--cpu-affinity", "abc"], "argument --cpu-affinity: expected CPU numbers and ranges"),
    (["--cpu-affinity", "3-1"], "whose range '3-1' runs downwards"),
    (["--cpu-affinity", "0,"], "argument --cpu-affinity: expected CPU numbers and ranges"),
    (["--factor", "0.5"], "argument --factor: expected a number > 1"),
    (["--factor", "1"], "argument --factor: expected a number > 1"),
    (["--factor", "nan"], "argument --factor: expected a number > 1"),
    (["--factor", "x"], "argument --factor: expected a number > 1"),
    (["--settings", "/nonexistent/gate.json"],
     "argument --settings: expected an existing settings file, got '/nonexistent/gate.json'"),
    (["--log", "/nonexistent/asv.log"], "argument --log: expected a file in an existing folder"),
    (["--summary", "/nonexistent/summary.md"], "argument --summary: expected a file in an existing folder"),
    (["--python", "/nonexistent/python"], "argument --python: expected a Python this user can run"),
    (["--python", "/"], "argument --python: expected a Python this user can run"),
    (["--python", ""], "argument --python: expected a Python this user can run (a path, or a name on PATH), got ''"),
])
def test_bad_overrides_are_one_line_usage_errors_before_anything_runs(project, capsys, argv, message):
    repo, fake, record = project
    with pytest.raises(SystemExit) as exc:
        gate_main(repo, fake, "--dry-run", *argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and not out
    assert not record.exists()


@pytest.mark.parametrize("repeat", ["3", "(5,50,0.5)", "1,5,10", "(2, 4, 1)", "(1,1,0)"])
def test_every_repeat_the_gate_takes_is_taken_by_asv_and_the_ratio_benchmarks(project, monkeypatch, capsys, repeat):
    from asv.commands.common_args import add_bench
    from benchmarks import bench_ratio

    repo, fake, _ = project
    assert gate_main(repo, fake, "--dry-run", "--repeat", repeat) == 0
    assert shlex.join(["-a", f"repeat={repeat}"]) in capsys.readouterr().out
    asv = argparse.ArgumentParser()
    add_bench(asv)
    assert asv.parse_args(["-a", f"repeat={repeat}"]).attribute["repeat"]
    monkeypatch.setenv(bench_ratio.RATIO_REPEAT_ENV, repeat)
    bench_ratio.repeat_rule()  # raises for a rule it does not take


@pytest.mark.parametrize("affinity, cpus", [("0", [0]), ("0,1", [0, 1]), ("0-3", [0, 1, 2, 3]), ("0-1,4", [0, 1, 4])])
def test_every_cpu_affinity_the_gate_takes_is_taken_by_asv(project, monkeypatch, capsys, affinity, cpus):
    import multiprocessing

    from asv.commands.common_args import add_bench

    repo, fake, _ = project
    monkeypatch.setattr(gate.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(multiprocessing, "cpu_count", lambda: 8)
    assert gate_main(repo, fake, "--dry-run", "--cpu-affinity", affinity) == 0
    assert f"--cpu-affinity {affinity}" in capsys.readouterr().out
    asv = argparse.ArgumentParser()
    add_bench(asv)
    assert asv.parse_args(["--cpu-affinity", affinity]).attribute["cpu_affinity"] == cpus == gate.affinity_cpus(affinity)


def test_a_named_settings_file_is_read(project, capsys, tmp_path):
    repo, fake, _ = project
    named = write_settings(tmp_path / "mine.json", {"default": {"factor": 1.4}})
    assert gate_main(repo, fake, "--dry-run", "--settings", str(named)) == 0
    out = capsys.readouterr().out
    assert f"settings from {named} [default]" in out and "--factor 1.4" in out


def test_the_same_commit_twice_is_a_warning_not_a_failure(project, capsys):
    repo, fake, _ = project
    assert gate_main(repo, fake, "--dry-run", "main", "HEAD") == 0  # a fresh clone on main
    out = capsys.readouterr().out
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert f"warning: main and HEAD are the same commit ({head[:8]}): asv compares it with itself, " \
           "so nothing can differ" in out
    assert gate_main(repo, fake, "--dry-run", "main~1", "main") == 0
    assert "warning" not in capsys.readouterr().out


def test_gate_unknown_commit_or_config_or_no_asv_is_unmeasured_without_asv(project, monkeypatch, capsys):
    repo, fake, record = project
    monkeypatch.setenv("FAKE_ASV_MISSING", "1")
    assert gate_main(repo, fake, "main~1", "main") == gate.UNMEASURED
    assert "asv is not installed" in capsys.readouterr().err
    monkeypatch.setenv("FAKE_ASV_MISSING", "0")
    record.unlink()
    assert gate_main(repo, fake, "no-such-commit", "main") == gate.UNMEASURED
    assert "unknown commit 'no-such-commit'" in capsys.readouterr().err
    assert cli.main(["gate", "--config", str(repo / "nope.json")]) == gate.UNMEASURED
    assert not record.exists()


def test_gate_runs_as_a_script_without_the_package(project, monkeypatch):
    # CI runs it from asv's private virtualenv, where neither int8nax nor MLX is installed.
    repo, fake, record = project
    env = {**os.environ, "FAKE_ASV_SCENARIO": "regression", "PYTHONPATH": ""}
    code = ("import sys; sys.modules['mlx'] = None; sys.modules['int8nax'] = None; "
            f"sys.argv = ['gate.py', '--config', {str(repo / 'asv.conf.json')!r}, '--machine', 'box', "
            f"'--python', {str(fake)!r}]; exec(open({str(ROOT / 'src/int8nax/commands/gate.py')!r}).read())")
    result = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "REGRESSION (exit 1)" in result.stdout


# --- the ratio benchmarks' clock --------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_ratio_sample_is_the_fastest_call_ratio_in_blocks_and_asv_reads_the_samples(monkeypatch):
    from benchmarks import bench_ratio

    clock = FakeClock()
    monkeypatch.setattr(bench_ratio.time, "perf_counter", clock)
    calls = bench_ratio.BLOCK_CALLS * 3
    # Preempted calls (30 s, 200 s) only add time: the ratio is 3 / 2 whatever they are.
    times = {"num": iter([3.0, 30.0] + [3.5] * (calls - 2)), "den": iter([200.0, 2.0] + [2.5] * (calls - 2))}
    order = []

    class Part:
        def __init__(self, name):
            self.name = name

        def run(self):
            order.append(self.name)
            clock.now += next(times[self.name])

    bench = bench_ratio.GemmRatio()
    bench.num, bench.den, bench.blocks = Part("num"), Part("den"), 3
    monkeypatch.setenv(bench_ratio.RATIO_REPEAT_ENV, "1")
    result = bench.track_int8nax_gemm_ratio((16, 512, 512))
    # the form asv's runner reads from a timing benchmark: it keeps median, spread and samples
    assert result["number"] == 1 and result["samples"] == [pytest.approx(1.5)]
    k = bench_ratio.BLOCK_CALLS
    assert order == (["num"] * k + ["den"] * k + ["den"] * k + ["num"] * k) + ["num"] * k + ["den"] * k
    assert bench_ratio.GemmRatio.unit == bench_ratio.LinearRatio.unit == "ratio"


@pytest.mark.parametrize("text,rule", [("", (5, 20, 0.5)), ("3", (3, 3, 0.0)), ("(5,50,0.5)", (5, 50, 0.5)),
                                       ("(2, 4, 1)", (2, 4, 1.0))])
def test_ratio_repeat_rule_reads_the_gates_setting(monkeypatch, text, rule):
    from benchmarks import bench_ratio

    monkeypatch.setenv(bench_ratio.RATIO_REPEAT_ENV, text)
    assert bench_ratio.repeat_rule() == rule


@pytest.mark.parametrize("text", ["0", "(5,2,1)", "x", "(1,2)"])
def test_a_bad_ratio_repeat_rule_names_the_variable(monkeypatch, text):
    from benchmarks import bench_ratio

    monkeypatch.setenv(bench_ratio.RATIO_REPEAT_ENV, text)
    with pytest.raises(ValueError, match=r"INT8NAX_RATIO_REPEAT: expected N \(a whole number >= 1\) or"):
        bench_ratio.repeat_rule()


def test_the_gate_hands_its_repeat_to_the_ratio_benchmarks():
    settings = gate.Settings(repeat="(7,9,0.25)")
    assert gate.benchmark_env(settings, {})["INT8NAX_RATIO_REPEAT"] == "(7,9,0.25)"


def test_ratio_benchmark_uses_this_profiles_reference_and_sizes_its_sample(monkeypatch):
    from benchmarks import bench_ratio, common

    monkeypatch.setenv("INT8NAX_BENCH_PROFILE", "cpu")
    monkeypatch.setenv("INT8NAX_BACKEND", "cpu")
    # The suite's per-process memos, restored afterwards: other tests rely on a fresh setup.
    monkeypatch.setattr(common, "_prepared", {})
    monkeypatch.setattr(bench_ratio, "_blocks", {})
    common.profile.cache_clear()
    try:
        bench = bench_ratio.GemmRatio()
        bench.setup((16, 512, 512))
        assert bench.den is common._prepared[("numpy-sgemm", (16, 512, 512))]
        assert bench.num is common._prepared[("int8nax-gemm", (16, 512, 512))]
        assert 1 <= bench.blocks <= bench_ratio.MAX_BLOCKS
        with pytest.raises(NotImplementedError, match="not in the 'cpu' profile"):
            bench_ratio.LinearRatio().setup((64, 4096, 4096))
    finally:
        common.profile.cache_clear()


# --- the calibration script's planted slowdown ------------------------------------------------


def test_planted_slowdown_multiplies_each_call_by_the_factor():
    import functools

    from int8nax.commands.gate_calibrate import sandbox

    clock = FakeClock()

    class Backend:
        def int8_matmul(self, a, b):
            clock.now += 1.0  # the call itself takes 1 s
            return "product"

        def w8a8_linear(self, x, w, s, bias):
            clock.now += 2.0
            return "linear"

    backend = Backend()
    evaluated = []
    namespace = {"get": lambda name: backend, "lru_cache": functools.lru_cache,
                 "mx": argparse.Namespace(eval=evaluated.append)}
    exec(sandbox.PLANT.format(factor=1.2), namespace)

    def tick():
        clock.now += 0.001  # the busy wait reads the clock
        return clock.now

    namespace["_planted_time"] = argparse.Namespace(perf_counter=tick)
    slowed = namespace["get"]("cpu")
    assert slowed is backend and namespace["get"]("cpu") is backend
    start = clock.now
    assert slowed.int8_matmul(1, 2) == "product"
    assert clock.now - start == pytest.approx(1.2, abs=0.005)
    start = clock.now
    assert slowed.w8a8_linear(1, 2, 3, None) == "linear"
    assert clock.now - start == pytest.approx(2.4, abs=0.005)
    assert evaluated == ["product", "linear"]  # the lazy output is computed before it is timed


def test_plant_target_still_has_the_hook():
    from int8nax.commands.gate_calibrate import sandbox

    text = (ROOT / sandbox.PLANT_TARGET).read_text()
    assert "def get(name" in text and "lru_cache" in text and "import mlx.core as mx" in text


# --- the PR workflow's verdict script reads the gate's verdict back -----------------------------


def load_asv_gate():
    import importlib.util

    spec = importlib.util.spec_from_file_location("ci_asv_gate_for_gate_tests", ROOT / ".github/scripts/asv_gate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("status", [gate.QUIET, gate.REGRESSION, gate.UNMEASURED])
def test_workflow_verdict_is_the_gates_own(status):
    asv_gate = load_asv_gate()
    outcome = gate.classify(*LOGS[{0: "quiet", 1: "regression", 2: "failed"}[status]])
    log = LOGS[{0: "quiet", 1: "regression", 2: "failed"}[status]][1] + "\n" + gate.verdict_line(outcome, 1.5)
    result = asv_gate.verdict(status, log)
    assert result.passed is (status == gate.QUIET)
    assert result.reason.startswith(outcome.reason)
    # A gate killed after printing a quiet verdict (status 137) does not pass.
    assert not asv_gate.verdict(137, LOGS["quiet"][1] + gate.verdict_line(gate.classify(*LOGS["quiet"]))).passed
    # The gate's own "could not measure" for an unknown commit (printed before asv ran).
    unknown = gate.verdict_line(gate.Outcome(gate.UNMEASURED, "unknown commit 'x' in /r"))
    assert asv_gate.verdict(2, unknown).reason == "unknown commit 'x' in /r"


# --- the calibration script's report, on made-up samples ----------------------------------------


def test_calibration_report_counts_false_alarms_and_detections_by_asvs_rule():
    import random

    from int8nax.commands.gate_calibrate.points import Point, Run, flagged
    from int8nax.commands.gate_calibrate.reporting import report

    rng = random.Random(14)

    def point(center, spread=0.005, n=40):
        samples = [center * (1 + rng.uniform(-spread, spread)) for _ in range(n)]
        median = sorted(samples)[n // 2]
        return Point(median, {"ci_99_a": min(samples), "ci_99_b": max(samples), "q_25": median,
                              "q_75": median, "repeat": n, "number": 1}, samples)

    name = "bench_ratio.GemmRatio.track_int8nax_gemm_ratio((16, 512, 512))"
    runs = []
    for head_center, kind, planted, status in [(1.0, "A/A", 1.0, 0), (1.09, "A/A", 1.0, 1),
                                               (1.2, "A/B 1.2", 1.2, 1), (1.2, "A/B 1.2", 1.2, 1)]:
        base, head = {name: point(1.0)}, {name: point(head_center)}
        run = Run(kind, planted, status, 90.0, (2.0, 2.0, 2.0), raw=(base, head))
        ratio, significant, _ = flagged(base[name], head[name], 1.08)
        run.points[name] = (ratio, significant)
        runs.append(run)
    args = argparse.Namespace(machine="box", argv=["--machine", "box"], factors=[1.05, 1.10, 1.15])
    settings = gate.Settings(factor=1.08, source="test")
    text, suggested = report(runs, args, settings, "gate ...", "2026-12-01 10:00 UTC", (1.0, 1.0, 1.0))
    # Per benchmark at the factor run (1.08): the 1.09x A/A run is a false alarm, both A/B runs detected.
    row = next(line for line in text.splitlines() if line.startswith(f"| `{name}`"))
    assert "| 1/2 |" in row and "2/2" in row
    sweep = {line.split("|")[1].strip().split()[0]: line for line in text.splitlines()
             if line.startswith("| 1.") and "|" in line[2:]}
    assert sweep["1.08"].endswith("| 1/2 | 2/2 |")
    assert sweep["1.10"].endswith("| 0/2 | 2/2 |")  # 1.10 would have been quiet on the same samples
    assert sweep["1.15"].endswith("| 0/2 | 2/2 |")
    assert suggested >= 1.09 * 1.03  # at least 3 % above the largest A/A ratio seen
    assert "| A/A | 2 | 1 | 1 | 0 |" in text
