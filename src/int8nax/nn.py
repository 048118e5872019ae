"""mlx.nn layers built on int8nax: a drop-in W8A8 replacement for nn.Linear.

W8A8Linear follows the conventions of mlx.nn's own quantized layers (nn.QuantizedLinear):
its arrays are ordinary parameters (parameters(), save_weights/load_weights, update), it is
frozen at construction, and Module.set_dtype casts only what it can use. Where int8nax must
differ, it says so:

- `weight` is int8 and `scales` float32, always: set_dtype's default predicate skips the int8
  weight, and a cast of the scales (to float16 or bfloat16, which would round them and could
  flush small ones to subnormals) is not applied: the float32 scales are kept. `bias` follows
  set_dtype like any float parameter (the output dtype is always the input's).
- `weight` and `scales` are never trainable (their straight-through gradient is zero):
  unfreeze(), on the layer or on any module above it, leaves them frozen. `bias` is frozen at
  construction, like nn.QuantizedLinear's, and can be unfrozen for bias fine-tuning.
- Gradients with respect to the layer's input are straight-through (int8nax.w8a8_linear).
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map_with_path

from ._checks import check_backend, dtype_name
from .api import quantize_weight_int8, w8a8_linear

_ALWAYS_FROZEN = frozenset({"weight", "scales"})


class _FrozenKeys(set):
    """The layer's set of frozen parameter names: unfreeze() cannot remove weight or scales.

    mlx.nn's Module.unfreeze edits each module's `_no_grad` set directly (clear() or
    difference_update()), also when called on a parent, so the rule lives in the set.
    """

    def clear(self):
        super().clear()
        self.update(_ALWAYS_FROZEN)

    def difference_update(self, *others):
        super().difference_update(*others)
        self.update(_ALWAYS_FROZEN)

    def discard(self, key):
        if key not in _ALWAYS_FROZEN:
            super().discard(key)

    def remove(self, key):
        if key not in _ALWAYS_FROZEN:
            super().remove(key)


def _positive_int(value, name: str, func: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{func}: '{name}' must be a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{func}: '{name}' must be a positive int, got {value}")
    return value


class W8A8Linear(nn.Module):
    """y = x @ W.T + b with W stored as int8 per output channel and x quantized per token
    on every call (int8nax.w8a8_linear).

    Parameters (mx.arrays, saved/loaded like any mlx.nn parameters):
        weight int8 [output_dims, input_dims], scales float32 [output_dims], bias [output_dims]
        (optional; float32 from from_linear, or whatever dtype set_dtype gives it). Input
        [..., input_dims] in float16/bfloat16/float32 (mx.array or numpy); output in the
        input's dtype, shape [..., output_dims].

    A fresh layer holds zero weights, unit scales and a zero bias (so it outputs zeros):
    fill it with from_linear, or with load_weights from a saved W8A8Linear.
    """

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, backend: str | None = None):
        super().__init__()
        func = "W8A8Linear"
        _positive_int(input_dims, "input_dims", func)
        _positive_int(output_dims, "output_dims", func)
        check_backend(backend, func)
        self._no_grad = _FrozenKeys(_ALWAYS_FROZEN)
        self.weight = mx.zeros((output_dims, input_dims), dtype=mx.int8)
        self.scales = mx.ones((output_dims,), dtype=mx.float32)
        if bias:
            self.bias = mx.zeros((output_dims,), dtype=mx.float32)
        self._backend = backend
        self.freeze()  # like nn.QuantizedLinear: nothing trainable until unfrozen

    def __setitem__(self, key, value):
        # Every way a parameter is replaced (attribute assignment, update, load_weights,
        # set_dtype, an optimizer step) ends here.
        if key == "weight" and isinstance(value, mx.array) and value.dtype != mx.int8:
            raise TypeError(
                f"W8A8Linear: 'weight' must have dtype int8 (from quantize_weight_int8), got "
                f"{dtype_name(value.dtype)}; it is never trainable (keep it frozen, cast nothing "
                "but floating parameters)"
            )
        if key == "scales" and isinstance(value, mx.array) and value.dtype != mx.float32:
            if not mx.issubdtype(value.dtype, mx.floating):
                raise TypeError(f"W8A8Linear: 'scales' must be float32, got {dtype_name(value.dtype)}")
            current = self.get("scales")
            if (current is not None and current.shape == value.shape
                    and mx.array_equal(current.astype(value.dtype), value).item()):
                return  # a cast of the float32 scales (Module.set_dtype): keep them exact
            value = value.astype(mx.float32)  # any other float scales: widened, exactly
        super().__setitem__(key, value)

    @property
    def input_dims(self) -> int:
        return self.weight.shape[1]

    @property
    def output_dims(self) -> int:
        return self.weight.shape[0]

    def _extra_repr(self) -> str:
        text = f"input_dims={self.input_dims}, output_dims={self.output_dims}, bias={'bias' in self}"
        return text + (f", backend={self._backend!r}" if self._backend is not None else "")

    @classmethod
    def from_linear(cls, linear: nn.Linear, backend: str | None = None) -> "W8A8Linear":
        """Quantize an nn.Linear's weight (per output channel, int8nax.quantize_weight_int8);
        the bias is kept, widened to float32 (exact)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"W8A8Linear.from_linear: 'linear' must be an mlx.nn.Linear, got {type(linear).__name__}")
        out_dims, in_dims = linear.weight.shape
        has_bias = "bias" in linear
        layer = cls(in_dims, out_dims, bias=has_bias, backend=backend)
        layer.weight, layer.scales = quantize_weight_int8(linear.weight)
        if has_bias:
            layer.bias = linear.bias.astype(mx.float32)
        return layer

    def __call__(self, x) -> mx.array:
        shape = getattr(x, "shape", None)
        if shape is not None and len(shape) >= 1 and shape[-1] != self.input_dims:
            raise ValueError(
                f"W8A8Linear: input must have last dimension input_dims = {self.input_dims}, "
                f"got shape {tuple(shape)}"
            )
        return w8a8_linear(x, self.weight, self.scales, self.get("bias"), backend=self._backend)


def quantize_linears(model: nn.Module, backend: str | None = None, predicate=None) -> int:
    """Replace every nn.Linear in `model` (in place) by a W8A8Linear; returns how many.

    predicate(path, module) -> bool narrows the choice (e.g. skip an lm_head). A layer that
    cannot be quantized (NaN/inf or out-of-range weights) raises a ValueError naming its
    path in the model; the model is then left unchanged.
    """
    func = "quantize_linears"
    if not isinstance(model, nn.Module):
        raise TypeError(f"{func}: 'model' must be an mlx.nn.Module, got {type(model).__name__}")
    if predicate is not None and not callable(predicate):
        raise TypeError(f"{func}: 'predicate' must be callable (path, module) -> bool, got {type(predicate).__name__}")
    check_backend(backend, func)
    count = 0

    def swap(path, module):
        nonlocal count
        if isinstance(module, nn.Linear) and (predicate is None or predicate(path, module)):
            try:
                layer = W8A8Linear.from_linear(module, backend=backend)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{func}: layer '{path}': {exc}") from exc
            count += 1
            return layer
        return module

    leaves = model.leaf_modules()
    replaced = tree_map_with_path(
        lambda path, m: swap(path, m), leaves, is_leaf=lambda m: isinstance(m, nn.Module)
    )
    model.update_modules(replaced)
    return count
