"""int8nax.nn's host path: a W8A8Linear binds its arrays once (api.bind) and a call that no
transformation traces goes to the backend with them; a backend's marked entry point
(Backend.w8a8_linear_marked, the CUDA backend's compiled step with x's leading dims inside) serves
untraced calls and hands every traced one back to the gradient's path. The CUDA entry point
itself runs only on a GPU (test_nn.py, test_w8a8_linear.py there); here a stand-in built the
same way (compile_per_thread, BodyRan) over a kernel-like forward (no vjp or jvp: a traced call
served by it would fail or lose its gradient)."""

from __future__ import annotations

import os
import threading

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from int8nax import api, backends
from int8nax.backends import tape
from int8nax.backends.base import BodyRan
from int8nax.bench import host_work, models
from int8nax.nn import W8A8Linear, quantize_linears
from int8nax.per_thread import compile_per_thread
from test_gradients import KernelLikeBackend, mm_tol


class MarkedBackend(KernelLikeBackend):
    """KernelLikeBackend with a marked entry point as the CUDA backend's: one compiled function
    per x shape, reshapes inside, BodyRan set by its body. Counts the calls of each path."""

    name = "marked"

    def __init__(self):
        self.body = BodyRan()
        self.entries = {}
        self.lock = threading.Lock()
        self.marked_calls = 0
        self.body_runs = 0
        self.plain_calls = 0

    def w8a8_linear(self, x, w, scale_w, bias):
        self.plain_calls += 1
        return super().w8a8_linear(x, w, scale_w, bias)

    def _entry(self, shape, n):
        with self.lock:
            if shape not in self.entries:
                k, m = shape[-1], int(np.prod(shape[:-1]))

                def body(x, w, s, *bias):
                    self.body.ran = True
                    self.body_runs += 1
                    y = KernelLikeBackend.w8a8_linear(self, x.reshape(m, k), w, s, bias[0] if bias else None)
                    return y.reshape(shape[:-1] + (n,))

                self.entries[shape] = compile_per_thread(body)
            return self.entries[shape]

    def w8a8_linear_marked(self, x, w, scale_w, bias):
        self.marked_calls += 1
        self.body.ran = False
        args = (x, w, scale_w) if bias is None else (x, w, scale_w, bias)
        y = self._entry(x.shape, w.shape[0])(*args)
        return y, self.body.ran


@pytest.fixture
def marked(monkeypatch):
    impl = MarkedBackend()
    monkeypatch.setattr(backends, "resolve", lambda requested=None: impl)
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    return impl


def _layer(rng, k=16, n=6, bias=True):
    lin = nn.Linear(k, n, bias=bias)
    lin.weight = mx.array(rng.standard_normal((n, k)).astype(np.float32))
    if bias:
        lin.bias = mx.array(rng.standard_normal(n).astype(np.float32))
    layer = W8A8Linear.from_linear(lin)
    w_deq = np.array(layer.weight, np.float64) * np.array(layer.scales, np.float64)[:, None]
    return layer, w_deq


def test_untraced_calls_take_the_marked_entry_with_the_layers_arrays(marked, rng):
    layer, _ = _layer(rng)
    x = mx.array(rng.standard_normal((2, 3, 16)).astype(np.float32))
    want = np.array(KernelLikeBackend().w8a8_linear(x.reshape(6, 16), layer.weight, layer.scales, layer.bias))
    for i in range(6):
        if i == 2:  # first calls: the tracer checks' and the entry's signatures are traced once
            assert marked.body_runs == 1
            marked.marked_calls = marked.plain_calls = 0
        y = layer(x)
        assert y.shape == (2, 3, 6)
        np.testing.assert_array_equal(np.array(y).reshape(6, 6), want)
    # then every call replays the entry: no body run, no other path
    assert marked.marked_calls == 4 and marked.body_runs == 1 and marked.plain_calls == 0
    assert isinstance(layer._bound, api.BoundLinear) and layer._bound.w is layer.weight


