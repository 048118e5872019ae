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
