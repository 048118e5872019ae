"""Whether a transformation traces a call: the test that lets an untraced call skip the custom
functions (int8nax.api.gradients).

A custom function costs 3-4 µs of host time per call on the CPU box (a fake lazy backend timed),
more than a GPU backend's own part, and matters only when a transformation traces the call: a
gradient reaches an op only through arrays a transformation made (tracers). So a call whose
arguments _untraced finds free of tracers goes straight to the backend; the others take the
custom functions.

State: the check's compiled identity, one per live thread (int8nax.per_thread), holding MLX's
traces of it per input signature (dtypes and ndims: a handful); _detects_tracers' answer, asked
once per process.
"""

from __future__ import annotations

import threading

import mlx.core as mx

from ..backends.base import under_each_transformation
from ..per_thread import compile_per_thread


class _Ran(threading.local):
    ran = False
    mark = ()
    """This thread's compiled _mark, as _mark_if_traced.slot() (empty until the first call)."""


_RAN = _Ran()


def _mark(*arrays):
    _RAN.ran = True
    return arrays[0]


# MLX runs a compiled function's Python body only to trace it: at the first call for a
# signature (dtypes and ndims: shapeless) and whenever an input is a tracer (an array of an
# mx.grad, mx.vjp, mx.jvp, mx.vmap or mx.compile trace; MLX 0.32 compile.cpp); every other
# call replays the recorded graph (here: no op, the output is the first input), 1-2 µs on the
# CPU box. Checked once per process (_may_skip_custom) and by tests/test_host_path.py.
# Compiled once per thread (per_thread): MLX keeps compiled traces per OS thread and a trace
# made from Python holds a Python object, which one shared mx.compile object would leave to
# the C++ thread-exit destructors of every calling thread; freeing it there takes the GIL,
# which aborts the process (exit 134) when the interpreter is finalizing by then.
_mark_if_traced = compile_per_thread(_mark, shapeless=True)


def _untraced(*arrays) -> bool:
    """True when no argument is a tracer, so that no transformation can see this call; False
    when one may be (or at the first call of a signature, or with compilation disabled)."""
    ran = _RAN
    ran.ran = False
    try:
        mark = ran.mark[0]
    except IndexError:
        ran.mark = _mark_if_traced.slot()
        mark = ran.mark[0]
    mark(*arrays)
    return not ran.ran


def _detects_tracers() -> bool:
    """Whether _untraced says False inside every transformation and True outside, with this
    MLX: the fast path is taken only if so (an MLX that replayed compiled graphs for tracers
    would otherwise lose the custom functions' gradients)."""
    x = mx.zeros((2,), dtype=mx.float32)
    _untraced(x)  # the first call of the signature traces
    outside = _untraced(x)
    return outside and under_each_transformation(_untraced) == [False] * 5


_DETECTS: list[bool] = []
"""_detects_tracers()'s answer, asked at the first call that could use it (not at import: it
runs MLX transformations, which would start the GPU when the package is only imported)."""


_DETECTS_LOCK = threading.Lock()


def _detects() -> bool:
    """_detects_tracers()'s answer, asked once per process."""
    if not _DETECTS:
        with _DETECTS_LOCK:  # threads arriving together: one asks, the others wait for it
            if not _DETECTS:
                _DETECTS.append(_detects_tracers())
    return _DETECTS[0]


def _may_skip_custom(*arrays) -> bool:
    """Whether a valid call may go straight to the backend: this MLX lets _untraced tell traced
    calls apart, and no argument is a tracer."""
    return (_DETECTS[0] if _DETECTS else _detects()) and _untraced(*arrays)
