"""Tiny, huge and non-finite values on every backend: the float64 model itself on
hand-computed cases, then every backend against it, with numpy warnings as errors (users run
with -W error: documented overflow to inf must not warn)."""

from __future__ import annotations

import warnings

import mlx.core as mx
import numpy as np
import pytest

import int8nax
from int8nax import quant
from int8nax.reference import max_ulp_error, quantize_activations_ref, to_numpy, w8a8_linear_ref

DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}
FLT_MIN = 2.0**-126


@pytest.fixture(autouse=True)
def warnings_are_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def codes(row, dtype=np.float32):
    q, s = quant.quantize_activations_np(np.array([row], dtype).astype(np.float32))
    return q[0].tolist(), s[0]


# --- the model, by hand ------------------------------------------------------------------


def test_model_tiny_row_example():
    # absmax 1e-37: s = 1e-37 / 127 = 7.874e-40, subnormal, so k = 64:
    # 1e-38 / 7.874e-40 = 12.7 -> 13; 5e-39 / 7.874e-40 = 6.35 -> 6.
    q, s = codes([1e-37, 1e-38, 0, 5e-39])
    assert q == [127, 13, 0, 6]
    assert s == np.float32(np.float32(1e-37) / np.float32(127)) and s < FLT_MIN


def test_model_tiny_row_exact_powers_of_two():
    # absmax 127 * 2^-130: s = 2^-130 exactly, and x / s are the integers themselves
    # (1 / s = 2^130 overflows float32: the naive x * (1 / s) gave 127 for every nonzero).
    q, s = codes([127 * 2.0**-130, 2.0**-130, -3 * 2.0**-130, 2.5 * 2.0**-130, -0.5 * 2.0**-130])
    assert s == np.float32(2.0**-130)
    assert q == [127, 1, -3, 3, -1]  # ties away from zero, as for normal rows


def test_model_boundary_between_the_branches():
    # absmax 127 * 2^-126 gives s = 2^-126 = FLT_MIN: normal, so k = 0 (cider's formula).
    q, s = codes([127 * 2.0**-126, 2.0**-126, 0.5 * 2.0**-126])
    assert s == np.float32(FLT_MIN) and q == [127, 1, 1]
    # one step below: s subnormal, k = 64, same codes here
    below = np.nextafter(np.float32(127 * 2.0**-126), np.float32(0))
    q, s = codes([below, 2.0**-126])
    assert s < FLT_MIN and q == [127, 1]


def test_model_normal_rows_are_ciders_formula_bit_for_bit(rng):
    # k = 0: x * fl(1 / s) exactly as cider computes it (every float16 row is such a row)
    x = (rng.standard_normal((20, 50)) * np.logspace(-30, 30, 20)[:, None]).astype(np.float32)
    s = (np.abs(x).max(axis=1) / np.float32(127)).astype(np.float32)
    inv = (np.float32(1) / s).astype(np.float32)
    want = np.clip(quant.round_half_away((x * inv[:, None]).astype(np.float32)), -127, 127)
    q, s_got = quant.quantize_activations_np(x)
    np.testing.assert_array_equal(s_got, s)
    np.testing.assert_array_equal(q, want.astype(np.int8))


def test_model_scale_underflow_is_a_zero_row():
    # absmax 2^-149 (the smallest subnormal): absmax / 127 rounds to 0, so the row is
    # treated like an all-zero row (scale 1, codes 0).
    q, s = codes([2.0**-149, 0, -(2.0**-149)])
    assert q == [0, 0, 0] and s == 1.0


def test_model_huge_row_by_hand():
    # x = v (bfloat16 value of 1e36), K = 1, w = [[1.0]]: codes 127 and 127, acc = 16129,
    # y = 16129 * fl(v / 127) * fl(1 / 127) = v within two float32 roundings, not inf.
    v = float(np.array(mx.array([1e36]).astype(mx.bfloat16).astype(mx.float32))[0])
    x = mx.array([[1e36]]).astype(mx.bfloat16)
    w, s_w = int8nax.quantize_weight_int8(np.array([[1.0]], np.float32))
    assert w.tolist() == [[127]] and s_w[0] == np.float32(1 / 127)
    y = w8a8_linear_ref(x, w, s_w)
    assert np.isfinite(y).all() and abs(y[0, 0] / v - 1) < 2**-22


