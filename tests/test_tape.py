"""Tapes (int8nax.backends.tape): a graph recorded at a layer's first call of an x signature and
replayed in one C++ step at every later one.

The extension is built here as on any machine (the compiler and nanobind that CI installs); its
replays are checked on MLX's own ops on the CPU, bit for bit against building the same graph
again, and through int8nax.nn's layers on a lazy test backend (the GPU backends' graphs are
checked on a GPU: test_nn.py and test_cuda_*.py there)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from int8nax import backends
from int8nax.backends import entries, tape
from int8nax.backends.tape import build as tape_build
from int8nax.nn import W8A8Linear, quantize_linears
from conftest import random_w8a8_layer
from test_gradients import KernelLikeBackend, mm_tol
from test_layer_host_path import _Attn


def _graph(x, w, s):
    """A small graph with the shape of a layer's call: reshape to rows, GEMM, scale, reshape back."""
    m, k = entries.rows_of(x.shape)
    y = (x.reshape(m, k) @ w.T) * s
    return y.reshape(x.shape[:-1] + (w.shape[0],))


def _arrays(rng, *shapes):
    out = [mx.array(rng.standard_normal(s).astype(np.float32)) for s in shapes]
    mx.eval(*out)
    return out


def test_a_replay_gives_the_bits_of_the_graph_built_again(tapes_module, rng):
    w, s, x, x2 = _arrays(rng, (6, 16), (6,), (2, 3, 16), (2, 3, 16))
    tapes = tapes_module.Tapes(1, 4)
    assert tapes(x) is None and len(tapes) == 0  # nothing recorded yet
    assert tapes.record(x, [_graph(x, w, s)])
    # x's four steps (reshape, matmul, multiply, reshape) and two constants (the transposed w
    # does not depend on x: held as it is, computed once)
    assert tapes.describe() == [[4, 2]]
    y = tapes(x2)
    assert y.shape == (2, 3, 6) and y.dtype == mx.float32
    assert np.array_equal(np.array(y), np.array(_graph(x2, w, s)))


def test_a_replay_with_several_outputs_gives_a_tuple(tapes_module, rng):
    w, s, x, x2 = _arrays(rng, (8, 16), (8,), (5, 16), (5, 16))
    tapes = tapes_module.Tapes(3, 4)
    assert tapes.record(x, mx.split(_graph(x, w, s), [2, 6], axis=-1))
    parts = tapes(x2)
    assert isinstance(parts, tuple) and [p.shape for p in parts] == [(5, 2), (5, 4), (5, 2)]
    for got, want in zip(parts, mx.split(_graph(x2, w, s), [2, 6], axis=-1)):
        assert np.array_equal(np.array(got), np.array(want))
    assert not tapes.record(x, [_graph(x, w, s)])  # another count of outputs than the object's
    # an output that does not depend on x is a constant, and x itself may be an output
    both = tapes_module.Tapes(2, 4)
    assert both.record(x, [x, w])
    got_x, got_w = both(x2)
    assert got_x is not None and np.array_equal(np.array(got_x), np.array(x2))
    assert np.array_equal(np.array(got_w), np.array(w))


def test_a_recording_serves_its_shape_dtype_and_stream_only(tapes_module, rng):
    w, s, x = _arrays(rng, (6, 16), (6,), (4, 16))
    tapes = tapes_module.Tapes(1, 4)
    tapes.record(x, [_graph(x, w, s)])
    assert tapes(mx.zeros((5, 16))) is None
    assert tapes(mx.zeros((1, 4, 16))) is None
    assert tapes(x.astype(mx.float16)) is None
    with mx.stream(mx.new_stream(mx.default_device())):  # a primitive keeps its stream
        assert tapes(x) is None
    assert tapes(x, b"cpu") is None  # another context than the recording's (None)
    assert tapes(mx.zeros((4, 16))) is not None
    # the same signature recorded again replaces the old recording; a full object starts over
    tapes.record(x, [_graph(x, w, s)])
    assert len(tapes) == 1
    small = tapes_module.Tapes(1, 2)
    for m in (1, 2, 3):
        xm = mx.zeros((m, 16))
        small.record(xm, [_graph(xm, w, s)])
    assert len(small) == 1 and small(mx.zeros((3, 16))) is not None and small(mx.zeros((1, 16))) is None


