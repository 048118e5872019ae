"""Shared fixtures: every test that takes `backend` runs once per backend, skipped with the
backend's own reason where it cannot run on this machine; on the CPU backend once per CPU
GEMM engine (cpu-onnx, cpu-numpy), each forced for the test, skipped with its reason where
it cannot run here."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from int8nax import backends


def _backend_params():
    from int8nax.backends.cpu import engines as cpu_engines

    params = []
    for name in backends.NAMES:
        if name == "cpu":
            params += [pytest.param(("cpu", e), id=f"cpu-{e}") for e in cpu_engines.ENGINE_NAMES]
        else:
            params.append(pytest.param((name, None), id=name))
    return params


@pytest.fixture(params=_backend_params())
def backend(request):
    name, engine = request.param
    probe = backends.probe(name)
    if not probe.available:
        pytest.skip(f"backend {name} unavailable here: {probe.reason}")
    if engine is None:
        yield name
        return
    from int8nax.backends.cpu import engines as cpu_engines

    status = cpu_engines.engine_status(engine)
    if status.engine is None:
        # Under CI=true an engine whose library is missing (the `cpu` extra not installed) is a
        # failure, not a skip; one that is installed but fails its exactness check here skips.
        if status.missing and os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CPU GEMM engine {engine} is not installed, and CI=true requires it: {status.reason}")
        pytest.skip(f"CPU GEMM engine {engine} unavailable here: {status.reason}")
    with cpu_engines.using(engine):
        yield name


@pytest.fixture(autouse=True)
def mlx_default_device_unchanged():
    """Fails the test that leaves MLX's default device changed, and puts it back. The default
    device is one per process (only the default streams are per thread), and MLX's StreamContext
    saves and restores it: `with mx.stream(mx.cpu)` entered in several threads at once can leave
    the CPU as the default. On the H200 that happened in a threads test, and every later GPU test of
    the run then failed with "[custom_kernel] Only supports the GPU" instead of at the cause."""
    import mlx.core as mx

    before = mx.default_device()
    yield
    after = mx.default_device()
    if after != before:
        mx.set_default_device(before)
        pytest.fail(f"this test left MLX's default device {after} (it was {before}); put back")


@pytest.fixture
def rng(request):
    # A fresh stream per test, seeded by the test's name through a stable digest: Python's
    # hash() of a str changes from process to process (PYTHONHASHSEED), which made failures
    # impossible to reproduce.
    digest = hashlib.sha256(request.node.nodeid.encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def random_int8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def same_on_cpu_threads(call, inputs, want, rounds: int) -> list:
    """Run call(inputs[i]) `rounds` times on thread i, on MLX's CPU stream, for every i at once;
    returns the failures: i where a result differed from want[i], or the exception raised.
    The CPU is made the default once, here, around all the threads: MLX's default device is
    one per process, and a `with mx.stream(...)` in each thread races on it (see
    mlx_default_device_unchanged)."""
    import threading

    import mlx.core as mx

    errors = []

    def worker(i):
        try:
            for _ in range(rounds):
                if not np.array_equal(np.array(call(inputs[i])), want[i]):
                    errors.append(i)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(inputs))]
    with mx.stream(mx.cpu):
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return errors


ROUNDS_TO_INF = {"float16": 65520.0, "bfloat16": (2 - 2.0 ** -8) * 2.0 ** 127, "float32": (2 - 2.0 ** -24) * 2.0 ** 127}
"""The magnitude from which each output type's rounding gives inf."""


def within_one_ulp(y, ref, name):
    """Where y (an MLX array of float type `name`) is within 1 ulp of the float64 model `ref`, or inf
    exactly where the model rounds to inf, or NaN where it is NaN."""
    from int8nax.reference import to_numpy, ulp

    got = to_numpy(y, np.float64)
    with np.errstate(invalid="ignore"):
        close = np.abs(got - ref) <= np.maximum(ulp(ref, name), ulp(got, name))
        overflow = (np.abs(ref) >= ROUNDS_TO_INF[name]) & (got == np.sign(ref) * np.inf)
    return close | overflow | (np.isnan(ref) & np.isnan(got))


@pytest.fixture
def gemv_default(monkeypatch):
    """The decode GEMV as W8A8's and int8_matmul's default at M <= 16 (cuda_choice.GEMV_DEFAULT and
    GEMV_RAW_DEFAULT, set here too so that the tests of the rule hold whatever the module's defaults)."""
    from int8nax.backends.cuda import backend as cuda, choice as cuda_choice

    monkeypatch.setattr(cuda_choice, "GEMV_DEFAULT", True)
    monkeypatch.setattr(cuda_choice, "GEMV_RAW_DEFAULT", True)
    cuda.clear_caches()
    yield
    cuda.clear_caches()


@pytest.fixture(params=[False, True], ids=["apart", "inside"])
def gemv_inside(request, monkeypatch):
    """W8A8's GEMV rule both ways (cuda_plans.gemv.GEMV_QUANTIZE_INSIDE): the quantization kernel
    first (the default), or the GEMV quantizing x itself where x fits; the value is the test's."""
    from int8nax.backends.cuda import backend as cuda
    from int8nax.backends.cuda.plans import gemv as gemv_rule

    monkeypatch.setattr(gemv_rule, "GEMV_QUANTIZE_INSIDE", request.param)
    cuda.clear_caches()
    yield request.param
    cuda.clear_caches()


@pytest.fixture
def tapes_module():
    """The tape extension (int8nax.backends.tape), built here once per machine; skipped with the
    reason where it cannot be, a failure under CI=true (CI installs a compiler and nanobind)."""
    from int8nax.backends import tape

    module = tape.module()
    if module is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"no tapes here, and CI=true requires them: {tape.why()}")
        pytest.skip(f"no tapes here: {tape.why()}")
    return module


def random_w8a8_layer(rng, k: int, n: int, bias: bool = True, backend=None):
    """int8nax.nn.W8A8Linear.from_linear of an nn.Linear [n, k] with standard normal weights (and bias)."""
    import mlx.core as mx
    import mlx.nn as nn

    from int8nax.nn import W8A8Linear

    lin = nn.Linear(k, n, bias=bias)
    lin.weight = mx.array(rng.standard_normal((n, k)).astype(np.float32))
    if bias:
        lin.bias = mx.array(rng.standard_normal(n).astype(np.float32))
    return W8A8Linear.from_linear(lin, backend=backend)
