"""int8_matmul: bit-exact against the int64 reference on every backend."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import int8nax
from int8nax.reference import int8_matmul_ref

from conftest import random_int8


def check_exact(a, b, backend, **kw):
    out = int8nax.int8_matmul(a, b, backend=backend, **kw)
    assert out.dtype == mx.int32
    b_nk = np.asarray(b).T if kw.get("b_layout") == "kn" else b
    ref = int8_matmul_ref(a, b_nk)
    got = np.array(out)
    assert got.shape == ref.shape
    mismatch = np.argwhere(got.astype(np.int64) != ref)
    assert mismatch.size == 0, f"{len(mismatch)} wrong elements, first at {mismatch[0].tolist()}"


# Odd sizes straddle every tile used by the kernels (16, 32, 64, 128, 512, 1024 ...).
SHAPES = [
    (1, 1, 1), (1, 7, 1), (7, 1, 7), (1, 4096, 1), (3, 33, 5), (17, 100, 9), (33, 513, 65),
    (65, 1025, 129), (128, 128, 128), (129, 2049, 257), (16, 4096, 4096), (7, 513, 1025),
]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_random_shapes(backend, rng, m, k, n):
    check_exact(random_int8(rng, (m, k)), random_int8(rng, (n, k)), backend)


@pytest.mark.parametrize("fill_a,fill_b", [(-128, -128), (127, 127), (-128, 127), (127, -128)])
@pytest.mark.parametrize("m,k,n", [(5, 3000, 6), (64, 4097, 33)])
def test_extreme_values(backend, m, k, n, fill_a, fill_b):
    a = np.full((m, k), fill_a, np.int8)
    b = np.full((n, k), fill_b, np.int8)
    check_exact(a, b, backend)


def test_largest_k_does_not_wrap(backend):
    # K = 131071 with -128 * -128 everywhere: 2**31 - 16384, the largest sum int32 must hold.
    k = 131071
    a = np.full((2, k), -128, np.int8)
    b = np.full((3, k), -128, np.int8)
    out = np.array(int8nax.int8_matmul(a, b, backend=backend))
    assert (out == k * 16384).all()


def test_mixed_extremes(backend, rng):
    a = rng.choice(np.array([-128, -127, 0, 127], np.int8), size=(37, 2500))
    b = rng.choice(np.array([-128, 1, 127], np.int8), size=(41, 2500))
    check_exact(a, b, backend)


def test_b_layout_kn(backend, rng):
    a = random_int8(rng, (9, 70))
    b_kn = random_int8(rng, (70, 11))
    check_exact(a, b_kn, backend, b_layout="kn")


def test_transposed_and_strided_views(backend, rng):
    base_a = random_int8(rng, (80, 60))
    base_b = random_int8(rng, (90, 50))
    a = mx.array(base_a).T[::2, 3:53]  # [30, 50] from a transposed, strided view
    b = mx.array(base_b)[1::3, :]  # [30, 50], every third row
    out = np.array(int8nax.int8_matmul(a, b, backend=backend))
    ref = int8_matmul_ref(base_a.T[::2, 3:53], base_b[1::3, :])
    assert (out == ref).all()
    # numpy views too
    check_exact(base_a.T[::2, 3:53], base_b[1::3, :], backend)


@pytest.mark.parametrize("m,k,n", [(0, 8, 4), (4, 8, 0), (0, 0, 0), (3, 0, 5)])
def test_empty(backend, m, k, n):
    out = int8nax.int8_matmul(np.zeros((m, k), np.int8), np.zeros((n, k), np.int8), backend=backend)
    assert out.shape == (m, n) and out.dtype == mx.int32
    assert not np.array(out).any()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    m=st.integers(1, 300),
    k=st.integers(1, 300),
    n=st.integers(1, 300),
    seed=st.integers(0, 2**32 - 1),
    low=st.sampled_from([-128, -5, 0]),
)
def test_property_random(backend, m, k, n, seed, low):
    rng = np.random.default_rng(seed)
    a = rng.integers(low, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    check_exact(a, b, backend)
