"""W8A8Linear: a drop-in W8A8 replacement for nn.Linear.

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

A layer in a sibling group (int8nax.nn.siblings) hands its call to the group.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from .._checks import MAX_K, check_backend, dtype_name
from ..api import bind, quantize_weight_int8, w8a8_linear

_ALWAYS_FROZEN = frozenset({"weight", "scales"})
_PARAMETERS = {"weight": "int8, from quantize_weight_int8", "scales": "float32, from quantize_weight_int8",
               "bias": "floating, or None for no bias"}
_DICT_GET = dict.get  # a Module's own arrays, without Module.__getattr__'s Python frames


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


MAX_DIM = 2**31 - 1
"""The largest dimension MLX's shapes (int32) hold."""


def _positive_int(value, name: str, func: str, most: int | None = None, why: str = "") -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{func}: '{name}' must be a positive int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{func}: '{name}' must be a positive int, got {value}")
    if most is not None and value > most:
        raise ValueError(f"{func}: '{name}' must be a positive int <= {most}{why}, got {value}")
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

    Checks: the weight, scales and bias are checked once, at the first call that finds them
    (int8nax.api.bind: dtypes, shapes, scales positive and finite, which reads them: one
    synchronisation on a GPU), and again whenever one of them is another array object (any
    replacement: load_weights, update, set_dtype, an optimizer step, an assignment). An array
    changed in place (layer.scales[i] = v keeps the object) is not checked again. A call
    then checks only its input and goes to the backend.
    """

    _bound = None  # api.BoundLinear of the arrays last checked (None: not yet, or traced)

    def __init__(self, input_dims: int, output_dims: int, bias: bool = True, backend: str | None = None):
        super().__init__()
        func = "W8A8Linear"
        # checked here, not by mx.zeros (an OverflowError beyond int32) or at every call (K > MAX_K)
        _positive_int(input_dims, "input_dims", func, MAX_K, " (K: int32 accumulation cannot overflow)")
        _positive_int(output_dims, "output_dims", func, MAX_DIM, " (what an MLX shape holds)")
        check_backend(backend, func)
        self._no_grad = _FrozenKeys(_ALWAYS_FROZEN)
        self.weight = mx.zeros((output_dims, input_dims), dtype=mx.int8)
        self.scales = mx.ones((output_dims,), dtype=mx.float32)
        if bias:
            self.bias = mx.zeros((output_dims,), dtype=mx.float32)
        self._backend = backend
        self._group = None  # the SiblingGroup this layer belongs to (quantize_linears), if any
        self._index = 0  # its place in the group
        self.freeze()  # like nn.QuantizedLinear: nothing trainable until unfrozen

    def __setattr__(self, key, value):
        # MLX's Module.__setattr__ keeps anything but an mx.array (or a container) as a plain
        # attribute and drops the parameter of that name: the layer would fail on its next call
        # with an AttributeError that names nothing. bias=None removes the bias (a layer without one).
        if key in _PARAMETERS and not isinstance(value, mx.array) and not (key == "bias" and value is None):
            kind = type(value).__module__.replace("builtins", "").partition(".")[0]
            raise TypeError(f"W8A8Linear: '{key}' must be an mlx.core.array ({_PARAMETERS[key]}), got "
                            f"{kind + '.' if kind else ''}{type(value).__name__}"
                            + ("; convert it with mx.array" if hasattr(value, "__array__") else ""))
        super().__setattr__(key, value)

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
        self._replaced()

    # A parameter removed (`layer.bias = None` pops it, `del layer.bias` deletes it) changes the
    # layer as a replaced one does.
    def __delitem__(self, key):
        super().__delitem__(key)
        self._replaced()

    def pop(self, key, *default):
        had = key in self
        value = super().pop(key, *default)
        if had:
            self._replaced()
        return value

    def _replaced(self) -> None:
        group = getattr(self, "_group", None)
        if group is not None:
            group.replaced()

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

    def _check_input(self, x) -> None:
        shape = getattr(x, "shape", None)
        if shape is not None and len(shape) >= 1 and shape[-1] != _DICT_GET(self, "weight").shape[1]:
            raise ValueError(
                f"W8A8Linear: input must have last dimension input_dims = {self.input_dims}, "
                f"got shape {tuple(shape)}"
            )

    def _bind(self):
        """api.bind of the present arrays (kept while they stay the same objects), or None
        where one is a tracer (mx.compile of the model's state, a gradient of the bias)."""
        bound = bind(_DICT_GET(self, "weight"), _DICT_GET(self, "scales"), _DICT_GET(self, "bias"),
                     backend=self._backend, func="W8A8Linear", names=("weight", "scales", "bias"))
        if bound is not None:
            self._bound = bound
        return bound

    def __call__(self, x) -> mx.array:
        group = self._group
        if group is not None:
            return group.output(self._index, x)
        bound = self._bound  # _own_output's first lines, inline: the call every lone layer makes
        get = _DICT_GET
        if (bound is not None and get(self, "weight") is bound.w and get(self, "scales") is bound.scale_w
                and get(self, "bias") is bound.bias):
            y = bound.fast(x)
            return y if y is not None else self._general_output(x)
        return self._own_output(x)

    def _current_bound(self):
        """The BoundLinear of the present arrays: the one kept while they are the same objects, else
        bound anew (_bind: None where one is a tracer)."""
        bound = self._bound
        if (bound is None or _DICT_GET(self, "weight") is not bound.w or _DICT_GET(self, "scales") is not bound.scale_w
                or _DICT_GET(self, "bias") is not bound.bias):
            bound = self._bind()
        return bound

    def _own_output(self, x) -> mx.array:
        """This layer's y for x from its own arrays (alone, or in a group that stopped fusing)."""
        bound = self._current_bound()
        if bound is not None:
            y = bound.fast(x)
            if y is not None:
                return y
        return self._general_output(x)

    def _general_output(self, x) -> mx.array:
        """y through int8nax.w8a8_linear, which checks every argument and names what is wrong."""
        self._check_input(x)
        return w8a8_linear(x, self.weight, self.scales, self.get("bias"), backend=self._backend)
