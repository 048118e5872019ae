"""Tapes: a layer's call replayed in one C++ step (tape.cpp, built once per machine: build.py).

A GPU backend's W8A8 call is a small graph of kernel launches on x as the model passes it. Building it in
Python costs microseconds per call, and MLX's compiled replay (backends.entries) still several:
its cache lookup, argument flattening and Python frames cost more than the whole call of MLX's
own QuantizedLinear. A Tapes object, held by a layer whose weights stay the same arrays, records
the graph its backend builds on x at the first call of an x shape, dtype and stream, and replays
it for every later one: one C++ call that creates the recorded arrays on the new x.

new(outputs) gives a Tapes object, or None where tapes cannot serve (the reason: why()):
INT8NAX_TAPES=off, no C++ compiler or nanobind, an extension that did not build or load, or an
MLX whose tracers the extension cannot tell apart (checked once per process, as the API's own test
is: tracer_test). invalidate() forgets every recording (backends' clear_caches call it).
"""

from __future__ import annotations

import os
import threading

import mlx.core as mx

from ..base import under_each_transformation
from ..mlx_install import switched_off

ENV = "INT8NAX_TAPES"
"""off (also 0, false, no): no tapes; layers take the backends' compiled entry points."""

LIMIT = 16
"""Recordings a Tapes object keeps (x shapes, dtypes and streams); a full one starts over."""

_STATE: dict = {}
"""'module' (the _tape module or None) and 'why' (None, or why there are no tapes), once asked."""

_LOCK = threading.Lock()


def tracer_test(module) -> bool:
    """Whether module.is_tracer says True inside mx.grad, mx.vjp, mx.jvp, mx.vmap and mx.compile,
    for an input and for an array made from it, and False outside."""
    outside = module.is_tracer(mx.zeros((2,), dtype=mx.float32))
    seen = under_each_transformation(lambda x: module.is_tracer(x) and module.is_tracer(x * 2))
    return not outside and seen == [True] * 5


def takes_mlx_arrays(module) -> bool:
    """Whether the extension's functions accept MLX's own mx.array: only where the nanobind it was
    built with shares MLX's internals (its version's; another raises a TypeError at the call)."""
    try:
        module.is_tracer(mx.zeros((1,), dtype=mx.float32))
    except TypeError:
        return False
    return True


def _load() -> None:
    from . import build

    if switched_off(ENV):
        module, why = None, f"{ENV}={os.environ[ENV]}"
    else:
        module, why = build.load()
        if module is not None and not takes_mlx_arrays(module):
            module, why = None, (f"the extension does not take MLX's arrays: nanobind {build.nanobind_version()} "
                                 "does not share MLX's nanobind internals (pyproject.toml pins the one that does)")
        elif module is not None and not tracer_test(module):
            module, why = None, "the extension does not tell this MLX's tracers apart"
    _STATE.update(module=module, why=why)


def module():
    """The _tape module, built and loaded at the first ask in a process; None where there are no
    tapes (why())."""
    if "module" not in _STATE:
        with _LOCK:
            if "module" not in _STATE:
                _load()
    return _STATE["module"]


def why() -> str | None:
    """Why there are no tapes in this process, or None where there are (asks module() first)."""
    module()
    return _STATE["why"]


def new(outputs: int = 1):
    """A Tapes object whose replays give `outputs` arrays (one: the array; more: a tuple), or None
    where there are no tapes."""
    m = module()
    return None if m is None else m.Tapes(outputs, LIMIT)


def invalidate() -> None:
    """Forget every recording of every Tapes object (a backend setting changed its graphs), and
    ask INT8NAX_TAPES again at the next new()."""
    m = _STATE.get("module")
    if m is not None:
        m.invalidate()
    if m is None or switched_off(ENV):
        _STATE.clear()  # ask again at the next new()
