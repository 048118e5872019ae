"""`int8nax info`: a diagnostic, so exit status 0 whatever it finds; but its first line names no
backend that cannot run, says where a bad setting came from, and the next line says when API
calls without an explicit backend= will fail."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import int8nax
from int8nax import backends
from int8nax.commands import cli

WARNING = "warning: every API call without an explicit backend= fails until this is fixed"


def test_a_usable_backend_is_named_without_a_warning(monkeypatch, capsys):
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    picked, why = backends.choose(None)
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"int8nax backend: {picked}  ({why})" and "warning" not in out


def test_a_bad_backend_variable_is_named_as_the_cause(monkeypatch, capsys):
    monkeypatch.setenv(backends.ENV_VAR, "gpu")
    assert cli.main(["info"]) == 0
    first, second = capsys.readouterr().out.splitlines()[:2]
    assert first.startswith("int8nax backend: none  (INT8NAX_BACKEND=gpu: unknown backend 'gpu'; expected one of ")
    assert second == WARNING
    with pytest.raises(ValueError, match="INT8NAX_BACKEND"):  # what the warning announces
        int8nax.int8_matmul(np.zeros((1, 1), np.int8), np.zeros((1, 1), np.int8))


def test_a_fallback_that_cannot_run_is_not_named_as_the_backend(monkeypatch, capsys):
    # Auto mode falls back to the CPU backend without probing it (backends._auto_name); here
    # its probe says no, as with INT8NAX_CPU_GEMM=fast.
    real = int8nax.info()
    refused = "INT8NAX_CPU_GEMM: unknown CPU GEMM engine 'fast'"
    report = {**real, "backend": "cpu", "reason": "MLX's default device is Device(cpu, 0)",
              "backends": {**real["backends"], "cpu": {"available": False, "reason": refused}}}
    monkeypatch.setattr(int8nax, "info", lambda: report)
    assert cli.main(["info"]) == 0
    first, second = capsys.readouterr().out.splitlines()[:2]
    assert first == ("int8nax backend: none  (cpu would be picked (MLX's default device is Device(cpu, 0)), "
                     f"but cpu cannot run here: {refused})")
    assert second == WARNING


def test_a_bad_cpu_engine_variable_end_to_end(monkeypatch):
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    if backends.choose(None)[0] != "cpu":
        pytest.skip("auto mode picks a GPU backend here, not the CPU fallback")
    env = {k: v for k, v in os.environ.items() if k != backends.ENV_VAR}
    result = subprocess.run([sys.executable, "-m", "int8nax", "info"], env={**env, "INT8NAX_CPU_GEMM": "fast"},
                            capture_output=True, text=True, timeout=300)
    lines = result.stdout.splitlines()
    assert result.returncode == 0, result.stderr
    assert lines[0].startswith("int8nax backend: none  (cpu would be picked") and "INT8NAX_CPU_GEMM" in lines[0]
    assert lines[1] == WARNING


def test_version_and_python_dash_m():
    # `int8nax --version` says the package's version; `python -m int8nax` is the int8nax command.
    import subprocess
    import sys

    import int8nax

    out = subprocess.run([sys.executable, "-m", "int8nax", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == f"int8nax {int8nax.__version__}"
    bad = subprocess.run([sys.executable, "-m", "int8nax", "nonsense"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "nonsense" in bad.stderr


def test_no_command_prints_the_usage_with_every_command(capsys):
    # a missing subcommand is a usage error (exit 2, as argparse's own), shown as the help
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: int8nax")
    commands = cli.build_parser()._subparsers._group_actions[0].choices
    assert len(commands) >= 6 and all(f"\n    {name} " in err for name in commands)
