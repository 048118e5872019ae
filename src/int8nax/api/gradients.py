"""The gradients, defined once for every backend with mx.custom_function (a backend's forward
may leave MLX's graph, as the CPU backend's numpy path does):

- w8a8_linear: the straight-through estimator for the activation quantization, so the layer
  differentiates as the dequantized float layer y = x @ W_deq.T + bias with
  W_deq = w_int8 * scale_w[:, None]: dx = dy @ W_deq, dbias = sum of dy over the rows.
  The int8 weights and their scales get zero gradients (they are not trainable).
- swiglu_w8a8_linear: the derivative of its two steps (MLX's of swiglu, then w8a8_linear's).
- int8_matmul and quantize_activations have integer outputs and no useful gradient: asking
  for one (mx.grad, mx.vjp, mx.jvp through them) raises a ValueError, never silent zeros.

A call takes these only where a transformation may trace it (int8nax.api.tracing).

State: the refusing custom functions, one per backend (at most 3); the W8A8 and SwiGLU W8A8
gradients', each with and without a bias.
"""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx

from .. import backends
from .errors import _untraceable


def _no_gradient(func: str, why: str):
    def refuse(*_args):
        raise ValueError(f"{func} has no gradient: {why}")

    return refuse


# The refusing custom functions hand the backend its inputs behind mx.stop_gradient: mx.jvp
# asks every primitive that depends on a primal for a tangent, in graph order, so a custom
# kernel (no jvp) inside the body would raise MLX's "[Primitive::jvp] Not implemented for
# CustomKernel" before the refusal below could name the function (see _forward_inputs).
_cut = mx.stop_gradient


@lru_cache(maxsize=None)
def _int8_matmul_fn(impl: backends.Backend):
    # the backend's method is looked up per call (tests patch backends)
    f = mx.custom_function(
        lambda a, b: _untraceable("int8_matmul", impl, lambda: impl.int8_matmul(_cut(a), _cut(b))))
    why = ("its inputs and output are integers (int8 x int8 -> exact int32); for a trainable "
           "layer use w8a8_linear or int8nax.nn.W8A8Linear, whose gradient is straight-through")
    f.vjp(_no_gradient("int8_matmul", why))
    f.jvp(_no_gradient("int8_matmul", why))
    return f


@lru_cache(maxsize=None)
def _quantize_fn(impl: backends.Backend):
    f = mx.custom_function(
        lambda x: _untraceable("quantize_activations", impl, lambda: impl.quantize_activations(_cut(x))))
    why = ("rounding to int8 codes has zero derivative almost everywhere; for a trainable "
           "layer use w8a8_linear, whose gradient is straight-through")
    f.vjp(_no_gradient("quantize_activations", why))
    f.jvp(_no_gradient("quantize_activations", why))
    return f


def _dequantized_weight(w: mx.array, scale_w: mx.array) -> mx.array:
    """float32 [N, K] = w_int8 * scale_w[:, None]: the float weight the layer stands for."""
    return w.astype(mx.float32) * scale_w[:, None]


def _ste_dx(dy: mx.array, w: mx.array, scale_w: mx.array, dtype) -> mx.array:
    """The straight-through vjp of W8A8's input: dy [M, N] @ W_deq [N, K] in float32, in `dtype`."""
    return (dy.astype(mx.float32) @ _dequantized_weight(w, scale_w)).astype(dtype)


def _ste_db(dy: mx.array, dtype) -> mx.array:
    """The bias's vjp: dy [M, N] summed over the rows in float32, in `dtype`."""
    return dy.astype(mx.float32).sum(axis=0).astype(dtype)


def _ste_dy(dx: mx.array, w: mx.array, scale_w: mx.array, db, dtype) -> mx.array:
    """The straight-through jvp: dx [M, K] @ W_deq.T (+ db) in float32, in `dtype`."""
    dy = dx.astype(mx.float32) @ _dequantized_weight(w, scale_w).T
    return (dy if db is None else dy + db.astype(mx.float32)).astype(dtype)


@lru_cache(maxsize=None)
def _w8a8_grad(has_bias: bool):
    """mx.custom_function(x, w, s, [b,] y) -> y with the straight-through gradient (module
    docstring). The forward `y` is computed by the backend before this is called, outside the
    custom function, because MLX hands a custom function's body new array objects for its
    inputs: a backend that keeps per-weight state (the CPU backend's prepared weights, keyed
    by the array) would never see the caller's weight there. `y` comes in behind
    mx.stop_gradient, so only this vjp/jvp defines the derivative."""
    f = mx.custom_function(lambda *args: args[-1])

    @f.vjp
    def vjp(primals, cotangent, _output):
        x, w, s = primals[:3]
        grads = [_ste_dx(cotangent, w, s, x.dtype), mx.zeros_like(w), mx.zeros_like(s)]
        if has_bias:
            grads.append(_ste_db(cotangent, primals[3].dtype))
        return (*grads, mx.zeros_like(primals[-1]))

    @f.jvp
    def jvp(primals, tangents):
        x, w, s = primals[:3]
        return (_ste_dy(tangents[0], w, s, tangents[3] if has_bias else None, x.dtype),)

    return f


@lru_cache(maxsize=None)
def _swiglu_grad(has_bias: bool):
    """As _w8a8_grad for swiglu_w8a8_linear(gate_up, w, s, [b,] y) -> y: the derivative of the
    composition w8a8_linear(swiglu(gate, up)), with h's by MLX's own vjp/jvp of swiglu."""
    f = mx.custom_function(lambda *args: args[-1])

    @f.vjp
    def vjp(primals, cotangent, _output):
        gate_up, w, s = primals[:3]
        k = gate_up.shape[-1] // 2
        gate, up = gate_up[:, :k], gate_up[:, k:]
        _, (d_gate, d_up) = mx.vjp(backends.swiglu, [gate, up], [_ste_dx(cotangent, w, s, gate_up.dtype)])
        grads = [mx.concatenate([d_gate, d_up], axis=-1), mx.zeros_like(w), mx.zeros_like(s)]
        if has_bias:
            grads.append(_ste_db(cotangent, primals[3].dtype))
        return (*grads, mx.zeros_like(primals[-1]))

    @f.jvp
    def jvp(primals, tangents):
        gate_up, w, s = primals[:3]
        k = gate_up.shape[-1] // 2
        _, (dh,) = mx.jvp(backends.swiglu, [gate_up[:, :k], gate_up[:, k:]], [tangents[0][:, :k], tangents[0][:, k:]])
        return (_ste_dy(dh, w, s, tangents[3] if has_bias else None, gate_up.dtype),)

    return f


def _forward_inputs(impl: backends.Backend, x, w, scale_w, bias) -> tuple:
    """The forward's inputs, cut from the caller's graph by mx.stop_gradient: MLX's mx.jvp asks
    every primitive that depends on a primal for a tangent, even one whose output reaches the
    result only behind stop_gradient, and a custom kernel has none ("[Primitive::jvp] Not
    implemented for CustomKernel" on the H200). A backend that keys state by the
    weight array (weights_by_identity) gets the caller's weights; it computes outside MLX's
    graph anyway."""
    cut = mx.stop_gradient
    if impl.weights_by_identity:
        return cut(x), w, scale_w, bias
    return cut(x), cut(w), cut(scale_w), None if bias is None else cut(bias)
