"""How a prepared contender is timed: the three figures int8nax keeps apart.

    call    one call, then block until its output is computed (the seed's method; on MLX
            mostly MLX's per-evaluation cost at small M)
    chain   per call in a dependent chain: `calls` calls and one block at the end: what a
            model's forward pass sees. An MLX contender takes each call's first input from
            the previous output through one fused elementwise pass (contenders._after), a
            data edge that keeps the GPU from running the calls concurrently, which
            independent queued calls may do and which would flatter; torch's calls on one
            stream run in order already and pay no such pass.
    host    per call, the host's time to build one lazy call without evaluating it (MLX
            contenders only; independent calls on the prepared inputs, never evaluated, their
            graphs freed after the clock stops)

Kernel time (CUPTI records, cold L2) is another kind of figure, measured in worker processes
next to cuBLASLt: bench.kernel.mode (`int8nax compare --mode kernel`, CUDA only).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

from . import contenders
from .checks import MismatchError
from .peers import Unavailable
from .problems import Shape, ops

MODES = ("call", "chain", "host")


def median_seconds(run: Callable[[], object], repeat: int = 5, warmup: int = 1,
                   tick: Callable[[], None] | None = None) -> float:
    """Median wall time of `repeat` calls of a blocking callable, after `warmup` untimed calls.
    `tick`, if given, is called after each call, warm-up included (a progress display)."""
    for _ in range(warmup):
        run()
        if tick:
            tick()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = run()
        samples.append(time.perf_counter() - t0)
        del out  # freeing the outputs (host mode: a graph of many calls) is not part of a call
        if tick:
            tick()
    return statistics.median(samples)


def seconds_per_call(prepared, mode: str, repeat: int = 5, warmup: int = 1, calls: int = 100,
                     tick: Callable[[], None] | None = None) -> float:
    """Median seconds per call of `prepared` (a bench.contenders.Prepared) in `mode`."""
    if mode == "call":
        return median_seconds(prepared.run, repeat, warmup, tick)
    if mode == "chain":
        return median_seconds(lambda: prepared.chain(calls), repeat, warmup, tick) / calls
    if mode == "host":
        return median_seconds(lambda: prepared.build(calls), repeat, warmup, tick) / calls
    raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")


def tops(shape: Shape, seconds: float) -> float:
    """Throughput in tera-operations per second: 2*M*K*N multiply-adds counted as 2 ops."""
    return ops(shape) / seconds / 1e12


@dataclass
class Cell:
    """One contender at one shape in one mode: seconds per call, or why there is no time."""

    seconds: float | None = None
    unavailable: str | None = None
    mismatch: str | None = None
    error: str | None = None
    detail: str | None = None
    kernel: str | None = None  # int8nax's contenders: what ran (contenders.Prepared.kernel)

    def text(self) -> str:
        if self.seconds is not None:
            return f"{self.seconds * 1e3:.3f}"
        return "MISMATCH" if self.mismatch else "n/a"


def measure(shape: Shape, name: str, mode: str = "call", repeat: int = 5, chain_calls: int = 100,
            backend: str | None = None, warmup: int = 1, tick: Callable[[], None] | None = None) -> Cell:
    """Prepare contender `name` at `shape`, check its output, then time it in `mode` (`tick`:
    called after each timed or warm-up sample). Never raises for the contender's sake: the
    Cell says what happened."""
    try:
        prepared = contenders.get(name).ready(*shape, backend=backend)
        seconds = seconds_per_call(prepared, mode, repeat, warmup, calls=chain_calls, tick=tick)
    except Unavailable as exc:
        return Cell(unavailable=str(exc))
    except MismatchError as exc:
        return Cell(mismatch=str(exc))
    except Exception as exc:  # e.g. a peer that rejects a shape at run time: n/a with the reason
        return Cell(error=f"{type(exc).__name__}: {exc}")
    return Cell(seconds=seconds, detail=prepared.detail, kernel=prepared.kernel or None)
