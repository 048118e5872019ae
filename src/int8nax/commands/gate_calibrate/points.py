"""What asv recorded of a commit (a Point per benchmark and parameters), asv's own rule on a
pair of them (flagged), and the record of one gate run or pair (Run)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Point:
    """One benchmark at one parameter combination in one result file."""

    value: float
    stats: dict | None
    samples: list | None


def load_points(results_dir: Path, commit: str) -> dict[str, Point]:
    """'name(params)' -> Point for every measured benchmark of `commit` in `results_dir`."""
    from asv.results import Results

    points: dict[str, Point] = {}
    for path in sorted(results_dir.glob(f"{commit[:8]}-*.json")):
        res = Results.load(str(path))
        for key in res.get_all_result_keys():
            params = res.get_result_params(key)
            values = res.get_result_value(key, params)
            stats = res.get_result_stats(key, params)
            samples = res.get_result_samples(key, params)
            combos = list(itertools.product(*params)) if params else [()]
            if not params:
                values, stats, samples = [values], [stats], [samples]
            for combo, v, st, sa in zip(combos, values, stats, samples):
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    continue
                name = f"{key}({', '.join(combo)})" if combo else key
                points[name] = Point(v, st, sa)
    return points


def flagged(base: Point, head: Point, factor: float) -> tuple[float, bool, bool]:
    """(ratio head/base, significant by asv's test, flagged as worse by asv's rule at `factor`)."""
    from asv import _stats
    from asv.commands.compare import _is_result_better

    ratio = head.value / base.value
    significant = True
    if base.stats and head.stats and base.samples is not None and head.samples is not None:
        significant = _stats.is_different(base.samples, head.samples, base.stats, head.stats)
    worse = _is_result_better(base.value, head.value, (base.stats, base.samples),
                              (head.stats, head.samples), factor)
    return ratio, significant, worse


@dataclass
class Run:
    kind: str  # "A/A" or "A/B 1.2"
    planted: float  # 1.0 for A/A
    status: int
    seconds: float
    load: tuple[float, float, float]
    points: dict[str, tuple[float, bool]] = field(default_factory=dict)  # name -> (ratio, significant)
    raw: tuple[dict, dict] = ({}, {})  # (base points, head points)
