"""How long one call of a contender will take here, before it is timed: a probe that grows.

A contender's time per call depends on the machine far more than on anything int8nax knows
(MLX's weight-only quantized matmul runs at ~0.05 GFLOP/s on a 2-core CPU and at tens of
TFLOP/s on a GPU), so the estimate is measured, not declared. The probe runs the contender
on a ladder of shapes that grows from a small corner of the target (M <= 16, K, N <= 256)
towards it, doubling one dimension per step, until one call takes at least ENOUGH_S (long
enough that the per-call overhead is a small part of it) or the target itself is reached.
The estimate scales that call's time by the ratio of operations (2*M*K*N): a GEMM's time
grows about linearly in its work once it is past its overheads. Each step's data is built
but never checked (the check belongs to the measurement that follows); each step is run
twice and the faster call is kept, so one-time costs (a kernel build, weights packed on
first use) do not inflate the figure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from . import contenders
from .problems import Shape, ops

ENOUGH_S = 0.02
"""A probe call this long is mostly work, not per-call overhead: its rate extrapolates."""

START: Shape = (16, 256, 256)
"""The first rung (each dimension capped by the target's)."""


@dataclass(frozen=True)
class Estimate:
    """seconds: expected seconds per call at the target shape; probe: the rung it scales from,
    probe_seconds: the time of one call there; spent: wall seconds the probe took."""

    seconds: float
    probe: Shape
    probe_seconds: float
    spent: float

    def text(self) -> str:
        return f"~{seconds_text(self.seconds)} a call (probe: {seconds_text(self.probe_seconds)} at {shape_text(self.probe)})"


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


def expected_seconds(name: str, shape: Shape, backend: str | None = None, enough: float = ENOUGH_S,
                     start: Shape = START) -> Estimate | None:
    """Expected seconds per call of contender `name` at `shape` here (see the module's
    docstring). Raises contenders.Unavailable when the contender cannot run here; None when
    it fails otherwise (the measurement will report how)."""
    t_start = time.perf_counter()
    contender = contenders.get(name)
    for rung in ladder(shape, start):
        try:
            prepared = contender.prepare(*rung, backend=backend)
            seconds = min(_one_call(prepared), _one_call(prepared))
        except contenders.Unavailable:
            raise
        except Exception:  # a failure the measurement reports with its reason
            return None
        if seconds >= enough or rung == tuple(shape):
            return Estimate(seconds * ops(shape) / ops(rung), rung, seconds, time.perf_counter() - t_start)
    raise AssertionError("ladder() ends at the target")  # pragma: no cover
