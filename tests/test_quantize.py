"""Weight and activation quantization: the documented math, exactly."""

from __future__ import annotations

import warnings

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import int8nax
from int8nax import quant
from int8nax.reference import quantize_activations_ref


def test_weight_quant_matches_formula(rng):
    w = rng.standard_normal((40, 77)).astype(np.float32)
    q, s = int8nax.quantize_weight_int8(w)
    assert q.dtype == np.int8 and s.dtype == np.float32 and s.shape == (40,)
    expect_s = (np.abs(w).max(axis=1) / np.float32(127)).astype(np.float32)
    np.testing.assert_array_equal(s, expect_s)
    np.testing.assert_array_equal(q, np.clip(np.round(w / expect_s[:, None]), -127, 127).astype(np.int8))
    assert q.min() >= -127 and np.abs(q).max(axis=1).min() == 127


def test_weight_quant_rounds_half_to_even():
    # absmax 127 gives scale 1, so the codes are round_half_even(w)
    w = np.array([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5]], np.float32)
    q, s = int8nax.quantize_weight_int8(w)
    assert s[0] == 1.0
    assert q.tolist() == [[127, 0, 2, 2, 0, -2, -2]]


def test_weight_quant_zero_row_and_mx_input():
    w = mx.array(np.array([[0.0, 0.0], [1.0, -2.0]], np.float32))
    q, s = int8nax.quantize_weight_int8(w)
    assert isinstance(q, mx.array) and q.dtype == mx.int8
    assert np.array(s).tolist()[0] == 1.0 and np.array(q)[0].tolist() == [0, 0]
    assert np.isfinite(np.array(s)).all()


def test_weight_quant_accepts_float64_and_bf16():
    w = np.linspace(-3, 3, 24).reshape(4, 6)
    q64, s64 = int8nax.quantize_weight_int8(w)
    q32, s32 = int8nax.quantize_weight_int8(w.astype(np.float32))
    np.testing.assert_array_equal(q64, q32)
    qb, sb = int8nax.quantize_weight_int8(mx.array(w.astype(np.float32)).astype(mx.bfloat16))
    assert qb.shape == (4, 6)


def test_round_half_away_is_exact_near_half():
    below_half = np.nextafter(np.float32(0.5), np.float32(0))
    v = np.array([0.5, -0.5, 1.5, -2.5, below_half, -below_half, 126.5, 0.0], np.float32)
    assert quant.round_half_away(v).tolist() == [1, -1, 2, -3, 0, 0, 127, 0]


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float32])
def test_activation_quant_matches_reference(backend, rng, dtype):
    x = mx.array(rng.standard_normal((33, 517)).astype(np.float32) * 3).astype(dtype)
    q, s = int8nax.quantize_activations(x, backend=backend)
    q_ref, s_ref = quantize_activations_ref(x)
    assert q.dtype == mx.int8 and s.dtype == mx.float32
    np.testing.assert_array_equal(np.array(s), s_ref)
    np.testing.assert_array_equal(np.array(q), q_ref)


def test_activation_quant_ties_round_away(backend):
    # absmax 127 -> scale 1 -> inv 1: the codes are round_half_away(x)
    x = mx.array(np.array([[127.0, 0.5, -0.5, 2.5, -2.5, 1.25]], np.float32))
    q, s = int8nax.quantize_activations(x, backend=backend)
    assert np.array(s).tolist() == [1.0]
    assert np.array(q).tolist() == [[127, 1, -1, 3, -3, 1]]


def test_activation_quant_special_rows(backend):
    x = np.ones((4, 8), np.float32)
    x[1] = 0.0
    x[2, 3] = np.nan
    x[3, 0] = np.inf
    q, s = int8nax.quantize_activations(mx.array(x), backend=backend)
    q, s = np.array(q), np.array(s)
    assert s[0] == np.float32(1 / 127) and (q[0] == 127).all()
    assert s[1] == 1.0 and (q[1] == 0).all()
    assert np.isnan(s[2]) and np.isnan(s[3])
    assert (q[2] == 0).all() and (q[3] == 0).all()


def test_activation_quant_batched_shape(backend, rng):
    x = mx.array(rng.standard_normal((2, 3, 10)).astype(np.float32))
    q, s = int8nax.quantize_activations(x, backend=backend)
    assert q.shape == (2, 3, 10) and s.shape == (2, 3)
    q2, s2 = int8nax.quantize_activations(x.reshape(6, 10), backend=backend)
    np.testing.assert_array_equal(np.array(q).reshape(6, 10), np.array(q2))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(1, 64), k=st.integers(1, 600), seed=st.integers(0, 2**32 - 1),
       scale=st.sampled_from([1e-3, 1.0, 300.0]))
def test_activation_quant_property(backend, m, k, seed, scale):
    rng = np.random.default_rng(seed)
    x = mx.array((rng.standard_normal((m, k)) * scale).astype(np.float16))
    q, s = int8nax.quantize_activations(x, backend=backend)
    q_ref, s_ref = quantize_activations_ref(x)
    np.testing.assert_array_equal(np.array(s), s_ref)
    np.testing.assert_array_equal(np.array(q), q_ref)


@pytest.mark.parametrize("threads", [1, 3])
def test_weight_quant_in_blocks_is_the_whole_arrays_formula(monkeypatch, rng, threads):
    # blocks of 2 rows (of 300 float32s) and threads change nothing: every element gets the
    # formula's float32 operations; ties and a zero row land in later blocks too
    monkeypatch.setattr(quant, "WEIGHT_BLOCK_BYTES", 2 * 300 * 4)
    w = rng.standard_normal((37, 300)).astype(np.float32)
    w[20] = 0
    w[33, :4] = [127.0, 0.5, -1.5, 2.5]
    w[33, 4:] = 0
    scale = np.max(np.abs(w), axis=1) / np.float32(127)
    scale[scale == 0] = 1
    expect = np.clip(np.round(w / scale[:, None]), -127, 127).astype(np.int8)
    q, s = quant.quantize_weight_np(w, threads=threads)
    assert np.array_equal(q, expect) and np.array_equal(s, scale.astype(np.float32))
    assert list(q[33, :4]) == [127, 0, -2, 2] and not q[20].any() and s[20] == 1
    wide = w.astype(np.float64)
    q64, s64 = quant.quantize_weight_np(wide, threads=threads)
    assert np.array_equal(q64, expect) and np.array_equal(s64, s)


def test_weight_quant_names_the_first_bad_value_in_a_later_block(monkeypatch, rng):
    monkeypatch.setattr(quant, "WEIGHT_BLOCK_BYTES", 4 * 64)
    w = rng.standard_normal((40, 16)).astype(np.float32)
    w[29, 7], w[31, 2] = np.inf, np.nan
    with pytest.raises(ValueError, match=r"row 29 holds inf \(at column 7\)"):
        int8nax.quantize_weight_int8(w)
    with pytest.raises(ValueError, match=r"row 31 holds nan \(at column 2\)"):
        int8nax.quantize_weight_int8(mx.array(np.where(np.isinf(w), 0, w)))


@pytest.mark.parametrize("shape, row", [((4, 8), 1), ((256, 4096), 200)], ids=["one-block", "threaded-blocks"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_float32_weight_is_refused_without_numpys_warning(shape, row, bad):
    """The refusal is the one message: numpy's RuntimeWarning about the cast of the row it refuses
    is not printed before it."""
    w = np.ones(shape, np.float32)
    w[row, 2] = bad
    for given in (w, mx.array(w)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(ValueError, match=rf"'w' must be finite, but row {row} holds"):
                int8nax.quantize_weight_int8(given)
