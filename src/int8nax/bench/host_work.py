"""Host work per call of a linear layer: the microseconds the Python thread spends building one
call's lazy graph (no evaluation), for int8nax's W8A8Linear beside mlx.nn.Linear and MLX's 8-bit
QuantizedLinear (group 64) on the same shapes.

On a GPU this is the time the host needs before the GPU can run the call: in mlx-lm's decode
loop, where each step's graph is built, then evaluated, it adds to every token. Measured as the
mean of CALLS calls building graphs that are dropped unevaluated, best of REPEATS, after warm-up
calls (first-use work: the CUDA backend's per-shape entry points, the layer's weight checks).

Where the backend computes during the call (the CPU backend: numpy and its GEMM engine) there is
no host-only figure to take: W8A8Linear is then measured on GraphOnlyBackend, a stand-in built
as the CUDA backend is (a compiled entry point per shape, Backend.w8a8_linear_marked) whose graph
is one lazy MLX op of the output's shape. That figure is the Python work of int8nax's layer and
API above the backend (checks, backend choice, tracer test) and one compiled replay, which
host_backend() names; it says nothing of a real backend's kernels.

Shapes: Qwen2.5-7B's linears (K, N, bias): q/k/v-sized 3584 -> 3584 with a bias, the MLP's
3584 -> 18944 and 18944 -> 3584; M = 1 (decode) and 512 (a prefill chunk). Inputs are bfloat16
[1, M, K], as mlx-lm passes them. Weights are zeros: host work does not depend on values.

The launch (launch_us_per_call): the microseconds `mx.async_eval` takes per call for LAUNCH_CALLS
calls' graphs built beforehand, each batch evaluated to the end before the next: MLX's evaluation
of a call's nodes (on a GPU, each kernel's launch and the CUDA-graph commits; not waited for). In
mlx-lm's decode loop it is the larger share of a step's host time (results/cuda-h100.md). Where
MLX's default device is the CPU it is not measured (launch_unmeasured: the CPU stream computes
inside mx.async_eval).

A whole decoder layer (block_host_us): mlx-lm's Qwen2 TransformerBlock at Qwen2.5-0.5B's sizes
(BLOCK_CONFIG; host work does not depend on them), called as mlx-lm calls it without a cache (M = 1
without a mask, 512 with the causal one), in bf16, after nn.quantize(bits=8) (MLX's 8-bit form)
and after int8nax.nn.quantize_linears (W8A8: q/k/v and gate/up sibling groups, the SwiGLU MLP's
call taken over), the W8A8 layers on the same backend as W8A8Linear's figure: the per-layer host
work with the groups' split outputs and the MLP's own call included.
"""

from __future__ import annotations

import contextlib
import os
import time
from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map

from .. import backends
from ..backends import entries, tape
from ..backends.base import Backend, Probe
from ..nn import W8A8Linear

LAYERS = ("linear", "q8", "w8a8", "w8a8-compiled", "w8a8-uncompiled")
"""mlx.nn.Linear (bfloat16), mlx.nn.QuantizedLinear(bits=8, group_size=64), int8nax.nn.W8A8Linear
(its calls replayed by tapes where this process has them: int8nax.backends.tape), W8A8Linear
without tapes (TAPELESS_FORMS: its backend's mx.compile'd entry points), and W8A8Linear with
neither (UNCOMPILED_FORMS)."""

TAPELESS_FORMS = frozenset({"w8a8-compiled"})
"""W8A8 measured with INT8NAX_TAPES=off: beside "w8a8" it tells what a tape's replay saves against
the replay of MLX's compiled entry point."""

UNCOMPILED_FORMS = frozenset({"w8a8-uncompiled"})
"""W8A8 measured with the backend's compiled entry points off: each call builds its launches in
Python (the GPU backend's COMPILE = False; the stand-in's w8a8_linear). Beside "w8a8" it tells
what the replay of a compiled entry costs against building the graph directly."""

SHAPES = ((3584, 3584, True), (3584, 18944, False), (18944, 3584, False))
"""(K, N, bias) of the layers measured."""

TOKENS = (1, 512)
"""M, the rows of one call: a decode step and a prefill chunk."""

