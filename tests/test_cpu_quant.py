"""The CPU backend's fast quantization (bit-identical to int8nax.quant) and dequantization
(correctly rounded from float64, no warnings, inf only beyond the output dtype)."""

from __future__ import annotations

import math
import warnings

import mlx.core as mx
import numpy as np
import pytest

from int8nax import quant
from int8nax.reference import max_ulp_error
from int8nax.backends.cpu import backend as cpu, engines as cpu_engines, quant as cpu_quant


def assert_same_as_definition(x32: np.ndarray) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        q, s = cpu_quant.quantize_rows(x32)
    with np.errstate(all="ignore"):  # the definition may warn on tiny rows; the backend must not
        want_q, want_s = quant.quantize_activations_np(x32)
    assert q.dtype == np.int8 and s.dtype == np.float32
    np.testing.assert_array_equal(s.view(np.int32), want_s.view(np.int32))
    bad = np.argwhere(q != want_q)
    assert bad.size == 0, f"{len(bad)} codes differ, first at {bad[0].tolist()}: {q[tuple(bad[0])]} vs {want_q[tuple(bad[0])]}"


@pytest.mark.parametrize("scale", [1e-30, 1e-3, 1.0, 7.5, 1e4, 1e30, 3e36])
def test_random_rows(rng, scale):
    assert_same_as_definition((rng.standard_normal((37, 301)) * scale).astype(np.float32))


def test_rows_of_mixed_magnitude(rng):
    x = rng.standard_normal((64, 200)).astype(np.float32)
    x *= np.float32(10.0) ** rng.integers(-30, 30, (64, 1)).astype(np.float32)
    assert_same_as_definition(x)


def test_every_rounding_case_near_ties():
    # absmax 127 makes the scale exactly 1, so the codes are the rounded values themselves:
    # every n + 0.5 and its 8 float32 neighbours each side, and the classic 0.5 - 2**-25.
    centres = np.arange(0, 127, dtype=np.float32) + np.float32(0.5)
    bits = centres.view(np.uint32)[:, None] + np.arange(-8, 9, dtype=np.int64)[None, :]
    values = bits.astype(np.uint32).view(np.float32).ravel()
    values = np.concatenate([values, [np.float32(0.5) - np.float32(2**-25), np.float32(2**-149), 0.0, -0.0]])
    values = values[np.abs(values) <= 127]
    row = np.concatenate([[np.float32(127)], values, -values]).astype(np.float32)
    assert_same_as_definition(row[None, :])


def test_sampled_float32_range():
    # Every 4099th float32 in [0, 127] (the exhaustive pass is in docs/results/cpu.md).
    bits = np.arange(0, int(np.float32(127).view(np.uint32)) + 1, 4099, dtype=np.uint32)
    v = bits.view(np.float32)
    rows = np.concatenate([v, -v])
    rows = np.concatenate([rows, np.zeros((-len(rows)) % 4095, np.float32)]).reshape(-1, 4095)
    rows = np.concatenate([np.full((rows.shape[0], 1), 127, np.float32), rows], axis=1)
    assert_same_as_definition(rows)


def test_nan_inf_zero_and_tiny_rows(rng):
    k = 50
    x = rng.standard_normal((10, k)).astype(np.float32)
    x[0] = 0
    x[1, 3] = np.nan
    x[2, 7] = np.inf
    x[3, 0] = -np.inf
    x[4] = -0.0
    x[5, :4] = [1e-37, 1e-38, 0, 5e-39]  # the lead's example: scale below 2**-126
    x[5, 4:] = 0
    x[6] = np.float32(2**-149) * rng.integers(-3, 4, k)  # subnormal everywhere
    x[7] = np.float32(3.4e38) * np.sign(rng.standard_normal(k))  # near float32's max
    x[8, :] = np.float32(2**-126)  # scale just below normal
    assert_same_as_definition(x)


def test_single_column_and_empty():
    assert_same_as_definition(np.array([[3.0], [-0.25], [0.0]], np.float32))
    q, s = cpu_quant.quantize_rows(np.zeros((3, 0), np.float32))
    assert q.shape == (3, 0) and (s == 1).all()


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float32])
def test_backend_quantize_activations(rng, dtype):
    x = mx.array((rng.standard_normal((33, 130)) * 5).astype(np.float32)).astype(dtype)
    q, s = cpu.BACKEND.quantize_activations(x)
    want_q, want_s = quant.quantize_activations_np(np.array(x.astype(mx.float32)))
    np.testing.assert_array_equal(np.array(q), want_q)
    np.testing.assert_array_equal(np.array(s).view(np.int32), want_s.view(np.int32))


