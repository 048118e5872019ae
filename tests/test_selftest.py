"""`int8nax selftest`: the report an M5 owner pastes into an issue, exercised here on the CPU
backend; and its peer detection (cider only where it is the real thing)."""

from __future__ import annotations

import sys

import mlx.core as mx
import numpy as np
import pytest

from int8nax import backends, cli, exactness, selftest
from int8nax.backends import cpu

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
])
def test_bad_options_are_usage_errors(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        cli.main(["selftest", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "Traceback" not in err


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
