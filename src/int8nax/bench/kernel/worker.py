"""The GPU worker subprocess of kernel mode: runs items in a process of its own, one JSON line
each, and keeps a run going past a worker that dies.

Why a process: a kernel fault kills the CUDA context, and with it every later measurement in that
process. The parent (run_items) gives the items to a worker (python -m <the mode's module>
--worker, started by spawn_worker), reads back the records it wrote, records the item it died on
as failed and starts a fresh worker on the rest, within a budget in seconds (compile time
included); items not reached are listed as not run. A worker that finds the context poisoned
after an item (_healthy) exits with CONTEXT_LOST, so that a fresh one takes the rest.

What is measured is the mode's: each mode (bench.kernel.mode, bench.kernel.plans) calls
worker_main with its own measure(item, ctx) from its `python -m` entry point; ctx carries torch,
the CUPTI Profiler (bench.kernel.cupti), the launches per item and the device's L2 size.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .cupti import Profiler
from ..estimate import shape_text
from ..problems import Shape

DEFAULT_L2_BYTES = 50 << 20
"""The H200's L2, used when the device does not report its own."""

LAUNCHES = 30
"""Timed launches per item (the median is the figure)."""


@dataclass(frozen=True)
class Item:
    """One timed thing: subject (int8_matmul, cublaslt, w8a8:<dtype>[+bias], bf16) at one shape."""

    subject: str
    shape: Shape

    @property
    def key(self) -> str:
        return f"{self.subject} {shape_text(self.shape)}"


# ---- the worker (runs on the GPU) ---------------------------------------------------------------

def l2_bytes(torch) -> int:
    try:
        return int(torch.cuda.get_device_properties(0).L2_cache_size) or DEFAULT_L2_BYTES
    except Exception:  # noqa: BLE001  (an older torch without the field)
        return DEFAULT_L2_BYTES


def worker(items: list[Item], out: Path, launches: int, measure, progress=None) -> int:
    """Measure `items` in order with measure(item, ctx) (the mode's), appending one JSON line
    each to `out` (the parent reads it); progress(record) is its line in the log
    (default: progress_text)."""
    progress = progress or progress_text
    import mlx.core as mx
    import torch

    torch.zeros(1, device="cuda")  # torch's context and CUPTI before MLX's first kernel
    mx.eval(mx.zeros(1))
    with tempfile.TemporaryDirectory() as tmp, open(out, "a") as fh:
        ctx = {"torch": torch, "profiler": Profiler(torch, Path(tmp)), "launches": launches,
               "l2_bytes": l2_bytes(torch)}
        for done, item in enumerate(items, 1):
            t0 = time.time()
            try:
                rec = measure(item, ctx)
            except Exception as exc:  # noqa: BLE001  (NVRTC errors and cuBLASLt refusals come as exceptions)
                rec = {"subject": item.subject, "shape": list(item.shape), "error": f"{type(exc).__name__}: {exc}"[:2000]}
            rec["seconds"] = round(time.time() - t0, 2)
            rec["l2_bytes"] = ctx["l2_bytes"]
            fh.write(json.dumps(rec) + "\n")
            fh.flush()
            print(f"[kernel {done}/{len(items)}] {item.key}: {progress(rec)} ({rec['seconds']} s)",
                  file=sys.stderr, flush=True)
            if "error" in rec and not _healthy(mx, torch):
                print("[kernel] the CUDA context is lost: a fresh worker takes the rest", file=sys.stderr, flush=True)
                return CONTEXT_LOST
            torch.cuda.empty_cache()
            mx.clear_cache()
    return 0


CONTEXT_LOST = 3
"""A worker's exit status after an item's fault left the device unusable (the item is recorded)."""


def _healthy(mx, torch) -> bool:
    """Whether MLX and torch still run work on the device (a kernel fault poisons the context)."""
    try:
        mx.eval(mx.ones(4) + 1)
        torch.cuda.synchronize()
        return True
    except Exception:  # noqa: BLE001
        return False


