"""W8A8Linear and quantize_linears: the layer computes w8a8_linear of the quantized weights."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

import int8nax
from int8nax._checks import dtype_name
from int8nax.nn import W8A8Linear, quantize_linears
from int8nax.reference import to_numpy, w8a8_linear_ref


def test_from_linear_matches_functional(backend):
    mx.random.seed(0)
    lin = nn.Linear(96, 40)
    layer = W8A8Linear.from_linear(lin, backend=backend)
    x = mx.random.normal((3, 5, 96)).astype(mx.float16)
    y = layer(x)
    assert y.shape == (3, 5, 40) and y.dtype == mx.float16
    w_int8, s_w = int8nax.quantize_weight_int8(lin.weight)
    ref = w8a8_linear_ref(x.reshape(15, 96), w_int8, s_w, lin.bias)
    got = to_numpy(y, np.float64).reshape(15, 40)
    np.testing.assert_allclose(got, ref, rtol=2e-3, atol=1e-3)
    dense = to_numpy(lin(x.astype(mx.float32)), np.float64).reshape(15, 40)
    cos = (got * dense).sum() / (np.linalg.norm(got) * np.linalg.norm(dense))
    assert cos > 0.999


def test_quantize_linears_replaces_in_place():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8, bias=False))
    x = mx.random.normal((4, 16))
    before = to_numpy(model(x))
    n = quantize_linears(model)
    assert n == 2
    assert all(isinstance(model.layers[i], W8A8Linear) for i in (0, 2))
    assert "bias" not in model.layers[2]
    after = to_numpy(model(x))
    assert np.abs(after - before).max() < 0.05 * np.abs(before).max()


def test_quantize_linears_predicate():
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    n = quantize_linears(model, predicate=lambda path, m: path.endswith("1"))
    assert n == 1 and isinstance(model.layers[1], W8A8Linear) and isinstance(model.layers[0], nn.Linear)


class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(16, 32), nn.Linear(16, 8), nn.Linear(16, 8)
        self.o_proj = nn.Linear(32, 16, bias=False)


def test_quantize_linears_without_weights_reads_none_and_makes_the_same_calls():
    # weights=False: the shapes, bias and grouping of the quantized model without its weights
    # (`int8nax warm`): a weight quantize_linears would refuse (NaN) is never read.
    from int8nax.nn import kernel_calls

    real, shapes_only = _Block(), _Block()
    shapes_only.o_proj.weight = mx.full((16, 32), float("nan"))
    assert quantize_linears(real) == quantize_linears(shapes_only, weights=False) == 4
    assert kernel_calls(shapes_only) == kernel_calls(real)
    assert sorted((n, k) for _, n, k, _ in kernel_calls(real)[None]) == [(16, 32), (48, 16)]  # q|k|v fused, o alone
    layer = shapes_only.o_proj
    assert isinstance(layer, W8A8Linear) and not np.array(layer.weight).any() and "bias" not in layer
    assert shapes_only.q_proj.bias.dtype == mx.float32 and real.q_proj.bias.dtype == mx.float32
    with pytest.raises(TypeError, match="quantize_linears: 'weights' must be True or False, got str"):
        quantize_linears(_Block(), weights="no")


def test_from_linear_rejects_other_modules():
    with pytest.raises(TypeError, match="'linear' must be an mlx.nn.Linear"):
        W8A8Linear.from_linear(nn.ReLU())


# --- mlx.nn conventions (those of nn.QuantizedLinear, and where W8A8Linear differs) ---------


def small_layer(bias=True, backend=None):
    mx.random.seed(1)
    return W8A8Linear.from_linear(nn.Linear(24, 10, bias=bias), backend=backend)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_set_dtype_keeps_scales_float32_and_the_layer_working(backend, dtype):
    layer = small_layer(backend=backend)
    scales = np.array(layer.scales)
    model = nn.Sequential(layer, nn.ReLU())
    model.set_dtype(dtype)
    assert layer.weight.dtype == mx.int8 and layer.scales.dtype == mx.float32
    np.testing.assert_array_equal(np.array(layer.scales), scales)  # exactly, not rounded
    assert layer.bias.dtype == dtype  # a float parameter like any other
    x = mx.random.normal((3, 24)).astype(dtype)
    y = model(x)
    assert y.dtype == dtype and y.shape == (3, 10)
    want = int8nax.w8a8_linear(x, layer.weight, mx.array(scales), layer.bias, backend=backend)
    np.testing.assert_array_equal(to_numpy(y), to_numpy(mx.maximum(want, 0)))


def test_set_dtype_of_everything_is_refused_by_name():
    layer = small_layer()
    with pytest.raises(TypeError, match="W8A8Linear: 'weight' must have dtype int8.*got float16"):
        layer.set_dtype(mx.float16, predicate=None)


def test_scales_assignment_is_widened_or_refused():
    layer = small_layer()
    layer.scales = mx.array(np.full(10, 0.5, np.float16))  # other values: widened exactly
    assert layer.scales.dtype == mx.float32 and np.array(layer.scales).tolist() == [0.5] * 10
    with pytest.raises(TypeError, match="'scales' must be float32, got int32"):
        layer.scales = mx.ones((10,), dtype=mx.int32)


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_save_and_load_weights_round_trip(tmp_path, suffix):
    layer = small_layer()
    path = str(tmp_path / f"layer{suffix}")
    layer.save_weights(path)
    fresh = W8A8Linear(24, 10)
    x = mx.random.normal((4, 24))
    assert not np.array(fresh(x)).any()  # a fresh layer outputs zeros until loaded
    fresh.load_weights(path)
    for key in ("weight", "scales", "bias"):
        assert fresh[key].dtype == layer[key].dtype
        np.testing.assert_array_equal(np.array(fresh[key]), np.array(layer[key]))
    np.testing.assert_array_equal(np.array(fresh(x)), np.array(layer(x)))
    with pytest.raises(ValueError):
        W8A8Linear(24, 11).load_weights(path)  # shapes are checked by mlx.nn


def test_repr_and_parameters():
    layer = small_layer(backend="cpu")
    assert repr(layer) == "W8A8Linear(input_dims=24, output_dims=10, bias=True, backend='cpu')"
    assert repr(small_layer(bias=False)) == "W8A8Linear(input_dims=24, output_dims=10, bias=False)"
    assert sorted(layer.parameters()) == ["bias", "scales", "weight"]
    assert layer.trainable_parameters() == {}


def test_freeze_semantics():
    layer = small_layer()
    model = nn.Sequential(nn.Linear(8, 24), layer)
    model.unfreeze()  # on the parent: weight and scales stay frozen, bias becomes trainable
    assert sorted(model.trainable_parameters()["layers"][1]) == ["bias"]
    layer.freeze()
    layer.unfreeze(keys=["bias"])
    assert sorted(layer.trainable_parameters()) == ["bias"]
    layer.unfreeze(keys=["weight", "scales"])
    assert sorted(layer.trainable_parameters()) == ["bias"]
    # a trainable bias gets its gradient: the sum of dL/dy over the rows
    x = mx.random.normal((5, 24))
    grads = nn.value_and_grad(layer, lambda m, x: m(x).sum())(layer, x)[1]
    np.testing.assert_allclose(np.array(grads["bias"]), np.full(10, 5.0))


def test_quantize_linears_names_the_bad_layer():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    w = np.array(model.layers[2].weight)
    w[1, 2] = np.nan
    model.layers[2].weight = mx.array(w)
    with pytest.raises(ValueError, match=r"quantize_linears: layer 'layers\.2': quantize_weight_int8: 'w' must be finite, but row 1"):
        quantize_linears(model)
    assert isinstance(model.layers[0], nn.Linear)  # the model is left unchanged


def _assigned(name, value):
    """A layer given `value` as its parameter `name`, then called."""
    layer = W8A8Linear(4, 3)
    setattr(layer, name, value)
    return layer(mx.ones((2, 4)))


def test_a_layer_assigned_no_bias_computes_without_one():
    layer = W8A8Linear(4, 3)
    layer.bias = mx.ones((3,))
    assert np.array_equal(np.array(layer(mx.ones((2, 4)))), np.ones((2, 3)))
    layer.bias = None
    assert "bias" not in layer and np.array_equal(np.array(layer(mx.ones((2, 4)))), np.zeros((2, 3)))


def _warm(**kwargs):
    """nn.warm_up on a one-layer W8A8 model (on the CPU it builds nothing)."""
    model = nn.Sequential(nn.Linear(8, 4))
    quantize_linears(model)
    return int8nax.nn.warm_up(model, 4, **kwargs)


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: W8A8Linear(0, 4), ValueError, ["W8A8Linear", "'input_dims'", "positive int", "0"]),
        (lambda: W8A8Linear(4, "8"), TypeError, ["W8A8Linear", "'output_dims'", "positive int", "str"]),
        (lambda: W8A8Linear(131072, 4), ValueError, ["W8A8Linear", "'input_dims'", "<= 131071", "131072"]),
        (lambda: W8A8Linear(4, 10**12), ValueError, ["W8A8Linear", "'output_dims'", "<= 2147483647", "1000000000000"]),
        (lambda: W8A8Linear(4, 4, backend=123), TypeError, ["W8A8Linear", "'backend'", "int"]),
        (lambda: W8A8Linear(4, 4, backend="gpu"), ValueError, ["W8A8Linear", "'backend'", "'gpu'"]),
        (lambda: W8A8Linear.from_linear(nn.Linear(2, 2), backend=mx.cpu), TypeError, ["'backend'", "Device"]),
        (lambda: quantize_linears([nn.Linear(2, 2)]), TypeError, ["quantize_linears", "'model'", "list"]),
        (lambda: quantize_linears(nn.Linear(2, 2), predicate=True), TypeError, ["'predicate'", "callable"]),
        (lambda: int8nax.nn.kernel_calls(None), TypeError, ["kernel_calls", "'model'", "NoneType"]),
        (lambda: _warm(dtype="float16"), TypeError, ["warm_up", "'dtype'", "mlx dtype", "bfloat16", "str 'float16'"]),
        (lambda: _warm(dtype=mx.int8), ValueError, ["warm_up", "'dtype'", "bfloat16", "got int8"]),
        (lambda: _warm(jobs=0), ValueError, ["warm_up", "'jobs'", "positive int", "0"]),
        (lambda: _warm(jobs=-1), ValueError, ["warm_up", "'jobs'", "positive int", "-1"]),
        (lambda: _warm(jobs="2"), TypeError, ["warm_up", "'jobs'", "positive int", "str '2'"]),
        (lambda: _warm(progress=3), TypeError, ["warm_up", "'progress'", "callable", "int 3"]),
        (lambda: _assigned("weight", np.zeros((3, 4), np.int8)), TypeError,
         ["W8A8Linear", "'weight'", "mlx.core.array", "int8", "numpy.ndarray"]),
        (lambda: _assigned("scales", [1.0, 1.0, 1.0]), TypeError, ["W8A8Linear", "'scales'", "float32", "list"]),
        (lambda: _assigned("bias", 0.5), TypeError, ["W8A8Linear", "'bias'", "None", "float"]),
        (lambda: W8A8Linear(4, 3)(mx.zeros((2, 5))), ValueError, ["W8A8Linear", "input_dims = 4", "(2, 5)"]),
        (lambda: W8A8Linear(4, 3)(mx.zeros((2, 4), mx.int32)), TypeError, ["w8a8_linear", "'x'", "int32"]),
    ],
)
def test_layer_bad_input_is_named(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


# --- sibling layers: one quantization and one GEMM for layers that share their input --------


class Block(nn.Module):
    """An attention block's and an MLP's projections under mlx-lm's names (Qwen2: q/k/v with
    biases, o/gate/up/down without), called as mlx-lm calls them."""

    def __init__(self, dims=64, kv=16, hidden=96):
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj = nn.Linear(dims, dims), nn.Linear(dims, kv), nn.Linear(dims, kv)
        self.o_proj = nn.Linear(dims, dims, bias=False)
        self.gate_proj, self.up_proj = nn.Linear(dims, hidden, bias=False), nn.Linear(dims, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dims, bias=False)

    def parts(self, x):
        """Every projection's output (q, k, v, o, gate, up, down)."""
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        o = self.o_proj(q * mx.tanh(k.sum(axis=-1, keepdims=True) * v.mean(axis=-1, keepdims=True)))
        g, u = self.gate_proj(o), self.up_proj(o)
        return q, k, v, o, g, u, self.down_proj(nn.silu(g) * u)

    def __call__(self, x):
        return self.parts(x)[-1]