def test_traced_calls_leave_the_marked_entry_for_the_gradient(marked, rng):
    layer, w_deq = _layer(rng)
    x = mx.array(rng.standard_normal((2, 3, 16)).astype(np.float32))
    c = mx.array(rng.standard_normal((2, 3, 6)).astype(np.float32))
    layer(x), layer(x)
    y0 = np.array(layer(x))
    tol = mm_tol("kernel-like", 1e-5)  # the straight-through backward runs on MLX's default device
    dx = mx.grad(lambda x: (layer(x) * c).sum())(x)  # the kernel-like forward has no vjp
    np.testing.assert_allclose(np.array(dx, np.float64), np.array(c, np.float64) @ w_deq, rtol=tol, atol=tol)
    (_,), (dy,) = mx.jvp(layer, [x], [x])
    np.testing.assert_allclose(np.array(dy, np.float64), np.array(x, np.float64) @ w_deq.T, rtol=tol, atol=tol)
    np.testing.assert_array_equal(np.array(mx.compile(layer)(x)), y0)
    layer.unfreeze(keys=["bias"])
    _, grads = nn.value_and_grad(layer, lambda x: (layer(x) * c).sum())(x)
    np.testing.assert_allclose(np.array(grads["bias"]), np.array(c).sum(axis=(0, 1)), rtol=1e-5)
    runs = marked.body_runs
    y1 = layer(x)  # untraced again: replayed, no body
    assert marked.body_runs == runs
    np.testing.assert_array_equal(np.array(y1), y0)


def test_a_sibling_groups_fused_call_takes_the_marked_entry(marked, rng):
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(16, 8), nn.Linear(16, 4), nn.Linear(16, 4)

        def __call__(self, x):
            return mx.concatenate([self.q_proj(x), self.k_proj(x), self.v_proj(x)], axis=-1)

    model = Attn()
    quantize_linears(model)
    x = mx.array(rng.standard_normal((1, 5, 16)).astype(np.float32))
    group = model.q_proj._group
    fused = group._current()
    want = np.array(KernelLikeBackend().w8a8_linear(x.reshape(5, 16), fused.weight, fused.scales, fused.bias))
    for i in range(5):
        if i == 2:
            marked.marked_calls = marked.plain_calls = 0
        np.testing.assert_array_equal(np.array(model(x)).reshape(5, 16), want)
    assert marked.marked_calls == 3 and marked.plain_calls == 0


def test_a_wrong_input_is_named_by_the_layer(marked, rng):
    layer, _ = _layer(rng)
    layer(mx.zeros((2, 16)))
    with pytest.raises(ValueError, match=r"^W8A8Linear: input must have last dimension input_dims = 16"):
        layer(mx.zeros((2, 15)))
    with pytest.raises(TypeError, match=r"^w8a8_linear: 'x' must have dtype"):
        layer(mx.zeros((2, 16), dtype=mx.int32))


def test_a_replaced_weight_is_bound_anew(marked, rng):
    layer, _ = _layer(rng)
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    layer(x)
    first = layer._bound
    other, _ = _layer(rng)
    layer.update(other.parameters())
    y = layer(x)
    assert layer._bound is not first and layer._bound.w is layer.weight
    np.testing.assert_array_equal(np.array(y), np.array(other(x)))


def _count_graphs(monkeypatch) -> list:
    """The stand-in's recorded graphs (GraphOnlyBackend.w8a8_linear_graph), by weight rows, as built."""
    built = []
    graph = host_work.GraphOnlyBackend.w8a8_linear_graph

    def counted(self, x, w, s, b):
        got = graph(self, x, w, s, b)
        if got is not None:  # None: no compiled entry (the uncompiled form)
            built.append((x.shape, w.shape[0]))
        return got

    monkeypatch.setattr(host_work.GraphOnlyBackend, "w8a8_linear_graph", counted)
    return built


