"""SwiGLU MLPs. An MLP whose call is mlx-lm's `down_proj(swiglu(gate_proj(x), up_proj(x)))` (Llama,
Qwen2, Qwen3, Mistral and most of mlx-lm's dense models), with gate and up in one sibling group,
is given a call that hands the group's joint output to int8nax.swiglu_w8a8_linear where the
backend does that in one step (Backend.swiglu_one_step: CUDA with INT8NAX_CUDA_SWIGLU=fused): one
kernel computes h = silu(gate) * up and quantizes it for the down projection (h never written
out), with the bits of the model's own call, which every other backend keeps; at the token counts
where the backend's one step would be the two steps' launches anyway (Backend.swiglu_one_step_at:
CUDA's decode rows, whose GEMV quantizes in registers), the call stays the model's own, taped.
Where the backend
instead takes the whole MLP in one step (Backend.w8a8_mlp_marked: CUDA with INT8NAX_CUDA_MLP=step,
one compiled replay of the same launches as the own call's), a call hands it the group's and the
down projection's arrays, which saves the host work of two replays, a split and the swiglu at every
decode step. The module's class is swapped for a subclass of its own (same name, isinstance and
tree); a module whose children no longer fit takes its own call.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import threading
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn

from .. import backends
from ..api import swiglu_w8a8_linear
from ..backends import env_raw, tape
from ..backends.entries import rows_of
from ..backends import swiglu as _swiglu
from ..api.arguments import _ARRAY, _FLOATS
from ..api.bound import _nothing
from ..api.tracing import _may_skip_custom
from .linear import _DICT_GET, W8A8Linear


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
        group = self._fitting_group(down)
        return None if group is None else (group, down)

    def fused_call(self) -> str | None:
        """The call other than the model's own that a call takes here, where the children fit:
        "one-step" (swiglu_w8a8_linear's one kernel for h: one_step()), "whole-step" (the backend's
        step for the whole MLP: whole_step()), else None."""
        if self.one_step() is not None:
            return "one-step"
        down = self.get("down_proj")
        if type(down) is not W8A8Linear or getattr(backends.resolve(down._backend), "w8a8_mlp_marked", None) is None:
            return None
        return None if self._fitting_group(down) is None else "whole-step"

    def _fitting_group(self, down):
        """The gate/up group where it still fuses and shares down's backend, with down alone."""
        group = _gate_up_group(self)
        if group is None or not group.shared or down._group is not None or down._backend != group.backend:
            return None
        return group

    def whole_step(self, impl, down, x):
        """y for x through the backend's one step for the whole MLP (Backend.w8a8_mlp_marked, with
        the gate/up group's and the down projection's bound arrays), or None where that cannot
        serve this call: no such step, children that no longer fit, x not an mx.array of the
        width and a float dtype, an empty x, a traced x, or an error (the model's own call then
        runs and names it)."""
        entry = getattr(impl, "w8a8_mlp_marked", None)
        group = self._fitting_group(down) if entry is not None else None
        if group is None:
            return None
        fused = group._current()
        gate_up = fused.bound or group._bound_call(fused)
        bound = down._current_bound()
        if (gate_up is None or bound is None or not gate_up.marked or type(x) is not _ARRAY
                or 2 * group.bounds[0] != gate_up.n or bound.width != group.bounds[0]):
            return None
        shape = x.shape
        if not shape or shape[-1] != gate_up.width or x.dtype not in _FLOATS or 0 in shape:
            return None
        try:
            marked = entry(x, gate_up.w, gate_up.scale_w, gate_up.bias, bound.w, bound.scale_w, bound.bias)
        except (ValueError, RuntimeError):
            return None
        if marked is None:
            return None
        y, maybe_traced = marked
        # the body ran: a signature's first call (y is right) or a tracer (the own call serves it)
        return y if not maybe_traced or _may_skip_custom(x) else None

    _taped = None  # _TapedCall of the own call, made at the first call it can be recorded for

    def __call__(self, x):
        taped = self._taped
        if taped is not None and type(x) is _ARRAY:
            y = taped.replay(x)
            if y is not None:
                return y
        down = _DICT_GET(self, "down_proj")
        if type(down) is not W8A8Linear:
            return self._swiglu_base.__call__(self, x)
        try:
            impl = backends.resolve(down._backend)
        except (RuntimeError, ValueError):  # the own call's layers name why
            return self._swiglu_base.__call__(self, x)
        if not impl.swiglu_one_step_at(rows_of(x.shape)[0]):
            y = self.whole_step(impl, down, x)
            return y if y is not None else self._own_call_taped(impl, down, x)
        fits = self.one_step()
        if fits is None:
            return self._swiglu_base.__call__(self, x)
        group, down = fits
        group.members[0]._check_input(x)
        return swiglu_w8a8_linear(group.joint_output(x), down.weight, down.scales, down.get("bias"),
                                  backend=down._backend)

    def _own_call_taped(self, impl, down, x):
        """The model's own call on x, recorded for x's signature (_TapedCall) where the backend's
        layers build lazy graphs and tapes can serve: the next call of that signature replays
        gate/up, the swiglu and down in one step."""
        y = self._swiglu_base.__call__(self, x)
        if getattr(impl, "w8a8_linear_graph", None) is None or type(x) is not _ARRAY or type(y) is not _ARRAY:
            return y
        group = _gate_up_group(self)
        module = tape.module()
        bound = down._bound
        if group is None or module is None or module.is_tracer(x) or bound is None or not bound.taped():
            return y  # the down projection's own call not recorded: the backend gives no graph for it
        taped = self._taped
        guards = _TapedCall.guards_of(group.members + (down,))
        if taped is None or not taped.holds(guards):
            taped = _TapedCall(guards)
            if taped.tapes is None:
                return y
            object.__setattr__(self, "_taped", taped)  # not a parameter: past Module.__setattr__
        taped.record(x, y)
        return y

    def __reduce_ex__(self, protocol):
        # pickle names a class by its module and qualified name, which lead to the model's own
        # class: rebuild through _taken_over_instance instead (copy.deepcopy comes here too)
        reduced = super().__reduce_ex__(protocol)
        fn, args = reduced[0], reduced[1]
        if getattr(fn, "__name__", "") == "__newobj__" and args and args[0] is type(self):
            return (_taken_over_instance, (self._swiglu_base, *args[1:]), *reduced[2:])
        return reduced


