"""Backend selection: auto follows MLX's device, explicit requests run or explain themselves."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import int8nax
from int8nax import backends


def test_info_reports_every_backend():
    report = int8nax.info()
    assert set(report["backends"]) == set(backends.NAMES)
    assert report["backend"] in backends.NAMES
    assert report["reason"]
    for entry in report["backends"].values():
        assert isinstance(entry["available"], bool) and entry["reason"]


def test_cpu_default_device_picks_cpu(monkeypatch):
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    with mx.stream(mx.cpu):
        old = mx.default_device()
        mx.set_default_device(mx.cpu)
        try:
            name, why = backends.choose(None)
        finally:
            mx.set_default_device(old)
    assert name == "cpu" and "cpu" in why.lower()


def test_env_var_override(monkeypatch):
    monkeypatch.setenv(backends.ENV_VAR, "cpu")
    assert backends.choose(None) == ("cpu", f"requested by {backends.ENV_VAR}=cpu")
    monkeypatch.setenv(backends.ENV_VAR, "bogus")
    with pytest.raises(ValueError, match="unknown backend 'bogus'"):
        int8nax.int8_matmul(np.zeros((1, 1), np.int8), np.zeros((1, 1), np.int8))


@pytest.mark.parametrize("name", [n for n in backends.NAMES if n != "cpu"])
def test_unavailable_backend_says_why(name):
    probe = backends.probe(name)
    if probe.available:
        pytest.skip(f"{name} is available on this machine")
    with pytest.raises(RuntimeError) as info:
        int8nax.int8_matmul(np.zeros((1, 1), np.int8), np.zeros((1, 1), np.int8), backend=name)
    assert name in str(info.value) and probe.reason in str(info.value)


def test_alias_nax_is_metal():
    assert backends.canonical("NAX") == "metal"


def test_the_cuda_probe_is_asked_once_per_process(monkeypatch):
    pytest.importorskip("mlx.core")
    import types

    from int8nax.backends.cuda import backend as cuda

    asked = []
    fake = types.SimpleNamespace(is_available=lambda: asked.append(1) or False)
    monkeypatch.setattr(cuda.mx, "cuda", fake, raising=False)
    backend = cuda.CUDABackend()
    first = backend.probe()
    assert not first.available and "no CUDA device" in first.reason
    assert backend.probe() is first and len(asked) == 1


def test_the_registry_imports_no_input_checks():
    # one direction only: int8nax._checks asks the registry (its ENV_VAR, canonical, env_set);
    # the registry imports nothing of the API's checks (no import cycle, one name for the variable)
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(backends))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any("_checks" in m for m in imported) and "ENV_VAR" in vars(backends)
    from int8nax import _checks

    assert _checks.ENV_VAR is backends.ENV_VAR and _checks.backend_env_set is backends.env_set


def test_resolve_is_what_choose_names(monkeypatch):
    # resolve() skips composing choose()'s reason on the common call (no argument, no env):
    # the same backend either way, with the environment variable set or not.
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    assert backends.resolve(None) is backends.get(backends.choose(None)[0])
    monkeypatch.setattr(backends, "_GPU_ORDER", ())  # auto with no GPU backend to try
    backends.get.cache_clear()  # resolve's kept answers rest on the registry's: forget them
    assert backends.resolve(None) is backends.get(backends.choose(None)[0])
    monkeypatch.setenv(backends.ENV_VAR, "cpu")
    assert backends.resolve(None) is backends.get("cpu")
    monkeypatch.setenv(backends.ENV_VAR, "bogus")
    with pytest.raises(ValueError, match="unknown backend 'bogus'"):
        backends.resolve(None)


class _Registry:
    """The registry with a fake GPU backend "cuda" that can run, MLX's default device switched by
    hand (`device`), and the number of times auto mode asked the probes (`asked`)."""

    def __init__(self, monkeypatch):
        import types

        from int8nax.backends.base import Backend, Probe

        self.gpu_backend = type("FakeGPU", (Backend,), {"name": "cuda"})()
        self.device = mx.cpu
        self.asked = 0
        real_get, real_probe, real_auto = backends.get, backends.probe, backends._auto_name

        def auto_name():
            self.asked += 1
            return real_auto()

        monkeypatch.setattr(backends, "mx", types.SimpleNamespace(
            default_device=lambda: self.device, gpu=mx.gpu, DeviceType=mx.DeviceType, __version__=mx.__version__))
        monkeypatch.setattr(backends, "_GPU_ORDER", ("cuda",))
        monkeypatch.setattr(backends, "probe", lambda name: Probe(True, "fake") if name == "cuda" else real_probe(name))
        monkeypatch.setattr(backends, "get", lambda name: self.gpu_backend if name == "cuda" else real_get(name))
        monkeypatch.setattr(backends, "_auto_name", auto_name)
        monkeypatch.delenv(backends.ENV_VAR, raising=False)
        self.clear = real_get.cache_clear
        self.clear()
        monkeypatch.setattr(backends, "_RESOLVED", {})  # and an empty one again after the test


@pytest.fixture
def registry(monkeypatch):
    return _Registry(monkeypatch)


def test_resolve_keeps_auto_modes_answer_per_kind_of_default_device(registry):
    cpu = backends.get("cpu")
    assert backends.resolve(None) is cpu and registry.asked == 1
    assert backends.resolve(None) is cpu and registry.asked == 1  # kept
    registry.device = mx.gpu  # MLX's default device is read on every call
    assert backends.resolve(None) is registry.gpu_backend and registry.asked == 2
    assert backends.resolve(None) is registry.gpu_backend and registry.asked == 2
    registry.device = mx.cpu
    assert backends.resolve(None) is cpu and registry.asked == 2
    registry.device = "gpu"  # a device object that is no mx.Device (a stand-in): compared with ==
    assert backends.resolve(None) is cpu
    registry.device = mx.gpu
    registry.clear()  # get's (or probe's) cache cleared: the kept answers go with it
    assert backends.resolve(None) is registry.gpu_backend and registry.asked == 3


def test_resolve_keeps_explicit_answers_and_asks_again_for_auto_and_refusals(registry, monkeypatch):
    cpu = backends.get("cpu")
    monkeypatch.setenv(backends.ENV_VAR, "cpu")
    registry.device = mx.gpu
    assert backends.resolve(None) is cpu and backends.resolve("CPU") is cpu and registry.asked == 0
    monkeypatch.setenv(backends.ENV_VAR, "auto")  # auto by name follows the device as well
    assert backends.resolve(None) is registry.gpu_backend
    registry.device = mx.cpu
    assert backends.resolve(None) is cpu and backends.resolve("auto") is cpu
    registry.device = mx.gpu
    assert backends.resolve("auto") is registry.gpu_backend
    monkeypatch.setenv(backends.ENV_VAR, "metal")  # cannot run: raises on every call, naming the variable
    for _ in range(2):
        with pytest.raises(RuntimeError, match=rf"requested \({backends.ENV_VAR}=metal\) but cannot run"):
            backends.resolve(None)
        with pytest.raises(RuntimeError, match=r"requested \(argument\) but cannot run"):
            backends.resolve("metal")
    monkeypatch.setenv(backends.ENV_VAR, "bogus")
    with pytest.raises(ValueError, match=rf"{backends.ENV_VAR}=bogus: unknown backend 'bogus'"):
        backends.resolve(None)
    with pytest.raises(TypeError, match="expected a backend name"):
        backends.resolve(3)
    monkeypatch.delenv(backends.ENV_VAR)
    assert backends.resolve(None) is registry.gpu_backend


def test_resolve_keeps_a_bounded_number_of_answers(registry):
    for i in range(backends._RESOLVED_LIMIT * 2):
        assert backends.resolve("cpu" + " " * i) is backends.get("cpu")
        assert len(backends._RESOLVED) <= backends._RESOLVED_LIMIT
