"""`int8nax selftest`: the report an M5 owner pastes into an issue, exercised here on the CPU
backend; and its peer detection (cider only where it is the real thing)."""

from __future__ import annotations

import sys

import mlx.core as mx
import numpy as np
import pytest

from int8nax import backends, exactness
from int8nax.commands import cli, selftest
from int8nax._checks import MAX_K
from int8nax.backends.cpu import backend as cpu

from fakes import fake_cider, pypi_cider


def test_selftest_on_cpu_reports_all_exact(capsys):
    rc = cli.main(["selftest", "--backend", "cpu", "--sizes", "1,7,33", "--no-timing"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "under test: **cpu**" in out and "**ALL EXACT**" in out
    assert "| int8_matmul: bit-exact vs exact int product | 27 | 0 | - |" in out
    assert "| quantize_activations: bit-exact vs int8nax.quant | 9 | 0 | - |" in out
    assert "| w8a8_linear: within 1 ulp of float64 model | 27 | 0 | - |" in out
    assert "### Timings" not in out


def test_selftest_without_nax_says_why(capsys):
    probe = backends.probe("metal")
    if probe.available:
        pytest.skip("NAX is available here")
    rc = cli.main(["selftest", "--no-timing"])
    out = capsys.readouterr().out
    assert rc == 2
    assert f"NAX unavailable here: {probe.reason}" in out and "--backend cpu" in out


def test_selftest_reports_a_wrong_backend(monkeypatch, capsys):
    exact = cpu.BACKEND.int8_matmul

    def drop_last_column(a, b):
        out = np.array(exact(a, b))
        out[:, -1] = 0
        return mx.array(out)

    monkeypatch.setattr(cpu.BACKEND, "int8_matmul", drop_last_column)
    rc = cli.main(["selftest", "--backend", "cpu", "--sizes", "7,33", "--no-timing"])
    out = capsys.readouterr().out
    assert rc == 1 and "CHECKS FAILED" in out
    assert "| int8_matmul: bit-exact vs exact int product | 8 | 8 | (7, 7, 7): 7 of 49 wrong" in out


def test_first_use_check_passes_on_cpu():
    b = cpu.BACKEND
    assert exactness.first_use_check(b.int8_matmul, b.quantize_activations, b.w8a8_linear) == []


def test_quick_timing_table(capsys):
    rc = cli.main(["selftest", "--backend", "cpu", "--quick", "--repeat", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "| 33, 513, 257 | " in out and "| n/a |" in out  # cider absent here
    assert "cider int8_matmul_int32: n/a at (33, 513, 257): cider is not installed" in out


def test_unrelated_cider_is_not_timed(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cider", pypi_cider())
    rc = cli.main(["selftest", "--backend", "cpu", "--quick", "--repeat", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert rc == 0 and "is not Mininglamp-AI/cider" in out


@pytest.mark.parametrize("layout,linear_name", [("nk", "perchannel_linear"), ("kn", "w8a8_linear")])
def test_cider_of_either_generation_is_timed(monkeypatch, capsys, layout, linear_name):
    pkg, ops = fake_cider(layout=layout, linear_name=linear_name)
    monkeypatch.setitem(sys.modules, "cider", pkg)
    monkeypatch.setitem(sys.modules, "cider.ops", ops)
    rc = cli.main(["selftest", "--backend", "cpu", "--quick", "--repeat", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| 33, 513, 257 |"))
    assert rc == 0 and "n/a" not in row.split("|")[2] and "n/a" not in row.split("|")[4]
    assert linear_name in out  # the note says which cider ran


@pytest.mark.parametrize("argv,message", [
    (["--backend", "bogus"], "argument --backend: unknown backend 'bogus'"),
    (["--sizes", "abc"], "argument --sizes: expected comma-separated positive whole numbers, got 'abc'"),
    (["--repeat", "0"], "argument --repeat: expected a whole number >= 1, got '0'"),
    (["--sizes", "1,200000"], f"argument --sizes: expected sizes <= {MAX_K} (each is also a K, and int8_matmul "
                              f"takes K <= {MAX_K}), got '1,200000'"),
    (["--sizes", str(MAX_K + 1)], f"argument --sizes: expected sizes <= {MAX_K}"),
])
def test_bad_options_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        cli.main(["selftest", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "Traceback" not in err


def test_sizes_take_the_k_limit_itself():
    assert cli.build_parser().parse_args(["selftest", "--sizes", f"1,{MAX_K}"]).sizes == (1, MAX_K)


def _no_grid(*_args, **_kwargs):
    raise AssertionError("the exactness grid ran")


def test_a_grid_larger_than_memory_is_refused_before_it_runs(monkeypatch, capsys):
    # MLX ends the process when an allocation fails: the grid must not start.
    monkeypatch.setattr(selftest, "physical_memory", lambda: 2**30)
    monkeypatch.setattr(selftest, "exactness_grid", _no_grid)
    rc = cli.main(["selftest", "--backend", "cpu", "--sizes", "1,7,8000", "--no-timing"])
    out, err = capsys.readouterr()
    assert rc == 2 and not out
    assert err.strip() == ("int8nax selftest: the check at (M, K, N) = (8000, 8000, 8000) needs about 4 GiB "
                           "and this machine has 1 GiB: use smaller --sizes")


def test_an_allocation_failure_is_one_line(monkeypatch, capsys):
    def allocate_too_much(*_args, **_kwargs):
        return np.empty((2**60,), dtype=np.int8)  # numpy's _ArrayMemoryError, as at --sizes 200000

    monkeypatch.setattr(selftest, "physical_memory", lambda: None)
    monkeypatch.setattr(selftest, "exactness_grid", allocate_too_much)
    rc = cli.main(["selftest", "--backend", "cpu", "--sizes", "1,7", "--no-timing", "--quiet"])
    out, err = capsys.readouterr()
    assert rc == 2 and not out and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("int8nax selftest: out of memory (Unable to allocate 1.00 EiB") and "--sizes" in err


def test_json_report_has_the_same_facts(capsys):
    import json

    rc = cli.main(["selftest", "--backend", "cpu", "--sizes", "1,7", "--no-timing", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and report["exit"] == 0 and report["under_test"] == "cpu"
    assert report["mlx"] == mx.__version__ and set(report["backends"]) == set(backends.NAMES)
    gemm = report["exactness"]["checks"][0]
    assert gemm["what"].startswith("int8_matmul") and gemm["shapes"] == 8 and gemm["failed"] == 0


def test_json_report_when_the_backend_cannot_run(capsys):
    import json

    rc = cli.main(["selftest", "--backend", "metal", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 2 and report["exit"] == 2 and "Metal" in report["unavailable"]


class _FakeVariantOps:
    """A Metal kernel variant whose kernels are the CPU backend's (or a broken GEMM)."""

    def __init__(self, kernels, variant, gpu, broken=False):
        b = cpu.BACKEND
        self.variant = variant
        self.int8_matmul = (lambda a, w: b.int8_matmul(a, w) + 1) if broken else b.int8_matmul
        self.quantize_activations, self.w8a8_linear = b.quantize_activations, b.w8a8_linear

    def compile_report(self):
        return {"int8nax_int8_gemm (small tile)": None, "int8nax_quantize_rows": None}

    def self_test(self):
        return exactness.first_use_check(self.int8_matmul, self.quantize_activations, self.w8a8_linear)


def fake_m5_backend(broken_load=None):
    from int8nax import nax_emulator
    from int8nax.backends.metal import backend as metal, selection as metal_selection

    return metal.MetalBackend(
        machine=lambda: (True, "applegpu_g17s", "26.4"),
        ops_factory=lambda k, v, g: _FakeVariantOps(k, v, g, broken=v.load == broken_load),
        layout_probe=lambda kernels, relaxed: metal_selection.layout_result(nax_emulator.probe_dump(nax_emulator.mlx_float_layout())))


@pytest.fixture
def fresh_registry():
    backends.get.cache_clear()  # the registry must hand out the fake backend, and forget it after
    yield
    backends.get.cache_clear()


@pytest.mark.parametrize("broken_load", [None, "mlx_layout"])
def test_metal_report_lists_probe_choice_and_every_variant(monkeypatch, capsys, broken_load, fresh_registry):
    import json

    from int8nax.backends.metal import backend as metal, source as metal_source

    monkeypatch.setattr(metal, "BACKEND", fake_m5_backend(broken_load))
    monkeypatch.setattr(backends, "probe", lambda name: metal.BACKEND.probe() if name == "metal"
                        else backends.Probe(True, "fake"))
    with pytest.warns(RuntimeWarning) if broken_load else _no_warning():
        rc = cli.main(["selftest", "--backend", "metal", "--sizes", "1,7", "--no-timing", "--json"])
    report = json.loads(capsys.readouterr().out)
    section = report["metal"]
    assert section["hardware"]["available"] and section["layout"]["matches_mlx"]
    assert section["layout"]["fingerprint"].startswith("sha256:")
    names = [v["name"] for v in section["variants"]]
    assert names == [v.name for v in metal_source.variants()] and len(names) == 4
    chosen = section["selection"]["variant"]
    assert section["selection"]["probe"] == "matches"
    assert section["selection"]["decided_by"] == ("probe and self-test" if broken_load is None else "self-test")
    if broken_load is None:
        assert rc == 0 and chosen == "mlx_layout/relaxed_precision=true"
        assert all(t["failed"] == 0 for v in section["variants"] for t in v["exactness"])
    else:
        # the fast path fails its self-test: the generic path serves, and the grid shows why
        assert rc == 0 and chosen == "generic/relaxed_precision=true"
        assert "mlx_layout/relaxed_precision=true" in section["selection"]["self_tests"]
        bad = {v["name"]: v["exactness"][0]["failed"] for v in section["variants"]}
        assert bad["mlx_layout/relaxed_precision=true"] == 8 and bad["generic/relaxed_precision=true"] == 0
    rc = cli.main(["selftest", "--backend", "metal", "--sizes", "1,7", "--no-timing"])
    md = capsys.readouterr().out
    assert "### Metal NAX" in md and f"variant serving this process: **{chosen}** (layout probe matches" in md
    assert md.count("| mlx_layout/") == 2 and md.count("| generic/") == 2


class _no_warning:
    def __enter__(self):
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("error", RuntimeWarning)

    def __exit__(self, *exc):
        return self._ctx.__exit__(*exc)


def test_the_grid_follows_the_backend_and_progress_goes_to_stderr(capsys, monkeypatch):
    from int8nax.commands import selftest

    assert selftest.choose_grid("auto", "cpu")[0].name == "cpu"
    assert selftest.choose_grid("auto", "cuda")[0].name == "full"
    assert selftest.choose_grid("full", "cpu") == (selftest.GRIDS["full"], "--grid full")
    assert max(selftest.GRIDS["cpu"].sizes) < max(selftest.GRIDS["full"].sizes)
    # the CPU grid with small sizes: the report names the grid, stderr shows where it is
    rc = cli.main(["selftest", "--backend", "cpu", "--sizes", "1,7", "--no-timing"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert "- grid: **cpu** (the CPU backend is under test; --grid full runs the GPU grid): sizes 1, 7 (--sizes)" in out
    assert err.startswith("selftest: backend cpu, grid cpu") and "selftest: exactness grid ..." in err
    rc = cli.main(["selftest", "--backend", "cpu", "--sizes", "1,7", "--no-timing", "--quiet"])
    assert rc == 0 and capsys.readouterr().err == ""


def test_a_timed_contender_over_the_budget_is_left_out_with_its_estimate(monkeypatch):
    from int8nax.commands import selftest
    from int8nax.bench import estimate

    real = estimate.expected_seconds
    monkeypatch.setattr(estimate, "expected_seconds",
                        lambda name, shape, backend=None: estimate.Estimate(9.0, (8, 64, 48), 0.03, 0.1)
                        if name == "mlx-fp16" else real(name, shape, backend))
    lines, notes = selftest.timing_table("cpu", [(8, 64, 48)], warmup=0, repeat=1, budget=1.0)
    row = lines[2].split(" | ")
    assert "ms (" in row[1] and row[-1].strip(" |") == "n/a"
    assert any(n.startswith("mx.matmul fp16 skipped: n/a at 8x64x48 (~9 s a call") and "--all" in n for n in notes)
    lines, _ = selftest.timing_table("cpu", [(8, 64, 48)], warmup=0, repeat=1, budget=None)
    assert "ms (" in lines[2].split(" | ")[-1]


def test_a_layout_file_that_cannot_be_written_is_a_usage_error_before_anything_runs(capsys, tmp_path):
    for path, words in ((tmp_path / "no-folder" / "layout.npy", "expected a file in an existing folder"),
                        (tmp_path, "expected a file to write")):
        with pytest.raises(SystemExit) as exc:
            cli.main(["selftest", "--layout-out", str(path)])
        out, err = capsys.readouterr()
        assert exc.value.code == 2 and f"argument --layout-out: {words}" in err and not out
        assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv, named", [
    (["-v", "-q"], ["--verbose", "--quiet"]),
    (["--quick", "--grid", "full"], ["--quick", "--grid"]),
    (["--all", "--budget", "2"], ["--all", "--budget"]),
    (["--no-timing", "--repeat", "3"], ["--no-timing", "--repeat"]),
    (["--no-timing", "--warmup", "0"], ["--no-timing", "--warmup"]),
    (["--no-timing", "--budget", "2"], ["--no-timing", "--budget"]),
    (["--no-timing", "--all"], ["--no-timing", "--all"]),
])
def test_options_that_contradict_each_other_are_one_usage_line(monkeypatch, capsys, argv, named):
    """Neither is silently dropped: exit 2 and one line naming both, before the grid runs."""
    monkeypatch.setattr(selftest, "run_selftest", _no_grid)
    try:
        rc = cli.main(["selftest", "--backend", "cpu", *argv])
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert all(option in err for option in named), err


def test_timing_options_keep_their_defaults_and_take_a_given_value(monkeypatch):
    seen = {}
    monkeypatch.setattr(selftest, "run_selftest", lambda *a, **k: seen.update(warmup=a[3], repeat=a[4], **k) or 0)
    assert cli.main(["selftest", "--backend", "cpu", "--quick", "-q"]) == 0
    assert (seen["warmup"], seen["repeat"], seen["budget"]) == (5, 20, 1.0)
    assert cli.main(["selftest", "--backend", "cpu", "--quick", "-q", "--repeat", "3", "--all"]) == 0
    assert (seen["warmup"], seen["repeat"], seen["budget"]) == (5, 3, None)
    assert cli.main(["selftest", "--backend", "cpu", "--grid", "quick", "--no-timing", "-v"]) == 0