LAUNCH_LAYERS = ("linear", "q8", "w8a8")
"""The layer kinds whose launch is measured (the forms a model runs)."""

CALLS = 200
REPEATS = 5
WARM_UP = 3

EAGER = frozenset({"cpu"})
"""Backends that compute during the call (no host-only figure): W8A8Linear runs on GraphOnlyBackend there."""


def _graph(x, w):
    """The stand-in's whole graph: one lazy op of the output's shape and x's dtype."""
    return mx.zeros((*x.shape[:-1], w.shape[0]), dtype=x.dtype)


class GraphOnlyBackend(Backend):
    """A stand-in built as the CUDA backend is, whose graph is one lazy op of the output's shape
    and dtype (never evaluated here): its w8a8_linear_marked and w8a8_mlp_marked (offered where
    the CUDA backend offers its own: INT8NAX_CUDA_MLP=step) are the GPU backends' compiled entry
    points (backends.entries: marked bodies taking x at any rank, as the CUDA backend's kernels
    do) over that op, its w8a8_linear the op. What is left of a W8A8Linear call (or a SwiGLU
    MLP's) is int8nax's own host work and one compiled replay."""

    name = "graph-only"

    def __init__(self, compiled: bool = True):
        self._entries = entries.table(self._linear_entry, 64)
        self._mlp_entries = entries.table(self._mlp_entry, 64)
        self.compiled = compiled  # False: no compiled entry points (w8a8_linear_marked gives None)

    def probe(self) -> Probe:
        return Probe(True, "host-work stand-in: one lazy op per call")

    def w8a8_linear(self, x, w, scale_w, bias):
        return _graph(x, w)

    @staticmethod
    def _linear_entry(shape, n):
        return entries.linear(shape, n, lambda x, w, s, bias: _graph(x, w), any_rank=True)

    def w8a8_linear_graph(self, x, w, scale_w, bias):
        # Backend.w8a8_linear_graph as the CUDA backend's: the entry's graph built directly
        if not self.compiled:
            return None
        return entries.linear_body(x.shape, w.shape[0], lambda x, w, s, bias: _graph(x, w),
                                   any_rank=True)(x, w, scale_w, bias)

    @staticmethod
    def _mlp_entry(shape, n):
        return entries.mlp(shape, n, lambda x, w, s, bias: _graph(x, w), lambda h, w, s, bias: _graph(h, w),
                           any_rank=True)

    def w8a8_linear_marked(self, x, w, scale_w, bias):
        if not self.compiled:
            return None
        return entries.marked(self._entries.get((x.shape, w.shape[0])), x, w, scale_w,
                              scale_w if bias is None else bias)

    @property
    def w8a8_mlp_marked(self):
        # offered as the CUDA backend offers its own: where INT8NAX_CUDA_MLP=step
        from ..backends.cuda import settings as cuda_settings

        return self._mlp_marked if cuda_settings.mlp_choice() == "step" else None

    def _mlp_marked(self, x, w1, s1, b1, w2, s2, b2):
        # the same replay for a whole SwiGLU MLP, one entry per x shape as the CUDA backend keeps
        if not self.compiled:
            return None
        return entries.marked(self._mlp_entries.get((x.shape, w2.shape[0])), x, w1, s1, s1 if b1 is None else b1,
                              w2, s2, s2 if b2 is None else b2)


def host_backend() -> str:
    """The backend W8A8Linear's figure is taken on here: the one auto mode picks, or
    "graph-only (cpu computes during the call)" where that backend is eager."""
    name = backends.choose(None)[0]
    return f"graph-only ({name} computes during the call)" if name in EAGER else name


@contextlib.contextmanager
def _gpu_compiled(name: str, on: bool):
    """Backend `name`'s compiled entry points (its module's COMPILE) on or off while measured; the
    CUDA backend's caches cleared on each change, so no entry of the other setting is reused (the
    Metal backend's entries are asked for only while COMPILE is on)."""
    if name == "cuda":
        from ..backends.cuda import backend as module
    elif name == "metal":
        from ..backends.metal import backend as module
    else:
        yield
        return
    was = module.COMPILE
    if was == on:
        yield
        return
    module.COMPILE = on
    if name == "cuda":
        module.clear_caches()
    try:
        yield
    finally:
        module.COMPILE = was
        if name == "cuda":
            module.clear_caches()


