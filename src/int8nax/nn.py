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

Sibling layers. Where several layers take the same input (an attention block's q/k/v
projections, an MLP's gate/up), quantize_linears joins them in a SiblingGroup: the first
sibling called with an input computes one W8A8 GEMM over the siblings' concatenated weights
(the input quantized once, one larger N), and each sibling returns its columns of it. Every
output element has the same bits as the sibling's own call would give (the dequantization is
a function of each element's int32 sum, its row's and its column's scales and its bias). The
model's code and its module tree are unchanged: each sibling keeps its own weight, scales and
bias (same keys and shapes for parameters(), save_weights and load_weights), as views of the
group's concatenated arrays.

SwiGLU MLPs. An MLP whose call is mlx-lm's `down_proj(swiglu(gate_proj(x), up_proj(x)))` (Llama,
Qwen2, Qwen3, Mistral and most of mlx-lm's dense models), with gate and up in one sibling group,
is given a call that hands the group's joint output to int8nax.swiglu_w8a8_linear where the
backend does that in one step (Backend.swiglu_one_step: CUDA with INT8NAX_CUDA_SWIGLU=fused): one
kernel computes h = silu(gate) * up and quantizes it for the down projection (h never written
out), with the bits of the model's own call, which every other backend keeps. The module's class
is swapped for a subclass of its own (same name, isinstance and tree); a module whose children
no longer fit takes its own call.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import threading
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map_with_path

from ._checks import check_backend, dtype_name
from .api import bind, quantize_weight_int8, swiglu_w8a8_linear, w8a8_linear
from .api.tracing import _may_skip_custom
from . import backends
from .backends import swiglu as _swiglu

_ALWAYS_FROZEN = frozenset({"weight", "scales"})
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
        _positive_int(input_dims, "input_dims", func)
        _positive_int(output_dims, "output_dims", func)
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

    def _own_output(self, x) -> mx.array:
        """This layer's y for x from its own arrays (alone, or in a group that stopped fusing)."""
        bound = self._bound
        if (bound is None or _DICT_GET(self, "weight") is not bound.w or _DICT_GET(self, "scales") is not bound.scale_w
                or _DICT_GET(self, "bias") is not bound.bias):
            bound = self._bind()
        if bound is not None:
            y = bound.fast(x)
            if y is not None:
                return y
        return self._general_output(x)

    def _general_output(self, x) -> mx.array:
        """y through int8nax.w8a8_linear, which checks every argument and names what is wrong."""
        self._check_input(x)
        return w8a8_linear(x, self.weight, self.scales, self.get("bias"), backend=self._backend)


SIBLINGS = (
    ("q_proj", "k_proj", "v_proj"),
    ("gate_proj", "up_proj"),
    ("wq", "wk", "wv"),
    ("w1", "w3"),
    ("query", "key", "value"),
    ("to_q", "to_k", "to_v"),
)
"""Names of child layers that take one input in the usual model code (mlx-lm's Llama, Qwen2,
Qwen3, Mistral...: q/k/v and gate/up; the original Llama's wq/wk/wv and w1/w3; BERT-style
query/key/value; diffusers' to_q/to_k/to_v): quantize_linears' default `fuse`."""

MISSES_TO_SPLIT = 2
"""A group stops fusing once its fused result was left unused by a sibling this many times,
more often than it was used (its layers then do not share their input in this model)."""


class _Fused:
    """A group's concatenated arrays and the member arrays they were made of (sources: weight,
    scales, bias of each member in turn; checks: (member, its weight, scales, bias) for each);
    bound: api.bind's of the concatenated arrays (made at the first call that uses them; None
    where traced)."""

    __slots__ = ("sources", "checks", "weight", "scales", "bias", "bound")

    def __init__(self, members, sources, weight, scales, bias):
        self.sources, self.weight, self.scales, self.bias = sources, weight, scales, bias
        self.checks = tuple(zip(members, sources[0::3], sources[1::3], sources[2::3]))
        self.bound = None


class _Waiting(threading.local):
    """One thread's fused result that siblings have yet to take: pending is None, or
    [x, version, outputs, waiting], where waiting has bit i set while member i's columns wait and
    version is the group's when the result was computed."""

    pending = None


class SiblingGroup:
    """W8A8Linear layers of one input width, bias or not alike, and one backend, that a model
    calls with the same input: one W8A8 GEMM over their concatenated weights serves them all.

    A sibling called with an input x (the same Python object, an mx.array or a tracer of
    mx.compile/mx.grad) that the group's last fused call in this thread had, and whose columns
    it has not yet taken, gets them; any other call runs the fused GEMM on its x and leaves the
    other siblings' columns waiting (per thread: concurrent callers never share a result).
    So a sibling called with its own input is still right, only slower; a group whose fused
    results keep going unused (MISSES_TO_SPLIT) runs each layer alone from then on.

    The concatenated arrays follow the members' parameters: when a member's weight, scales or
    bias is replaced (load_weights, update, set_dtype, an optimizer step), the next call
    concatenates them anew; outside any transformation it also makes the members' weight and
    scales views of the new arrays again (one copy of the weights in memory).
    """

    version = 0  # bumped whenever a member's parameter is replaced (also while a copy is assembled)

    def __init__(self, members, backend=None):
        self.members = tuple(members)
        self.backend = backend
        widths = [m.output_dims for m in self.members]
        self.bounds = [sum(widths[: i + 1]) for i in range(len(widths) - 1)]
        self.has_bias = "bias" in self.members[0]
        self.shared = True
        self.version = 0
        self._hits = 0
        self._misses = 0
        self._lock = threading.Lock()
        self._all = (1 << len(self.members)) - 1  # every member's bit (_Waiting)
        self._local = _Waiting()
        self._fused = self._build(self._sources(), share=True)
        for i, m in enumerate(self.members):
            m._group, m._index = self, i

    def __getstate__(self):  # copy.deepcopy, pickle: a fresh lock and no waiting results
        state = self.__dict__.copy()
        del state["_lock"], state["_local"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._all = (1 << len(self.members)) - 1  # also for a group pickled before it was kept
        self._local = _Waiting()

    def _sources(self) -> tuple:
        return tuple(a for m in self.members for a in (m.weight, m.scales, m.get("bias")))

    def _build(self, sources, share: bool) -> _Fused:
        """The concatenated arrays of `sources`; share: evaluate them and make the members'
        weight and scales views of them (only where nothing is traced)."""
        weights, scales, biases = sources[0::3], sources[1::3], sources[2::3]
        w = mx.concatenate(weights, axis=0)
        s = mx.concatenate(scales, axis=0)
        # float32 holds every float16/bfloat16/float32 bias value exactly
        b = mx.concatenate([v.astype(mx.float32) for v in biases], axis=0) if self.has_bias else None
        if not share:
            return _Fused(self.members, sources, w, s, b)
        mx.eval(w, s) if b is None else mx.eval(w, s, b)
        for m, lo, hi in zip(self.members, [0, *self.bounds], [*self.bounds, w.shape[0]]):
            m.weight, m.scales = w[lo:hi], s[lo:hi]
        views = [a for m in self.members for a in (m.weight, m.scales)]
        mx.eval(*views)  # a slice of an evaluated array shares its memory
        return _Fused(self.members, self._sources(), w, s, b)

    def _current(self) -> _Fused:
        """The fused arrays of the members' present parameters (rebuilt if one was replaced: by
        identity, which also sees the replacements that bypass __setitem__, such as mx.compile's
        of its captured state)."""
        fused = self._fused
        get = _DICT_GET
        for m, w, s, b in fused.checks:
            if get(m, "weight") is not w or get(m, "scales") is not s or get(m, "bias") is not b:
                break
        else:
            return fused
        with self._lock:
            sources = self._sources()
            fused = self._fused
            if any(a is not b for a, b in zip(sources, fused.sources)):
                fused = self._build(sources, share=_may_skip_custom(*(a for a in sources if a is not None)))
                self._fused = fused
                self.version += 1
            return fused

    def _bound_call(self, fused: _Fused):
        """fused.bound, made at its first use: api.bind of the concatenated arrays (their scales
        read once: one synchronisation on a GPU; where they are refused, the member whose scales
        hold the bad value is named); None where traced."""
        bound = fused.bound
        if bound is None:
            try:
                bound = bind(fused.weight, fused.scales, fused.bias, backend=self.backend)
            except ValueError:
                for m in self.members:  # raises with the member's own 'scales' and index
                    bind(_DICT_GET(m, "weight"), _DICT_GET(m, "scales"), _DICT_GET(m, "bias"), backend=self.backend,
                         func="W8A8Linear", names=("weight", "scales", "bias"))
                raise
            fused.bound = bound
        return bound

    def _fused_output(self, fused: _Fused, index: int, x):
        """w8a8_linear of the concatenated arrays: the bound call, else (member index's input
        check first) the general path."""
        bound = self._bound_call(fused)
        if bound is not None:
            y = bound.fast(x)
            if y is not None:
                return y
        return self._fused_general(fused, index, x)

    def _fused_general(self, fused: _Fused, index: int, x):
        """_fused_output through int8nax.w8a8_linear, which checks every argument (x's width
        first, named by member index)."""
        self.members[index]._check_input(x)
        return w8a8_linear(x, fused.weight, fused.scales, fused.bias, backend=self.backend)

    def replaced(self) -> None:
        """A member's parameter was replaced (W8A8Linear.__setitem__): waiting results are stale."""
        self.version += 1

    def joint_output(self, x):
        """Every member's output side by side, [..., sum of output dims], for input x: the fused
        GEMM alone, leaving no result waiting (a caller that wants all columns at once)."""
        return self._fused_output(self._current(), 0, x)

    def output(self, index: int, x):
        """Member `index`'s y for input x. A sibling takes a waiting result without re-checking
        x or the parameters (the call that computed it checked both, and replacing a parameter
        since then changed `version`); any other call checks x's width first."""
        if not self.shared:
            return self.members[index]._own_output(x)
        local = self._local
        pending = local.pending
        if pending is not None:
            waiting = pending[3]
            bit = 1 << index
            if pending[0] is x and waiting & bit and pending[1] == self.version:
                waiting ^= bit
                if waiting:
                    pending[3] = waiting
                else:
                    local.pending = None
                self._hits += 1
                return pending[2][index]
            self.members[index]._check_input(x)
            if waiting:
                self._misses += 1  # a fused result some siblings never took
                if self._misses >= MISSES_TO_SPLIT and self._misses > self._hits:
                    self.shared = False
                    local.pending = None
                    return self.output(index, x)
        fused = self._current()
        bound = fused.bound  # _fused_output, inline
        if bound is None:
            bound = self._bound_call(fused)
        y = None if bound is None else bound.fast(x)
        if y is None:
            y = self._fused_general(fused, index, x)
        outputs = mx.split(y, self.bounds, axis=-1)
        local.pending = [x, self.version, outputs, self._all ^ (1 << index)]
        return outputs[index]


def _sibling_sets(fuse, func: str):
    if fuse is True:
        return SIBLINGS
    if fuse is False or fuse is None:
        return ()
    sets = None
    if not isinstance(fuse, (str, bytes)):
        try:
            sets = tuple(fuse)
        except TypeError:
            pass
    if sets is None or not all(
            isinstance(names, (tuple, list)) and names and all(isinstance(n, str) for n in names) for names in sets):
        raise TypeError(
            f"{func}: 'fuse' must be True, False or a sequence of tuples of child names such as "
            f"[('q_proj', 'k_proj', 'v_proj')], got {fuse!r}")
    return sets


def group_siblings(model: nn.Module, fuse=True, layers=None) -> list[SiblingGroup]:
    """Join the W8A8Linear children of each module of `model` named in one of `fuse`'s name
    tuples (SIBLINGS by default) into SiblingGroups, where they agree in input width, bias and
    backend; layers: only these (by identity). Returns the new groups."""
    sets = _sibling_sets(fuse, "group_siblings")
    groups = []
    for _, module in model.named_modules():
        for names in sets:
            found = [module[name] for name in names if name in module]
            found = [m for m in found if isinstance(m, W8A8Linear) and m._group is None
                     and (layers is None or id(m) in layers)]
            kinds: dict = {}
            for m in found:
                kinds.setdefault((m.input_dims, "bias" in m, m._backend), []).append(m)
            for (_, _, backend), members in kinds.items():
                if len(members) > 1:
                    groups.append(SiblingGroup(members, backend))
    return groups


# ---- SwiGLU MLPs (module docstring) ----

@lru_cache(maxsize=64)
def _mlx_lm_swiglu_call(cls) -> bool:
    """Whether cls.__call__(self, x) is exactly `return self.down_proj(swiglu(self.gate_proj(x),
    self.up_proj(x)))` (a docstring aside), with `swiglu` a function that computes what
    backends.swiglu does (_computes_swiglu)."""
    fn = getattr(cls, "__call__", None)
    if not inspect.isfunction(fn) or fn is nn.Module.__call__:
        return False
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError):
        return False
    node = tree.body[0] if tree.body else None
    if not isinstance(node, ast.FunctionDef) or len(node.args.args) != 2 or node.args.vararg or node.args.kwarg:
        return False
    self_name, x_name = (a.arg for a in node.args.args)
    body = node.body[1:] if (node.body and isinstance(node.body[0], ast.Expr)
                             and isinstance(node.body[0].value, ast.Constant)) else node.body
    if len(body) != 1 or not isinstance(body[0], ast.Return):
        return False

    def call_of(expr, name):  # `self.<name>(arg)` or `<name>(arg, ...)`; returns the args
        if not isinstance(expr, ast.Call) or expr.keywords:
            return None
        f = expr.func
        if name.startswith("self."):
            ok = (isinstance(f, ast.Attribute) and f.attr == name[5:] and isinstance(f.value, ast.Name)
                  and f.value.id == self_name)
        else:
            ok = isinstance(f, ast.Name) and f.id == name
        return expr.args if ok else None

    def is_x(expr):
        return isinstance(expr, ast.Name) and expr.id == x_name

    down = call_of(body[0].value, "self.down_proj")
    if not down or len(down) != 1 or not isinstance(down[0], ast.Call) or not isinstance(down[0].func, ast.Name):
        return False
    act = down[0].func.id
    pair = call_of(down[0], act)
    if not pair or len(pair) != 2:
        return False
    gate, up = call_of(pair[0], "self.gate_proj"), call_of(pair[1], "self.up_proj")
    if not gate or not up or len(gate) != 1 or len(up) != 1 or not is_x(gate[0]) or not is_x(up[0]):
        return False
    return _computes_swiglu(fn.__globals__.get(act))


_PROBE_DEVICE_LOCK = threading.Lock()
"""Held while _computes_swiglu makes the CPU MLX's default device: that default is one per
process, and two threads saving and restoring it at once can leave the CPU as everyone's."""


@lru_cache(maxsize=8)
def _computes_swiglu(fn) -> bool:
    """Whether fn(gate, up) gives backends.swiglu's bits (on the CPU, in every float dtype, over
    values where sigmoid saturates, underflows and rounds): mlx-lm's `swiglu` does. Once per
    function and process (quantize_linears); for those milliseconds MLX's default device is the
    CPU in every thread (mx.stream), which a caller quantizing a model while other threads
    serve should know."""
    if fn is None or not callable(fn):
        return False
    values = mx.array([-1e4, -90.0, -30.0, -17.3, -5.5, -1.0, -0.3, -1e-3, 0.0, 1e-3, 0.37, 1.0, 2.5, 9.75, 31.0, 1e4])
    gate = mx.concatenate([values, mx.sin(mx.arange(48, dtype=mx.float32)) * 7])
    up = mx.concatenate([values[::-1], mx.cos(mx.arange(48, dtype=mx.float32)) * 3])
    try:
        with _PROBE_DEVICE_LOCK, mx.stream(mx.cpu):
            return all(mx.array_equal(fn(gate.astype(t), up.astype(t)), _swiglu(gate.astype(t), up.astype(t)),
                                      equal_nan=True).item()
                       for t in (mx.float32, mx.float16, mx.bfloat16))
    except Exception:  # noqa: BLE001 - anything else is not the function we know
        return False


def _gate_up_group(module):
    """The SiblingGroup of exactly module's gate_proj and up_proj, in that order, else None."""
    gate, up = module.get("gate_proj"), module.get("up_proj")
    group = getattr(gate, "_group", None)
    if group is None or len(group.members) != 2 or group.members[0] is not gate or group.members[1] is not up:
        return None
    return group


class SwiGLUMLPCall:
    """Mixed into the class of a SwiGLU MLP that quantize_linears recognised (module docstring):
    its call hands the gate/up group's joint output to swiglu_w8a8_linear; own_call(x) is the
    model's own call (the same bits, in two steps)."""

    _swiglu_base: type = nn.Module  # the model's own class (set on each subclass)

    def own_call(self, x):
        return self._swiglu_base.__call__(self, x)

    def one_step(self):
        """(gate group, down projection) where a call now takes swiglu_w8a8_linear (the children
        still fit and the backend runs it in one step), else None."""
        down = self.get("down_proj")
        if type(down) is not W8A8Linear or not backends.resolve(down._backend).swiglu_one_step():
            return None
        group = _gate_up_group(self)
        if group is None or not group.shared or down._group is not None or down._backend != group.backend:
            return None
        return group, down

    def __call__(self, x):
        # one_step()'s first test, inline: where the backend has no one-step kernel (the default
        # everywhere) the model's own call follows at once
        down = _DICT_GET(self, "down_proj")
        if type(down) is not W8A8Linear or not backends.resolve(down._backend).swiglu_one_step():
            return self._swiglu_base.__call__(self, x)
        fits = self.one_step()
        if fits is None:
            return self._swiglu_base.__call__(self, x)
        group, down = fits
        group.members[0]._check_input(x)
        return swiglu_w8a8_linear(group.joint_output(x), down.weight, down.scales, down.get("bias"),
                                  backend=down._backend)

    def __reduce_ex__(self, protocol):
        # pickle names a class by its module and qualified name, which lead to the model's own
        # class: rebuild through _taken_over_instance instead (copy.deepcopy comes here too)
        reduced = super().__reduce_ex__(protocol)
        fn, args = reduced[0], reduced[1]
        if getattr(fn, "__name__", "") == "__newobj__" and args and args[0] is type(self):
            return (_taken_over_instance, (self._swiglu_base, *args[1:]), *reduced[2:])
        return reduced


_TAKEN_OVER: dict[type, type] = {}
_TAKEN_OVER_LOCK = threading.Lock()


def _taken_over_class(cls: type) -> type:
    with _TAKEN_OVER_LOCK:
        sub = _TAKEN_OVER.get(cls)
        if sub is None:
            sub = type(cls.__name__, (SwiGLUMLPCall, cls), {"_swiglu_base": cls, "__doc__": cls.__doc__,
                                                           "__module__": cls.__module__, "__qualname__": cls.__qualname__})
            _TAKEN_OVER[cls] = sub
        return sub


def _taken_over_instance(cls: type, *args):
    sub = _taken_over_class(cls)
    return sub.__new__(sub, *args)


def take_over_swiglu_mlps(model: nn.Module) -> int:
    """Give every module of `model` whose call is mlx-lm's SwiGLU MLP call and whose gate_proj
    and up_proj form one SiblingGroup the call through int8nax.swiglu_w8a8_linear (module
    docstring); returns how many."""
    count = 0
    for _, module in model.named_modules():
        if isinstance(module, SwiGLUMLPCall):
            continue
        if (_gate_up_group(module) is None or type(module.get("down_proj")) is not W8A8Linear
                or not _mlx_lm_swiglu_call(type(module))):
            continue
        module.__class__ = _taken_over_class(type(module))
        count += 1
    return count


def quantize_linears(model: nn.Module, backend: str | None = None, predicate=None, fuse=True) -> int:
    """Replace every nn.Linear in `model` (in place) by a W8A8Linear; returns how many.

    predicate(path, module) -> bool narrows the choice (e.g. skip an lm_head). A layer that
    cannot be quantized (NaN/inf or out-of-range weights) raises a ValueError naming its
    path in the model; the model is then left unchanged.

    fuse: True (default: the child names of SIBLINGS), a sequence of tuples of child names, or
    False. Layers so named under one module that agree in input width, bias and backend become
    a SiblingGroup: called with one input, they quantize it once and run one GEMM (see the
    module docstring); the module tree, its parameter keys and shapes are unchanged. A SwiGLU
    MLP so grouped (mlx-lm's call) then computes its down projection's input and quantization
    in one step (take_over_swiglu_mlps), with the same bits.
    """
    func = "quantize_linears"
    if not isinstance(model, nn.Module):
        raise TypeError(f"{func}: 'model' must be an mlx.nn.Module, got {type(model).__name__}")
    if predicate is not None and not callable(predicate):
        raise TypeError(f"{func}: 'predicate' must be callable (path, module) -> bool, got {type(predicate).__name__}")
    check_backend(backend, func)
    sibling_sets = _sibling_sets(fuse, func)
    count = 0
    made = set()

    def swap(path, module):
        nonlocal count
        if isinstance(module, nn.Linear) and (predicate is None or predicate(path, module)):
            try:
                layer = W8A8Linear.from_linear(module, backend=backend)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{func}: layer '{path}': {exc}") from exc
            count += 1
            made.add(id(layer))
            return layer
        return module

    leaves = model.leaf_modules()
    replaced = tree_map_with_path(
        lambda path, m: swap(path, m), leaves, is_leaf=lambda m: isinstance(m, nn.Module)
    )
    model.update_modules(replaced)
    if sibling_sets:
        group_siblings(model, sibling_sets, made)
        take_over_swiglu_mlps(model)
    return count


def kernel_calls(model: nn.Module) -> dict:
    """{backend name or None: [(op, n, k, bias dtype or None), ...]}: the W8A8 calls `model`'s
    layers make, as their backends see them: a sibling group's one fused call, a lone layer's own,
    and a SwiGLU MLP's one-step call where the backend takes it (Backend.warm_up's `layers`)."""
    calls: dict = {}
    groups = set()
    for _, module in model.named_modules():
        if isinstance(module, SwiGLUMLPCall):
            fits = module.one_step()
            if fits is not None:
                group, down = fits
                bias = down.get("bias")
                calls.setdefault(down._backend, []).append(("swiglu_w8a8_linear", down.output_dims, down.input_dims,
                                                            None if bias is None else bias.dtype))
        if type(module) is not W8A8Linear:
            continue
        group = module._group
        if group is not None and group.shared:
            if id(group) not in groups:
                groups.add(id(group))
                n = sum(m.output_dims for m in group.members)
                calls.setdefault(group.backend, []).append(
                    ("w8a8_linear", n, module.input_dims, mx.float32 if group.has_bias else None))
            continue
        bias = module.get("bias")
        calls.setdefault(module._backend, []).append(
            ("w8a8_linear", module.output_dims, module.input_dims, None if bias is None else bias.dtype))
    return {b: list(dict.fromkeys(c)) for b, c in calls.items()}


def _activation_dtype(model: nn.Module):
    """The floating dtype most of `model`'s parameters outside its W8A8 layers have (its
    activations', in the usual model), float16 where it has none."""
    counts: dict = {}
    for path, value in tree_flatten(model.parameters()):
        if isinstance(value, mx.array) and mx.issubdtype(value.dtype, mx.floating) and not path.endswith(("scales", "bias")):
            counts[value.dtype] = counts.get(value.dtype, 0) + value.size
    return max(counts, key=counts.get) if counts else mx.float16


def warm_up(model: nn.Module, max_rows: int, *, dtype=None, jobs: int | None = None, progress=None) -> int:
    """Make ready, before a first request, every kernel `model`'s W8A8 layers launch for inputs
    of 1 .. max_rows rows (tokens times batch), with activations of `dtype` (default: the dtype
    most of the model's other parameters have). On CUDA each kernel instance is compiled once per
    machine into MLX's kernel cache, in parallel (`jobs` compiles at once, default the CPUs;
    progress(done, total)), and loaded; a later process finds them there. Returns how many
    kernels this built (0 where all were ready, or on the CPU)."""
    func = "warm_up"
    if not isinstance(model, nn.Module):
        raise TypeError(f"{func}: 'model' must be an mlx.nn.Module, got {type(model).__name__}")
    _positive_int(max_rows, "max_rows", func)
    dtype = _activation_dtype(model) if dtype is None else dtype
    built = 0
    for backend, layers in kernel_calls(model).items():
        built += backends.resolve(backend).warm_up(layers, max_rows, dtype, jobs=jobs, progress=progress)
    return built
