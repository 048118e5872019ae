"""Backend registry and selection.

MLX picks the device and int8nax follows it. In auto mode, when MLX's default
device is the GPU, the Metal NAX backend is tried first, then CUDA; otherwise,
or when neither can run, the CPU backend. An explicit choice (the `backend=`
argument of every API function, or the INT8NAX_BACKEND environment variable)
either runs on what it names or raises a RuntimeError saying why it cannot.
"""

from __future__ import annotations

import importlib
import os
from functools import lru_cache

import mlx.core as mx

from .base import Backend, Probe, refused_by_trace, swiglu, swiglu_of

ENV_VAR = "INT8NAX_BACKEND"

try:
    _ENV_KEY = os.environ.encodekey(ENV_VAR)
except AttributeError:  # not CPython's os._Environ
    _ENV_KEY = None


def env_set() -> bool:
    """bool(os.environ.get(INT8NAX_BACKEND)), asked on every call: os.environ.get raises and
    catches a KeyError inside for an unset name (~1.3 µs on the CPU box), the mapping under it
    answers in ~0.1 µs."""
    env = os.environ
    try:
        return bool(env._data.get(_ENV_KEY))
    except AttributeError:  # os.environ replaced by a plain mapping
        return bool(env.get(ENV_VAR))

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


@lru_cache(maxsize=None)
def get(name: str) -> Backend | None:
    """The backend object for a canonical name, or None if its module is absent."""
    try:
        module = importlib.import_module(_MODULES[name])
    except ModuleNotFoundError as exc:
        if exc.name in (_MODULES[name], _MODULES[name].rpartition(".")[0]):  # the module or its package
            return None
        raise
    return module.BACKEND


@lru_cache(maxsize=None)
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
        requested = os.environ.get(ENV_VAR) or "auto"
        source = f"{ENV_VAR}={requested}" if requested != "auto" else "auto"
        return canonical(requested, source), source
    return canonical(requested), "argument"


def choose(requested: str | None = None) -> tuple[str, str]:
    """(backend name, why) for an explicit request, else INT8NAX_BACKEND, else auto."""
    name, source = _requested(requested)
    if name == "auto":
        return _auto()
    p = probe(name)
    if not p.available:
        raise RuntimeError(f"backend {name!r} was requested ({source}) but cannot run here: {p.reason}")
    return name, f"requested by {source}"


def resolve(requested: str | None = None) -> Backend:
    """The backend object choose() names, without composing its reason (every API call asks)."""
    if requested is None and not env_set():
        return get(_auto_name())
    name, _ = choose(requested)
    return get(name)


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
