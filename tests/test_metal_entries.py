"""The Metal backend's compiled entry points (MetalBackend.w8a8_linear_marked) on the CPU box: its
own launch code (launch.run_w8a8 through KernelSet) over kernels that record each launch and
compute their outputs with MLX ops, so that mx.compile can trace them. What is checked: a shape's
first call is eager (every build's first launch evaluated: the threadgroup check), later calls
replay the same launches (names, template arguments, grid, threadgroup, inputs) with the same
values, traced calls are told apart, and a refused threadgroup is refitted before any trace.
Nothing here ran on an M5."""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import backends, nax_emulator as emu
from int8nax.backends.metal import (
    backend as metal, kernel_set as metal_kernel_set, launch as metal_launch, selection as metal_selection,
)

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import mlx_stand_in  # noqa: E402
from conftest import random_w8a8_layer  # noqa: E402


class TraceableKernels:
    """A metal_kernel factory (KernelSet(factory=...)) whose kernels record every launch and
    compute each output from their inputs' values with MLX ops: an output with the first input's
    leading dims gets that input's sums over its last axis (its rows' sums at any rank), every
    output the sum of all inputs."""

    def __init__(self):
        self.calls: list = []

    def __call__(self, *, name, **_):
        calls = self.calls

        def kernel(*, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, **__):
            calls.append((name, tuple(template or ()), tuple(grid), tuple(threadgroup),
                          tuple((tuple(a.shape), a.dtype) for a in inputs)))
            total = sum(mx.sum(a.astype(mx.float32)) for a in inputs)
            first = inputs[0].astype(mx.float32)
            outs = []
            for shape, dtype in zip(output_shapes, output_dtypes):
                out = mx.zeros(shape, dtype=mx.float32) + total
                if tuple(shape[:-1]) == tuple(first.shape[:-1]):
                    out = out + first.sum(axis=-1, keepdims=True)
                outs.append(out.astype(dtype))
            return outs

        return kernel


class PassingOps(metal_launch.VariantOps):
    """The real launches of a variant; its self-test passes (the recording kernels compute no GEMM)."""

    def self_test(self):
        return []


def m5(factory, evaluate=None) -> metal.MetalBackend:
    backend = metal.MetalBackend(kernels=metal_kernel_set.KernelSet(factory, evaluate=evaluate),
                                 machine=lambda: (True, "applegpu_g17s", "26.4"), ops_factory=PassingOps,
                                 layout_probe=lambda kernels, relaxed: metal_selection.layout_result(
                                     emu.probe_dump(emu.mlx_float_layout())))
    assert backend.probe().available
    return backend


@pytest.fixture
def served(monkeypatch):
    """(backend, recording factory): a pretend M5 that int8nax's calls resolve to."""
    factory = TraceableKernels()
    backend = m5(factory)
    monkeypatch.setattr(backends, "resolve", lambda requested=None: backend)
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    factory.calls.clear()  # the selection's launches
    return backend, factory


def _layer(rng, k=64, n=40, bias=True):
    return random_w8a8_layer(rng, k, n, bias)


@pytest.mark.parametrize("rows", [(1, 1), (2, 3), (3, 40)])  # the decode kernel; quantize + GEMM, two tiles
@pytest.mark.parametrize("bias", [True, False])
def test_later_calls_replay_the_first_calls_launches(served, rng, rows, bias):
    backend, factory = served
    layer = _layer(rng, bias=bias)
    x = mx.array(rng.standard_normal((*rows, 64)).astype(np.float16))
    key = (x.shape, 40, x.dtype, None if not bias else layer.bias.dtype)
    for _ in range(3):  # the API's first call of a signature may take its general path, then the eager one
        if key in backend._launched:
            break
        layer(x)
    assert key in backend._launched
    factory.calls.clear()
    eager = backend.w8a8_linear(x, layer.weight, layer.scales, layer.get("bias"))
    first = list(factory.calls)
    assert first[0][4][0] == (x.shape, x.dtype)  # x as it comes, not its rows
    assert len(first) == (1 if rows[0] * rows[1] <= 4 else 2)  # the decode kernel; quantize and GEMM
    factory.calls.clear()
    traced = layer(x)  # the entry's first call: traced through the same launch code
    assert factory.calls == first
    factory.calls.clear()
    for _ in range(3):
        again = layer(x)
    assert factory.calls == []  # replayed: no launch built in Python
    assert traced.shape == again.shape == (*rows, 40) and again.dtype == mx.float16
    assert mx.array_equal(eager, traced).item() and mx.array_equal(eager, again).item()


def test_the_entry_point_gives_the_rows_call_in_xs_leading_dims(served, rng):
    backend, factory = served
    layer = _layer(rng)
    x = mx.array(rng.standard_normal((2, 3, 64)).astype(np.float32))
    y, ran = backend.w8a8_linear_marked(x, layer.weight, layer.scales, layer.bias)
    assert ran  # the eager first call: the API asks itself whether x is traced
    y2, ran2 = backend.w8a8_linear_marked(x, layer.weight, layer.scales, layer.bias)
    assert ran2  # the entry's body ran: its first trace
    y3, ran3 = backend.w8a8_linear_marked(x, layer.weight, layer.scales, layer.bias)
    assert not ran3
    rows = backend.w8a8_linear(x.reshape(6, 64), layer.weight, layer.scales, layer.bias).reshape(2, 3, 40)
    assert all(mx.array_equal(v, rows).item() for v in (y, y2, y3))
    flags = []
    mx.grad(lambda v: flags.append(backend.w8a8_linear_marked(v, layer.weight, layer.scales, layer.bias)[1])
            or v.sum())(x)
    assert flags == [True]  # a tracer runs the body


