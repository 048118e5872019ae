"""mlx.nn layers built on int8nax: a drop-in W8A8 replacement for nn.Linear."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map_with_path

from .api import quantize_weight_int8, w8a8_linear


class W8A8Linear(nn.Module):
    """y = x @ W.T + b with W stored as int8 per output channel and x quantized per token
    on every call (int8nax.w8a8_linear).

    Parameters (mx.arrays, saved/loaded like any mlx.nn parameters):
        weight int8 [output_dims, input_dims], scales float32 [output_dims], bias [output_dims]
        (optional). Input [..., input_dims] in float16/bfloat16/float32; output in the input's
        dtype, shape [..., output_dims].
    """

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, backend: str | None = None):
        super().__init__()
        self.weight = mx.zeros((output_dims, input_dims), dtype=mx.int8)
        self.scales = mx.ones((output_dims,), dtype=mx.float32)
        if bias:
            self.bias = mx.zeros((output_dims,), dtype=mx.float32)
        self._backend = backend
        self.freeze()  # integer weights are not trainable

    @property
    def input_dims(self) -> int:
        return self.weight.shape[1]

    @property
    def output_dims(self) -> int:
        return self.weight.shape[0]

    def _extra_repr(self) -> str:
        return f"input_dims={self.input_dims}, output_dims={self.output_dims}, bias={'bias' in self}"

    @classmethod
    def from_linear(cls, linear: nn.Linear, backend: str | None = None) -> "W8A8Linear":
        """Quantize an nn.Linear's weight (per output channel, int8nax.quantize_weight_int8)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"W8A8Linear.from_linear: 'linear' must be an mlx.nn.Linear, got {type(linear).__name__}")
        out_dims, in_dims = linear.weight.shape
        has_bias = "bias" in linear
        layer = cls(in_dims, out_dims, bias=has_bias, backend=backend)
        layer.weight, layer.scales = quantize_weight_int8(linear.weight)
        if has_bias:
            layer.bias = linear.bias.astype(mx.float32)
        return layer

    def __call__(self, x: mx.array) -> mx.array:
        return w8a8_linear(x, self.weight, self.scales, self.get("bias"), backend=self._backend)


def quantize_linears(model: nn.Module, backend: str | None = None, predicate=None) -> int:
    """Replace every nn.Linear in `model` (in place) by a W8A8Linear; returns how many.

    predicate(path, module) -> bool narrows the choice (e.g. skip an lm_head).
    """
    count = 0

    def swap(path, module):
        nonlocal count
        if isinstance(module, nn.Linear) and (predicate is None or predicate(path, module)):
            count += 1
            return W8A8Linear.from_linear(module, backend=backend)
        return module

    leaves = model.leaf_modules()
    replaced = tree_map_with_path(
        lambda path, m: swap(path, m), leaves, is_leaf=lambda m: isinstance(m, nn.Module)
    )
    model.update_modules(replaced)
    return count
