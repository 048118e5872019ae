"""The API's host path (int8nax.api): a call that no transformation traces goes straight to
the backend, and how int8nax.api.tracing._untraced tells (the gradients on every path are in
test_gradients.py)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import int8nax
from int8nax import backends
from int8nax.api import tracing
from test_gradients import KernelLikeBackend, check_int8_matmul_refusals


class RecordingBackend(KernelLikeBackend):
    """KernelLikeBackend (lazy, its forward without vjp or jvp, as a custom kernel's) that
    records the arguments it was handed."""

    def __init__(self):
        self.seen = []

    def int8_matmul(self, a, b):
        self.seen.append((a, b))
        return super().int8_matmul(a, b)

    def quantize_activations(self, x):
        self.seen.append((x,))
        return super().quantize_activations(x)

    def w8a8_linear(self, x, w, scale_w, bias):
        self.seen.append((x, w, scale_w, bias))
        return super().w8a8_linear(x, w, scale_w, bias)


@pytest.fixture
def lazy(monkeypatch):
    impl = RecordingBackend()
    monkeypatch.setattr(backends, "resolve", lambda requested=None: impl)
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    return impl


def test_this_mlx_tells_traced_calls_apart():
    # The fast path rests on this: a compiled function's body runs for tracer inputs (and at
    # a signature's first call) and not on replays. If an MLX release changes it, the first
    # call's check turns the fast path off (correct, ~4 us slower per call): this test says so.
    assert tracing._detects_tracers(), "int8nax.api.tracing._untraced cannot tell traced calls apart with this MLX"
    x = mx.ones((3, 4), dtype=mx.float16)
    c = mx.ones((3, 4), dtype=mx.float16)
    tracing._untraced(x)
    assert tracing._untraced(x) and tracing._untraced(mx.zeros((7, 5), dtype=mx.float16))  # shapeless
    seen = []

    def f(x):
        seen.append((tracing._untraced(x), tracing._untraced(x * 2), tracing._untraced(c, x), tracing._untraced(c)))
        return x.astype(mx.float32).sum()

    mx.grad(f)(x)
    mx.vjp(f, [x], [mx.array(1.0)])
    mx.jvp(f, [x], [x])
    mx.vmap(f)(mx.ones((2, 3, 4), dtype=mx.float16))
    mx.compile(f)(x)
    # the tracer, an array made from it, a mix: traced; an array no transformation made: not
    assert seen == [(False, False, False, True)] * 5


def test_with_compilation_disabled_every_call_is_checked(lazy):
    a = mx.ones((2, 3), dtype=mx.int8)
    b = mx.ones((4, 3), dtype=mx.int8)
    int8nax.int8_matmul(a, b)
    mx.disable_compile()
    try:
        assert not tracing._untraced(a, b)
        check_int8_matmul_refusals({})
    finally:
        mx.enable_compile()


def test_the_common_call_is_the_backends_own_output(lazy):
    a = mx.ones((2, 3), dtype=mx.int8)
    b = mx.ones((4, 3), dtype=mx.int8)
    x = mx.ones((5, 3), dtype=mx.float16)
    x3 = mx.ones((2, 5, 3), dtype=mx.float16)
    s = mx.ones((4,), dtype=mx.float32)
    bias = mx.zeros((4,), dtype=mx.float16)
    for _ in range(2):  # the first call of a signature is traced (then checked) once
        out = int8nax.int8_matmul(a, b)
        y = int8nax.w8a8_linear(x, b, s, bias)
        y3 = int8nax.w8a8_linear(x3, b, s)
        q, qs = int8nax.quantize_activations(x)
    assert np.array(out).tolist() == [[3] * 4] * 2
    assert y.shape == (5, 4) and y.dtype == mx.float16 and y3.shape == (2, 5, 4)
    assert q.shape == (5, 3) and qs.shape == (5,)
    # the last calls: the caller's arrays went to the backend as they were (no custom function)
    assert lazy.seen[-4][0] is a and lazy.seen[-4][1] is b
    assert all(v is u for v, u in zip(lazy.seen[-3], (x, b, s, bias)))
    assert lazy.seen[-2][1] is b and lazy.seen[-2][0].shape == (10, 3)
    assert lazy.seen[-1][0] is x


def test_the_default_cpu_call_sees_the_callers_weight_array(monkeypatch, rng):
    # The CPU backend keys its prepared weights by the array object (weights_by_identity), on
    # the common call (no backend=) as on the checked one.
    from int8nax.backends.cpu import backend as cpu

    monkeypatch.setattr(backends, "resolve", lambda requested=None: cpu.BACKEND)
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    seen = []
    real = cpu.BACKEND.w8a8_linear
    monkeypatch.setattr(cpu.BACKEND, "w8a8_linear", lambda x, w, s, b: seen.append(w) or real(x, w, s, b))
    w, s = int8nax.quantize_weight_int8(mx.array(rng.standard_normal((6, 16)).astype(np.float32)))
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    for _ in range(2):
        int8nax.w8a8_linear(x, w, s)
    mx.grad(lambda x: int8nax.w8a8_linear(x, w, s).sum())(x)
    assert len(seen) == 3 and all(v is w for v in seen)


def test_importing_runs_no_transformation():
    # The tracer check runs MLX transformations (on a GPU box: the GPU's first work); it waits
    # for the first call that could use it.
    import subprocess
    import sys

    code = "import int8nax, int8nax.api.tracing as t; print(t._DETECTS)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
