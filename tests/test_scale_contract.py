"""The weight scales' contract (docs/numerics.md): w8a8_linear, swiglu_w8a8_linear and W8A8Linear
take scale_w positive and finite and refuse zero, negative, NaN and inf scales by name; each scale
array is read once, not per call; a float64 scale is taken like a float64 bias (rounded to
float32 once, the same range check)."""

from __future__ import annotations

import threading

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

import int8nax
from int8nax import _checks
from int8nax.api import arguments, linear
from int8nax.nn import W8A8Linear, quantize_linears

BAD = [("negative", -0.5), ("zero", 0.0), ("negative zero", -0.0), ("nan", float("nan")), ("inf", float("inf")),
       ("minus inf", float("-inf"))]


def _problem(rng, n=5, k=16, m=3):
    w, s = int8nax.quantize_weight_int8(rng.standard_normal((n, k)).astype(np.float32))
    x = rng.standard_normal((m, k)).astype(np.float32)
    return x, w, s


@pytest.mark.parametrize("what, value", BAD, ids=[b[0] for b in BAD])
@pytest.mark.parametrize("kind", ["mx", "numpy"])
def test_w8a8_linear_refuses_a_bad_scale_by_name(rng, what, value, kind):
    x, w, s = _problem(rng)
    s = s.copy()
    s[3] = value
    args = (x, w, s) if kind == "numpy" else (mx.array(x), mx.array(w), mx.array(s))
    with pytest.raises(ValueError) as exc:
        int8nax.w8a8_linear(*args)
    text = str(exc.value)
    assert text.startswith("w8a8_linear: 'scale_w' must be positive and finite"), text
    assert f"got {float(value)!r} at index 3" in text, text


def test_swiglu_w8a8_linear_refuses_a_bad_scale(rng):
    _, w, s = _problem(rng)
    s = mx.array(np.where(np.arange(5) == 1, np.float32(np.nan), s))
    gate_up = mx.array(rng.standard_normal((2, 32)).astype(np.float32))
    with pytest.raises(ValueError, match=r"^swiglu_w8a8_linear: 'scale_w' must be positive and finite.*nan at index 1"):
        int8nax.swiglu_w8a8_linear(gate_up, mx.array(w), s)


def test_quantize_weight_int8_gives_scales_the_contract_takes(rng):
    # every row kind: zeros (scale 1), tiny (subnormal scale), ordinary, huge
    w = np.stack([np.zeros(8), np.full(8, 1e-40), rng.standard_normal(8), np.full(8, 3e38)]).astype(np.float32)
    q, s = int8nax.quantize_weight_int8(w)
    assert s[0] == 1 and 0 < s[1] < np.finfo(np.float32).tiny and np.all(np.isfinite(s)) and np.all(s > 0)
    y = int8nax.w8a8_linear(np.ones((2, 8), np.float32), q, s)  # accepted
    assert y.shape == (2, 4)


@pytest.mark.parametrize("what, value", BAD, ids=[b[0] for b in BAD])
def test_the_layer_refuses_a_bad_scale_by_its_own_name(rng, what, value):
    layer = W8A8Linear.from_linear(nn.Linear(16, 5))
    x = mx.array(rng.standard_normal((2, 16)).astype(np.float32))
    layer(x)
    bad = np.array(layer.scales)
    bad[2] = value
    layer.scales = mx.array(bad)  # a swapped array is checked at the next call
    with pytest.raises(ValueError) as exc:
        layer(x)
    text = str(exc.value)
    assert text.startswith("W8A8Linear: 'scales' must be positive and finite") and "at index 2" in text, text


def test_a_sibling_groups_member_with_a_bad_scale_is_named(rng):
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(16, 8), nn.Linear(16, 4), nn.Linear(16, 4)

    model = Attn()
    quantize_linears(model)
    assert model.k_proj._group is not None
    model.k_proj.scales = mx.array(np.array([1.0, 1.0, -2.0, 1.0], np.float32))
    x = mx.array(rng.standard_normal((2, 16)).astype(np.float32))
    with pytest.raises(ValueError, match=r"^W8A8Linear: 'scales' must be positive and finite.*-2\.0 at index 2"):
        model.q_proj(x)