def test_invalidate_drops_every_recording(tapes_module, rng):
    w, s, x = _arrays(rng, (6, 16), (6,), (4, 16))
    tapes = tapes_module.Tapes(1, 4)
    tapes.record(x, [_graph(x, w, s)])
    tape.invalidate()
    assert tapes(x) is None and len(tapes) == 0
    tapes.record(x, [_graph(x, w, s)])
    assert len(tapes) == 1 and tapes(x) is not None


def test_tracers_are_never_replayed(tapes_module, rng):
    w, s, x = _arrays(rng, (6, 16), (6,), (4, 16))
    tapes = tapes_module.Tapes(1, 4)
    tapes.record(x, [_graph(x, w, s)])
    seen = []

    def f(v):
        seen.append((tapes(v), tapes(v * 1)))
        return _graph(v, w, s).sum()

    mx.grad(f)(x)
    mx.vjp(f, [x], [mx.array(1.0)])
    mx.jvp(f, [x], [x])
    mx.vmap(f)(mx.stack([x, x]))
    mx.compile(f)(x)
    assert len(seen) == 5 and all(a is None and b is None for a, b in seen)
    assert tape.tracer_test(tapes_module)
    x2 = mx.zeros((2, 16))
    assert tapes.record(x2, [_graph(x2, w, s)])  # untraced: recorded
    traced = []
    mx.grad(lambda v: traced.append(tapes.record(v, [_graph(v, w, s)])) or _graph(v, w, s).sum())(x)
    assert traced == [False]


