"""W8A8Linear and quantize_linears: the layer computes w8a8_linear of the quantized weights."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

import int8nax
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


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: W8A8Linear(0, 4), ValueError, ["W8A8Linear", "'input_dims'", "positive int", "0"]),
        (lambda: W8A8Linear(4, "8"), TypeError, ["W8A8Linear", "'output_dims'", "positive int", "str"]),
        (lambda: W8A8Linear(4, 4, backend=123), TypeError, ["W8A8Linear", "'backend'", "int"]),
        (lambda: W8A8Linear(4, 4, backend="gpu"), ValueError, ["W8A8Linear", "'backend'", "'gpu'"]),
        (lambda: W8A8Linear.from_linear(nn.Linear(2, 2), backend=mx.cpu), TypeError, ["'backend'", "Device"]),
        (lambda: quantize_linears([nn.Linear(2, 2)]), TypeError, ["quantize_linears", "'model'", "list"]),
        (lambda: quantize_linears(nn.Linear(2, 2), predicate=True), TypeError, ["'predicate'", "callable"]),
        (lambda: W8A8Linear(4, 3)(mx.zeros((2, 5))), ValueError, ["W8A8Linear", "input_dims = 4", "(2, 5)"]),
        (lambda: W8A8Linear(4, 3)(mx.zeros((2, 4), mx.int32)), TypeError, ["w8a8_linear", "'x'", "int32"]),
    ],
)
def test_layer_bad_input_is_named(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"
