"""Gradients through the W8A8 layer on every backend: straight-through for the activation
quantization, i.e. those of the dequantized float layer y = x @ W_deq.T + b, W_deq =
w_int8 * scale_w[:, None]; integer functions refuse to be differentiated."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
import pytest

import int8nax
from int8nax import backends
from int8nax.backends.base import Backend, Probe
from int8nax.nn import W8A8Linear
from int8nax.reference import to_numpy

DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}
# dx is dy @ W_deq rounded once to x's dtype (float32 accumulation); relative bounds per dtype.
RTOL = {"float16": 2e-3, "bfloat16": 1.6e-2, "float32": 2e-5}
# On a GPU MLX runs float32 matmuls in TF32 (10-bit mantissa) unless MLX_ENABLE_TF32=0, and the
# backward's dy @ W_deq is such a matmul: it is as precise as the device's float32 matmul.
TF32 = 2.0**-10


def mm_tol(backend: str, tol: float) -> float:
    """`tol`, or TF32's relative precision where MLX's float32 matmul may run in TF32: the
    backward runs on MLX's default device whatever int8nax's backend (on the H200 host the
    cpu backend's backward ran on the GPU and failed the float32 bound, 2026-12-01)."""
    on_gpu = backend in ("cuda", "metal") or mx.default_device() == mx.gpu
    return max(tol, 4 * TF32) if on_gpu else tol


def layer(rng, k, n):
    w, s = int8nax.quantize_weight_int8(rng.standard_normal((n, k)).astype(np.float32) * 0.1)
    return w, s, w.astype(np.float64) * s.astype(np.float64)[:, None]


def dequantized_model(x64, w_deq, b=None):
    """float64 y of the dequantized float layer."""
    y = x64 @ w_deq.T
    return y if b is None else y + b


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_grad_x_is_dy_times_dequantized_w(backend, rng, dtype):
    w, s, w_deq = layer(rng, 96, 40)
    x = mx.array(rng.standard_normal((2, 3, 96)).astype(np.float32)).astype(DTYPES[dtype])
    c = mx.array(rng.standard_normal((2, 3, 40)).astype(np.float32))
    dx = mx.grad(lambda x: (int8nax.w8a8_linear(x, w, s, backend=backend).astype(mx.float32) * c).sum())(x)
    assert dx.dtype == x.dtype and dx.shape == x.shape
    want = to_numpy(c, np.float64) @ w_deq
    assert np.abs(want).max() > 0.1  # not a vacuous zero comparison
    tol = mm_tol(backend, RTOL[dtype])
    np.testing.assert_allclose(to_numpy(dx, np.float64), want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("fd_dtype", [np.float32, np.float64])
def test_grad_matches_finite_differences_of_the_dequantized_model(backend, rng, fd_dtype):
    # A nonlinear loss: dL/dx = (dL/dy at the layer's output) @ W_deq. The finite differences
    # are of the dequantized float model at the same dL/dy, in float32 and float64.
    k, n = 24, 10
    w, s, w_deq = layer(rng, k, n)
    b = rng.standard_normal(n).astype(np.float32)
    x0 = rng.standard_normal((3, k)).astype(np.float32)

    def loss(x):
        return mx.tanh(int8nax.w8a8_linear(x, w, s, b, backend=backend)).sum()

    dx = to_numpy(mx.grad(loss)(mx.array(x0)), np.float64)
    y = to_numpy(int8nax.w8a8_linear(x0, w, s, b, backend=backend), np.float64)
    g_y = 1 - np.tanh(y) ** 2  # dL/dy at the layer's output

    def surrogate(x):  # the dequantized float model, with dL/dy frozen at the layer's output
        return float((g_y.astype(fd_dtype) * dequantized_model(x, w_deq.astype(fd_dtype), b.astype(fd_dtype))).sum())

    h = 1e-3 if fd_dtype == np.float32 else 1e-6
    fd = np.zeros_like(x0, dtype=np.float64)
    for i in np.ndindex(x0.shape):
        e = np.zeros_like(x0, dtype=fd_dtype)
        e[i] = h
        xf = x0.astype(fd_dtype)
        fd[i] = (surrogate(xf + e) - surrogate(xf - e)) / (2 * h)
    tol = mm_tol(backend, 2e-3 if fd_dtype == np.float32 else 1e-5)
    np.testing.assert_allclose(dx, fd, rtol=tol, atol=tol)


def test_grad_bias_and_no_grad_for_int8_weights(backend, rng):
    w, s, _ = layer(rng, 32, 12)
    b = mx.array(rng.standard_normal(12).astype(np.float32))
    x = mx.array(rng.standard_normal((5, 32)).astype(np.float32))
    c = mx.array(rng.standard_normal((5, 12)).astype(np.float32))
    f = lambda x, w, s, b: (int8nax.w8a8_linear(x, w, s, b, backend=backend) * c).sum()  # noqa: E731
    _, dw, ds, db = mx.grad(f, argnums=(0, 1, 2, 3))(x, mx.array(w), mx.array(s), b)
    np.testing.assert_allclose(np.array(db), np.array(c).sum(axis=0), rtol=1e-6, atol=1e-6)
    assert not np.array(dw).any() and not np.array(ds).any()


def test_vjp_and_jvp(backend, rng):
    w, s, w_deq = layer(rng, 20, 7)
    x = mx.array(rng.standard_normal((4, 20)).astype(np.float32))
    cot = mx.array(rng.standard_normal((4, 7)).astype(np.float32))
    tan = mx.array(rng.standard_normal((4, 20)).astype(np.float32))
    fn = lambda x: int8nax.w8a8_linear(x, w, s, backend=backend)  # noqa: E731
    (y,), (dx,) = mx.vjp(fn, [x], [cot])
    np.testing.assert_allclose(np.array(y), np.array(fn(x)))
    want = np.array(cot, np.float64) @ w_deq
    tol = mm_tol(backend, 1e-5)
    np.testing.assert_allclose(np.array(dx), want, rtol=tol, atol=tol * np.abs(want).max())
    _, (dy,) = mx.jvp(fn, [x], [tan])
    want = np.array(tan, np.float64) @ w_deq.T
    np.testing.assert_allclose(np.array(dy), want, rtol=tol, atol=tol * np.abs(want).max())


class LoRA(nn.Module):
    """A frozen W8A8Linear plus a trainable low-rank update, as LoRA fine-tuning does."""

    def __init__(self, base: nn.Module, rank: int = 4):
        super().__init__()
        self.base = base
        self.down = nn.Linear(base.weight.shape[1], rank, bias=False)
        self.up = nn.Linear(rank, base.weight.shape[0], bias=False)

    def __call__(self, x):
        return self.base(x) + self.up(self.down(x))


def lora_model(base):
    # The first (trainable) Linear sits before the quantized layer: its gradient must pass
    # through the W8A8 layer's backward (all zeros on the CPU backend before).
    mx.random.seed(4)
    return nn.Sequential(nn.Linear(12, 16), LoRA(base), nn.ReLU(), nn.Linear(16, 3))


def test_lora_around_a_frozen_w8a8_layer(backend, rng):
    mx.random.seed(3)
    dense = nn.Linear(16, 16)
    base = W8A8Linear.from_linear(dense, backend=backend)
    model = lora_model(base)
    assert model.trainable_parameters()["layers"][1]["base"] == {}  # the quantized layer is frozen
    x = mx.array(rng.standard_normal((8, 12)).astype(np.float32))
    target = mx.array(rng.standard_normal((8, 3)).astype(np.float32))

    def loss_fn(model, x):
        return ((model(x) - target) ** 2).mean()

    loss, grads = nn.value_and_grad(model, loss_fn)(model, x)
    assert np.abs(np.array(grads["layers"][0]["weight"])).max() > 1e-4

    # The same model with the dequantized float layer in place of the quantized one: the
    # straight-through gradients are its gradients at (almost) the same forward values.
    float_base = nn.Linear(16, 16)
    float_base.weight = mx.array(np.array(base.weight, np.float32) * np.array(base.scales)[:, None])
    float_base.bias = base.bias
    ref = lora_model(float_base)
    ref.update(model.trainable_parameters())
    float_base.freeze()
    _, ref_grads = nn.value_and_grad(ref, loss_fn)(ref, x)
    got = np.concatenate([np.array(v).ravel() for _, v in _leaves(grads)])
    want = np.concatenate([np.array(v).ravel() for _, v in _leaves(ref_grads)])
    assert got.shape == want.shape and got.size > 100
    # Forward values differ by the activation quantization (~1%), so the gradients do too, and
    # where a unit sits at a ReLU kink a single element may differ a lot: compare normwise
    # (silent zeros, or a transposed weight, would be off by 100% or more; seen: 3-10%).
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 0.25, rel

    opt = optim.SGD(learning_rate=0.1)
    before = float(loss)
    for _ in range(5):
        loss, grads = nn.value_and_grad(model, loss_fn)(model, x)
        opt.update(model, grads)
        mx.eval(model.parameters())
    assert float(loss_fn(model, x)) < before
    assert model.layers[1].base.weight.dtype == mx.int8 and model.layers[1].base.scales.dtype == mx.float32


def _leaves(tree):
    from mlx.utils import tree_flatten

    return tree_flatten(tree)


@pytest.fixture(params=["backend=", "default"])
def route(request, monkeypatch):
    """How a test calls the API: with backend= (the checked path), or as the common call with
    no backend argument (int8nax.api's inline path), the registry then handing out the backend
    under test. Returns a function: backend name -> keyword arguments for the call."""
    if request.param == "backend=":
        return lambda name: {"backend": name}
    real = backends.resolve
    monkeypatch.delenv(backends.ENV_VAR, raising=False)

    def route_to(name):
        impl = backends.get(name) if isinstance(name, str) else name
        monkeypatch.setattr(backends, "resolve", lambda requested=None: impl if requested is None else real(requested))
        return {}

    return route_to


def check_int8_matmul_refusals(kw):
    """Every transformation through int8_matmul(**kw) raises the ValueError naming it."""
    a = mx.ones((2, 3), dtype=mx.int8)
    b = mx.ones((4, 3), dtype=mx.int8)

    def mm(a, b):
        return int8nax.int8_matmul(a, b, **kw)

    calls = {
        "grad": lambda: mx.grad(lambda a: mm(a, b).astype(mx.float32).sum())(a),
        "grad of a float input": lambda: mx.grad(
            lambda x: mm(x.astype(mx.int8), b).astype(mx.float32).sum())(mx.ones((2, 3))),
        "grad of b": lambda: mx.grad(lambda b: mm(a, b).astype(mx.float32).sum())(b),
        "vjp": lambda: mx.vjp(lambda a: mm(a, b), [a], [mx.ones((2, 4), mx.int32)]),
        # mx.jvp asks a primitive that depends on a primal for its tangent first: a kernel in
        # the forward must not be reached (it would raise "[Primitive::jvp] Not implemented for ...")
        "jvp": lambda: mx.jvp(lambda a: mm(a, b), [a], [a]),
        "jvp of b": lambda: mx.jvp(lambda b: mm(a, b), [b], [b]),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="int8_matmul has no gradient: its inputs and output are integers"):
            mx.eval(call())
    # without a transformation it is unaffected
    assert np.array(mm(a, b)).tolist() == [[3] * 4] * 2


def check_quantize_refusals(kw):
    x = mx.ones((2, 3, 8))

    def qa(x):
        return int8nax.quantize_activations(x, **kw)

    calls = {
        "grad": lambda: mx.grad(lambda x: qa(x)[1].sum())(x),
        "vjp": lambda: mx.vjp(lambda x: qa(x)[1], [x], [mx.ones((2, 3))]),
        "jvp": lambda: mx.jvp(lambda x: qa(x)[1], [x], [x]),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match="quantize_activations has no gradient"):
            mx.eval(call())


def check_straight_through_with_bias_and_leading_dims(rng, kw, tol):
    """grad, vjp and jvp of w8a8_linear(**kw) with a bias and x [2, 3, K]: those of the
    dequantized float layer, the bias's too (also with x a constant)."""
    w, s, w_deq = layer(rng, 16, 6)
    w, s = mx.array(w), mx.array(s)
    x = mx.array(rng.standard_normal((2, 3, 16)).astype(np.float32))
    b = mx.array(rng.standard_normal(6).astype(np.float32))
    c = mx.array(rng.standard_normal((2, 3, 6)).astype(np.float32))
    tx = mx.array(rng.standard_normal((2, 3, 16)).astype(np.float32))
    tb = mx.array(rng.standard_normal(6).astype(np.float32))

    def f(x, w, s, b):
        return int8nax.w8a8_linear(x, w, s, b, **kw)

    def close(got, want):
        np.testing.assert_allclose(np.array(got, np.float64), want, rtol=tol, atol=tol * np.abs(want).max())

    dx, dw, ds, db = mx.grad(lambda *p: (f(*p) * c).sum(), argnums=(0, 1, 2, 3))(x, w, s, b)
    close(dx, np.array(c, np.float64) @ w_deq)
    close(db, np.array(c, np.float64).sum(axis=(0, 1)))
    assert dx.shape == x.shape and not np.array(dw).any() and not np.array(ds).any()
    close(mx.grad(lambda b: (f(x, w, s, b) * c).sum())(b), np.array(c, np.float64).sum(axis=(0, 1)))

    (y,), (vx, vb) = mx.vjp(lambda x, b: f(x, w, s, b), [x, b], [c])
    close(vx, np.array(dx, np.float64))
    close(vb, np.array(db, np.float64))
    np.testing.assert_array_equal(np.array(y), np.array(f(x, w, s, b)))

    (y,), (dy,) = mx.jvp(lambda x, b: f(x, w, s, b), [x, b], [tx, tb])
    close(dy, np.array(tx, np.float64) @ w_deq.T + np.array(tb, np.float64))
    assert dy.shape == (2, 3, 6) and y.shape == (2, 3, 6)


def test_int8_matmul_refuses_every_transformation(backend, route):
    check_int8_matmul_refusals(route(backend))


def test_quantize_activations_refuses_every_transformation(backend, route):
    check_quantize_refusals(route(backend))


def test_straight_through_with_bias_and_leading_dims(backend, route, rng):
    check_straight_through_with_bias_and_leading_dims(rng, route(backend), mm_tol(backend, 1e-5))


def test_int8_matmul_refuses_gradients(backend):
    a = mx.ones((2, 3), dtype=mx.int8)
    b = mx.ones((4, 3), dtype=mx.int8)
    with pytest.raises(ValueError, match="int8_matmul has no gradient"):
        mx.grad(lambda a: int8nax.int8_matmul(a, b, backend=backend).astype(mx.float32).sum())(a)
    with pytest.raises(ValueError, match="int8_matmul has no gradient"):
        x = mx.ones((2, 3))
        mx.grad(lambda x: int8nax.int8_matmul(x.astype(mx.int8), b, backend=backend).astype(mx.float32).sum())(x)
    with pytest.raises(ValueError, match="int8_matmul has no gradient"):
        mx.vjp(lambda a: int8nax.int8_matmul(a, b, backend=backend), [a], [mx.ones((2, 4), mx.int32)])
    # without a transformation it is unaffected
    assert np.array(int8nax.int8_matmul(a, b, backend=backend)).tolist() == [[3] * 4] * 2


def test_quantize_activations_refuses_gradients(backend):
    x = mx.ones((2, 8))
    with pytest.raises(ValueError, match="quantize_activations has no gradient"):
        mx.grad(lambda x: int8nax.quantize_activations(x, backend=backend)[1].sum())(x)


def test_empty_problems_differentiate(backend):
    b = mx.ones((3,))
    # K = 0: y is the bias, so dbias counts the rows and dx is empty.
    db = mx.grad(lambda b: int8nax.w8a8_linear(mx.zeros((4, 0)), np.zeros((3, 0), np.int8),
                                               np.ones(3, np.float32), b, backend=backend).sum())(b)
    assert np.array(db).tolist() == [4.0, 4.0, 4.0]


class GraphBackend(Backend):
    """A pure-MLX backend (dequantized float math, not int8nax's numerics): it keeps MLX's
    graph, so it shows how the API's custom_function composes with mx.compile, as the
    CUDA backend (mx.fast.cuda_kernel) does."""

    name = "graph"

    def probe(self):
        return Probe(True, "test double")

    def int8_matmul(self, a, b):  # float32 products: exact while |sum| < 2**24
        return (a.astype(mx.float32) @ b.astype(mx.float32).T).astype(mx.int32)

    def quantize_activations(self, x):
        x32 = x.astype(mx.float32)
        scale = mx.maximum(mx.abs(x32).max(axis=1), 1e-30) / 127
        return mx.round(x32 / scale[:, None]).astype(mx.int8), scale

    def w8a8_linear(self, x, w, scale_w, bias):
        y = x.astype(mx.float32) @ (w.astype(mx.float32) * scale_w[:, None]).T
        if bias is not None:
            y = y + bias
        return y.astype(x.dtype)


def test_custom_function_composes_with_compile(monkeypatch, rng):
    monkeypatch.setattr(backends, "resolve", lambda requested=None: GraphBackend())
    w, s, _ = layer(rng, 16, 6)
    b = rng.standard_normal(6).astype(np.float32)
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    loss = lambda x: mx.tanh(int8nax.w8a8_linear(x, w, s, b)).sum()  # noqa: E731
    eager_y, eager_dx = loss(x), mx.grad(loss)(x)
    compiled_y, compiled_dx = mx.compile(loss)(x), mx.compile(mx.grad(loss))(x)
    np.testing.assert_allclose(np.array(compiled_y), np.array(eager_y), rtol=1e-6)
    np.testing.assert_allclose(np.array(compiled_dx), np.array(eager_dx), rtol=1e-6, atol=1e-7)


class NumpyBackend(GraphBackend):
    """A backend that evaluates its inputs for numpy, as the CPU backend's eager path does,
    without a graph path of its own."""

    name = "numpy-only"

    def int8_matmul(self, a, b):
        return mx.array(np.array(a).astype(np.int32) @ np.array(b).astype(np.int32).T)

    def quantize_activations(self, x):
        return super().quantize_activations(mx.array(np.array(x)))

    def w8a8_linear(self, x, w, scale_w, bias):
        return super().w8a8_linear(mx.array(np.array(x)), w, scale_w, bias)


def test_a_backend_outside_the_graph_inside_compile_or_vmap_says_so(monkeypatch, rng):
    # what a backend that evaluates its inputs meets inside mx.compile / mx.vmap, named by the API
    # (the CPU backend runs its cpu_graph path there instead: tests/test_cpu_graph.py)
    monkeypatch.setattr(backends, "resolve", lambda requested=None: NumpyBackend())
    w, s, _ = layer(rng, 4, 3)
    x = mx.ones((2, 4))
    calls = [
        lambda: mx.compile(lambda x: int8nax.w8a8_linear(x, w, s))(x),
        lambda: mx.vmap(lambda x: int8nax.w8a8_linear(x, w, s))(mx.ones((5, 2, 4))),
        lambda: mx.compile(lambda a: int8nax.int8_matmul(a, w))(mx.ones((2, 4), mx.int8)),
        lambda: mx.compile(lambda x: int8nax.quantize_activations(x)[0])(x),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=r"the numpy-only backend evaluated its inputs outside MLX's graph inside "
                                             r"mx.compile or mx.vmap"):
            call()


def test_the_backend_sees_the_callers_weight_array(monkeypatch, rng):
    # Per-weight state in a backend (the CPU backend's prepared weights) is keyed by the array:
    # the forward must get the caller's object, which MLX's custom_function body would not.
    from int8nax.backends.cpu import backend as cpu

    seen = []
    real = cpu.BACKEND.w8a8_linear
    monkeypatch.setattr(cpu.BACKEND, "w8a8_linear", lambda x, w, s, b: seen.append(w) or real(x, w, s, b))
    w, s, _ = layer(rng, 16, 6)
    w, s = mx.array(w), mx.array(s)
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    int8nax.w8a8_linear(x, w, s, backend="cpu")
    mx.grad(lambda x: int8nax.w8a8_linear(x, w, s, backend="cpu").sum())(x)
    assert len(seen) == 2 and all(v is w for v in seen)


def touched(v):
    """v, passed through a primitive that has neither jvp nor vjp (QR on the CPU stream)."""
    v32 = v.astype(mx.float32).reshape(1, -1)[:, :1]
    q = mx.linalg.qr(mx.broadcast_to(v32, (2, 2)) + mx.eye(2), stream=mx.cpu)[0]
    return v + (q[0, 0] * 0).astype(v.dtype)


class KernelLikeBackend(GraphBackend):
    """GraphBackend whose forward passes every input through a primitive without a jvp or vjp,
    as a custom kernel is (the CUDA and Metal backends): mx.jvp must not ask it for a tangent."""

    name = "kernel-like"

    def int8_matmul(self, a, b):
        return super().int8_matmul(touched(a), touched(b))

    def quantize_activations(self, x):
        return super().quantize_activations(touched(x))

    def w8a8_linear(self, x, w, scale_w, bias):
        return super().w8a8_linear(touched(x), touched(w), touched(scale_w), None if bias is None else touched(bias))


def test_refusals_do_not_reach_the_forward_kernels(monkeypatch):
    # On such a backend mx.jvp raised MLX's "[Primitive::jvp] Not implemented for QRF" (for a
    # custom kernel: "... for CustomKernel") instead of naming the function.
    monkeypatch.setattr(backends, "resolve", lambda requested=None: KernelLikeBackend())
    check_int8_matmul_refusals({})
    check_quantize_refusals({})


def test_straight_through_on_a_kernel_like_backend(monkeypatch, rng):
    monkeypatch.setattr(backends, "resolve", lambda requested=None: KernelLikeBackend())
    check_straight_through_with_bias_and_leading_dims(rng, {}, mm_tol("kernel-like", 1e-5))


def test_jvp_does_not_reach_the_forward_kernels(monkeypatch, rng):
    monkeypatch.setattr(backends, "resolve", lambda requested=None: KernelLikeBackend())
    w, s, w_deq = layer(rng, 16, 6)
    b = rng.standard_normal(6).astype(np.float32)
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    tan = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    w_mx, s_mx, b_mx = mx.array(w), mx.array(s), mx.array(b)
    fn = lambda x, w, s, b: int8nax.w8a8_linear(x, w, s, b)  # noqa: E731
    zeros = [mx.zeros_like(v) for v in (w_mx, s_mx)]
    (y,), (dy,) = mx.jvp(fn, [x, w_mx, s_mx, b_mx], [tan, *zeros, mx.ones_like(b_mx)])
    want = np.array(tan, np.float64) @ w_deq.T + 1.0
    tol = mm_tol("kernel-like", 1e-5)  # the tangent is a float32 matmul on MLX's default device
    np.testing.assert_allclose(np.array(dy), want, rtol=tol, atol=tol * np.abs(want).max())
    np.testing.assert_allclose(np.array(y), np.array(fn(x, w_mx, s_mx, b_mx)))