def two_blocks(seed=3, fuse=True, backend=None):
    """A fused and an unfused copy of the same quantized Block (same weights)."""
    mx.random.seed(seed)
    ref = Block()
    mx.eval(ref.parameters())
    copy = Block()
    copy.update(ref.parameters())
    quantize_linears(ref, backend=backend, fuse=False)
    quantize_linears(copy, backend=backend, fuse=fuse)
    return ref, copy


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float32])
def test_siblings_give_the_bits_of_separate_layers(backend, dtype):
    ref, fused = two_blocks(backend=backend)
    assert fused.q_proj._group is fused.v_proj._group is not None and fused.gate_proj._group is not None
    assert fused.o_proj._group is None and ref.q_proj._group is None
    x = (mx.random.normal((2, 5, 64)) * 3).astype(dtype)
    for _ in range(2):  # the CPU backend's first and prepared products
        want, got = ref.parts(x), fused.parts(x)
        for a, b in zip(want, got):
            assert a.dtype == b.dtype == dtype and a.shape == b.shape
            np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    # and each output within 1 ulp of the float64 model of its own layer
    from conftest import within_one_ulp

    x2 = x.reshape(10, 64)
    for name, y in (("q_proj", got[0]), ("k_proj", got[1]), ("v_proj", got[2])):
        layer = getattr(fused, name)
        model = w8a8_linear_ref(x2, layer.weight, layer.scales, layer.bias)
        assert within_one_ulp(y.reshape(10, -1), model, dtype_name(dtype)).all()