@contextlib.contextmanager
def _env(name: str, value: str, refresh):
    """Environment variable `name` set to `value` while measured, refresh() called after each change
    (the setting read anew): for the benchmark's own process, never while other threads call int8nax."""
    was = os.environ.get(name)
    os.environ[name] = value
    refresh()
    try:
        yield
    finally:
        if was is None:
            del os.environ[name]
        else:
            os.environ[name] = was
        refresh()


def _tapes(on: bool):
    """INT8NAX_TAPES=off while measured where not `on` (the recordings forgotten before and after)."""
    return contextlib.nullcontext() if on else _env(tape.ENV, "off", tape.invalidate)


@contextlib.contextmanager
def _w8a8_setting(form: str):
    """What W8A8 `form` is measured under: its backend (compiled entry points off for
    UNCOMPILED_FORMS) and tapes (off for TAPELESS_FORMS); nothing for the other forms."""
    if not form.startswith("w8a8"):
        yield
        return
    with _w8a8_backend(form not in UNCOMPILED_FORMS), _tapes(form not in TAPELESS_FORMS):
        yield


@contextlib.contextmanager
def _w8a8_backend(compiled: bool = True):
    """The backend W8A8Linear calls resolve to while measured: auto's own (with `compiled` False,
    its compiled entry points off), or where that is eager
    GraphOnlyBackend(compiled), reached through int8nax's own resolution (backends.get hands it
    out under the eager backend's name, and resolve's kept answers are forgotten before and after;
    for the benchmark's own process, never while other threads call int8nax)."""
    name = backends.choose(None)[0]
    if name not in EAGER:
        with _gpu_compiled(name, compiled):
            yield
        return
    stand_in, real = GraphOnlyBackend(compiled), backends.get

    def get(requested: str):
        return stand_in if requested == name else real(requested)

    real.cache_clear()
    backends.get = get
    try:
        yield
    finally:
        backends.get = real
        real.cache_clear()


@lru_cache(maxsize=len(LAYERS) * len(SHAPES))
def layer(kind: str, k: int, n: int, bias: bool) -> nn.Module:
    """The layer `kind` (LAYERS) of input width k, output width n, with zero weights, evaluated;
    kept for the process (at most one per kind and shape)."""
    if kind not in LAYERS:
        raise ValueError(f"kind: expected one of {LAYERS}, got {kind!r}")
    if kind.startswith("w8a8"):
        made = W8A8Linear(k, n, bias=bias)
    else:
        dense = nn.Linear(k, n, bias=bias)
        dense.weight = mx.zeros((n, k), dtype=mx.bfloat16)
        if bias:
            dense.bias = mx.zeros((n,), dtype=mx.bfloat16)
        made = dense if kind == "linear" else nn.QuantizedLinear.from_linear(dense, group_size=64, bits=8)
    mx.eval(made.parameters())
    return made


def host_us_per_call(kind: str, k: int, n: int, bias: bool, m: int, calls: int = CALLS,
                     repeats: int = REPEATS) -> float:
    """Microseconds of host work per call of layer(kind, k, n, bias) on x bfloat16 [1, m, k]:
    the mean over `calls` calls whose graphs are built and dropped, best of `repeats`."""
    f = layer(kind, k, n, bias)
    x = mx.zeros((1, m, k), dtype=mx.bfloat16)
    mx.eval(x)
    with _w8a8_setting(kind):
        return _best_us(calls, repeats, f, x)


LAUNCH_CALLS = 64
"""Calls whose graphs one timed mx.async_eval launches (launch_us_per_call)."""


def launch_unmeasured() -> str | None:
    """Why there is no launch figure on this machine (MLX's default device is the CPU, whose
    stream computes inside mx.async_eval: the figure would be the computation), or None."""
    device = mx.default_device()
    if device.type == mx.DeviceType.cpu:
        return f"MLX's default device is {device}: mx.async_eval computes there"
    return None


