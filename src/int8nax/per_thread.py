"""mx.compile for functions that any number of threads call: one compiled object per thread,
released in that thread when it ends.

Why (MLX 0.32, mlx/compile.cpp and python/src/transforms.cpp): MLX keeps the traces of
compiled functions in a cache per OS thread (a C++ thread_local), and a trace made from Python
holds a Python object (the output's tree structure). When a thread ends, the C++ runtime
destroys that thread's cache after Python has let go of the thread, and freeing the Python
object then takes the GIL (PyGILState_Ensure). Thread.join() returns before the OS thread has
run its thread_local destructors, so when the main thread exits right after joining its
workers, CPython is already finalizing: it ends the worker with pthread_exit inside that
destructor and the C++ runtime aborts ("terminate called without an active exception", exit
status 134, the fault handler showing a non-main thread "Garbage-collecting"). A daemon
thread still running at exit meets the same. And a compiled object erases its traces only
from the cache of the thread that called it last, so one shared by threads leaves traces in
the others' caches until they end (memory), keyed by the address of its Python function,
which a function made later may reuse (a trace of another function replayed).

So a PerThreadCompiled keeps one mx.compile object per thread. Each is released:
- in its own thread, when Python clears that thread's state at its end (a threading.local,
  GIL held, interpreter whole): MLX erases its traces there, before join() returns;
- for the main thread and threads still running at interpreter exit, by an atexit hook
  (MLX allows erasing another thread's traces; its cache takes a lock); after that hook the
  function runs uncompiled (the same results: mx.compile only replays the traced graph);
- with the PerThreadCompiled itself (a bounded cache evicting it frees every thread's).

State: one compiled object per (function, live thread), holding MLX's traces: one per distinct
input signature (shapes and dtypes; dtypes and ndims when shapeless). A function called at
many shapes (one per token count, say) would keep a trace for each; max_signatures bounds
them: a thread's compiled object that meets one combination of argument shapes more than
that is replaced by a fresh one (MLX erases the old traces), so the traces kept never exceed
max_signatures per thread and dtype combination, at the cost of re-tracing (Python only, no
kernel build) the shapes seen after that. With max_signatures every argument is an mx.array.
"""

from __future__ import annotations

import atexit
import itertools
import threading
import weakref

import mlx.core as mx

_LIVE: "weakref.WeakSet[PerThreadCompiled]" = weakref.WeakSet()
_KEYS = itertools.count(1)
_CLOSED = False


class _ThreadEnd:
    """Held by one thread's threading.local: freed when Python clears that thread's state (in
    that thread, with the GIL), and then releases the thread's compiled objects."""

    __slots__ = ("key",)

    def __init__(self, key: int):
        self.key = key

    def __del__(self, live=_LIVE):  # bound now: at interpreter exit module globals may be gone
        for fn in list(live):
            fn._by_thread.pop(self.key, None)
            fn._signatures.pop(self.key, None)


class _Local(threading.local):
    def __init__(self):
        self.key = next(_KEYS)  # unique for the process's life (thread idents are reused)
        self.end = _ThreadEnd(self.key)


_LOCAL = _Local()


class _Mine(threading.local):
    """One PerThreadCompiled's slot (its slot() list) in the present thread: None until the
    thread's first call. Freed with the thread's state, as _LOCAL is."""

    slot = None


class PerThreadCompiled:
    """mx.compile(fn, shapeless=shapeless), compiled once per calling thread (module docstring);
    with max_signatures, at most that many traces kept per thread.

    Called like fn (positional arguments); the results are mx.compile's."""

    def __init__(self, fn, shapeless: bool = False, max_signatures: int | None = None):
        if max_signatures is not None and (shapeless or max_signatures < 1):
            raise ValueError("PerThreadCompiled: max_signatures must be a positive int, and only "
                             f"without shapeless; got {max_signatures!r} (shapeless={shapeless})")
        self.fn = fn
        self.shapeless = shapeless
        self.max_signatures = max_signatures
        self._by_thread: dict[int, list] = {}
        self._signatures: dict[int, set] = {}
        self._mine = _Mine()  # this thread's slot in one attribute read (~0.08 µs less a call)
        _LIVE.add(self)

    def __call__(self, *args):
        mine = self._mine
        slot = mine.slot
        if not slot:  # the thread's first call, or the slot emptied at interpreter exit
            slot = mine.slot = self.slot()
        if self.max_signatures is not None:
            self._within_bound(slot, args)
        return slot[0](*args)

    def slot(self) -> list:
        """This thread's compiled object in a one-element list, which a caller may keep (in a
        threading.local) and call as slot[0] to skip the lookup. The list is emptied when the
        object is released at interpreter exit (slot[0] then raises IndexError: ask again) and
        refilled in place when max_signatures replaces the object."""
        key = _LOCAL.key
        slot = self._by_thread.get(key)
        if slot is None:
            if _CLOSED:
                return [self.fn]
            slot = self._by_thread[key] = [mx.compile(self.fn, shapeless=self.shapeless)]
        return slot

    def _within_bound(self, slot: list, args) -> None:
        # Shapes only (2.5 us for shapes and dtypes of four arrays, 0.8 for shapes): the dtype
        # combinations a caller uses multiply the traces kept, by a number the caller fixes.
        signature = tuple([a.shape for a in args])
        seen = self._signatures.get(_LOCAL.key)
        if seen is None:
            seen = self._signatures[_LOCAL.key] = set()
        if signature not in seen:
            if len(seen) >= self.max_signatures and not _CLOSED:
                seen.clear()
                slot[0] = mx.compile(self.fn, shapeless=self.shapeless)  # the old one and its traces go
            seen.add(signature)

    def signatures(self) -> int:
        """Shape combinations this thread's compiled object holds traces of (with max_signatures)."""
        return len(self._signatures.get(_LOCAL.key, ()))

    def threads(self) -> int:
        """How many threads hold a compiled object of this function now."""
        return len(self._by_thread)


def compile_per_thread(fn, shapeless: bool = False, max_signatures: int | None = None) -> PerThreadCompiled:
    """fn compiled with mx.compile once per calling thread; see PerThreadCompiled."""
    return PerThreadCompiled(fn, shapeless=shapeless, max_signatures=max_signatures)


class SlotTable(threading.local):
    """Per thread, key -> the compiled callable of the PerThreadCompiled factory(key) builds (its
    slot for this thread, PerThreadCompiled.slot): a hot call finds its compiled object in one
    dict lookup, without the factory's own cache or the object's thread lookup. At most `limit`
    keys a thread (all dropped when full). Forget every thread's entries by making a new table.
    The objects must not bound their signatures (max_signatures): their calls skip that check."""

    def __init__(self, factory, limit: int):
        self.factory, self.limit, self.table = factory, limit, {}

    def get(self, key):
        held = self.table.get(key)
        if held is None or not held[1]:  # a new key, or the slot emptied at interpreter exit
            if len(self.table) >= self.limit:
                self.table.clear()
            entry = self.factory(key)  # held here with its slot
            held = self.table[key] = (entry, entry.slot())
        return held[1][0]


def release_all() -> None:
    """Release every thread's compiled objects; later calls run uncompiled (at interpreter exit)."""
    global _CLOSED
    _CLOSED = True
    for fn in list(_LIVE):
        for slot in fn._by_thread.values():
            slot.clear()
        fn._by_thread.clear()
        fn._signatures.clear()


atexit.register(release_all)