def test_the_host_work_benchmark_measures_int8naxs_layer(monkeypatch, tapes_module):
    # on the CPU box W8A8Linear is measured over the graph-only stand-in, which reaches int8nax's
    # own layer path; the real resolve is back afterwards
    if backends.choose(None)[0] not in host_work.EAGER:
        pytest.skip("on a lazy backend the figure is that backend's own")
    seen = []
    marked = host_work.GraphOnlyBackend.w8a8_linear_marked

    def counted(self, x, w, s, b):
        got = marked(self, x, w, s, b)
        if got is not None:  # None: no compiled entry (the uncompiled form)
            seen.append((x.shape, got[0].shape, got[1]))
        return got

    monkeypatch.setattr(host_work.GraphOnlyBackend, "w8a8_linear_marked", counted)
    built = _count_graphs(monkeypatch)
    real_get, real_resolve = backends.get, backends.resolve
    us = host_work.host_us_per_call("w8a8", 64, 32, True, 5, calls=3, repeats=2)
    assert us > 0 and backends.get is real_get and backends.resolve is real_resolve
    # warm-up settles the first-call work (the graph recorded once); every measured call replays the
    # tape: no graph built, no compiled entry called
    assert built == [((1, 5, 64), 32)] and seen == []
    assert host_work.host_backend().startswith("graph-only")
    # the stand-in is what int8nax's own resolution hands out while measured, and only then
    with host_work._w8a8_backend():
        assert isinstance(backends.resolve(None), host_work.GraphOnlyBackend)
    assert backends.resolve(None) is real_get(backends.choose(None)[0])
    with pytest.raises(ValueError, match="kind"):
        host_work.layer("w4a4", 64, 32, True)
    # without tapes, every measured call replays the compiled entry
    monkeypatch.setenv(tape.ENV, "off")
    tape.invalidate()
    try:
        assert host_work.host_us_per_call("w8a8", 64, 32, True, 5, calls=3, repeats=2) > 0
        assert seen[-6:] == [((1, 5, 64), (1, 5, 32), False)] * 6
    finally:
        monkeypatch.delenv(tape.ENV)
        tape.invalidate()
    # "w8a8-uncompiled": no compiled entry on the stand-in, so each call builds its graph directly
    plain = []
    direct = host_work.GraphOnlyBackend.w8a8_linear
    monkeypatch.setattr(host_work.GraphOnlyBackend, "w8a8_linear",
                        lambda self, x, w, s, b: plain.append(x.shape) or direct(self, x, w, s, b))
    seen.clear()
    built.clear()
    assert host_work.host_us_per_call("w8a8-uncompiled", 64, 32, True, 5, calls=3, repeats=2) > 0
    assert seen == [] and built == [] and plain == [(5, 64)] * (host_work.WARM_UP + 6)
    assert host_work.layer("w8a8-uncompiled", 64, 32, True) is not host_work.layer("w8a8", 64, 32, True)


def test_the_cached_decoder_layer_replays_its_recordings_on_a_kv_cache(monkeypatch, tapes_module):
    # mlx-lm's layer decoding one token on a KV cache: after the warm-up, every measured call of the
    # W8A8 layer replays (no graph built); the cache each call writes is a copy (its length stays)
    pytest.importorskip("mlx_lm")
    if backends.choose(None)[0] not in host_work.EAGER:
        pytest.skip("on a lazy backend the figure is that backend's own")
    built = _count_graphs(monkeypatch)
    caches = []
    real_kv = models.mlx_lm_module("cache").KVCache

    class Counted(real_kv):
        def __init__(self):
            super().__init__()
            caches.append(self)

    monkeypatch.setattr(models.mlx_lm_module("cache"), "KVCache", Counted)
    us = host_work.cached_block_host_us("w8a8", "qwen2.5-0.5b", tokens=7, calls=3, repeats=2)
    assert us > 0 and len(caches) == 1 and caches[0].offset == 7
    # q|k|v, o, gate|up and down recorded once in the warm-up (decode rows, hidden 896, inter 4864)
    assert sorted(built) == sorted([((1, 1, 896), 896 + 2 * 128), ((1, 1, 896), 896), ((1, 1, 896), 2 * 4864),
                                    ((1, 1, 4864), 896)])
    assert host_work.cached_block_host_us("q8", "qwen2.5-0.5b", tokens=7, calls=3, repeats=2) > 0
    with pytest.raises(ValueError, match="^form: "):
        host_work.cached_block_host_us("w8a8-mlp-step")
    with pytest.raises(ValueError, match="^config: "):
        host_work.block("bf16", "llama-3-8b")


def test_the_launch_figure_times_mx_async_eval_of_graphs_built_before_it(monkeypatch):
    # the figure is mx.async_eval's time per call: a launch made 2 ms slower shows in it, a graph
    # built 2 ms slower does not (built before the clock starts); every batch is evaluated
    import time as real_time

    evaluated, real_async = [], mx.async_eval
    monkeypatch.setattr(host_work.mx, "eval", lambda *a: evaluated.append(len(a[0])))

    def slow_launch(ys):
        real_time.sleep(0.002)
        real_async(ys)

    monkeypatch.setattr(host_work.mx, "async_eval", slow_launch)
    assert host_work.launch_us_per_call("linear", 64, 32, False, calls=4, repeats=2) >= 2000 / 4
    assert [n for n in evaluated if n == 4] == [4] * (host_work.WARM_UP + 2)  # each batch, after its launch
    monkeypatch.setattr(host_work.mx, "async_eval", real_async)
    dense = host_work.layer("linear", 64, 32, False)
    monkeypatch.setattr(host_work, "layer", lambda *_: lambda x: real_time.sleep(0.002) or dense(x))
    assert host_work.launch_us_per_call("linear", 64, 32, False, calls=4, repeats=2) < 2000


