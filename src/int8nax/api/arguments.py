"""What the public functions check beyond int8nax._checks: the inline checks' constants, the
scale arrays whose values were already read (a call does not read them again: on a GPU that is a
synchronisation), and [..., K] inputs as rows.

State: the scale arrays whose values were checked (at most 1024, by identity, each going with
its array: _CheckedScales).
"""

from __future__ import annotations

import threading
import weakref

import mlx.core as mx

from .. import backends
from .._checks import FLOAT_DTYPES, check_scale_values
from .errors import _reraise_foreign

B_LAYOUTS = ("nk", "kn")

# The common call's inline checks (module globals: no attribute lookups on mx per call).
_ARRAY = mx.array
_INT8 = mx.int8
_FLOAT32 = mx.float32
_FLOATS = frozenset(FLOAT_DTYPES)


def _rows(x: mx.array) -> tuple[mx.array, tuple[int, ...]]:
    """Flatten [..., K] to [rows, K]; returns the leading shape to restore."""
    lead = tuple(x.shape[:-1])
    rows = 1
    for d in lead:
        rows *= d
    return x.reshape(rows, x.shape[-1]), lead


class _CheckedScales:
    """Scale arrays whose values passed check_scale_values, by identity: the common call asks
    here (a dict lookup and a weak reference, ~0.1 µs) instead of reading the values, which on
    a GPU is a synchronisation. An entry goes with its array (weak reference) and at most LIMIT
    are kept, the oldest forgotten first; a forgotten array is checked again at its next use.
    An array changed in place (scale_w[i] = v keeps the object) is not checked again."""

    LIMIT = 1024

    def __init__(self):
        self._refs: dict[int, weakref.ref] = {}
        # Re-entrant: a weak reference's callback (drop) can run in this thread while it
        # holds the lock (an array freed by a garbage collection inside add).
        self._lock = threading.RLock()

    def seen(self, scale: mx.array) -> bool:
        ref = self._refs.get(id(scale))
        return ref is not None and ref() is scale

    def add(self, scale: mx.array) -> None:
        key = id(scale)

        def drop(ref, key=key, refs=self._refs, lock=self._lock):
            with lock:
                if refs.get(key) is ref:
                    del refs[key]

        ref = weakref.ref(scale, drop)
        with self._lock:
            refs = self._refs
            refs.pop(key, None)
            while len(refs) >= self.LIMIT:
                del refs[next(iter(refs))]
            refs[key] = ref

    def __len__(self) -> int:
        return len(self._refs)


_SCALES = _CheckedScales()
_scale_seen = _SCALES.seen


def _check_scales(scale: mx.array, name: str, func: str) -> None:
    """check_scale_values(scale) once per scale array (_CheckedScales). Where a transformation
    refuses to evaluate it (a tracer of mx.compile or mx.vmap) the values cannot be read and
    are not checked; an unevaluated array of another thread is named as such."""
    if _scale_seen(scale):
        return
    try:
        check_scale_values(scale, name, func)
    except ValueError as exc:
        if backends.refused_by_trace(exc):
            return
        raise
    except RuntimeError as exc:
        _reraise_foreign(func, exc, ((name, scale),))
    _SCALES.add(scale)
