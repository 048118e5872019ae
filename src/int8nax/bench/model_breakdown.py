"""Where a model's forward spends its time on a CUDA GPU (`int8nax compare --model ... --breakdown`).

For one prepared model (bench.models.Prepared) at one token count, a few forwards run under
torch.profiler (CUPTI activity records: MLX launches from CUDA graphs on its own stream, which
CUDA events cannot bracket). Per forward, in ms per layer:

    wall        the forward on the host: building the graph, launching it, waiting (mx.eval)
    gpu busy    the union of the forward's GPU activity intervals
    idle %      1 - busy / wall: where it is high, the host (Python, MLX's graph building and
                launches) is what sets the speed, not a kernel
    <category>  the kernels' summed durations by CATEGORIES (first rule that matches a kernel's name)

The figures are medians over the forwards; the kernels of the median forward that take the most
time are listed by name. The profiler adds host time to every launch (a host-bound decode step
of 4 Qwen2.5-7B layers on the H200: 1.04 ms a layer profiled, 0.59 not), so wall reads above what
`compare --model` times; the GPU figures are the kernels' own.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

CATEGORIES = (
    ("int8nax quantize", r"int8nax_(swiglu_)?quantize"),  # the SwiGLU kernel makes h and its codes
    ("int8nax reduce", r"int8nax_reduce"),
    ("int8nax gemm", r"int8nax_"),
    ("float gemm", r"gemm|gemv|nvjet|xmma|cutlass|cublas|matmul|qmm|qmv|splitk"),
    ("attention", r"sdpa|attention|flash"),
    ("copy", r"copy|memcpy|memset|gather|scatter|concat"),
    ("other", r""),
)
"""(category, regular expression searched in a kernel's lower-cased name), in order: the first
that matches names the kernel's category ("other": elementwise ops, norms, rope, softmax...)."""

NAMES = tuple(name for name, _ in CATEGORIES)
_RULES = tuple((name, re.compile(rx)) for name, rx in CATEGORIES)
TOP = 6
"""Kernels listed by name per breakdown (the median forward's largest, summed by name)."""


def category(kernel: str) -> str:
    """The CATEGORIES name of a kernel's name."""
    low = kernel.lower()
    for name, rx in _RULES:
        if rx.search(low):
            return name
    return "other"


def busy_us(events: list[dict]) -> float:
    """µs covered by at least one of the {ts, dur} intervals (µs)."""
    total, end = 0.0, None
    for e in sorted(events, key=lambda e: e["ts"]):
        s, f = e["ts"], e["ts"] + e["dur"]
        if end is None or s > end:
            total += f - s
            end = f
        elif f > end:
            total += f - end
            end = f
    return total


@dataclass
class Breakdown:
    """One forward's (the median's) figures, ms per layer, as the module doc defines them."""

    wall_ms: float
    busy_ms: float
    categories: dict[str, float]
    top: list[tuple[str, float, int]] = field(default_factory=list)
    """(kernel short name, ms per layer, launches per forward) of the largest kernels."""
    kernels: int = 0
    """GPU activities per forward."""

    @property
    def idle(self) -> float:
        return max(0.0, 1.0 - self.busy_ms / self.wall_ms) if self.wall_ms > 0 else 0.0


def forward_figures(gpu: list[dict], ranges: list[dict], layers: int) -> Breakdown:
    """The median forward's Breakdown from GPU activities and the forwards' host ranges (both
    {name, ts, dur}, µs, as cupti.gpu_events reads them): an activity belongs to the range
    its start falls in (each forward ends in mx.eval, so its kernels end inside it)."""
    from .kernel.cupti import short_name

    if not ranges:
        raise ValueError("no forward ranges in the trace")
    per = []
    for r in ranges:
        lo, hi = r["ts"], r["ts"] + r["dur"]
        per.append((r["dur"], [e for e in gpu if lo <= e["ts"] <= hi]))
    per.sort(key=lambda p: p[0])
    wall, events = per[len(per) // 2]
    cats = {name: 0.0 for name in NAMES}
    by_name: dict[str, list[float]] = {}
    for e in events:
        cats[category(e["name"])] += e["dur"]
        by_name.setdefault(short_name(e["name"]), []).append(e["dur"])
    top = sorted(((n, sum(d), len(d)) for n, d in by_name.items()), key=lambda t: -t[1])[:TOP]
    scale = 1e-3 / layers
    return Breakdown(wall * scale, busy_us(events) * scale, {k: v * scale for k, v in cats.items()},
                     [(n, us * scale, count) for n, us, count in top], len(events))


def measured(prepared, tokens: int, forwards: int = 3) -> tuple[Breakdown | None, str | None]:
    """(breakdown(...), None), or (None, why there is none: no CUDA or torch here, or the
    recording failed); never raises, so the figures measured without it stand."""
    from .kernel.cupti import skip_reason

    why = skip_reason()
    if why:
        return None, why
    try:
        return breakdown(prepared, tokens, forwards), None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"


def start() -> None:
    """Create torch's CUDA context (and CUPTI's) before MLX launches its first kernel, as
    kernel mode's worker does (kernel.worker); nothing where torch has no CUDA."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.zeros(1, device="cuda")
    except ImportError:
        pass


def breakdown(prepared, tokens: int, forwards: int = 3) -> Breakdown:
    """Record `forwards` runs of prepared.run(tokens) (after prepared.prepare(tokens) and one
    untimed run) on the GPU: their median Breakdown. Needs torch with CUDA (cupti.skip_reason)."""
    import torch

    from .kernel.cupti import record

    prepared.prepare(tokens)
    prepared.run(tokens)
    with tempfile.TemporaryDirectory() as tmp:
        gpu, ranges = record(torch, lambda _: prepared.run(tokens), forwards, Path(tmp))
    return forward_figures(gpu, ranges, prepared.layers)

