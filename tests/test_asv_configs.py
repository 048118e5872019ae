"""The three asv configurations (CPU, CUDA, M5) agree with each other and with pyproject.toml:
same suite, directories, build and install steps and regression rules; the same mlx pin
everywhere, and the device packages pinned to it; the cider commit the adapter knows."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from int8nax.bench.peers import cider

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("asv.conf.json", "asv.cuda.conf.json", "asv.m5.conf.json")
SHARED = ("version", "project", "project_url", "repo", "branches", "dvcs", "environment_type",
          "build_command", "install_command", "uninstall_command", "benchmark_dir", "env_dir",
          "results_dir", "html_dir", "regressions_thresholds", "regressions_first_commits")


def load_jsonc(path: Path) -> dict:
    """asv's JSONC: // comments on their own lines (none of ours sits inside a string)."""
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("//"))
    return json.loads(text)


@pytest.fixture(scope="module")
def configs() -> dict[str, dict]:
    return {name: load_jsonc(ROOT / name) for name in CONFIGS}


@pytest.fixture(scope="module")
def mlx_pin() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (pin,) = [re.fullmatch(r"mlx==([\d.]+)", d).group(1) for d in deps if d.startswith("mlx")]
    return pin


def test_shared_settings_are_identical(configs):
    base = configs["asv.conf.json"]
    for name, conf in configs.items():
        for key in SHARED:
            assert conf.get(key) == base.get(key), f"{name}: {key} differs from asv.conf.json"


def test_mlx_and_its_device_packages_carry_pyprojects_pin(configs, mlx_pin):
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert all(f"=={mlx_pin}" in d for d in extras["cpu"] + extras["cuda"] if d.startswith("mlx"))
    for name, conf in configs.items():
        req = conf["matrix"]["req"]
        assert req["mlx"] == [mlx_pin], name
        for device in ("mlx-cpu", "mlx-cuda-13"):
            if device in req:
                assert [v for v in req[device] if v is not None] == [mlx_pin], f"{name}: {device}"


def test_the_cpu_environment_installs_what_the_cpu_extra_brings(configs):
    # Install steps use --no-deps, so a package the `cpu` extra adds must be in the matrix too.
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    req = configs["asv.conf.json"]["matrix"]["req"]
    for dep in extras["cpu"]:
        name = re.match(r"[A-Za-z0-9_.\[\]-]+", dep).group(0).split("[")[0]
        package = "mlx-cpu" if name == "mlx" else name  # mlx[cpu] is how the extra pulls mlx-cpu
        assert package in req, f"asv.conf.json's matrix lacks {package} (from the cpu extra: {dep})"


def test_every_dependency_of_int8nax_is_installed_with_its_pin(configs, mlx_pin):
    # The wheel is installed with --no-deps: each of pyproject's dependencies comes from the matrix
    # (mlx, numpy) or from an install step carrying the same pin (nanobind).
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for name, conf in configs.items():
        steps = " ".join(conf["install_command"])
        for dep in deps:
            package = re.match(r"[A-Za-z0-9_.-]+", dep).group(0)
            pinned = "==" in dep
            assert package in conf["matrix"]["req"] or (pinned and f"--no-deps {dep}" in steps), f"{name}: {dep}"


def test_the_m5_config_builds_the_cider_commit_the_adapter_expects(configs):
    req = configs["asv.m5.conf.json"]["matrix"]["req"]
    (spec,) = [k for k in req if "cider" in k]
    assert spec.endswith("@" + cider.PINNED_SHA)