def count_backend_calls(monkeypatch):
    from int8nax.backends.cpu import backend as cpu

    seen = []
    real = cpu.BACKEND.w8a8_linear
    monkeypatch.setattr(cpu.BACKEND, "w8a8_linear", lambda x, w, s, b: seen.append(w.shape[0]) or real(x, w, s, b))
    return seen


def test_siblings_quantize_once_and_run_one_gemm(monkeypatch):
    seen = count_backend_calls(monkeypatch)
    ref, fused = two_blocks(backend="cpu")
    x = mx.random.normal((3, 64))
    mx.eval(ref(x))
    assert sorted(seen) == [16, 16, 64, 64, 64, 96, 96]  # q k v o gate up down: 7 quantize + 7 GEMMs
    seen.clear()
    mx.eval(fused(x))
    assert sorted(seen) == [64, 64, 96, 192]  # q|k|v, o, gate|up, down: 4 quantize + 4 GEMMs


def test_siblings_called_with_different_inputs(backend):
    ref, fused = two_blocks(backend=backend)
    x1, x2 = mx.random.normal((3, 64)), mx.random.normal((3, 64))
    x1_again = x1 + 0  # equal values, another array: never mistaken for x1
    calls = [("q_proj", x1), ("k_proj", x2), ("v_proj", x1), ("k_proj", x1), ("q_proj", x1), ("q_proj", x1_again),
             ("v_proj", x2), ("k_proj", x1_again)]
    for name, x in calls:
        np.testing.assert_array_equal(np.array(getattr(fused, name)(x)), np.array(getattr(ref, name)(x)))


