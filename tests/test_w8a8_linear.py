"""w8a8_linear against the float64 model of the same quantization (int8nax.reference)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import int8nax
from int8nax.reference import max_ulp_error, to_numpy, w8a8_linear_ref

DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}


def make_layer(rng, m, k, n, dtype, bias=False):
    x = mx.array(rng.standard_normal((m, k)).astype(np.float32)).astype(DTYPES[dtype])
    w_int8, s_w = int8nax.quantize_weight_int8(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
    b = rng.standard_normal(n).astype(np.float32) if bias else None
    return x, w_int8, s_w, b


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("m,k,n", [(1, 64, 8), (5, 300, 7), (33, 1100, 65), (128, 4096, 256)])
def test_within_one_ulp_of_float64_model(backend, rng, dtype, m, k, n):
    x, w, s_w, _ = make_layer(rng, m, k, n, dtype)
    y = int8nax.w8a8_linear(x, w, s_w, backend=backend)
    assert y.dtype == DTYPES[dtype] and y.shape == (m, n)
    ref = w8a8_linear_ref(x, w, s_w)
    assert max_ulp_error(y, ref, dtype) <= 1.0


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_bias(backend, rng, dtype):
    x, w, s_w, b = make_layer(rng, 17, 513, 33, dtype, bias=True)
    y = int8nax.w8a8_linear(x, w, s_w, mx.array(b), backend=backend)
    assert max_ulp_error(y, w8a8_linear_ref(x, w, s_w, b), dtype) <= 1.0


# How closely the bias cancels the product, per output dtype: deep enough that rounding the
# product to float32 (error ~2**-24 * |product|, |product| ~ 1000) before adding the bias is
# several ulps of the small result, yet the result stays a normal number of the dtype.
CANCEL = {"float16": 2.0**-14, "bfloat16": 2.0**-18, "float32": 2.0**-24}


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_bias_cancelling_the_product(backend, rng, dtype):
    # K = 1 keeps acc small and exactly known; bias = -(acc * s_x * s_w) * (1 + eps).
    m, n = 64, 48
    x = mx.array(rng.uniform(20, 40, (m, 1)).astype(np.float32)).astype(DTYPES[dtype])
    w, s_w = int8nax.quantize_weight_int8(rng.uniform(20, 40, (n, 1)).astype(np.float32))
    prod = w8a8_linear_ref(x, w, s_w)
    b = (-prod[m // 2] * (1 + CANCEL[dtype])).astype(np.float32)
    y = int8nax.w8a8_linear(x, w, s_w, b, backend=backend)
    assert max_ulp_error(y, w8a8_linear_ref(x, w, s_w, b), dtype) <= 1.0


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_cosine_against_unquantized(backend, rng, dtype):
    m, k, n = 64, 1024, 96
    x32 = rng.standard_normal((m, k)).astype(np.float32)
    w32 = rng.standard_normal((n, k)).astype(np.float32)
    x = mx.array(x32).astype(DTYPES[dtype])
    w, s_w = int8nax.quantize_weight_int8(w32)
    y = to_numpy(int8nax.w8a8_linear(x, w, s_w, backend=backend), np.float64).ravel()
    exact = (to_numpy(x, np.float64) @ w32.astype(np.float64).T).ravel()
    cos = y @ exact / (np.linalg.norm(y) * np.linalg.norm(exact))
    assert cos >= 0.999, cos


def test_nan_and_inf_rows_poison_only_themselves(backend, rng):
    x, w, s_w, b = make_layer(rng, 6, 40, 9, "float16", bias=True)
    xn = np.array(x.astype(mx.float32))
    xn[1, 5] = np.nan
    xn[4, 0] = -np.inf
    y = to_numpy(int8nax.w8a8_linear(mx.array(xn).astype(mx.float16), w, s_w, b, backend=backend))
    assert np.isnan(y[1]).all() and np.isnan(y[4]).all()
    clean = [0, 2, 3, 5]
    assert np.isfinite(y[clean]).all()
    ref = w8a8_linear_ref(xn[clean].astype(np.float16), w, s_w, b)
    np.testing.assert_allclose(y[clean], ref, rtol=2e-3, atol=2e-3)


def test_zero_rows_give_bias(backend, rng):
    _, w, s_w, b = make_layer(rng, 1, 32, 5, "float32", bias=True)
    y = np.array(int8nax.w8a8_linear(mx.zeros((3, 32)), w, s_w, b, backend=backend))
    np.testing.assert_array_equal(y, np.broadcast_to(b, (3, 5)))


@pytest.mark.parametrize("m,k,n", [(0, 16, 4), (3, 16, 0), (3, 0, 4)])
def test_empty(backend, m, k, n):
    w = np.zeros((n, k), np.int8)
    y = int8nax.w8a8_linear(mx.zeros((m, k), mx.float16), w, np.ones(n, np.float32), backend=backend)
    assert y.shape == (m, n) and y.dtype == mx.float16 and not np.array(y).any()


def test_batched_leading_dims(backend, rng):
    x, w, s_w, _ = make_layer(rng, 12, 64, 10, "float32")
    y = int8nax.w8a8_linear(x.reshape(3, 4, 64), w, s_w, backend=backend)
    assert y.shape == (3, 4, 10)
    flat = int8nax.w8a8_linear(x, w, s_w, backend=backend)
    np.testing.assert_array_equal(np.array(y).reshape(12, 10), np.array(flat))


def test_strided_activation_view(backend, rng):
    base = mx.array(rng.standard_normal((20, 64)).astype(np.float32))
    x = base.T[:40:2]  # [20, 20] from a transposed view
    _, w, s_w, _ = make_layer(rng, 1, 20, 7, "float32")
    y = int8nax.w8a8_linear(x, w, s_w, backend=backend)
    assert max_ulp_error(y, w8a8_linear_ref(np.array(x), w, s_w), "float32") <= 1.0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 200), k=st.integers(1, 700), n=st.integers(1, 200),
       seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(list(DTYPES)))
def test_property(backend, m, k, n, seed, dtype):
    rng = np.random.default_rng(seed)
    x, w, s_w, _ = make_layer(rng, m, k, n, dtype)
    y = int8nax.w8a8_linear(x, w, s_w, backend=backend)
    assert max_ulp_error(y, w8a8_linear_ref(x, w, s_w), dtype) <= 1.0
