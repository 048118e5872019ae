"""The folder int8nax keeps what it builds or measures once per machine in (the Metal backend's
tile choices, the tape extension)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

CACHE_ENV = "INT8NAX_CACHE_DIR"
"""A folder to keep the cache in, instead of the user's cache folder."""


def cache_dir() -> Path:
    """$INT8NAX_CACHE_DIR, else the user's cache folder (~/Library/Caches on macOS,
    $XDG_CACHE_HOME or ~/.cache elsewhere) / int8nax."""
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "int8nax"
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "int8nax"