def test_siblings_that_never_share_stop_fusing(monkeypatch):
    seen = count_backend_calls(monkeypatch)
    ref, fused = two_blocks(backend="cpu")
    group = fused.q_proj._group
    for _ in range(3):  # a cross-attention pattern: q from one input, k and v from another
        x, enc = mx.random.normal((2, 64)), mx.random.normal((2, 64))
        got = [fused.q_proj(x), fused.k_proj(enc), fused.v_proj(enc)]
        want = [ref.q_proj(x), ref.k_proj(enc), ref.v_proj(enc)]
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.array(a), np.array(b))
    assert not group.shared
    seen.clear()
    fused.k_proj(mx.random.normal((2, 64)))
    assert seen == [16]  # each layer alone again


def test_siblings_keep_the_module_tree(tmp_path):
    from mlx.utils import tree_flatten

    ref, fused = two_blocks()
    shapes = lambda m: {k: (v.shape, v.dtype) for k, v in tree_flatten(m.parameters())}  # noqa: E731
    assert shapes(fused) == shapes(ref)
    assert all(isinstance(fused[name], W8A8Linear) for name in ("q_proj", "k_proj", "v_proj", "gate_proj"))
    path = str(tmp_path / "block.safetensors")
    fused.save_weights(path)
    for key, value in tree_flatten(ref.parameters()):
        np.testing.assert_array_equal(np.array(dict(tree_flatten(fused.parameters()))[key]), np.array(value))
    # loading into another fused model (other random weights) replaces the siblings' arrays:
    # the next call concatenates them anew
    _, other = two_blocks(seed=11)
    x = mx.random.normal((4, 64))
    before = np.array(other(x))
    other.load_weights(path)
    after = np.array(other(x))
    assert not np.array_equal(before, after)
    np.testing.assert_array_equal(after, np.array(ref(x)))
    group = other.q_proj._group
    assert group._fused.sources[0] is other.q_proj.weight  # views of the new concatenation again