# --- dequantization ------------------------------------------------------------------------


DTYPE_NAMES = {mx.float16: "float16", mx.bfloat16: "bfloat16", mx.float32: "float32"}


def bf16_round(y: float) -> float:
    """Correctly rounded bfloat16 value of a float64 (exact arithmetic, independent code)."""
    if not math.isfinite(y) or y == 0:
        return y
    _, e = math.frexp(y)  # |y| = m * 2**e, m in [0.5, 1)
    quantum = 2.0 ** max(e - 8, -133)  # 8 significant bits; fixed quantum below 2**-126
    r = round(y / quantum) * quantum  # round() on a float is half to even, and exact here
    return math.copysign(math.inf, y) if abs(r) > 3.3895313892515355e38 else r


def expected(y64: np.ndarray, dtype) -> np.ndarray:
    with np.errstate(over="ignore"):
        if dtype == mx.float16:
            return y64.astype(np.float16).astype(np.float64)
        if dtype == mx.float32:
            return y64.astype(np.float32).astype(np.float64)
    return np.vectorize(bf16_round, otypes=[np.float64])(y64)


def _casters():
    casters = [pytest.param(cpu_engines.NumpyEngine().float16, id="f16-numpy")]
    status = cpu_engines.engine_status("onnx")
    if status.engine is not None:
        casters.append(pytest.param(status.engine.float16, id="f16-onnx"))
    return casters


@pytest.fixture(params=_casters())
def to_float16(request):
    return request.param


@pytest.fixture
def dequant(to_float16):
    def run(acc, sx, sw, bias, dtype) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            y = cpu_quant.dequantize(acc, sx, sw, bias, dtype, to_float16)
        assert y.dtype == dtype and tuple(y.shape) == acc.shape
        return np.array(y.astype(mx.float32)).astype(np.float64)
    return run


def model(acc, sx, sw, bias):
    y = acc.astype(np.float64) * sx.astype(np.float64)[:, None] * sw.astype(np.float64)[None, :]
    return y if bias is None else y + bias.astype(np.float64)[None, :]


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float32])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("transposed", [False, True])
def test_dequantize_is_correctly_rounded(dequant, rng, dtype, with_bias, transposed):
    m, n = 40, 70
    acc = rng.integers(-2**31 + 1, 2**31 - 1, (m, n)).astype(np.int32)
    acc[:, :10] = rng.integers(-300, 300, (m, 10))
    if transposed:
        acc = np.ascontiguousarray(acc.T).T
    sx = (10.0 ** rng.uniform(-12, -6, m)).astype(np.float32)
    sw = (10.0 ** rng.uniform(-6, -2, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32) * 100 if with_bias else None
    y64 = model(acc, sx, sw, bias)
    got = dequant(acc, sx, sw, bias, dtype)
    want = expected(y64, dtype)
    if bias is None and dtype != mx.float32:
        # The float32 route: within 1 ulp, and off the correctly rounded value by at most 1 ulp
        # on a few elements (exact halfway cases of the three float32 roundings).
        assert max_ulp_error(got, y64, DTYPE_NAMES[dtype]) <= 1.0
        assert (got != want).mean() < 0.01
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_float32_route_does_not_overflow_to_inf(dequant, dtype):
    # y = 65520 * (1 + 2**-23) * (1 - 2**-23) = 65520 - 2**-30: float32 rounds it to 65520.0,
    # which float16 rounds to inf; from float64 it is 65504. bfloat16: the same at its limit.
    top = 65520.0 if dtype == mx.float16 else 3.3961775292304767e38  # halfway past the largest
    acc = np.array([[1, 2**20]], np.int32)
    sx = np.array([1 + 2**-23], np.float32)
    sw = np.array([top * (1 - 2**-23), top * (1 - 2**-23) / 2**20], np.float32)
    y64 = model(acc, sx, sw, None)
    got = dequant(acc, sx, sw, None, dtype)
    np.testing.assert_array_equal(got, expected(y64, dtype))
    assert np.isfinite(got).all()


@pytest.mark.parametrize("dtype,midpoint", [(mx.float16, 1 + 2**-11), (mx.bfloat16, 1 + 2**-8)])
@pytest.mark.parametrize("sign", [1, -1])
def test_double_rounding_at_a_midpoint(dequant, dtype, midpoint, sign):
    # y = midpoint + 2**-30: float32 rounds it onto the midpoint, where rounding to even would
    # go down; rounded once, it goes up. And the other side of the midpoint.
    acc = np.array([[sign, -sign]], np.int32)
    sx = np.array([1.0], np.float32)
    sw = np.array([2**-30, 2**-30], np.float32)
    bias = np.array([sign * midpoint, sign * midpoint], np.float32)
    got = dequant(acc, sx, sw, bias, dtype)
    ulp = 2**-10 if dtype == mx.float16 else 2**-7
    np.testing.assert_array_equal(got, [[sign * (1 + ulp), sign * 1.0]])


def test_float16_just_below_overflow_is_finite(dequant):
    # 65520 - 2**-12 rounds to 65520.0 in float32, then to inf in float16; once: 65504.
    acc = np.array([[-1, 1]], np.int32)
    got = dequant(acc, np.array([1.0], np.float32), np.array([2**-12, 2**-12], np.float32),
                  np.array([65520.0, 65520.0], np.float32), mx.float16)
    np.testing.assert_array_equal(got, [[65504.0, np.inf]])


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float32])
def test_extreme_scales_do_not_overflow_intermediates(dequant, rng, dtype):
    acc = rng.integers(-2**31 + 1, 2**31 - 1, (6, 5)).astype(np.int32)
    sx = np.array([1e36 / 127, 3.4e38 / 127, 1e-45, 2**-140, 1.0, 1e30], np.float32)
    sw = np.array([1e-40, 1e-30, 1e-10, 1.0, 2**-149], np.float32)
    y64 = model(acc, sx, sw, None)
    got = dequant(acc, sx, sw, None, dtype)
    np.testing.assert_array_equal(got, expected(y64, dtype))