def test_model_nan_rows_are_nan_without_warnings():
    x = np.array([[1.0, np.nan], [np.inf, 1.0], [1.0, 2.0]], np.float32)
    w, s_w = int8nax.quantize_weight_int8(np.eye(2, dtype=np.float32))
    y = w8a8_linear_ref(x, w, s_w, np.ones(2, np.float32))
    assert np.isnan(y[:2]).all() and np.isfinite(y[2]).all()


# --- every backend against the model -----------------------------------------------------


def tiny_rows(rng, k):
    x = np.stack([
        np.resize(np.array([1e-37, 1e-38, 0, 5e-39]), k),
        rng.standard_normal(k) * 1e-39,  # subnormal values
        rng.standard_normal(k) * 1e-37,  # normal values, subnormal scale
        rng.standard_normal(k) * 1e-36,  # scales either side of FLT_MIN
        rng.standard_normal(k) * 1e-35,  # near-subnormal, normal scale
        rng.standard_normal(k) * 1e-44,  # scale underflows: a zero row
        rng.standard_normal(k),
    ]).astype(np.float32)
    x[3, 0] = 127 * FLT_MIN
    return x


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tiny_rows_quantize(backend, rng, dtype):
    x = mx.array(tiny_rows(rng, 40)).astype(DTYPES[dtype])
    q, s = int8nax.quantize_activations(x, backend=backend)
    q_ref, s_ref = quantize_activations_ref(x)
    np.testing.assert_array_equal(np.array(s).view(np.int32), s_ref.view(np.int32))
    np.testing.assert_array_equal(np.array(q), q_ref)
    assert (s_ref[:3] < FLT_MIN).all()  # the rows really take the tiny-row branch
    if dtype == "float32":
        assert np.array(q)[0, :4].tolist() == [127, 13, 0, 6]


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("with_bias", [False, True])
def test_tiny_rows_w8a8_within_one_ulp(backend, rng, dtype, with_bias):
    k, n = 64, 24
    x = mx.array(tiny_rows(rng, k)).astype(DTYPES[dtype])
    # weights of magnitude ~1, so that outputs of the tiny rows are normal float32 numbers
    w, s_w = int8nax.quantize_weight_int8(rng.standard_normal((n, k)).astype(np.float32))
    b = (rng.standard_normal(n) * 1e-36).astype(np.float32) if with_bias else None
    y = int8nax.w8a8_linear(x, w, s_w, b, backend=backend)
    ref = w8a8_linear_ref(x, w, s_w, b)
    assert max_ulp_error(y, ref, dtype) <= 1.0
    if dtype == "float32":
        assert (np.abs(ref[:3]) > FLT_MIN).mean() > 0.5  # not a comparison of zeros