def test_scales_are_read_once_per_array_not_per_call(rng, monkeypatch):
    reads = []
    real = _checks.check_scale_values
    monkeypatch.setattr(arguments, "check_scale_values", lambda s, *a: reads.append(id(s)) or real(s, *a))
    x, w, s = _problem(rng)
    x, w, s = mx.array(x), mx.array(w), mx.array(s)
    for _ in range(5):
        int8nax.w8a8_linear(x, w, s)
    assert reads == [id(s)]
    layer = W8A8Linear.from_linear(nn.Linear(16, 5))
    for _ in range(5):
        layer(x)
    assert len(reads) == 2
    layer.scales = layer.scales * 2  # another array: read again, once
    for _ in range(3):
        layer(x)
    assert len(reads) == 3


def test_the_checked_scales_are_bounded_and_go_with_their_arrays(rng, monkeypatch):
    monkeypatch.setattr(arguments._CheckedScales, "LIMIT", 8)
    checked = arguments._CheckedScales()
    monkeypatch.setattr(arguments, "_SCALES", checked)
    for reader in (arguments, linear):  # the checked path's and the inline call's
        monkeypatch.setattr(reader, "_scale_seen", checked.seen)
    x, w, s = _problem(rng)
    x, w = mx.array(x), mx.array(w)
    kept = [mx.array(s) for _ in range(20)]
    for scale in kept:
        int8nax.w8a8_linear(x, w, scale)
    assert len(checked) == 8 and checked.seen(kept[-1]) and not checked.seen(kept[0])
    del kept, scale
    assert len(checked) == 0


def test_a_float64_scale_is_taken_like_a_float64_bias(rng):
    x, w, s = _problem(rng)
    b = rng.standard_normal(5)
    want = np.array(int8nax.w8a8_linear(x, w, s.astype(np.float32), b.astype(np.float32)))
    got = np.array(int8nax.w8a8_linear(x, w, s.astype(np.float64), b))
    assert np.array_equal(got, want)
    got_mx = np.array(int8nax.w8a8_linear(x, w, mx.array(s.astype(np.float64)), mx.array(b)))
    assert np.array_equal(got_mx, want)
    for name, args in (("scale_w", (s.astype(np.float64) * 0 + 1e39, None)), ("bias", (s, np.full(5, 1e39)))):
        with pytest.raises(ValueError, match=rf"^w8a8_linear: '{name}' holds finite values beyond float32 range"):
            int8nax.w8a8_linear(x, w, *args)


def test_a_lazy_scale_from_another_thread_is_named(rng):
    if int8nax.info()["backend"] != "cpu":
        pytest.skip("the GPU backends leave evaluation to the caller (MLX's own error there)")
    x, w, s = _problem(rng)
    lazy_s = mx.array(s) + 0  # built, not evaluated, on this thread
    raised = {}

    def work():
        try:
            int8nax.w8a8_linear(mx.array(x), mx.array(w), lazy_s)
        except RuntimeError as exc:
            raised["error"] = str(exc)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert raised["error"].startswith("w8a8_linear: 'scale_w' is an unevaluated mx.array made on another thread")


def test_inside_mx_compile_a_traced_scale_is_not_read(rng):
    # a tracer's values cannot be read: the call runs (the contract is the caller's there)
    x, w, s = _problem(rng)
    x, w, s = mx.array(x), mx.array(w), mx.array(s)
    want = np.array(int8nax.w8a8_linear(x, w, s))
    got = np.array(mx.compile(lambda x, s: int8nax.w8a8_linear(x, w, s))(x, s))
    assert np.array_equal(got, want)