def launch_us_per_call(kind: str, k: int, n: int, bias: bool, m: int = 1, calls: int = LAUNCH_CALLS,
                       repeats: int = REPEATS) -> float:
    """Microseconds of MLX's launch per call of layer(kind, k, n, bias) on x bfloat16 [1, m, k]:
    `calls` calls' graphs built, then mx.async_eval of their outputs timed, per call, best of
    `repeats` (each batch evaluated to the end, untimed, before the next is built)."""
    f = layer(kind, k, n, bias)
    x = mx.zeros((1, m, k), dtype=mx.bfloat16)
    mx.eval(x)
    best = float("inf")
    with _w8a8_setting(kind):
        for trial in range(WARM_UP + repeats):
            ys = [f(x) for _ in range(calls)]
            start = time.perf_counter()
            mx.async_eval(ys)
            took = time.perf_counter() - start
            mx.eval(ys)
            if trial >= WARM_UP:
                best = min(best, took)
    return best / calls * 1e6


def _best_us(calls: int, repeats: int, f, *args) -> float:
    """Microseconds a call of f(*args) takes, graphs built and dropped: WARM_UP calls first, then
    the mean over `calls` calls, best of `repeats`."""
    for _ in range(WARM_UP):
        f(*args)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            f(*args)
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


BLOCK_FORMS = ("bf16", "q8", "w8a8", "w8a8-mlp-step", "w8a8-compiled", "w8a8-uncompiled")
"""A decoder layer's forms: bf16, nn.quantize(bits=8, group_size=64), int8nax.nn.quantize_linears
(as it runs; with the SwiGLU MLP's whole step as well: MLP_STEP_FORMS; without tapes:
TAPELESS_FORMS; without compiled entry points: UNCOMPILED_FORMS)."""

MLP_STEP_FORMS = frozenset({"w8a8-mlp-step"})
"""W8A8 measured with INT8NAX_CUDA_MLP=step (the CUDA backend's whole-MLP step, and the stand-in's):
beside "w8a8" it tells what building the MLP in one replay saves a layer."""


def _mlp_step(on: bool):
    """INT8NAX_CUDA_MLP=step while measured where `on`; as it is otherwise."""
    if not on:
        return contextlib.nullcontext()
    from ..backends.cuda import settings as cuda_settings

    return _env(cuda_settings.MLP_ENV, "step", cuda_settings.mlp_choice.cache_clear)


BLOCK_CONFIG = "qwen2.5-0.5b"
"""The decoder layer's sizes (bench.models.CONFIGS)."""

BLOCK_CALLS = 100


CACHED_CONFIG = "qwen3-8b"
"""The decoder layer decoding on a KV cache (cached_block_host_us): mlx-lm's layer of the model the
generation breakdown runs, at its widths (which choose the CUDA kernels a call records)."""

CACHED_TOKENS = 512
"""Tokens in that layer's KV cache: the generation breakdown's prompt."""

CACHED_FORMS = ("bf16", "q8", "w8a8")
"""The forms cached_block_host_us measures."""


@lru_cache(maxsize=len(BLOCK_FORMS) + len(CACHED_FORMS))
def block(form: str, config: str = BLOCK_CONFIG) -> nn.Module:
    """mlx-lm's TransformerBlock of `config` (bench.models.CONFIGS: Qwen2's for BLOCK_CONFIG) in
    `form` (BLOCK_FORMS), zero weights, evaluated; kept for the process. Raises
    bench.peers.Unavailable without mlx-lm."""
    if form not in BLOCK_FORMS:
        raise ValueError(f"form: expected one of {BLOCK_FORMS}, got {form!r}")
    from . import models
    from ..nn import quantize_linears

    if config not in models.CONFIGS:
        raise ValueError(f"config: expected one of {sorted(models.CONFIGS)}, got {config!r}")
    config = models.CONFIGS[config]
    made = models.mlx_lm_module(config.family).TransformerBlock(models.model_args(config, 1))
    made.update(tree_map(lambda a: mx.zeros(a.shape, dtype=mx.bfloat16), made.parameters()))
    if form == "q8":
        nn.quantize(made, group_size=64, bits=8)
    elif form.startswith("w8a8"):
        quantize_linears(made)
    mx.eval(made.parameters())
    return made