@pytest.mark.parametrize("with_bias", [False, True])
def test_huge_bfloat16_rows_stay_finite(backend, rng, with_bias):
    # bfloat16 x ~ 1e36: s_x ~ 8e33, acc * s_x alone exceeds float32's range, the result
    # (~5e34) does not: it must come out finite and within 1 ulp.
    k, n = 256, 16
    x = mx.array(rng.standard_normal((4, k)).astype(np.float32) * 1e36).astype(mx.bfloat16)
    w, s_w = int8nax.quantize_weight_int8(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
    b = rng.standard_normal(n).astype(np.float32) if with_bias else None
    y = int8nax.w8a8_linear(x, w, s_w, b, backend=backend)
    ref = w8a8_linear_ref(x, w, s_w, b)
    assert np.isfinite(ref).all() and np.abs(ref).max() > 1e34
    assert np.isfinite(to_numpy(y)).all()
    assert max_ulp_error(y, ref, "bfloat16") <= 1.0


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_huge_rows_near_float32_max(backend, rng, dtype):
    # scales near float32's maximum (x up to 3e38 in float32/bfloat16; 6e4 in float16)
    top = {"float16": 6e4, "bfloat16": 3e38, "float32": 3e38}[dtype]
    k, n = 32, 8
    x = mx.array(rng.uniform(-1, 1, (3, k)).astype(np.float32) * np.float32(top)).astype(DTYPES[dtype])
    w, s_w = int8nax.quantize_weight_int8(rng.standard_normal((n, k)).astype(np.float32) * 1e-3)
    y = int8nax.w8a8_linear(x, w, s_w, backend=backend)
    ref = w8a8_linear_ref(x, w, s_w)
    limit = float(np.finfo(np.float16).max) if dtype == "float16" else 3.3e38
    assert np.isfinite(ref).all() and (np.abs(ref) < limit).all()
    assert max_ulp_error(y, ref, dtype) <= 1.0


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("with_bias", [False, True])
def test_documented_overflow_is_inf_without_warnings(backend, dtype, with_bias):
    # Results beyond the output dtype's range become inf (with the right sign), silently.
    top = {"float16": 6e4, "bfloat16": 3e38, "float32": 3e38}[dtype]
    x = mx.array(np.array([[top, -top, top, top], [1, 2, 3, 4]], np.float32)).astype(DTYPES[dtype])
    w, s_w = int8nax.quantize_weight_int8(np.array([[100.0, -100.0, 100.0, 100.0], [1, 0, 0, 0]], np.float32))
    b = np.zeros(2, np.float32) if with_bias else None
    y = to_numpy(int8nax.w8a8_linear(x, w, s_w, b, backend=backend), np.float64)
    assert y[0, 0] == np.inf and np.isfinite(y[0, 1]) and np.isfinite(y[1]).all()
    ref = w8a8_linear_ref(x, w, s_w, b)
    assert max_ulp_error(y[:, 1:], ref[:, 1:], dtype) <= 1.0 and max_ulp_error(y[1:], ref[1:], dtype) <= 1.0


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_non_finite_rows_without_warnings(backend, rng, dtype):
    x = rng.standard_normal((4, 16)).astype(np.float32)
    x[0, 3], x[1, 0], x[2, 5] = np.nan, np.inf, -np.inf
    xm = mx.array(x).astype(DTYPES[dtype])
    w, s_w = int8nax.quantize_weight_int8(rng.standard_normal((5, 16)).astype(np.float32))
    q, s = int8nax.quantize_activations(xm, backend=backend)
    assert np.isnan(np.array(s)[:3]).all() and not np.array(q)[:3].any()
    for b in (None, np.ones(5, np.float32)):
        y = to_numpy(int8nax.w8a8_linear(xm, w, s_w, b, backend=backend))
        assert np.isnan(y[:3]).all() and np.isfinite(y[3]).all()


@pytest.mark.parametrize("k", [23, 40, 126])
def test_model_tiny_row_rule_does_not_depend_on_k(rng, k):
    # quant.py defines k = 64; quantize_rows.metal uses 2^126 (= 1 / FLT_MIN, no literal). For
    # every k in [23, 126], s * 2^k and its reciprocal are normal, where float32 rounding does
    # not depend on the exponent, so the codes are the same.
    x = (rng.standard_normal((400, 33)) * (2.0 ** rng.uniform(-149, -120, (400, 1)))).astype(np.float32)
    q64, s = quant.quantize_activations_np(x)
    tiny = s < FLT_MIN
    assert tiny.sum() > 300
    up = np.float32(2.0**k)
    inv = (np.float32(1) / (s[tiny] * up)).astype(np.float32)
    qk = np.clip(quant.round_half_away((x[tiny] * up) * inv[:, None]), -127, 127).astype(np.int8)
    np.testing.assert_array_equal(qk, q64[tiny])


def test_first_use_check_covers_tiny_rows():
    from int8nax import exactness
    from int8nax.backends.cpu import backend as cpu

    rows = exactness.tiny_rows(np.random.default_rng(0), 37)
    q, s = quant.quantize_activations_np(rows)
    assert q[0, :4].tolist() == [127, 13, 0, 6] and (s[:2] < FLT_MIN).all()
    b = cpu.BACKEND
    assert exactness.first_use_check(b.int8_matmul, b.quantize_activations, b.w8a8_linear) == []

    def reciprocal_of_the_scale(x):  # what a kernel without the tiny-row rule computes
        x32 = to_numpy(x, np.float32)
        s = quant.row_scales(x32)
        with np.errstate(over="ignore", invalid="ignore"):
            v = x32 * (np.float32(1) / s)[:, None]
            qn = np.clip(np.nan_to_num(quant.round_half_away(v)), -127, 127).astype(np.int8)
        return mx.array(qn), mx.array(s)

    failures = exactness.first_use_check(b.int8_matmul, reciprocal_of_the_scale, b.w8a8_linear)
    assert any("float32 tiny rows" in f for f in failures) and any("bfloat16 tiny rows" in f for f in failures)


def test_model_scale_rounded_up_to_the_smallest_subnormal():
    # absmax = 64 * 2^-149: absmax / 127 = 0.504 * 2^-149 rounds up to s = 2^-149, so the
    # codes are x / s = 64 (found by hypothesis in test_properties.py): s is the float32
    # quotient the spec defines, however coarse.
    q, s = codes([64 * 2.0**-149, -(2.0**-149), 0])
    assert s == np.float32(2.0**-149) and q == [64, -1, 0]