def test_a_machine_that_cannot_build_says_why(monkeypatch, tmp_path):
    monkeypatch.setenv("INT8NAX_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    module, why = tape_build.load()
    assert module is None and why.startswith("false failed (exit 1)")
    assert not list(tmp_path.rglob("*.tmp"))  # no half-written file left
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    module, why = tape_build.load()
    assert module is None and "could not build it" in why


def test_an_extension_built_with_another_nanobind_is_refused_by_name(monkeypatch, tapes_module):
    # nanobind of other internals than MLX's builds and loads, but its functions refuse mx.array
    class Foreign:
        def is_tracer(self, x):
            raise TypeError("is_tracer(): incompatible function arguments")

    monkeypatch.setattr(tape_build, "load", lambda: (Foreign(), None))
    tape._STATE.clear()
    try:
        assert tape.module() is None and "does not take MLX's arrays" in tape.why()
    finally:
        monkeypatch.undo()
        tape._STATE.clear()
    assert tape.takes_mlx_arrays(tape.module())


def test_the_build_reads_mlxs_headers_beside_mlx_core(monkeypatch, tmp_path):
    # any folder named mlx on sys.path (MLX's own kernel cache in the temp folder) joins the
    # namespace package; the headers and libmlx are those beside mlx.core
    from int8nax.backends.mlx_install import mlx_package_dir

    (tmp_path / "mlx").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert (mlx_package_dir() / "include" / "mlx" / "array.h").is_file()
    assert mlx_package_dir() != tmp_path / "mlx"


def test_int8nax_tapes_off_means_no_tapes(monkeypatch, tapes_module):
    monkeypatch.setenv(tape.ENV, "off")
    tape.invalidate()  # asks the setting again
    try:
        assert tape.new() is None and tape.why() == f"{tape.ENV}=off"
    finally:
        monkeypatch.delenv(tape.ENV)
        tape.invalidate()
    assert tape.new() is not None and tape.why() is None


# ---- through int8nax.nn's layers ----

class TapedBackend(KernelLikeBackend):
    """KernelLikeBackend (a lazy graph whose primitives have no jvp or vjp, as custom kernels) with
    Backend.w8a8_linear_graph, counting the graphs built and the plain calls."""

    name = "taped"

    def __init__(self):
        self.graphs = []
        self.plain = 0

    def w8a8_linear(self, x, w, scale_w, bias):
        self.plain += 1
        return super().w8a8_linear(x, w, scale_w, bias)

    def w8a8_linear_graph(self, x, w, scale_w, bias):
        self.graphs.append(x.shape)
        m, k = entries.rows_of(x.shape)
        y = KernelLikeBackend.w8a8_linear(self, x.reshape(m, k), w, scale_w, bias)
        return y.reshape(x.shape[:-1] + (w.shape[0],))


@pytest.fixture
def taped(monkeypatch, tapes_module):
    impl = TapedBackend()
    monkeypatch.setattr(backends, "resolve", lambda requested=None: impl)
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    return impl


def _layer(rng, k=16, n=6, bias=True):
    return random_w8a8_layer(rng, k, n, bias)


def test_a_layer_records_once_and_replays(taped, rng):
    layer = _layer(rng)
    x = mx.array(rng.standard_normal((2, 3, 16)).astype(np.float32))
    want = np.array(KernelLikeBackend().w8a8_linear(x.reshape(6, 16), layer.weight, layer.scales, layer.bias))
    for i in range(5):
        if i == 2:  # first calls: the tracer check's signature traced (the general path), then recorded
            assert taped.graphs == [(2, 3, 16)]
            taped.graphs.clear()
            taped.plain = 0
        np.testing.assert_array_equal(np.array(layer(x)).reshape(6, 6), want)
    assert taped.graphs == [] and taped.plain == 0 and len(layer._bound.tapes) == 1
    layer(x.astype(mx.float16))  # another dtype: recorded too
    assert taped.graphs == [(2, 3, 16)] and len(layer._bound.tapes) == 2


def test_a_traced_call_takes_the_gradients_path(taped, rng):
    layer = _layer(rng)
    w_deq = np.array(layer.weight, np.float64) * np.array(layer.scales, np.float64)[:, None]
    x = mx.array(rng.standard_normal((2, 3, 16)).astype(np.float32))
    c = mx.array(rng.standard_normal((2, 3, 6)).astype(np.float32))
    y0 = np.array(layer(x))
    tol = mm_tol("kernel-like", 1e-5)  # the straight-through backward runs on MLX's default device
    dx = mx.grad(lambda v: (layer(v) * c).sum())(x)  # the kernel-like forward has no vjp
    np.testing.assert_allclose(np.array(dx, np.float64), np.array(c, np.float64) @ w_deq, rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.array(mx.compile(layer)(x)), y0)
    assert taped.graphs == [(2, 3, 16)]  # the traced calls recorded nothing
    np.testing.assert_array_equal(np.array(layer(x)), y0)


def test_a_sibling_group_replays_its_split(taped, rng):
    model = _Attn()  # q 8, k 4, v 4 wide
    quantize_linears(model)
    x = mx.array(rng.standard_normal((1, 5, 16)).astype(np.float32))
    fused = model.q_proj._group._current()
    want = np.array(KernelLikeBackend().w8a8_linear(x.reshape(5, 16), fused.weight, fused.scales, fused.bias))
    for _ in range(3):
        got = mx.concatenate([model.q_proj(x), model.k_proj(x), model.v_proj(x)], axis=-1)
        np.testing.assert_array_equal(np.array(got).reshape(5, 16), want)
    assert taped.graphs == [(1, 5, 16)]  # one fused graph, the split recorded with it
    assert fused.parted.tapes.describe()[0][0] >= 4  # the call's steps and the split's three slices


def test_a_replaced_weight_records_anew(taped, rng):
    layer = _layer(rng)
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    layer(x), layer(x)
    other = _layer(rng)
    layer.update(other.parameters())
    np.testing.assert_array_equal(np.array(layer(x)), np.array(other(x)))
    assert taped.graphs == [(3, 16), (3, 16), (3, 16)]  # layer's first, then the new arrays', then other's


def test_a_changed_backend_choice_is_not_served_by_old_recordings(taped, monkeypatch, rng):
    layer = _layer(rng)
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    layer(x), layer(x)
    assert taped.graphs == [(3, 16)]
    monkeypatch.setenv(backends.ENV_VAR, "cpu")  # the resolve stand-in still answers: recorded anew
    layer(x), layer(x)
    assert taped.graphs == [(3, 16), (3, 16)] and len(layer._bound.tapes) == 2
    monkeypatch.delenv(backends.ENV_VAR)  # the first value again: its recording serves
    layer(x)
    assert taped.graphs == [(3, 16), (3, 16)]
    backends.get.cache_clear()  # the registry forgotten: so are the recordings
    layer(x)
    assert taped.graphs == [(3, 16), (3, 16), (3, 16)]


def test_a_backend_without_a_graph_for_the_call_keeps_its_own_path(taped, rng):
    layer = _layer(rng)
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    taped.w8a8_linear_graph = lambda *args: None  # no recordable graph for this call (yet)
    for _ in range(3):
        layer(x)
    assert taped.plain == 3 and len(layer._bound.tapes) == 0


def _taken_over_mlp(rng):
    """(a taken-over mlx-lm Qwen2 MLP, its float reference's own call under fuse=False)."""
    import copy

    from mlx_lm.models import qwen2

    ref = qwen2.MLP(16, 40)
    ref.update(nn.utils.tree_map(lambda a: mx.array(rng.standard_normal(a.shape).astype(np.float32)),
                                 ref.parameters()))
    mlp = copy.deepcopy(ref)
    quantize_linears(ref, fuse=False)
    quantize_linears(mlp)
    return mlp, ref


def test_a_taken_over_mlp_replays_its_own_call_in_one_step(taped, rng):
    pytest.importorskip("mlx_lm")
    from int8nax.nn import SwiGLUMLPCall

    mlp, ref = _taken_over_mlp(rng)
    assert isinstance(mlp, SwiGLUMLPCall)
    for i in range(5):
        x = mx.array(rng.standard_normal((1, 3, 16)).astype(np.float32))
        if i == 3:  # the children's and the MLP's first calls are recorded by now
            taped.graphs.clear()
        np.testing.assert_array_equal(np.array(mlp(x)), np.array(ref(x)))
    assert taped.graphs == [] and len(mlp._taped.tapes) == 1  # replayed: no layer built a graph
    # a replaced array of any child: the own call again, recorded anew
    other, _ = _taken_over_mlp(rng)
    mlp.down_proj.update(other.down_proj.parameters())
    x = mx.array(rng.standard_normal((1, 3, 16)).astype(np.float32))
    want = np.array(mlp.own_call(x))
    group = mlp.gate_proj._group
    assert not mlp._taped.holds(mlp._taped.guards_of(group.members + (mlp.down_proj,)))
    np.testing.assert_array_equal(np.array(mlp(x)), want)
    np.testing.assert_array_equal(np.array(mlp(x)), want)
    # traced: the own call (its layers' gradient path), never the recording
    c = mx.array(rng.standard_normal((1, 3, 16)).astype(np.float32))
    tol = mm_tol("kernel-like", 1e-5)
    ref.down_proj.update(other.down_proj.parameters())
    dx = mx.grad(lambda v: (mlp(v) * c).sum())(x)
    dx_ref = mx.grad(lambda v: (ref(v) * c).sum())(x)
    np.testing.assert_allclose(np.array(dx), np.array(dx_ref), rtol=tol, atol=tol)
    # copies drop the recording
    import copy

    assert copy.deepcopy(mlp)._taped is None


def test_an_mlp_whose_layers_give_no_graph_is_not_recorded(taped, rng):
    pytest.importorskip("mlx_lm")
    mlp, ref = _taken_over_mlp(rng)
    taped.w8a8_linear_graph = lambda *args: None  # e.g. the compiled entry points turned off
    x = mx.array(rng.standard_normal((2, 16)).astype(np.float32))
    for _ in range(3):
        np.testing.assert_array_equal(np.array(mlp(x)), np.array(ref(x)))
    assert mlp._taped is None


# ---- on a GPU backend: its own graphs recorded and replayed ----

GPU_CASES = ((256, 384, True, (1, 1)), (256, 384, False, (1, 5)), (512, 1024, True, (1, 511)),
             (512, 1024, False, (512,)), (1024, 512, True, (2, 1000)))
"""(K, N, bias, x's leading dims): the GEMV (one row), a few rows, a remainder chunk's 511, 512
rows 2-D, and 2000 rows over two leading dims."""


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_a_gpu_layer_replayed_gives_the_bits_of_the_general_path(backend, tapes_module, rng, dtype):
    import int8nax

    if backends.get(backend).w8a8_linear_graph is None:
        pytest.skip(f"the {backend} backend computes during the call: nothing to record")
    for k, n, bias, lead in GPU_CASES:
        layer = random_w8a8_layer(rng, k, n, bias, backend)
        for i in range(4):  # the first calls bind and record; the last two replay
            x = mx.array(rng.standard_normal((*lead, k)).astype(np.float32)).astype(dtype)
            want = int8nax.w8a8_linear(x, layer.weight, layer.scales, layer.get("bias"), backend=backend)
            y = layer(x)
            assert y.shape == (*lead, n) and y.dtype == dtype
            np.testing.assert_array_equal(np.array(y.astype(mx.float32)), np.array(want.astype(mx.float32)),
                                          err_msg=f"K={k} N={n} bias={bias} x {lead}, call {i}")
        assert len(layer._bound.tapes) == 1


def test_gpu_siblings_replayed_give_the_bits_of_separate_layers(backend, tapes_module, rng):
    if backends.get(backend).w8a8_linear_graph is None:
        pytest.skip(f"the {backend} backend computes during the call: nothing to record")

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(256, 256), nn.Linear(256, 64), nn.Linear(256, 64)

    model = Attn()
    alone = {}
    for name in ("q_proj", "k_proj", "v_proj"):
        lin = model[name]
        lin.weight = mx.array(rng.standard_normal(lin.weight.shape).astype(np.float32))
        lin.bias = mx.array(rng.standard_normal(lin.bias.shape).astype(np.float32))
        alone[name] = W8A8Linear.from_linear(lin, backend=backend)
    quantize_linears(model, backend=backend)
    for m in (1, 7, 512):
        for _ in range(3):
            x = mx.array(rng.standard_normal((1, m, 256)).astype(np.float32)).astype(mx.bfloat16)
            for name in ("q_proj", "k_proj", "v_proj"):
                np.testing.assert_array_equal(np.array(model[name](x).astype(mx.float32)),
                                              np.array(alone[name](x).astype(mx.float32)), err_msg=f"{name} M={m}")
    assert len(model.q_proj._group._current().parted.tapes) == 3


def test_warm_up_builds_the_extension_where_a_layers_backend_records(monkeypatch, tapes_module, rng):
    from int8nax.nn import warm_up

    asked = []
    real = tape.module
    monkeypatch.setattr(tape, "module", lambda: asked.append(True) or real())
    model = nn.Sequential(nn.Linear(16, 8))
    quantize_linears(model, backend="cpu")
    warm_up(model, 4)
    assert asked == []  # the CPU backend computes during the call: nothing to record
    impl = TapedBackend()
    monkeypatch.setattr(backends, "resolve", lambda requested=None: impl)
    warm_up(model, 4)
    assert asked == [True]