def progress_text(rec: dict) -> str:
    """One record in a line, for the progress log."""
    if "us" in rec:
        return f"{rec['us']:.1f} us, {rec['tops']:.0f} TOPS, checked; {rec.get('describe', '')[:100]}"
    if "mismatch" in rec:
        return f"MISMATCH: {rec['mismatch']}"
    return f"ERROR: {rec.get('error', '?')[:300]}"


def worker_main(measure, argv=None, progress=None) -> int:
    """A worker's command line, what a mode's `python -m` entry point runs (measure, progress:
    as worker takes them)."""
    parser = argparse.ArgumentParser(description="kernel-time worker (started by `int8nax compare --mode kernel`)")
    parser.add_argument("--worker", required=True, help="JSON file of [subject, [M, K, N]] items")
    parser.add_argument("--out", required=True)
    parser.add_argument("--launches", type=int, default=LAUNCHES)
    args = parser.parse_args(argv)
    items = [Item(s, tuple(shape)) for s, shape in json.loads(Path(args.worker).read_text())]
    return worker(items, Path(args.out), args.launches, measure, progress)


# ---- the parent: workers, budget, results ------------------------------------------------------

def spawn_worker(items: list[Item], out: Path, launches: int, timeout: float, module: str) -> str:
    """Run one worker (python -m `module` --worker ...) on `items`; its status in words ('ok',
    'exit N', 'timed out')."""
    spec = out.with_suffix(".items.json")
    spec.write_text(json.dumps([[i.subject, list(i.shape)] for i in items]))
    cmd = [sys.executable, "-m", module, "--worker", str(spec), "--out", str(out),
           "--launches", str(launches)]
    try:
        proc = subprocess.run(cmd, timeout=max(timeout, 1.0), stdout=sys.stderr)
    except subprocess.TimeoutExpired:
        return "timed out"
    return "ok" if proc.returncode == 0 else f"exit {proc.returncode}"


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line cut short by a dying worker
    return out


def run_items(items: list[Item], budget: float, launches: int = LAUNCHES, *, spawn, clock=time.time) -> list[dict]:
    """Every item's record, in order: measured by workers (a fresh one after each that dies),
    the item a worker died on marked failed, those past the budget marked not run.
    spawn(items, out, launches, timeout) runs one worker (spawn_worker with the mode's module)."""
    start = clock()
    records: dict[Item, dict] = {}
    remaining = list(items)
    with tempfile.TemporaryDirectory() as tmp:
        while remaining:
            left = budget - (clock() - start)
            if left < 5:
                break
            out = Path(tmp) / f"records_{len(records)}.jsonl"  # a fresh file: a dead worker's last line may be cut
            status = spawn(remaining, out, launches, left)
            for rec in read_records(out):
                records.setdefault(Item(rec["subject"], tuple(rec["shape"])), rec)
            todo = [i for i in remaining if i not in records]
            if not todo:
                break
            if status == f"exit {CONTEXT_LOST}" and len(todo) < len(remaining):
                remaining = todo  # the faulting item is recorded; a fresh context takes the rest
                continue
            if status == "exit 1" and len(todo) == len(remaining):
                for i in todo:  # a Python error before the first item: every worker would fail alike
                    records[i] = {"subject": i.subject, "shape": list(i.shape),
                                  "error": "the worker failed before its first item (exit 1; its log is above)"}
                break
            # The worker stopped before the end: the first item it left undone is the culprit.
            why = {"timed out": "the run's budget ran out during it",
                   "ok": "the worker ended without measuring it"}.get(
                status, f"the worker died on it ({status}; its log is above, on stderr)")
            records[todo[0]] = {"subject": todo[0].subject, "shape": list(todo[0].shape), "error": why}
            remaining = todo[1:]
    for i in items:
        records.setdefault(i, {"subject": i.subject, "shape": list(i.shape),
                               "not_run": f"the run's budget ({budget:.0f} s) was spent first"})
    return [records[i] for i in items]
