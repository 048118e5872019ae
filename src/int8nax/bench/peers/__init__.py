"""Adapters for the implementations int8nax is measured against.

Each adapter imports its library only when asked, and says in words why it cannot
run (library missing, wrong package, wrong hardware, unsupported shape) by raising
Unavailable, so that a benchmark suite or a CLI can skip it and carry on.
"""

from __future__ import annotations

import importlib


class Unavailable(Exception):
    """A contender cannot run here; str(exc) is the reason, meant for a human."""


def import_torch(why: str):
    """The torch module; Unavailable (naming `why` torch is wanted) if it is absent or broken."""
    try:
        return importlib.import_module("torch")
    except ModuleNotFoundError as exc:
        if exc.name == "torch":
            raise Unavailable(f"torch is not installed ({why})") from None
        raise Unavailable(f"torch is installed but cannot be imported: {exc}") from None
    except Exception as exc:
        raise Unavailable(f"importing torch failed: {type(exc).__name__}: {exc}") from None
