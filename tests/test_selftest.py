"""`int8nax selftest`: the report an M5 owner pastes into an issue, exercised here on the CPU
backend; and its peer detection (cider only where it is the real thing)."""

from __future__ import annotations

import sys
import types

import mlx.core as mx
import numpy as np
import pytest

from int8nax import backends, cli, selftest
from int8nax.backends import cpu


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
    assert selftest.first_use_check(b.int8_matmul, b.quantize_activations, b.w8a8_linear) == []


def test_quick_timing_table(capsys):
    rc = cli.main(["selftest", "--backend", "cpu", "--quick", "--repeat", "1", "--warmup", "0"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "| 33, 513, 257 | " in out and "| n/a |" in out  # cider absent here
    assert "cider: not installed" in out


def test_unrelated_cider_is_not_a_peer(monkeypatch):
    monkeypatch.setitem(sys.modules, "cider", types.ModuleType("cider"))  # PyPI's `cider`
    fns, note = selftest.find_cider()
    assert fns == {} and "unrelated" in note


def test_real_cider_api_is_probed(monkeypatch):
    fake = types.ModuleType("cider")
    fake.__version__ = "0.7.0"
    fake.int8_matmul_int32 = lambda a, b: cpu.BACKEND.int8_matmul(a, b)  # [N, K] weights, exact
    fake.perchannel_linear = lambda x, w, s, bias=None: cpu.BACKEND.w8a8_linear(x, w, s, bias)
    monkeypatch.setitem(sys.modules, "cider", fake)
    fns, note = selftest.find_cider()
    assert set(fns) == {"cider int8_matmul_int32", "cider perchannel_linear"} and note == "cider 0.7.0"
    old_layout = types.ModuleType("cider")
    old_layout.int8_matmul_int32 = lambda a, b: cpu.BACKEND.int8_matmul(a, b.T)  # [K, N] era
    old_layout.w8a8_linear = lambda x, w, s: cpu.BACKEND.w8a8_linear(x, w.T, s, None)
    monkeypatch.setitem(sys.modules, "cider", old_layout)
    fns, note = selftest.find_cider()
    assert fns == {}
    assert "int8_matmul_int32 does not take [N, K] weights" in note
    assert "w8a8_linear does not take [N, K] weights" in note
