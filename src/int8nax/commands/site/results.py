"""Each machine's latest results, read from asv's result files (asv_format, format version 2): a
number is a result, NaN n/a (skipped), null a failure; a benchmark absent from a file was not run
at that commit."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from . import asv_format


_BENCH = re.compile(r"^(?P<prefix>.+)\.time_(?P<stem>\w+?)(?P<chain>_chain)?$")

RATIO_BENCH = re.compile(r"^bench_ratio\.\w+\.track_(?P<stem>\w+)_ratio$")
"""The regression gate's ratio benchmarks: int8nax's time over a reference's at the same shape,
unitless (benchmarks/bench_ratio.py). The page shows them apart from the contenders' times."""

_KERNEL = re.compile(r"^(?P<prefix>.+)\.track_(?P<stem>\w+)_kernel$")
"""The kernel records (benchmarks/bench_kernel.py): per shape, contenders.kernel_id of what ran."""

_KERNEL_US = re.compile(r"^(?P<prefix>.+)\.track_(?P<stem>\w+)_kernel_us$")
"""Kernel time (benchmarks/bench_kernel.py's KernelTime, GPUs): per shape, CUPTI µs of a contender."""

NOT_CONTENDERS = ("bench_ratio.", "bench_model.")
"""Benchmark modules whose time_ values are not times of a contender: the regression gate's
ratio benchmarks record int8nax's time over a reference's (benchmarks/bench_ratio.py); the
model benchmarks (benchmarks/bench_model.py) have their own section (model_section)."""


class SiteError(Exception):
    """What the command cannot do, and why (printed, exit status 1)."""


@dataclass
class Value:
    """One benchmark at one parameter value: seconds, or why there is none."""

    seconds: float | None = None
    status: str = "absent"  # "ok", "skipped" (NaN), "failed" (null), "absent" (not run)

    def text(self) -> str:
        return {"ok": "", "skipped": "n/a (skipped)", "failed": "failed",
                "absent": "no result at this commit"}[self.status]


@dataclass
class ResultFile:
    path: Path
    commit: str
    date: int
    env: str
    started: int
    values: dict[str, dict[str, Value]]  # benchmark -> parameter repr -> Value
    ratios: dict[str, dict[str, Value]] = field(default_factory=dict)  # ratio benchmark -> parameter -> Value
    kernels: dict[str, dict[str, int]] = field(default_factory=dict)  # stem -> parameter repr -> kernel id
    kernel_us: dict[str, dict[str, float]] = field(default_factory=dict)  # stem -> parameter repr -> µs


def _parse_value(raw) -> Value:
    if raw is None:
        return Value(status="failed")
    if asv_format.finite(raw):
        return Value(float(raw), "ok")
    return Value(status="skipped")


def _param_text(combo: tuple[str, ...]) -> str:
    """How the page keys a parameter combination: the value, or the values joined by ", "."""
    return ", ".join(combo) if len(combo) > 1 else combo[0]


def read_result_file(path: Path) -> ResultFile:
    """One asv result file (asv_format) -> its time_ values by benchmark and parameter."""
    try:
        raw = asv_format.read(path)
    except asv_format.NotAResultFile as exc:
        raise SiteError(str(exc)) from None
    values: dict[str, dict[str, Value]] = {}
    started = 0
    ratios: dict[str, dict[str, Value]] = {}
    kernels: dict[str, dict[str, int]] = {}
    kernel_us: dict[str, dict[str, float]] = {}
    for bench, entry in raw.entries.items():
        timed = _KERNEL_US.match(bench)
        if timed and entry.params:
            kernel_us[timed.group("stem")] = {_param_text(c): float(r) for c, r in entry.pairs() if asv_format.finite(r)}
            continue
        kernel = _KERNEL.match(bench)
        if kernel and entry.params:
            kernels[kernel.group("stem")] = {_param_text(c): int(r) for c, r in entry.pairs() if asv_format.finite(r)}
            continue
        is_ratio = bool(RATIO_BENCH.match(bench))
        if not is_ratio and (not _BENCH.match(bench) or bench.startswith(NOT_CONTENDERS)):
            continue
        started = max(started, entry.started)
        if not entry.params:  # not parametrized: no shape
            continue
        (ratios if is_ratio else values)[bench] = {_param_text(c): _parse_value(r) for c, r in entry.pairs()}
    return ResultFile(path, raw.commit, raw.date, raw.env, started, values, ratios, kernels, kernel_us)