def test_no_launch_figure_where_mlx_computes_on_the_cpu(monkeypatch):
    # the CPU stream computes inside mx.async_eval: no figure there, and the report says why
    monkeypatch.setattr(host_work.mx, "default_device", lambda: mx.Device(mx.cpu))
    why = host_work.launch_unmeasured()
    assert why and "cpu" in why.lower()
    assert host_work.launch_lines() == [f"launch a call (mx.async_eval): not measured ({why})"]
    monkeypatch.setattr(host_work.mx, "default_device", lambda: mx.Device(mx.gpu))
    assert host_work.launch_unmeasured() is None


def test_the_uncompiled_host_work_turns_the_cuda_entry_points_off_and_back_on(monkeypatch):
    # on a CUDA machine "w8a8-uncompiled" measures with cuda.COMPILE off, caches cleared on each change
    from int8nax.backends.cuda import backend as cuda

    cleared = []
    monkeypatch.setattr(cuda, "clear_caches", lambda: cleared.append(cuda.COMPILE))
    monkeypatch.setattr(backends, "choose", lambda requested=None: ("cuda", "stood in"))
    with host_work._w8a8_backend(compiled=False):
        assert cuda.COMPILE is False
    assert cuda.COMPILE is True and cleared == [False, True]
    with host_work._w8a8_backend(compiled=True):
        assert cuda.COMPILE is True
    assert cleared == [False, True]  # nothing to change: nothing cleared


def test_the_host_work_benchmark_measures_a_whole_decoder_layer(monkeypatch, tapes_module):
    if backends.choose(None)[0] not in host_work.EAGER:
        pytest.skip("on a lazy backend the figure is that backend's own")
    pytest.importorskip("mlx_lm")
    from int8nax.nn import SiblingGroup, SwiGLUMLPCall

    seen = []
    marked = host_work.GraphOnlyBackend.w8a8_linear_marked

    def counted(self, x, w, s, b):
        got = marked(self, x, w, s, b)
        if got is not None:  # None: no compiled entry (the uncompiled form)
            seen.append(w.shape[0])
        return got

    marked_mlp = host_work.GraphOnlyBackend._mlp_marked

    def counted_mlp(self, x, w1, s1, b1, w2, s2, b2):
        got = marked_mlp(self, x, w1, s1, b1, w2, s2, b2)
        if got is not None:
            seen.append((w1.shape[0], w2.shape[0]))
        return got

    monkeypatch.setattr(host_work.GraphOnlyBackend, "w8a8_linear_marked", counted)
    monkeypatch.setattr(host_work.GraphOnlyBackend, "_mlp_marked", counted_mlp)
    built = _count_graphs(monkeypatch)
    for form in host_work.BLOCK_FORMS:
        assert host_work.block_host_us(form, 1, calls=2, repeats=1) > 0
    block = host_work.block("w8a8")
    assert isinstance(block.mlp, SwiGLUMLPCall) and isinstance(block.self_attn.q_proj._group, SiblingGroup)
    assert isinstance(host_work.block("q8").mlp.gate_proj, nn.QuantizedLinear)
    # the W8A8 calls of the layer on the stand-in, each recorded once and replayed after: q|k|v, o,
    # gate|up, down (896 wide, MLP 4864); with INT8NAX_CUDA_MLP=step (as the CUDA backend, the
    # stand-in offers the whole-MLP step only then) q|k|v and o, and the MLP's compiled step at
    # every call; the setting as it was afterwards
    from int8nax.backends.cuda import settings as cuda_settings

    monkeypatch.delenv(cuda_settings.MLP_ENV, raising=False)
    cuda_settings.mlp_choice.cache_clear()
    calls = 1 + host_work.WARM_UP  # (calls=1, repeats=1) and the warm-up calls
    for form, recorded, stepped in (("w8a8", [896 + 2 * 128, 896, 2 * 4864, 896], []),
                                    ("w8a8-mlp-step", [896 + 2 * 128, 896], [(2 * 4864, 896)] * calls)):
        seen.clear()
        built.clear()
        assert host_work.block_host_us(form, 1, calls=1, repeats=1) > 0
        assert [n for _, n in built] == recorded and seen == stepped, form
        assert cuda_settings.mlp_choice() == "own" and cuda_settings.MLP_ENV not in os.environ
    # without tapes every call replays the compiled entries; the uncompiled form reaches neither
    seen.clear()
    built.clear()
    assert host_work.block_host_us("w8a8-compiled", 1, calls=2, repeats=1) > 0
    assert built == [] and seen[-4:] == [896 + 2 * 128, 896, 2 * 4864, 896]
    seen.clear()
    built.clear()
    assert host_work.block_host_us("w8a8-uncompiled", 1, calls=2, repeats=1) > 0 and seen == [] and built == []
    with pytest.raises(ValueError, match="form"):
        host_work.block("w4a4")


