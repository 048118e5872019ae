"""Sibling layers. Where several layers take the same input (an attention block's q/k/v
projections, an MLP's gate/up), quantize_linears joins them in a SiblingGroup: the first
sibling called with an input computes one W8A8 GEMM over the siblings' concatenated weights
(the input quantized once, one larger N), and each sibling returns its columns of it. Every
output element has the same bits as the sibling's own call would give (the dequantization is
a function of each element's int32 sum, its row's and its column's scales and its bias). The
model's code and its module tree are unchanged: each sibling keeps its own weight, scales and
bias (same keys and shapes for parameters(), save_weights and load_weights), as views of the
group's concatenated arrays.
"""

from __future__ import annotations

import threading

import mlx.core as mx
import mlx.nn as nn

from ..api import bind, w8a8_linear
from ..api.tracing import _may_skip_custom
from .linear import _DICT_GET, W8A8Linear


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
    where traced); parted: bound's twin whose calls give the members' outputs (BoundLinear.parts)."""

    __slots__ = ("sources", "checks", "weight", "scales", "bias", "bound", "parted")

    def __init__(self, members, sources, weight, scales, bias):
        self.sources, self.weight, self.scales, self.bias = sources, weight, scales, bias
        self.checks = tuple(zip(members, sources[0::3], sources[1::3], sources[2::3]))
        self.bound = self.parted = None


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
        """A member's parameter was replaced or removed (W8A8Linear): waiting results are stale; and
        where the members' biases are no longer alike (one removed, or one added), no fused GEMM
        serves them all: the group runs each layer alone from then on."""
        self.version += 1
        # getattr: a copy being assembled replaces its members' parameters before it has its state
        if getattr(self, "shared", False) and any(("bias" in m) != self.has_bias for m in self.members):
            self.shared = False

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
        parted = fused.parted
        if parted is None:
            bound = fused.bound or self._bound_call(fused)
            if bound is not None:
                parted = fused.parted = bound.bound_parts(self.bounds)
        outputs = None if parted is None else parted.fast(x)
        if outputs is None:
            outputs = mx.split(self._fused_general(fused, index, x), self.bounds, axis=-1)
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
