"""The calibration through `int8nax gate` itself: every pair (A, A') and (A, B_f) gated
`--runs` times, interleaved, each run's verdict and asv's points kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from .points import Run, flagged, load_points
from .sandbox import Clone, shlex_join


def gate_run(clone: Clone, head: str, args, log_dir: Path, label: str) -> tuple[int, float, str]:
    command = [sys.executable, str(clone.path / "src/int8nax/commands/gate.py"), "--config",
               str(clone.path / args.config), "--machine", args.machine, *args.gate_args, clone.base, head]
    t0 = time.monotonic()
    result = subprocess.run(command, cwd=clone.path, env=clone.env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    (log_dir / f"{label}.log").write_text(result.stdout + result.stderr)
    return result.returncode, seconds, shlex_join(command)


def measure(clone: Clone, args, log_dir: Path, after_each=None, say=print,
            deadline: float | None = None) -> tuple[list[Run], str]:
    """Run the gate on every pair `args.runs` times; `after_each(runs, command)` is called after
    each repetition (the report is rewritten then, so an interrupted calibration keeps its data).
    A repetition that the longest one so far says would end past `deadline` is not started."""
    pairs = [("A/A", 1.0, clone.same)] + [(f"A/B {f}", f, clone.slow[f]) for f in args.slowdowns]
    runs: list[Run] = []
    command = ""
    results_dir = clone.path / ".asv" / "results" / args.machine
    durations: list[float] = []
    for r in range(args.runs):
        if deadline is not None and durations and time.monotonic() + max(durations) > deadline:
            say(f"budget: {r} repetition(s) done; another would end past --budget-min {args.budget_min}")
            break
        t0 = time.monotonic()
        # Alternate the order of the pairs between repetitions, so that a slow spell of the
        # machine does not always fall on the same kind.
        for kind, planted, head in (pairs if r % 2 == 0 else pairs[::-1]):
            label = f"run{r + 1:02d}-{kind.replace('/', '').replace(' ', '-')}"
            status, seconds, command = gate_run(clone, head, args, log_dir, label)
            run = Run(kind, planted, status, seconds, os.getloadavg())
            base, other = load_points(results_dir, clone.base), load_points(results_dir, head)
            for name in sorted(set(base) & set(other)):
                ratio, significant, _ = flagged(base[name], other[name], args.factor_ran)
                run.points[name] = (ratio, significant)
            run.raw = (base, other)
            runs.append(run)
            say(f"[{time.strftime('%H:%M:%S')}] {label}: exit {status}, {seconds / 60:.1f} min, "
                f"load {run.load[0]:.2f}")
        durations.append(time.monotonic() - t0)
        if after_each:
            after_each(runs, command)
    return runs, command