def test_a_shapes_first_call_under_a_trace_waits_for_an_eager_one(served, rng):
    # inside mx.compile nothing can be evaluated: the build's check is deferred, the shape stays eager
    backend, factory = served
    layer = _layer(rng)
    w, s, b = layer.weight, layer.scales, layer.bias
    x = mx.array(rng.standard_normal((5, 64)).astype(np.float32))
    deferred = backend.kernels.deferred_checks
    mx.compile(lambda v: backend.w8a8_linear_marked(v, w, s, b)[0])(x)
    assert backend.kernels.deferred_checks > deferred and backend._launched == set()
    _, ran = backend.w8a8_linear_marked(x, w, s, b)
    assert ran and (x.shape, 40, mx.float32, mx.float32) in backend._launched
    assert backend.kernels.deferred_checks > deferred


def test_a_refused_threadgroup_is_refitted_before_the_entry_is_traced(monkeypatch, rng):
    # a pipeline allowing 256 threads: the eager call learns it and refits; the trace launches the
    # smaller tile at once, and no launch of the replays can meet the refusal
    limited = mlx_stand_in.ThreadLimited(TraceableKernels(), 256, prefix="int8nax_w8a8_gemm")
    backend = m5(limited, evaluate=limited.evaluate)
    monkeypatch.setattr(backends, "resolve", lambda requested=None: backend)
    recorded = limited.factory.calls
    layer = _layer(rng, k=256, n=256)
    x = mx.array(rng.standard_normal((100, 256)).astype(np.float16))
    recorded.clear()
    key = (x.shape, 256, x.dtype, mx.float32)
    for _ in range(3):  # first calls: the refusal met, the limit learnt, the call refitted; the eager one
        if key in backend._launched:
            break
        eager = layer(x)
    assert key in backend._launched
    threads = [np.prod(c[3]) for c in recorded if c[0] == "int8nax_w8a8_gemm"]
    assert threads[0] > 256 and all(t <= 256 for t in threads[1:]) and limited.refused == [("int8nax_w8a8_gemm", threads[0])]
    recorded.clear()
    traced = layer(x)
    gemms = [c for c in recorded if c[0] == "int8nax_w8a8_gemm"]
    assert len(gemms) == 1 and np.prod(gemms[0][3]) <= 256
    recorded.clear()
    assert mx.array_equal(layer(x), eager).item() and mx.array_equal(traced, eager).item() and recorded == []


def test_compile_off_builds_every_call(served, monkeypatch, rng):
    backend, factory = served
    monkeypatch.setattr(metal, "COMPILE", False)
    layer = _layer(rng)
    x = mx.array(rng.standard_normal((1, 64)).astype(np.float32))
    assert backend.w8a8_linear_marked(x, layer.weight, layer.scales, layer.bias) is None
    for _ in range(3):
        layer(x)
    assert len(factory.calls) == 3


def test_no_entry_before_first_use(rng):
    backend = metal.MetalBackend(kernels=metal_kernel_set.KernelSet(TraceableKernels()),
                                 machine=lambda: (True, "applegpu_g17s", "26.4"), ops_factory=PassingOps)
    layer = _layer(rng)
    x = mx.array(rng.standard_normal((1, 64)).astype(np.float32))
    assert backend.w8a8_linear_marked(x, layer.weight, layer.scales, layer.bias) is None


def test_the_uncompiled_host_work_turns_the_metal_entry_points_off_and_back_on(monkeypatch):
    # on an M5 the host-work benchmark's "w8a8-uncompiled" measures with metal.COMPILE off
    from int8nax.bench import host_work

    monkeypatch.setattr(backends, "choose", lambda requested=None: ("metal", "stood in"))
    with host_work._w8a8_backend(compiled=False):
        assert metal.COMPILE is False
    assert metal.COMPILE is True
    with host_work._w8a8_backend(compiled=True):
        assert metal.COMPILE is True


def test_the_shapes_remembered_are_bounded(served, monkeypatch, rng):
    backend, _ = served
    monkeypatch.setattr(metal, "ENTRY_CACHE_SIZE", 2)
    layer = _layer(rng)
    for m in (1, 2, 3, 5, 7):
        backend.w8a8_linear_marked(mx.zeros((m, 64)), layer.weight, layer.scales, layer.bias)
        assert (m, 64) in {key[0] for key in backend._launched} and len(backend._launched) <= 2


def test_a_layer_records_the_entrys_graph_once_its_eager_call_ran(served, rng, tapes_module, monkeypatch):
    # MetalBackend.w8a8_linear_graph: nothing before a shape's eager first call (a replay skips
    # KernelSet.launch's checks), then the launches that call made, for the layer's tape
    backend, factory = served
    layer = _layer(rng)
    x = mx.array(rng.standard_normal((2, 3, 64)).astype(np.float16))
    assert backend.w8a8_linear_graph(x, layer.weight, layer.scales, layer.bias) is None
    eager = backend.w8a8_linear(x.reshape(6, 64), layer.weight, layer.scales, layer.bias).reshape(2, 3, 40)
    for _ in range(4):
        y = layer(x)
    assert layer._bound.taped() and len(layer._bound.tapes) == 1
    factory.calls.clear()
    for _ in range(2):
        y = layer(x)
    assert factory.calls == [] and mx.array_equal(y, eager).item()  # replayed, the eager call's values
    monkeypatch.setattr(metal, "COMPILE", False)
    assert backend.w8a8_linear_graph(x, layer.weight, layer.scales, layer.bias) is None