@dataclass
class MachineResults:
    name: str
    info: dict  # machine.json
    commit: str
    date: int
    envs: list[str]
    values: dict[str, dict[str, Value]]  # benchmark -> parameter repr -> Value (merged envs)
    ratios: dict[str, dict[str, Value]] = field(default_factory=dict)  # the gate's ratios, merged alike
    kernels: dict[str, dict[str, int]] = field(default_factory=dict)  # stem -> parameter -> kernel id
    previous_commit: str = ""  # the latest earlier commit with kernel records ("" if none)
    previous_kernels: dict[str, dict[str, int]] = field(default_factory=dict)
    kernel_us: dict[str, dict[str, float]] = field(default_factory=dict)  # stem -> parameter -> µs (KernelTime)


def _merged_kernels(files: list[ResultFile], what: str = "kernels") -> dict:
    """The files' `what` (kernels or kernel_us) per stem and parameter, the newer run's winning."""
    merged: dict = {}
    for f in sorted(files, key=lambda f: f.started):
        for stem, per in getattr(f, what).items():
            merged.setdefault(stem, {}).update(per)
    return merged


def _has_time(rf: ResultFile) -> bool:
    return any(v.status == "ok" for per in rf.values.values() for v in per.values())


def read_machine(folder: Path, commits: set[str] | None = None) -> MachineResults | None:
    """The latest commit (by commit date) of `folder` that has any time result, its files merged
    (several environments at one commit: a number beats n/a, the newer run beats the older).
    `commits`: only these are considered (the ones `asv publish` put on the site), if given."""
    every = [read_result_file(p) for p in asv_format.result_paths(folder)]
    every = [f for f in every if commits is None or f.commit in commits]
    files = [f for f in every if _has_time(f)]
    if not files:
        return None
    latest = max(files, key=lambda f: (f.date, f.started))
    earlier = [f for f in every if f.kernels and f.commit != latest.commit
               and (f.date, f.started) < (latest.date, latest.started)]
    previous = max(earlier, key=lambda f: (f.date, f.started)).commit if earlier else ""
    same = sorted((f for f in files if f.commit == latest.commit), key=lambda f: f.started)
    merged: dict[str, dict[str, Value]] = {}
    ratios: dict[str, dict[str, Value]] = {}
    for f in same:
        for into, source in ((merged, f.values), (ratios, f.ratios)):
            for bench, per in source.items():
                slot = into.setdefault(bench, {})
                for param, value in per.items():
                    old = slot.get(param)
                    if old is None or value.status == "ok" or old.status != "ok":
                        slot[param] = value
    # kernel records from every file of the commit: a run of bench_kernel alone has no time
    kernels = _merged_kernels([f for f in every if f.commit == latest.commit])
    return MachineResults(folder.name, asv_format.machine_info(folder), latest.commit, latest.date, [f.env for f in same], merged, ratios,
                          kernels, previous,
                          _merged_kernels([f for f in every if f.commit == previous]),
                          _merged_kernels([f for f in every if f.commit == latest.commit], "kernel_us"))


def read_results(results_dir: Path, commits: set[str] | None = None) -> list[MachineResults]:
    if not results_dir.is_dir():
        raise SiteError(f"{results_dir} does not exist: run `asv run` first, or pass --results")
    found = [read_machine(d, commits) for d in sorted(results_dir.iterdir()) if d.is_dir()]
    return [m for m in found if m is not None]