def test_siblings_follow_an_update_of_one_member():
    ref, fused = two_blocks()
    x = mx.random.normal((2, 64))
    new_bias = mx.arange(16, dtype=mx.float32)
    for m in (ref, fused):
        m.k_proj.bias = new_bias
        m.set_dtype(mx.bfloat16)  # the biases become bfloat16, the scales stay float32
    for a, b in zip(ref.parts(x.astype(mx.bfloat16)), fused.parts(x.astype(mx.bfloat16))):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    # between two siblings' calls with the same input: the waiting result is not used
    x = x.astype(mx.bfloat16)
    fused.q_proj(x)
    for m in (ref, fused):
        m.k_proj.bias = m.k_proj.bias + 1
    np.testing.assert_array_equal(to_numpy(fused.k_proj(x)), to_numpy(ref.k_proj(x)))
    # nor where a member's bias was removed, by None or by del
    for remove in (lambda layer: setattr(layer, "bias", None), lambda layer: delattr(layer, "bias")):
        fused.q_proj(x)
        for m in (ref, fused):
            if "bias" not in m.k_proj:
                m.k_proj.bias = mx.ones((16,), dtype=mx.bfloat16)
        fused.q_proj(x)
        for m in (ref, fused):
            remove(m.k_proj)
        assert "bias" not in fused.k_proj
        np.testing.assert_array_equal(to_numpy(fused.k_proj(x)), to_numpy(ref.k_proj(x)))


def test_siblings_differentiate_like_separate_layers():
    ref, fused = two_blocks()
    x = mx.random.normal((3, 64))
    for m in (ref, fused):
        m.unfreeze(keys=["bias"])
    loss = lambda m, x: (m(x) ** 2).sum()  # noqa: E731
    (l_ref, g_ref), (l_fused, g_fused) = (nn.value_and_grad(m, loss)(m, x) for m in (ref, fused))
    assert l_ref.item() == l_fused.item()
    from mlx.utils import tree_flatten

    g_ref, g_fused = dict(tree_flatten(g_ref)), dict(tree_flatten(g_fused))
    assert sorted(g_ref) == sorted(g_fused) and "q_proj.bias" in g_fused
    for key in g_ref:
        np.testing.assert_allclose(np.array(g_fused[key]), np.array(g_ref[key]), rtol=1e-5, atol=1e-6)
    dx = [mx.grad(lambda x: (m(x) ** 2).sum())(x) for m in (ref, fused)]
    np.testing.assert_allclose(np.array(dx[1]), np.array(dx[0]), rtol=1e-5, atol=1e-6)


