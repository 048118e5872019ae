"""The Metal GEMM tile chosen on the device: the candidates (tiling.METAL_LARGE_CANDIDATES) are
timed once against each other at first use on the GPU, and the winner is cached on disk per
device, MLX version and kernel source, so that later processes on that machine read it instead
of timing (and building the losers) again.

Pure Python around an injected `measure(candidates) -> {name: seconds | reason}`: the backend
(metal.py) times its own launches, and tests pass numbers. Nothing here launches a kernel.

The cache is one JSON object {key: entry} in CACHE_FILE under cache_dir(); writes go to a
temporary file in the same folder and replace the old one at once (os.replace), so a reader
never sees half a file. A file that cannot be read or parsed, or an entry that names no
current candidate, is ignored and rewritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ... import tiling
from ..cache import cache_dir

TILE_ENV = "INT8NAX_METAL_TILE"
"""Names the tile for M > METAL_SMALL_MAX_M (a candidate's name) instead of timing: for A/B runs."""

CACHE_FILE = "metal_tiles.json"

TUNE_SHAPE = (2048, 4096, 4096)
"""(M, K, N) the candidates are timed at: the issue's M = 2048 target, and a seed timing shape."""

TUNE_REPEAT = 5
"""Timed calls per candidate (after one untimed call that builds it); the median counts."""

TUNE_BUDGET_S = 0.3
"""Seconds of timed calls, all candidates together, after which the rest are not timed."""


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def cache_key(architecture: str | None, device_name: str | None, mlx_version: str, variant: str,
              kernel_source: str, candidates=tiling.METAL_LARGE_CANDIDATES) -> str:
    """What a cached choice holds for: the GPU (architecture and name), MLX's version, the kernel
    variant, the GEMM source and the candidate set (a change to either times again)."""
    digest = hashlib.sha256(kernel_source.encode() + "|".join(c.name for c in candidates).encode()).hexdigest()[:12]
    return f"{architecture}|{device_name}|mlx {mlx_version}|{variant}|kernels {digest}"


def read_cache(path: Path) -> tuple[dict, str | None]:
    """(the cached {key: entry}, None), or ({}, why) when the file is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, "no cache file yet"
    except (OSError, ValueError) as exc:
        return {}, f"cache file {path} unreadable ({type(exc).__name__}), rewritten"
    if not isinstance(data, dict):
        return {}, f"cache file {path} is not a JSON object, rewritten"
    return data, None


def write_cache(path: Path, data: dict) -> str | None:
    """Write `data` atomically (a temporary file in the same folder, then os.replace); None on
    success, else why not (a read-only home must not stop NAX: the choice is then made again by
    the next process)."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
        return None
    except OSError as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return f"cache not written ({type(exc).__name__}: {exc})"


@dataclass(frozen=True)
class TileChoice:
    """The tile serving M > METAL_SMALL_MAX_M, and how it was chosen."""

    config: tiling.NaxTileConfig
    source: str
    """"measured" (timed now), "cache" (timed by an earlier process), "forced" (INT8NAX_METAL_TILE)
    or "default" (nothing timed: METAL_LARGE)."""
    timings_ms: dict = field(default_factory=dict)
    """{candidate name: median ms per call at `shape`, or why it was not timed}."""
    shape: tuple = TUNE_SHAPE
    notes: tuple = ()

    def summary(self) -> str:
        c = self.config
        text = f"tile for M > {tiling.METAL_SMALL_MAX_M}: {c.name} ({c.bm}x{c.bn}x{c.bk}, {c.threads} threads)"
        if self.timings_ms:
            times = ", ".join(f"{n} {v:.3f} ms" if isinstance(v, (int, float)) else f"{n} {v}"
                              for n, v in self.timings_ms.items())
            text += f", {self.source} at {'x'.join(map(str, self.shape))} (M x K x N): {times}"
        else:
            text += f", {self.source}"
        return text + "".join(f"; {note}" for note in self.notes)


def candidate_named(name: str, candidates=tiling.METAL_LARGE_CANDIDATES) -> tiling.NaxTileConfig:
    for c in candidates:
        if c.name == name:
            return c
    raise ValueError(f"{TILE_ENV}: unknown tile {name!r}; expected one of {[c.name for c in candidates]}")


def choose_tile(key: str, measure, candidates=tiling.METAL_LARGE_CANDIDATES, path: Path | None = None,
                forced: str | None = None) -> TileChoice:
    """The tile for M > METAL_SMALL_MAX_M: `forced` (a candidate's name) if given; else the
    cached winner for `key`; else each candidate timed by `measure(candidates)` ({name: seconds,
    or a reason it was not timed}), the fastest chosen and cached. Nothing timed: METAL_LARGE."""
    if forced:
        return TileChoice(candidate_named(forced, candidates), "forced", notes=(f"{TILE_ENV}={forced}",))
    path = path or cache_path()
    data, problem = read_cache(path)
    entry = data.get(key)
    names = {c.name for c in candidates}
    if isinstance(entry, dict) and entry.get("winner") in names and isinstance(entry.get("timings_ms"), dict):
        return TileChoice(candidate_named(entry["winner"], candidates), "cache", dict(entry["timings_ms"]),
                          tuple(entry.get("shape", TUNE_SHAPE)), (f"cached in {path}",))
    notes = [problem] if problem and problem != "no cache file yet" else []
    results = measure(candidates)
    timings = {c.name: (results[c.name] * 1e3 if isinstance(results.get(c.name), (int, float))
                        else results.get(c.name, "not timed")) for c in candidates}
    timed = {n: v for n, v in timings.items() if isinstance(v, float)}
    if not timed:
        return TileChoice(tiling.METAL_LARGE, "default", timings, TUNE_SHAPE,
                          tuple(notes + ["no candidate could be timed"]))
    winner = min(timed, key=timed.get)
    data[key] = {"winner": winner, "timings_ms": timings, "shape": list(TUNE_SHAPE)}
    written = write_cache(path, data)
    notes.append(written or f"cached in {path}")
    return TileChoice(candidate_named(winner, candidates), "measured", timings, TUNE_SHAPE, tuple(notes))
