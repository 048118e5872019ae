"""Backend registry and selection.

MLX picks the device and int8nax follows it. In auto mode, when MLX's default
device is the GPU, the Metal NAX backend is tried first, then CUDA; otherwise,
or when neither can run, the CPU backend. An explicit choice (the `backend=`
argument of every API function, or the INT8NAX_BACKEND environment variable)
either runs on what it names or raises a RuntimeError saying why it cannot.

What a backend says of itself (probe) is asked once per process, so resolve() keeps its answers:
auto mode's per kind of default device (GPU or not: MLX's default device is read on every call),
and each explicit name's; clearing get's or probe's cache (cache_clear()) forgets them too.
"""

from __future__ import annotations

import functools
import importlib
import os
from functools import lru_cache

import mlx.core as mx

from . import tape
from .base import Backend, Probe, refused_by_trace, swiglu, swiglu_of

ENV_VAR = "INT8NAX_BACKEND"

try:
    _ENV_KEY = os.environ.encodekey(ENV_VAR)
except AttributeError:  # not CPython's os._Environ
    _ENV_KEY = None


def env_raw():
    """INT8NAX_BACKEND's value as stored (bytes on POSIX), or None where it is unset or empty,
    asked on every call: os.environ.get raises and catches a KeyError inside for an unset name
    (~1.3 µs on the CPU box), the mapping under it answers in ~0.1 µs."""
    env = os.environ
    try:
        return env._data.get(_ENV_KEY) or None
    except AttributeError:  # os.environ replaced by a plain mapping
        return env.get(ENV_VAR) or None


def env_set() -> bool:
    """Whether INT8NAX_BACKEND is set (and not empty)."""
    return env_raw() is not None


_GPU_TYPE, _CPU_TYPE = mx.DeviceType.gpu, mx.DeviceType.cpu

_RESOLVED: dict = {}
"""resolve()'s answers (module docstring): True / False (auto mode with MLX's default device on
the GPU or not), an explicit argument's name, ("env", raw value) for INT8NAX_BACKEND's value;
only answers that name a backend that can run, and only those that cannot change until get's
or probe's cache is cleared (which empties this)."""

_RESOLVED_LIMIT = 64
"""At most this many answers are kept (argument spellings and environment values vary)."""


def _remember(key, impl: "Backend") -> "Backend":
    if len(_RESOLVED) >= _RESOLVED_LIMIT:
        _RESOLVED.clear()
    _RESOLVED[key] = impl
    return impl


def _per_name(fn):
    """fn(name) computed once per name for the process (lru_cache(maxsize=None));
    its cache_clear() also forgets resolve()'s answers, which rest on it, and the layers' tapes,
    recorded from the backends it gave."""
    cached = lru_cache(maxsize=None)(fn)

    @functools.wraps(fn)
    def call(name):
        return cached(name)

    def cache_clear() -> None:
        cached.cache_clear()
        _RESOLVED.clear()
        tape.invalidate()

    call.cache_clear = cache_clear
    call.cache_info = cached.cache_info
    return call


# name -> module holding a `BACKEND` instance; auto mode tries GPU backends in this order.
_MODULES = {
    "metal": "int8nax.backends.metal.backend",
    "cuda": "int8nax.backends.cuda.backend",
    "cpu": "int8nax.backends.cpu.backend",
}
_GPU_ORDER = ("metal", "cuda")
_ALIASES = {"nax": "metal"}

NAMES = tuple(_MODULES)


