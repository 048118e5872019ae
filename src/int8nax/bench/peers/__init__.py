"""Adapters for the implementations int8nax is measured against.

Each adapter imports its library only when asked, and says in words why it cannot
run (library missing, wrong package, wrong hardware, unsupported shape) by raising
Unavailable, so that a benchmark suite or a CLI can skip it and carry on.
"""

from __future__ import annotations

import importlib


class Unavailable(Exception):
    """A contender cannot run here; str(exc) is the reason, meant for a human."""


def import_optional(name: str, why: str):
    """The module `name`; Unavailable if it is absent ("`name` is not installed (`why`)") or
    broken (a broken install must not stop a benchmark run)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise Unavailable(f"{name} is not installed ({why})") from None
        raise Unavailable(f"{name} is installed but cannot be imported: {exc}") from None
    except Exception as exc:
        raise Unavailable(f"{name} is installed but importing it failed: {type(exc).__name__}: {exc}") from None


def import_torch(why: str):
    """torch, for the peers that run through it (import_optional)."""
    return import_optional("torch", why)
