"""CUPTI kernel time: the GPU activity records (kernels, memsets, copies) of a few launches,
read through torch.profiler, turned into per-launch times and the kernels of one launch.

MLX launches on its own stream from CUDA graphs, so CUDA events cannot bracket its kernels; CUPTI's
activity records (start and duration on the GPU) can, and torch.profiler is the way to them that
the GPU machines have. Kernel mode (bench.kernel.mode, bench.kernel.plans) times its launches with
Profiler; the model breakdown (bench.model_breakdown) records its own forwards with record and
names kernels with short_name. skip_reason says where none of this can run.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path


# ---- CUPTI records -> per-launch times (pure) ---------------------------------------------------

GPU_CATEGORIES = ("kernel", "gpu_memset", "gpu_memcpy")


def gpu_events(trace: dict) -> tuple[list[dict], list[dict]]:
    """(GPU activities sorted by start, user ranges named 'launch<i>') of a chrome trace
    written by torch.profiler: each {name, ts, dur} in µs."""
    gpu, ranges = [], []
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X" or "ts" not in e:
            continue
        rec = {"name": e.get("name", "?"), "ts": float(e["ts"]), "dur": float(e.get("dur", 0.0))}
        if e.get("cat") in GPU_CATEGORIES:
            gpu.append(rec)
        elif e.get("cat") == "user_annotation" and rec["name"].startswith("launch"):
            ranges.append(rec)
    gpu.sort(key=lambda e: e["ts"])
    ranges.sort(key=lambda e: e["ts"])
    return gpu, ranges


def split_launches(gpu: list[dict], ranges: list[dict], launches: int) -> list[list[dict]]:
    """The GPU activities of each launch. Every launch runs the same kernels, so the records
    split evenly in start order; where they do not (an extra kernel in one launch), each goes
    to the launch whose host range holds its start. ValueError when neither works."""
    if gpu and len(gpu) % launches == 0:
        per = len(gpu) // launches
        groups = [gpu[i * per:(i + 1) * per] for i in range(launches)]
        if all([e["name"] for e in g] == [e["name"] for e in groups[0]] for g in groups):
            return groups
    if len(ranges) == launches:
        groups = [[e for e in gpu if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]] for r in ranges]
        if all(groups) and sum(map(len, groups)) == len(gpu):
            return groups
    raise ValueError(f"CUPTI saw {len(gpu)} GPU activities for {launches} launches "
                     f"({len(ranges)} launch ranges), which do not split into launches")


def launch_figures(groups: list[list[dict]]) -> tuple[float, list[list]]:
    """(median µs of a launch's activities summed, parts): parts are [short name, median µs]
    of each activity of a launch in order, over the launches that ran the most common sequence."""
    totals = [sum(e["dur"] for e in g) for g in groups]
    seqs = [tuple(e["name"] for e in g) for g in groups]
    common = max(set(seqs), key=seqs.count)
    same = [g for g, s in zip(groups, seqs) if s == common]
    parts = [[short_name(name), statistics.median(g[j]["dur"] for g in same)] for j, name in enumerate(common)]
    return statistics.median(totals), parts


def short_name(name: str) -> str:
    """A kernel's name without 'void', namespaces, template arguments and parameters."""
    name = name.removeprefix("void ").split("(")[0].split("<")[0]
    return name.rsplit("::", 1)[-1][:80]


# ---- timing launches (on the GPU) ---------------------------------------------------------------

class Profiler:
    """CUPTI through torch.profiler: time launch(i) for i in range(launches)."""

    def __init__(self, torch, tmp: Path):
        self.torch, self.tmp = torch, tmp

    def time(self, launch, launches: int) -> tuple[float, list[list]]:
        gpu, ranges = record(self.torch, launch, launches, self.tmp)
        return launch_figures(split_launches(gpu, ranges, launches))


def record(torch, launch, launches: int, tmp: Path) -> tuple[list[dict], list[dict]]:
    """gpu_events of launch(i) for i in range(launches), each in a host range "launch<i>",
    recorded by torch.profiler (CUPTI) and read back from its trace, written to `tmp`."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for i in range(launches):
            with record_function(f"launch{i}"):
                launch(i)
        torch.cuda.synchronize()
    path = Path(tmp) / f"trace_{os.getpid()}.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    path.unlink(missing_ok=True)
    return gpu_events(trace)


# ---- where it runs ------------------------------------------------------------------------------

def skip_reason() -> str | None:
    """Why kernel time cannot be measured here (None: it can)."""
    try:
        import mlx.core as mx
    except Exception as exc:  # noqa: BLE001
        return f"mlx does not import ({exc})"
    cuda = getattr(mx, "cuda", None)
    if cuda is None or not cuda.is_available():
        return "needs an NVIDIA GPU with MLX's CUDA backend (mx.cuda.is_available() is False here)"
    try:
        import torch
    except ImportError:
        return "needs torch with CUDA (its profiler reads the CUPTI kernel records)"
    if not torch.cuda.is_available():
        return f"needs torch with CUDA (torch {torch.__version__} sees no GPU)"
    return None