def canonical(name: str, where: str = "backend") -> str:
    """The canonical backend name for `name` (aliases resolved); ValueError for an unknown one,
    its message led by `where` the name came from."""
    if not isinstance(name, str):
        raise TypeError(f"backend: expected a backend name (str), got {type(name).__name__} {name!r}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in _MODULES and key != "auto":
        choices = ", ".join(("auto",) + NAMES + tuple(_ALIASES))
        raise ValueError(f"{where}: unknown backend {name!r}; expected one of {choices}")
    return key


@_per_name
def get(name: str) -> Backend | None:
    """The backend object for a canonical name, or None if its module is absent."""
    try:
        module = importlib.import_module(_MODULES[name])
    except ModuleNotFoundError as exc:
        if exc.name in (_MODULES[name], _MODULES[name].rpartition(".")[0]):  # the module or its package
            return None
        raise
    return module.BACKEND


@_per_name
def probe(name: str) -> Probe:
    backend = get(name)
    if backend is None:
        return Probe(False, "not built into this version of int8nax")
    return backend.probe()


def _auto_name() -> str:
    """What auto mode picks (the backend name only: the API asks on every call)."""
    if mx.default_device() != mx.gpu:
        return "cpu"
    for name in _GPU_ORDER:
        if probe(name).available:
            return name
    return "cpu"


def _auto() -> tuple[str, str]:
    name = _auto_name()
    if mx.default_device() != mx.gpu:
        return name, f"MLX's default device is {mx.default_device()}"
    if name != "cpu":
        return name, f"MLX's default device is the GPU and {name} is available: {probe(name).reason}"
    skipped = [f"{n}: {probe(n).reason}" for n in _GPU_ORDER]
    return "cpu", "no GPU backend can run (" + "; ".join(skipped) + ")"


def _requested(requested: str | None) -> tuple[str, str]:
    """(canonical name or "auto", where the request came from)."""
    if requested is None:
        return _from_env(os.environ.get(ENV_VAR))
    return canonical(requested), "argument"


def _from_env(value: str | None) -> tuple[str, str]:
    """_requested's answer for INT8NAX_BACKEND's `value` (None or empty: auto)."""
    requested = value or "auto"
    source = f"{ENV_VAR}={requested}" if requested != "auto" else "auto"
    return canonical(requested, source), source


def _choose(name: str, source: str) -> tuple[str, str]:
    if name == "auto":
        return _auto()
    p = probe(name)
    if not p.available:
        raise RuntimeError(f"backend {name!r} was requested ({source}) but cannot run here: {p.reason}")
    return name, f"requested by {source}"


def choose(requested: str | None = None) -> tuple[str, str]:
    """(backend name, why) for an explicit request, else INT8NAX_BACKEND, else auto."""
    return _choose(*_requested(requested))


def resolve(requested: str | None = None) -> Backend:
    """The backend object choose() names, without composing its reason (every API call asks):
    an answer kept in _RESOLVED where there is one (auto mode: for the kind of MLX's present
    default device), else choose()'s, which raises where the choice cannot run."""
    if requested is None:
        raw = env_raw()
        if raw is None:
            device = mx.default_device()
            kind = getattr(device, "type", None)  # DeviceType's members are singletons; == otherwise
            gpu = kind is _GPU_TYPE or (kind is not _CPU_TYPE and device == mx.gpu)
            impl = _RESOLVED.get(gpu)
            if impl is None:
                impl = _remember(gpu, get(_auto_name()))
            return impl
        key = ("env", raw)
    elif type(requested) is str:
        key = requested
    else:
        return get(choose(requested)[0])  # choose raises the TypeError
    impl = _RESOLVED.get(key)
    if impl is None:
        # the value read above, not the environment read again (another thread may change it)
        name, source = _from_env(os.fsdecode(raw)) if requested is None else (canonical(requested), "argument")
        impl = get(_choose(name, source)[0])
        if name != "auto":  # auto follows MLX's default device: not kept under this key
            _remember(key, impl)
    return impl


def info() -> dict:
    """Which backend auto/env selection picks, why, and what every backend says of itself."""
    try:
        picked, why = choose(None)
    except (RuntimeError, ValueError) as exc:
        picked, why = None, str(exc)
    return {
        "backend": picked,
        "reason": why,
        "mlx_version": mx.__version__,
        "default_device": str(mx.default_device()),
        "backends": {n: {"available": probe(n).available, "reason": probe(n).reason} for n in NAMES},
    }
