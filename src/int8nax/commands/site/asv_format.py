"""asv's result files (format version 2, asv 0.6), read once for the comparison page
(results) and its model section (model_section).

A file holds "commit_hash", "date" (commit date, ms), "env_name", "params" (the machine's),
"result_columns" and "results": {benchmark name: [column values in result_columns order]}.
Column "params" is a list of parameter value lists (asv's reprs: "'qwen2.5-7b'", "4096"), and
column "result" a list with one value per combination of them (their Cartesian product, in
order), or a single value. A value is a number, NaN (skipped: n/a) or null (failed). A
benchmark absent from a file was not run at that commit.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path


class NotAResultFile(ValueError):
    """The file cannot be read as an asv result file; the message names it and why."""


@dataclass(frozen=True)
class Entry:
    """One benchmark's results in one file."""

    params: list  # parameter value lists; [] for a benchmark without parameters
    results: list  # one raw value per combination of params (a single value for one without)
    started: int  # started_at (ms since the epoch), 0 where the file has none

    def pairs(self) -> list[tuple[tuple[str, ...], object]]:
        """(combination, raw value) for each combination of params; the combination of a
        benchmark without parameters is ()."""
        return list(zip(itertools.product(*self.params), self.results))


@dataclass(frozen=True)
class ResultFile:
    path: Path
    commit: str
    date: int  # the commit's date, ms
    env: str
    entries: dict[str, Entry]


MACHINE_FILE = "machine.json"
"""The file of a machine folder (.asv/results/<machine>/) that describes the machine; the others
are result files."""


def result_paths(folder: Path) -> list[Path]:
    """The result files of one machine folder, sorted by name."""
    return [p for p in sorted(Path(folder).glob("*.json")) if p.name != MACHINE_FILE]


def result_files(folder: Path, commits: set[str] | None = None):
    """Each readable result file of one machine folder (a section leaves an unreadable one out;
    `results` reports it), of a commit in `commits` where given."""
    for path in result_paths(folder):
        try:
            raw = read(path)
        except NotAResultFile:
            continue
        if commits is None or raw.commit in commits:
            yield raw


def latest(found: list[tuple[int, str, object]]) -> tuple[int, str, list]:
    """(date, commit, payloads) of the latest commit (by commit date) among a machine's result
    files, given as (date, commit, payload) each: the payloads of all its files (environments),
    in order; (0, "", []) where there are none."""
    if not found:
        return 0, "", []
    date, commit = max((d, c) for d, c, _ in found)
    return date, commit, [payload for _, c, payload in found if c == commit]


def machine_folders(results_dir: Path) -> list[Path]:
    """The machine folders of a results dir, sorted by name ([] where it does not exist)."""
    return sorted(d for d in Path(results_dir).iterdir() if d.is_dir()) if Path(results_dir).is_dir() else []


def machine_info(folder: Path) -> dict:
    """The machine folder's machine.json ({} where it has none)."""
    path = Path(folder) / MACHINE_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def hardware(info: dict) -> str:
    """A machine.json's hardware in words, as the page heads each machine: "cpu X, num_cpu 2, gpu Y"
    (the keys it has)."""
    return ", ".join(f"{k} {info[k]}" for k in ("cpu", "num_cpu", "gpu") if info.get(k))


def finite(value) -> bool:
    """Whether a raw value is a measurement (not NaN: skipped, nor None: failed)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read(path: Path) -> ResultFile:
    """The file at `path`; NotAResultFile where it is not one (unreadable, not JSON, or without
    the fields above)."""
    try:
        data = json.loads(Path(path).read_text())
        columns = data["result_columns"]
        i_result, i_params = columns.index("result"), columns.index("params")
        commit, date = data["commit_hash"], int(data.get("date") or 0)
        i_started = columns.index("started_at") if "started_at" in columns else None
        entries = {}
        for name, row in data.get("results", {}).items():
            params = row[i_params] or []
            combos = math.prod(len(p) for p in params)
            result = row[i_result]
            started = row[i_started] if i_started is not None and len(row) > i_started else None
            entries[name] = Entry(params, result if isinstance(result, list) else [result] * combos,
                                  int(started) if finite(started) else 0)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise NotAResultFile(f"{path}: not an asv result file ({type(exc).__name__}: {exc})") from None
    return ResultFile(Path(path), commit, date, data.get("env_name", ""), entries)