def cuda_graphs_recorded(monkeypatch, forward, narrow: bool) -> list:
    """The CUDA backend's launches replaced for its entry points' logic on the CPU box: the choice
    names variant "v<M>" with plan (N, K), the quantization launch ("quant", M, K), the epilogue
    `narrow`; graphs.w8a8_graph records (x shape, variant, plan, has_bias, quant, narrow) in the
    list returned and computes forward(rows, w, s, bias) on x's rows, in x's leading dims."""
    from int8nax.backends.cuda import settings as cuda_settings, graphs as cuda_graphs, backend as cuda

    seen = []

    def graph(x, w, s, bias, variant, plan, has_bias, quant, narrow):
        seen.append((x.shape, variant, plan, has_bias, quant, narrow))
        y = forward(x.reshape(-1, x.shape[-1]), w, s, bias if has_bias else None)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    monkeypatch.setattr(cuda, "choice", lambda m, n, k, w8a8, bias: type("C", (), {"variant": f"v{m}", "plan": (n, k)}))
    monkeypatch.setattr(cuda_graphs, "quant_launch", lambda m, k: ("quant", m, k))
    monkeypatch.setattr(cuda_settings, "_narrow", lambda: narrow)
    monkeypatch.setattr(cuda_graphs, "w8a8_graph", graph)
    return seen


def test_the_cuda_marked_entry_builds_w8a8_graph_of_the_rows_and_marks_traced_calls(monkeypatch, rng):
    # The CUDA entry point's own logic on the CPU box, its launches replaced: it hands w8a8_graph
    # x as it comes (the kernels read M from x's shape: no reshape node) with the choice,
    # quantization launch and epilogue of the 2-D entry (_w8a8_for_shape) for M = the product of
    # x's leading dims; its flag is set at a signature's first call and for tracers only. The
    # kernels themselves run only on a GPU.
    from int8nax.backends.cuda import backend as cuda

    seen = cuda_graphs_recorded(monkeypatch, KernelLikeBackend().w8a8_linear, narrow=True)
    cuda._w8a8_any_rows.cache_clear()
    try:
        layer, w_deq = _layer(rng)
        w, s, b = layer.weight, layer.scales, layer.bias
        x = mx.array(rng.standard_normal((2, 3, 16)).astype(np.float32))
        y, ran = cuda.w8a8_marked(x, w, s, b)
        assert ran and y.shape == (2, 3, 6)
        assert seen == [((2, 3, 16), "v6", (6, 16), True, ("quant", 6, 16), True)]
        y2, ran2 = cuda.w8a8_marked(x, w, s, b)
        assert not ran2 and len(seen) == 1
        want = np.array(KernelLikeBackend().w8a8_linear(x.reshape(6, 16), w, s, b)).reshape(2, 3, 6)
        np.testing.assert_array_equal(np.array(y2), want)
        flags = []
        mx.grad(lambda x: flags.append(cuda.w8a8_marked(x, w, s, b)[1]) or x.sum())(x)
        assert flags == [True]
        y1, _ = cuda.w8a8_marked(x[0, :1], w, s, None)  # 2-D rows, no bias: the placeholder bias
        assert y1.shape == (1, 6) and seen[-1][0] == (1, 16) and seen[-1][3] is False
        monkeypatch.setattr(cuda, "COMPILE", False)
        assert cuda.w8a8_marked(x, w, s, b) is None
    finally:
        cuda._w8a8_any_rows.cache_clear()


