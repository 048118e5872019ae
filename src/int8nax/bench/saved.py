"""The whole result of a long asv measurement, saved beside the asv record.

asv keeps one number per benchmark and parameter; the generation and first-token benchmarks
measure far more in their setup_cache (each trial, the spread, load and conversion times, the
kernels a process built, the checks). Where SAVE_ENV names a folder, those measurements also
write their whole result there as JSON after every step, in the form `int8nax compare
--generate --json` (and `--first-token --json`) writes, so that one device call gives both the
asv record and the full table, and a call cut short by its time limit keeps what it measured.

    writer(name) -> callable(payload: dict) or None     (None where SAVE_ENV is not set)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

SAVE_ENV = "INT8NAX_BENCH_SAVE"
"""A folder: the asv suite's generate and first-token measurements write <name>.json into it."""


def writer(name: str) -> Callable[[dict], None] | None:
    """A function that writes its payload to SAVE_ENV's folder as `name`.json (replacing the last
    one: each call carries everything so far); None where SAVE_ENV is unset or empty."""
    folder = os.environ.get(SAVE_ENV, "").strip()
    if not folder:
        return None
    path = Path(folder) / f"{name}.json"

    def write(payload: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".json.part")
        part.write_text(json.dumps(payload, indent=1))
        part.replace(path)  # whole or absent: a run killed mid-write leaves the last complete file

    return write