class _TapedCall:
    """A taken-over MLP's own call recorded by tapes (int8nax.backends.tape) while its children
    hold the same arrays: `guards`, (layer, name, array) for the weight, scales and bias of
    gate_proj, up_proj and down_proj as recorded, checked by identity before each replay (the
    recording holds those arrays; a replaced one, by any route, means recording anew); keyed by
    INT8NAX_BACKEND's value as the layers' recordings are. Copies and pickles drop it."""

    __slots__ = ("tapes", "guards")

    def __init__(self, guards):
        self.tapes, self.guards = tape.new(1), guards

    @staticmethod
    def guards_of(layers) -> tuple:
        return tuple((m, k, _DICT_GET(m, k)) for m in layers for k in ("weight", "scales", "bias"))

    def holds(self, guards) -> bool:
        return len(guards) == len(self.guards) and all(a[2] is b[2] for a, b in zip(guards, self.guards))

    def record(self, x, y) -> None:
        self.tapes.record(x, [y], env_raw())

    def replay(self, x):
        """y for x, or None where nothing recorded serves it (x's signature, a replaced array,
        another INT8NAX_BACKEND value, a tracer)."""
        get = _DICT_GET
        for m, k, a in self.guards:
            if get(m, k) is not a:
                return None
        return self.tapes(x, env_raw())

    def __reduce__(self):
        return (_nothing, ())


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