def test_float16_subnormal_outputs(dequant, rng):
    acc = rng.integers(-1000, 1000, (20, 30)).astype(np.int32)
    sx = np.full(20, 2**-20, np.float32)
    sw = (10.0 ** rng.uniform(-9, -5, 30)).astype(np.float32)
    np.testing.assert_array_equal(dequant(acc, sx, sw, None, mx.float16), expected(model(acc, sx, sw, None), mx.float16))


def test_nan_scale_rows_stay_nan(dequant):
    acc = np.ones((2, 3), np.int32)
    got = dequant(acc, np.array([np.nan, 1.0], np.float32), np.ones(3, np.float32), None, mx.bfloat16)
    assert np.isnan(got[0]).all() and (got[1] == 1).all()


def test_float32_route_near_max_beside_nan(dequant):
    # A NaN weight scale in one column must not hide a near-overflow value in another.
    acc = np.array([[1, 1]], np.int32)
    sx = np.array([1 + 2**-23], np.float32)
    sw = np.array([np.nan, 65520.0 * (1 - 2**-23)], np.float32)
    got = dequant(acc, sx, sw, None, mx.float16)
    assert np.isnan(got[0, 0]) and got[0, 1] == 65504.0


def test_quantize_rows_may_overwrite_its_input(rng):
    x = (rng.standard_normal((9, 77)) * 3).astype(np.float32)
    x[2, 5] = np.nan
    x[4, :3] = [1e-37, 1e-38, 5e-39]
    x[4, 3:] = 0
    want_q, want_s = cpu_quant.quantize_rows(x.copy())
    q, s = cpu_quant.quantize_rows(x, overwrite=True)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(s.view(np.int32), want_s.view(np.int32))


def test_row_blocks_on_threads_give_the_same_result(rng, to_float16):
    # Large enough (>= 2**18 elements per block) that three threads each get a block.
    x = (rng.standard_normal((601, 1400)) * 4).astype(np.float32)
    x[10, 3] = np.nan
    x[500, :2] = [1e-38, 5e-39]
    x[500, 2:] = 0
    q1, s1 = cpu_quant.quantize_rows(x, threads=1)
    q3, s3 = cpu_quant.quantize_rows(x.copy(), overwrite=True, threads=3)
    np.testing.assert_array_equal(q1, q3)
    np.testing.assert_array_equal(s1.view(np.int32), s3.view(np.int32))
    assert_same_as_definition(x)
    acc = rng.integers(-2**31 + 1, 2**31 - 1, (700, 1300)).astype(np.int32)
    sx = (10.0 ** rng.uniform(-12, -6, 700)).astype(np.float32)
    sw = (10.0 ** rng.uniform(-6, -2, 1300)).astype(np.float32)
    sw[7] = 65520.0 * (1 - 2**-23) / 2**31 * 1e12  # some elements near float16's limit
    for dtype in (mx.float16, mx.bfloat16):
        for a in (acc, np.ascontiguousarray(acc.T).T):
            one = cpu_quant.dequantize(a, sx, sw, None, dtype, to_float16, threads=1)
            many = cpu_quant.dequantize(a, sx, sw, None, dtype, to_float16, threads=3)
            np.testing.assert_array_equal(np.array(one.astype(mx.float32)), np.array(many.astype(mx.float32)))