def test_vmap_never_sees_the_dropped_graph_of_a_traced_call(monkeypatch, rng):
    # Under mx.vmap the marked entry's body runs on tracers and builds kernel-like ops (no vmap
    # rule); the call leaves that graph unused and takes the gradient's path, whose forward here
    # is plain MLX: vmap must succeed, as it only transforms what reaches the output.
    from test_gradients import GraphBackend

    class Mixed(MarkedBackend):
        def w8a8_linear(self, x, w, scale_w, bias):
            self.plain_calls += 1
            return GraphBackend.w8a8_linear(self, x, w, scale_w, bias)

    impl = Mixed()
    monkeypatch.setattr(backends, "resolve", lambda requested=None: impl)
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    layer, _ = _layer(rng)
    x = mx.array(rng.standard_normal((4, 3, 16)).astype(np.float32))
    for _ in range(3):
        y0 = np.array(layer(x))
    runs = impl.body_runs
    yv = mx.vmap(layer)(x)
    assert impl.body_runs == runs + 1  # the body ran on the tracer, and its graph was dropped
    np.testing.assert_array_equal(np.array(yv), y0)


def test_a_layer_takes_the_marked_entry_with_int8nax_backend_set(monkeypatch, rng):
    # INT8NAX_BACKEND naming a backend that can run: the layer's calls take the same entry as
    # auto's (resolve keeps the answer); one that cannot run: the call raises naming the variable
    impl = MarkedBackend()
    real_get = backends.get
    monkeypatch.setattr(backends, "get", lambda name: impl if name == "cpu" else real_get(name))
    real_get.cache_clear()
    try:
        monkeypatch.setenv(backends.ENV_VAR, "cpu")
        layer, _ = _layer(rng)
        x = mx.array(rng.standard_normal((2, 16)).astype(np.float32))
        for _ in range(3):
            layer(x)
        assert impl.marked_calls == 3 and impl.plain_calls == 0
        monkeypatch.setenv(backends.ENV_VAR, "cuda" if not backends.probe("cuda").available else "metal")
        if backends.probe(backends.canonical(os.environ[backends.ENV_VAR])).available:
            pytest.skip("every backend can run here")
        with pytest.raises(RuntimeError, match=rf"requested \({backends.ENV_VAR}=\w+\) but cannot run here"):
            layer(x)
        monkeypatch.setenv(backends.ENV_VAR, "bogus")
        with pytest.raises(ValueError, match=rf"unknown backend 'bogus' in the environment variable {backends.ENV_VAR}"):
            layer(x)
    finally:
        real_get.cache_clear()


def test_a_traced_call_runs_the_marked_entrys_body_once(marked, rng):
    # the lone layer's inline path hands a call that the entry marked as traced to the general
    # path directly, without asking the entry again
    layer, _ = _layer(rng)
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    layer(x), layer(x)
    runs, calls = marked.body_runs, marked.marked_calls
    mx.grad(lambda x: layer(x).sum())(x)
    assert marked.body_runs == runs + 1 and marked.marked_calls == calls + 1


class _Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(16, 8), nn.Linear(16, 4), nn.Linear(16, 4)


def test_siblings_take_a_waiting_result_once_each(marked, rng):
    model = _Attn()
    quantize_linears(model)
    group = model.q_proj._group
    x = mx.array(rng.standard_normal((2, 16)).astype(np.float32))
    want = {name: np.array(KernelLikeBackend().w8a8_linear(x, model[name].weight, model[name].scales, model[name].bias))
            for name in ("q_proj", "k_proj", "v_proj")}
    for _ in range(2):
        for name in ("q_proj", "k_proj", "v_proj"):
            model[name](x)
    marked.marked_calls = 0
    hits, misses = group._hits, group._misses

    def check(name):
        np.testing.assert_allclose(np.array(model[name](x)), want[name], rtol=1e-6, atol=1e-6)

    # any order: one fused call serves all three, and the result is dropped once all took theirs
    for order in (("q_proj", "k_proj", "v_proj"), ("v_proj", "q_proj", "k_proj"), ("k_proj", "v_proj", "q_proj")):
        for name in order:
            check(name)
    assert marked.marked_calls == 3 and group._hits == hits + 6 and group._misses == misses
    assert group._local.pending is None
    # a sibling called twice before the others: the second call computes anew (a miss: its
    # columns were taken), and the others then take the new result
    check("q_proj")
    check("q_proj")
    check("k_proj")
    check("v_proj")
    assert marked.marked_calls == 5 and group._misses == misses + 1 and group.shared
    # another thread never takes this thread's waiting result
    check("q_proj")
    seen = []
    t = threading.Thread(target=lambda: seen.append(np.array(model.k_proj(x))))
    t.start()
    t.join()
    np.testing.assert_allclose(seen[0], want["k_proj"], rtol=1e-6, atol=1e-6)
    assert marked.marked_calls == 7