class _GraphBackend:
    """A backend that stays in MLX's graph (float math on the dequantized weights), as the CUDA
    backend does: what mx.compile of a whole model needs (the CPU backend computes in numpy)."""

    name = "graph"
    weights_by_identity = False

    def __init__(self):
        self.calls = []

    def w8a8_linear(self, x, w, scale_w, bias):
        self.calls.append(w.shape[0])
        y = x.astype(mx.float32) @ (w.astype(mx.float32) * scale_w[:, None]).T
        return (y if bias is None else y + bias).astype(x.dtype)


def test_siblings_under_compile(monkeypatch):
    from int8nax import backends

    graph = _GraphBackend()
    monkeypatch.setattr(backends, "resolve", lambda requested=None: graph)
    ref, fused = two_blocks()
    x = mx.random.normal((2, 3, 64))
    eager = np.array(fused(x))
    graph.calls.clear()
    step = mx.compile(fused)
    np.testing.assert_array_equal(np.array(step(x)), eager)
    assert sorted(graph.calls) == [64, 64, 96, 192]  # traced once: four GEMMs
    np.testing.assert_array_equal(np.array(step(x * 2)), np.array(fused(x * 2)))
    np.testing.assert_array_equal(np.array(ref(x)), eager)
    # with the model's state as inputs of the compiled function (siblings' arrays are tracers)
    state_step = mx.compile(lambda x: fused(x), inputs=fused.state, outputs=fused.state)
    np.testing.assert_array_equal(np.array(state_step(x)), eager)
    np.testing.assert_array_equal(np.array(fused(x)), eager)


def test_siblings_can_be_deep_copied():
    import copy

    ref, fused = two_blocks()
    twin = copy.deepcopy(fused)
    x = mx.random.normal((2, 64))
    np.testing.assert_array_equal(np.array(twin(x)), np.array(ref(x)))
    assert twin.q_proj._group is twin.k_proj._group is not fused.q_proj._group


def test_siblings_are_thread_safe():
    from conftest import same_on_cpu_threads

    # The block's float glue runs on the CPU too: with the CPU backend on a machine whose default
    # device is a GPU, MLX's GPU reductions between the layers are not bitwise repeatable from
    # call to call (seen on the H200, threads or not), and this test is about int8nax's layers.
    ref, fused = two_blocks(backend="cpu")
    inputs = [mx.random.normal((2, 64), stream=mx.cpu) for _ in range(4)]
    with mx.stream(mx.cpu):
        want = [np.array(ref(x)) for x in inputs]
    assert same_on_cpu_threads(fused, inputs, want, rounds=15) == []
    assert fused.q_proj._group.shared


def test_quantize_linears_fuse_argument():
    model = Block()
    assert quantize_linears(model, fuse=[("gate_proj", "up_proj")]) == 7
    assert model.q_proj._group is None and model.gate_proj._group is model.up_proj._group is not None
    with pytest.raises(TypeError, match="quantize_linears: 'fuse' must be True, False or a sequence"):
        quantize_linears(Block(), fuse="q_proj")
    with pytest.raises(TypeError, match="'fuse'"):
        quantize_linears(Block(), fuse=[("q_proj", 3)])


def test_siblings_at_qwen_widths_give_the_bits_of_separate_layers(backend):
    """Qwen2.5-7B's widths (q|k|v: 3584 + 512 + 512, gate|up: 2 x 18944, K = 3584), where the fused
    GEMMs run other plans than the separate ones; on the GPU backends only (the CPU's numpy path
    takes minutes here)."""
    if backend not in ("cuda", "metal"):
        pytest.skip("GPU backends only: the CPU backend is covered by the small shapes above")
    mx.random.seed(5)
    ref = Block(dims=3584, kv=512, hidden=18944)
    ref.set_dtype(mx.bfloat16)
    mx.eval(ref.parameters())
    fused = Block(dims=3584, kv=512, hidden=18944)
    fused.update(ref.parameters())
    quantize_linears(ref, backend=backend, fuse=False)
    quantize_linears(fused, backend=backend)
    for m in (1, 16, 512):
        x = mx.random.normal((m, 3584)).astype(mx.bfloat16)
        for a, b in zip(ref.parts(x), fused.parts(x)):
            assert np.array_equal(np.array(a.view(mx.uint16)), np.array(b.view(mx.uint16))), f"M={m}"
