"""Adapters for the implementations int8nax is measured against.

Each adapter imports its library only when asked, and says in words why it cannot
run (library missing, wrong package, wrong hardware, unsupported shape) by raising
Unavailable, so that a benchmark suite or a CLI can skip it and carry on.
"""

from __future__ import annotations


class Unavailable(Exception):
    """A contender cannot run here; str(exc) is the reason, meant for a human."""