def block_host_us(form: str, m: int, calls: int = BLOCK_CALLS, repeats: int = REPEATS) -> float:
    """Microseconds of host work per call of block(form) on x bfloat16 [1, m, hidden] (mask None
    at m = 1, "causal" above), as host_us_per_call measures a layer."""
    f = block(form)
    x = mx.zeros((1, m, f.hidden_size), dtype=mx.bfloat16)
    mask = None if m == 1 else "causal"
    mx.eval(x)
    with _w8a8_setting(form), _mlp_step(form in MLP_STEP_FORMS):
        return _best_us(calls, repeats, f, x, mask)


def cached_block_host_us(form: str, config: str = CACHED_CONFIG, tokens: int = CACHED_TOKENS,
                         calls: int = BLOCK_CALLS, repeats: int = REPEATS) -> float:
    """Microseconds of host work per decode call (x bfloat16 [1, 1, hidden], no mask) of block(form,
    config) on mlx-lm's KVCache holding `tokens` tokens, as a model's step calls each layer: the
    graph of the projections, the cache's update, attention and the MLP, built and dropped. Each call
    takes a shallow copy of the cache with fresh nodes of its arrays (an update writes into the array
    object the cache holds; the copy and the two nodes, ~1 µs, are in every form's figure alike)."""
    import copy

    from . import models

    if form not in CACHED_FORMS:
        raise ValueError(f"form: expected one of {CACHED_FORMS}, got {form!r}")
    f = block(form, config)
    cfg = models.CONFIGS[config]
    kv = models.mlx_lm_module("cache").KVCache()
    zeros = mx.zeros((1, cfg.kv_heads, tokens, cfg.head_dim), dtype=mx.bfloat16)
    kv.update_and_fetch(zeros, zeros)
    x = mx.zeros((1, 1, cfg.hidden), dtype=mx.bfloat16)
    mx.eval(kv.state, x)

    def call():
        c = copy.copy(kv)
        c.keys, c.values = mx.stop_gradient(kv.keys), mx.stop_gradient(kv.values)
        return f(x, None, c)

    with _w8a8_setting(form):
        return _best_us(calls, repeats, call)


def launch_lines() -> list[str]:
    """The launch of each of LAUNCH_LAYERS at each shape of SHAPES, M = 1, µs a call: a line a
    shape, or one saying why there is none (launch_unmeasured)."""
    why_not = launch_unmeasured()
    if why_not:
        return [f"launch a call (mx.async_eval): not measured ({why_not})"]
    return [f"launch a call (mx.async_eval), {k} -> {n}{' + bias' if bias else ''}, M = 1: "
            + ", ".join(f"{kind} {launch_us_per_call(kind, k, n, bias):.2f}" for kind in LAUNCH_LAYERS)
            for k, n, bias in SHAPES]


def report() -> str:
    """Every figure of this module as text: each layer kind (LAYERS) at each shape and M, the
    launch of LAUNCH_LAYERS at each shape at M = 1, then the decoder layer's forms (BLOCK_FORMS),
    µs per call, on host_backend()."""
    why = tape.why()
    lines = [f"host work per call, µs (graph built, not evaluated), W8A8 on {host_backend()}, "
             + ("tapes on" if why is None else f"no tapes ({why})")]
    for k, n, bias in SHAPES:
        for m in TOKENS:
            cells = ", ".join(f"{kind} {host_us_per_call(kind, k, n, bias, m):.2f}" for kind in LAYERS)
            lines.append(f"{k} -> {n}{' + bias' if bias else ''}, M = {m}: {cells}")
    lines += launch_lines()
    for m in TOKENS:
        try:
            cells = ", ".join(f"{form} {block_host_us(form, m):.1f}" for form in BLOCK_FORMS)
        except ImportError as exc:  # mlx-lm gives the decoder layer
            cells = f"not measured ({exc})"
        lines.append(f"decoder layer ({BLOCK_CONFIG}), M = {m}: {cells}")
    try:
        cells = ", ".join(f"{form} {cached_block_host_us(form):.1f}" for form in CACHED_FORMS)
    except ImportError as exc:
        cells = f"not measured ({exc})"
    lines.append(f"decoder layer ({CACHED_CONFIG}) on a {CACHED_TOKENS}-token KV cache, M = 1: {cells}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
