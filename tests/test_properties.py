"""Property tests over each float dtype's whole range, subnormal to max: quantization is
bit-exact against int8nax.quant and W8A8 within 1 ulp of the float64 model on every backend;
the model itself obeys the quantization error bound (and is checked by hand in
test_extremes.py). Small shapes and modest example counts keep each test to a few seconds."""

from __future__ import annotations

import warnings

import mlx.core as mx
import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import int8nax
from int8nax import quant
from int8nax.reference import max_ulp_error, quantize_activations_ref, to_numpy, w8a8_linear_ref

DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}
# (smallest subnormal exponent, largest exponent) of each dtype: x = normal * 2**e
RANGE = {"float16": (-24, 15), "bfloat16": (-133, 127), "float32": (-149, 127)}
MAXVAL = {"float16": 65504.0, "bfloat16": float(np.finfo(np.float32).max) * (1 - 2**-8), "float32": float(np.finfo(np.float32).max)}
MANT = {"float16": 10, "bfloat16": 7, "float32": 23}
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def activations(draw, dtype=None):
    dtype = dtype or draw(st.sampled_from(list(DTYPES)))
    lo, hi = RANGE[dtype]
    # the ends of the range (subnormal, near max) as often as the middle
    e = draw(st.one_of(st.integers(lo, lo + 30), st.integers(hi - 20, hi), st.integers(lo, hi)))
    m, k = draw(st.integers(1, 6)), draw(st.integers(1, 48))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)) * 2.0**e
    x = np.clip(x, -MAXVAL[dtype], MAXVAL[dtype])
    with np.errstate(over="ignore", under="ignore"):
        xm = mx.array(x.astype(np.float32)).astype(DTYPES[dtype])
    return dtype, e, xm, rng


def with_warnings_as_errors(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


@SETTINGS
@given(case=activations())
def test_quantize_over_the_whole_range(backend, case):
    dtype, _, x, _ = case
    q, s = with_warnings_as_errors(lambda: int8nax.quantize_activations(x, backend=backend))
    q_ref, s_ref = quantize_activations_ref(x)
    np.testing.assert_array_equal(np.array(s).view(np.int32), s_ref.view(np.int32))
    np.testing.assert_array_equal(np.array(q), q_ref)


@SETTINGS
@given(case=activations())
def test_model_obeys_the_quantization_error_bound(case):
    # |x / s - q| <= 1/2 up to the float32 rounding of the reciprocal and the product (a few
    # 2**-23 relative) where x / s is inside [-127.5, 127.5], else q = +-127; the row's
    # largest value maps to 127 up to the rounding of s itself (coarse when s is subnormal).
    _, _, x, _ = case
    x64 = to_numpy(x, np.float64)
    q, s = quant.quantize_activations_np(x64.astype(np.float32))
    absmax = np.abs(x64).max(axis=1)
    live = (absmax.astype(np.float32) / np.float32(127)) > 0  # rows whose float32 scale is not 0
    assert (np.abs(q) <= 127).all()
    assert not q[~live].any() and (s[~live] == 1).all()
    s64 = s[live].astype(np.float64)
    r = x64[live] / s64[:, None]
    qa = q[live].astype(np.float64)
    clipped = np.abs(r) > 127.5
    assert (qa[clipped] == 127 * np.sign(r[clipped])).all()
    assert (np.abs(r - qa)[~clipped] <= 0.5 + 127 * 2.0**-21).all()
    # relative rounding error of s against absmax / 127 (large when s is a subnormal: e.g.
    # absmax = 64 * 2^-149 gives s = 2^-149 and codes 64)
    delta = np.maximum(2.0**-24, 2.0**-150 / (absmax[live] / 127))
    assert (np.abs(qa).max(axis=1) >= np.floor(127 / (1 + delta) - 0.5) - 1).all()


@st.composite
def layers(draw):
    dtype, e, x, rng = draw(activations())
    n = draw(st.integers(1, 24))
    e_w = draw(st.integers(-40, 40))
    k = x.shape[1]
    w, s_w = int8nax.quantize_weight_int8(rng.standard_normal((n, k)).astype(np.float32) * np.float32(2.0**e_w))
    with_bias = draw(st.booleans())
    with np.errstate(over="ignore"):  # an inf bias is dropped by the test
        b = (rng.standard_normal(n) * 2.0 ** (e + e_w)).astype(np.float32) if with_bias else None
    return dtype, e, x, w, s_w, b


@SETTINGS
@given(case=layers())
# a product past float32's range, found by Hypothesis: inf, without numpy's overflow warning
@example(case=("bfloat16", 107, mx.array([[4.13967e+30]]).astype(mx.bfloat16), mx.array([[127]], dtype=mx.int8),
               mx.array([1.2457038e+06]), None))
def test_w8a8_over_the_whole_range(backend, case):
    dtype, e, x, w, s_w, b = case
    with np.errstate(over="ignore"):
        b = None if b is None or not np.isfinite(b).all() else b
    ref = w8a8_linear_ref(x, w, s_w, b)
    y = to_numpy(with_warnings_as_errors(lambda: int8nax.w8a8_linear(x, w, s_w, b, backend=backend)), np.float64)
    top = MAXVAL[dtype] * (1 + 2.0 ** -(MANT[dtype] + 1))  # beyond it, the rounded result is inf
    inside = np.abs(ref) < MAXVAL[dtype]
    beyond = np.abs(ref) > top
    assert (y[beyond] == np.sign(ref[beyond]) * np.inf).all()
    if inside.any():
        assert max_ulp_error(y[inside], ref[inside], dtype) <= 1.0
