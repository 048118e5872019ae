"""How long one call of a contender will take here, before it is timed: a probe that grows.

A contender's time per call depends on the machine far more than on anything int8nax knows
(MLX's weight-only quantized matmul runs at ~0.05 GFLOP/s on a 2-core CPU and at tens of
TFLOP/s on a GPU), so the estimate is measured, not declared. The probe runs the contender
on a ladder of shapes that grows from a small corner of the target (M <= 16, K, N <= 256)
towards it, doubling one dimension per step, until one call takes long enough to say how
the target compares with the caller's budget, or the target itself is reached (then its own
time is the estimate).

A call's time is a fixed cost plus a cost per operation (2*M*K*N): a GEMM's time grows about
linearly in its work once past its overheads, but the fixed cost can be large and uneven. On
a loaded 2-core CPU numpy's two-thread OpenBLAS sgemm takes ~20 ms a call at 64x512x512 and
below (15-24 ms from run to run), where a quiet box takes 0.2-0.4 ms. A probe that stopped at
that first rung and scaled it by the ratio of operations would take the fixed cost for work
(2-22 s a call at 512x4096x4096, where sgemm takes 64-156 ms) and skip the contender. Two
timings that small cannot tell the fixed cost from the work either (their difference is mostly
noise), so the probe stays cheap where that cannot mislead and climbs where it can:

- a rung of ENOUGH_S or more gives an estimate: the line through it and a rung of at most
  half its operations (the fixed cost and the rate) where at least WORK_SHARE of its time
  grew with the work, else the plain ratio of operations, which counts a fixed cost as work
  and so errs high;
- an estimate within the budget ends the climb: the cell is measured either way, and the
  real time is at most about twice the estimate (the plain ratio is an upper bound where a
  GEMM's rate does not fall with its size, and the line is at least half of it);
- an estimate over the budget ends it only from a rung of SKIP_S or more whose time grew
  with its work (a fixed cost of tens of ms is a small part of it, and the line takes out the
  rest), or from a rung as long as the budget: a skip rests on a call long enough to justify
  it. A slow contender pays about a second of probe for it; one whose calls are mostly a fixed
  cost of over SKIP_S climbs on until the operations left bring its estimate within the
  budget, or to the target (the ratio would scale its fixed cost up).

Each step's data is built but never checked (the check belongs to the measurement that
follows); each step is run twice and the faster call is kept, so one-time costs (a kernel
build, weights packed on first use) do not inflate the figure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable

from . import contenders
from .problems import Shape, ops

ENOUGH_S = 0.02
"""A probe call shorter than this gives no estimate: it is mostly timer noise and overhead."""

WORK_SHARE = 0.5
"""The share of a probe call's time that must have grown with the work before its line is
used. Below it the call is mostly fixed cost and the growth that gives the rate is small
next to the noise of two timings; at or above it the line's estimate is at least half the
plain ratio of operations (and at most it), whatever the noise did."""

SKIP_S = 0.1
"""The shortest probe call whose estimate may skip a contender: the waits of a loaded CPU
(~20 ms a call for a two-thread BLAS on 2 cores) are a small part of it."""

BUDGET_S = 1.0
"""The budget a caller that names none is taken to have (the commands' default --budget)."""

START: Shape = (16, 256, 256)
"""The first rung (each dimension capped by the target's)."""


@dataclass(frozen=True)
class Estimate:
    """seconds: expected seconds per call at the target shape; probe: the rung it scales from,
    probe_seconds: the time of one call there; spent: wall seconds the probe took; base,
    base_seconds: the smaller rung whose time, with the probe's, gave the fixed cost and the
    rate (None: the estimate is the plain ratio of operations, or the target's own time)."""

    seconds: float
    probe: Shape
    probe_seconds: float
    spent: float
    base: Shape | None = None
    base_seconds: float | None = None

    def text(self) -> str:
        probe = f"{seconds_text(self.probe_seconds)} at {shape_text(self.probe)}"
        if self.base is not None:
            probe += f", {seconds_text(self.base_seconds)} at {shape_text(self.base)}"
        return f"~{seconds_text(self.seconds)} a call (probe: {probe})"


def shape_text(shape: Shape) -> str:
    return "x".join(map(str, shape))


def seconds_text(seconds: float) -> str:
    """3.2 ms, 1.4 s, 3 min 5 s: a duration as a person reads it."""
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    return f"{minutes // 60} h {minutes % 60} min"


def ladder(target: Shape, start: Shape = START) -> list[Shape]:
    """Shapes from `start` (capped by `target`) to `target`, each doubling the dimension that
    is furthest (as a ratio) from its target, the last one `target` itself."""
    shape = [min(s, t) for s, t in zip(start, target)]
    rungs = [tuple(shape)]
    while tuple(shape) != tuple(target):
        i = max(range(3), key=lambda d: target[d] / shape[d])
        shape[i] = min(shape[i] * 2, target[i])
        rungs.append(tuple(shape))
    return rungs


def _one_call(prepared) -> float:
    t0 = time.perf_counter()
    prepared.run()
    return time.perf_counter() - t0


def expected_seconds(name: str, shape: Shape, backend: str | None = None, budget: float = BUDGET_S,
                     enough: float = ENOUGH_S, start: Shape = START,
                     time_call: Callable[[object], float] = _one_call) -> Estimate | None:
    """Expected seconds per call of contender `name` at `shape` here, precise enough to compare
    with `budget` seconds (see the module's docstring). `time_call(prepared)` is one call's
    seconds (a test's stand-in for the clock). Raises contenders.Unavailable when the
    contender cannot run here; None when it fails otherwise (the measurement will report how)."""
    t_start = time.perf_counter()
    contender = contenders.get(name)
    target = tuple(shape)
    timed: list[tuple[Shape, float]] = []  # (rung, seconds), smallest first
    for rung in ladder(shape, start):
        try:
            prepared = contender.prepare(*rung, backend=backend)
            seconds = min(time_call(prepared), time_call(prepared))
        except contenders.Unavailable:
            raise
        except Exception:  # a failure the measurement reports with its reason
            return None
        if rung == target:
            return Estimate(seconds, rung, seconds, time.perf_counter() - t_start)
        # the base has at most half the rung's work, so that the growth between them is large
        # next to the noise even where a dimension's last step is short of doubling it
        base = next(((r, t) for r, t in reversed(timed) if ops(r) <= ops(rung) / 2), None)
        timed.append((rung, seconds))
        if seconds < enough:
            continue
        guess = Estimate(seconds * ops(target) / ops(rung), rung, seconds, 0.0)
        grew = False  # whether the rung's time is mostly work that grew from the base
        if base is not None:
            per_op = max(0.0, (seconds - base[1]) / (ops(rung) - ops(base[0])))
            grew = per_op * ops(rung) >= WORK_SHARE * seconds
            line = seconds + per_op * (ops(target) - ops(rung))
            # at most the plain ratio: a step that grew faster than its work (out of a cache)
            # would otherwise be extrapolated at a steeper rate than the rung's own average
            if grew and line < guess.seconds:
                guess = Estimate(line, rung, seconds, 0.0, *base)
        # both estimates are at least `seconds`, so a rung of the budget's length settles a
        # skip; a shorter one settles it only when it is long and grew with its work (a rung
        # of SKIP_S that did not grow is mostly a fixed cost, which the ratio would scale up)
        if guess.seconds <= budget or seconds >= budget or (seconds >= SKIP_S and grew):
            return replace(guess, spent=time.perf_counter() - t_start)
    raise AssertionError("ladder() ends at the target")  # pragma: no cover
