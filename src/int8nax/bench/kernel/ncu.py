"""Nsight Compute (ncu) profiles of kernel-mode items: where a kernel's time goes, not only how
long it takes (bench.kernel.mode gives that).

    python -m int8nax.bench.kernel.ncu --profile prof --set w8a8:bfloat16,int8_matmul@512x4096x4096 \\
        --manifest manifest.json

runs the three steps (each also on its own):

    ncu --clock-control none --profile-from-start off --print-units base --section ... \\
        --export prof python -m int8nax.bench.kernel.ncu --set ... --manifest manifest.json
    ncu --import prof.ncu-rep --csv --page details --print-units base > prof.csv
    python -m int8nax.bench.kernel.ncu --summarize prof.csv --manifest manifest.json

The run (on the GPU, under ncu) prepares every item as kernel mode does (bench.kernel.cases:
the same operands, calls and checks), runs WARMUP calls of each and checks its output (kernel
builds and first-use checks stay outside the profile), then starts the profiler and runs each
item's `launches` calls, one call + mx.eval each, with a one-thread boundary kernel (MARKER)
before each item and after the last. The manifest lists the items in that order. The summary
splits ncu's kernels at the boundaries, so each kernel is attributed to its item by position
(a count that does not fit is an error, never a guess), and prints per kernel its duration,
DRAM and SM throughput, registers, occupancy and issue figures, per item its kernels' total per
call, and per shape each W8A8 item against int8_matmul's total.

ncu's own replay flushes the caches before each kernel (its default), so operands come from HBM
without the input rotation kernel mode needs.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .cupti import short_name
from ..estimate import shape_text
from .cases import FLOAT_PEERS, SWIGLU_QUANTIZE, WARMUP, prepare
from .worker import DEFAULT_L2_BYTES, Item
from ..problems import parse_shapes

MARKER = "int8nax_ncu_boundary"
"""The boundary kernel's name (MLX calls it custom_kernel_<this>...)."""

PROFILE_SHARE = 0.85
"""The share of --time-limit after which no item starts its profile (ncu then writes its report)."""

SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "SchedulerStats", "WarpStateStats", "MemoryWorkloadAnalysis")
"""The ncu sections the summary reads (ncu_command)."""


# ---- items ---------------------------------------------------------------------------------------

def parse_sets(values: list[str]) -> list[Item]:
    """['w8a8:bfloat16,int8_matmul@512x4096x4096,128x3584x18944', ...] -> items: each value's
    subjects at each of its shapes, shape by shape; ValueError naming --set otherwise."""
    items: list[Item] = []
    for value in values:
        subjects, sep, shapes = value.partition("@")
        names = [s.strip() for s in subjects.split(",") if s.strip()]
        if not sep or not names:
            raise ValueError(f"--set: expected SUBJECT[,SUBJECT...]@MxKxN[,MxKxN...], got {value!r}")
        for name in names:
            if name not in ("int8_matmul", "cublaslt", *FLOAT_PEERS) and not name.startswith(
                    ("w8a8:", SWIGLU_QUANTIZE)):
                raise ValueError(f"--set: a subject is int8_matmul, {', '.join(FLOAT_PEERS)}, cublaslt, "
                                 "w8a8:<dtype>[+bias] or "
                                 f"{SWIGLU_QUANTIZE}<fused|staged>:<dtype>, got {name!r}")
        for shape in parse_shapes(shapes, "--set"):
            items += [Item(name, shape) for name in names]
    return list(dict.fromkeys(items))


def ncu_command(report: str, run_args: list[str], python: str = "python3") -> list[str]:
    """The ncu command line that profiles `python -m int8nax.bench.kernel.ncu <run_args>` into `report`
    (.ncu-rep): SECTIONS, base units, the clocks left alone (the GPU machines' advice), only the
    window the run opens."""
    cmd = ["ncu", "--clock-control", "none", "--profile-from-start", "off", "--print-units", "base",
           "--force-overwrite", "--export", report]
    for section in SECTIONS:
        cmd += ["--section", section]
    return cmd + [python, "-m", "int8nax.bench.kernel.ncu", *run_args]


# ---- the run (on the GPU, under ncu) --------------------------------------------------------------

def _run(mx, p, operands):
    """One call of a prepared item, its output ready (evaluated, unless the call waits itself)."""
    out = p.call(operands)
    if not p.synced:
        mx.eval(out)
    return out


def run(items: list[Item], launches: int, *, l2: int, backend: str, start, stop, mark, deadline: float,
        profile_deadline: float = float("inf"), clock=time.time, log=print) -> list[dict]:
    """Prepare, warm up and check every item (until `deadline`), then between start() and stop()
    each ready item's `launches` calls (until `profile_deadline`: under ncu each kernel is replayed
    for seconds, and a run killed by its limit leaves no report) with mark(i) before profiled item
    i and mark(count) after the last. Returns the manifest's entries in order: key, subject,
    shape, describe, check (None: exact), profiled, error."""
    import mlx.core as mx

    entries, ready = [], []
    for item in items:
        entry = {"key": item.key, "subject": item.subject, "shape": list(item.shape), "profiled": False}
        entries.append(entry)
        if clock() > deadline:
            entry["error"] = "not run: the time limit came first"
            continue
        try:
            p = prepare(item, l2, backend)
            for i in range(WARMUP):
                _run(mx, p, p.sets[i % len(p.sets)])
            out = _run(mx, p, p.sets[0])
            entry.update(describe=p.describe, check=p.check(out), what=p.what)
        except Exception as exc:  # noqa: BLE001 - an item that cannot run is said, the rest go on
            entry["error"] = f"{type(exc).__name__}: {exc}"[:500]
            continue
        ready.append((entry, p))
        log(f"ready: {item.key}: {entry['describe']}", file=sys.stderr)
    start()
    done = 0
    try:
        for entry, p in ready:
            if clock() > profile_deadline:
                entry["error"] = "prepared, not profiled: the time limit came first"
                continue
            mark(done)
            for j in range(launches):
                _run(mx, p, p.sets[j % len(p.sets)])
            entry["profiled"] = True
            done += 1
        mark(done)
    finally:
        stop()
    return entries


def marker_kernel():
    """mark(i) for run: one thread of a kernel named MARKER (a boundary in ncu's list)."""
    import mlx.core as mx

    kernel = mx.fast.cuda_kernel(name=MARKER, input_names=["x"], output_names=["y"], source="y[0] = x[0];")

    def mark(i: int) -> None:
        mx.eval(kernel(inputs=[mx.array([i], dtype=mx.int32)], output_shapes=[(1,)], output_dtypes=[mx.int32],
                       grid=(1, 1, 1), threadgroup=(1, 1, 1))[0])

    mark(-1)  # built before the profile starts
    return mark


def _profiler():
    """(start, stop): CUDA's profiler API through torch (MLX's and torch's kernels share the
    primary context), which ncu --profile-from-start off listens to."""
    import torch

    torch.zeros(1, device="cuda")
    return torch.cuda.profiler.start, torch.cuda.profiler.stop


# ---- the summary ------------------------------------------------------------------------------

_TIME_UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
               "s": 1e6, "second": 1e6}

# (label, metric name, unit kind): the unit kind tells apart two metrics of one name
# ("Memory Throughput" is a % in SpeedOfLight and byte/second in MemoryWorkloadAnalysis)
COLUMNS = (
    ("us", "Duration", "time"),
    ("DRAM %", "DRAM Throughput", "%"),
    ("TB/s", "Memory Throughput", "byte/second"),
    ("SM %", "Compute (SM) Throughput", "%"),
    ("regs", "Registers Per Thread", "count"),
    ("occ %", "Achieved Occupancy", "%"),
    ("theor %", "Theoretical Occupancy", "%"),
    ("issued/sched", "Issued Warp Per Scheduler", "count"),
    ("no elig %", "No Eligible", "%"),
    ("cyc/instr", "Warp Cycles Per Issued Instruction", "count"),
)


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def _unit_kind(unit: str) -> str:
    unit = unit.strip()
    if unit in _TIME_UNITS:
        return "time"
    if unit == "%":
        return "%"
    if unit.endswith("/second") or unit.endswith("/s"):
        return "byte/second"
    return "count"


def _byte_rate(value: float, unit: str) -> float:
    """value in `unit` (byte/second, Kbyte/second, ...) in TB/s."""
    prefix = unit.split("byte")[0] if "byte" in unit else ""
    scale = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}.get(prefix, 1)
    return value * scale / 1e12


def read_kernels(text: str) -> list[dict]:
    """ncu's details page as CSV (`ncu --import R --csv --page details`) -> one dict per profiled
    kernel in ID order: id, name, grid, block and `metrics` {label: value} for COLUMNS (durations
    in µs, rates in TB/s); lines before the header (ncu's ==PROF== lines) are skipped."""
    lines = text.splitlines()
    head = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if head is None:
        raise ValueError("summary: no ncu details CSV here (no header line starting with \"ID\")")
    kernels: dict[int, dict] = {}
    for row in csv.DictReader(io.StringIO("\n".join(lines[head:]))):
        kid = _number(row.get("ID", ""))
        if kid is None:
            continue
        k = kernels.setdefault(int(kid), {"id": int(kid), "name": row.get("Kernel Name", "?"),
                                          "grid": row.get("Grid Size", ""), "block": row.get("Block Size", ""),
                                          "metrics": {}})
        name, unit, value = row.get("Metric Name", ""), row.get("Metric Unit", ""), _number(row.get("Metric Value", ""))
        if value is None:
            continue
        kind = _unit_kind(unit)
        for label, metric, want in COLUMNS:
            if metric == name and want == kind:
                if kind == "time":
                    value = value * _TIME_UNITS[unit.strip()]
                elif kind == "byte/second":
                    value = _byte_rate(value, unit)
                k["metrics"][label] = value
    return [kernels[i] for i in sorted(kernels)]


def attribute(kernels: list[dict], entries: list[dict]) -> list[tuple[dict, list[dict]]]:
    """(manifest entry, its kernels) for each profiled entry, by the boundary kernels' positions;
    ValueError where the boundaries do not match the manifest."""
    profiled = [e for e in entries if e.get("profiled")]
    cuts = [i for i, k in enumerate(kernels) if MARKER in k["name"]]
    if len(cuts) != len(profiled) + 1:
        raise ValueError(f"summary: {len(cuts)} boundary kernels in the profile, expected {len(profiled) + 1} "
                         f"for {len(profiled)} profiled items: the report and the manifest are not of one run")
    return [(e, kernels[a + 1:b]) for e, a, b in zip(profiled, cuts, cuts[1:])]


def _cell(value: float | None, label: str) -> str:
    if value is None:
        return "—"
    if label == "us":
        return f"{value:.1f}"
    if label == "TB/s":
        return f"{value:.2f}"
    if label in ("regs",):
        return f"{value:.0f}"
    return f"{value:.2f}" if label in ("issued/sched", "cyc/instr") else f"{value:.0f}"


def summary(kernels: list[dict], manifest: dict) -> str:
    """The profile in words and tables (module docstring)."""
    launches = max(1, int(manifest.get("launches", 1)))
    out = [f"ncu profile: {manifest.get('env', '')}".rstrip(), ""]
    labels = [c[0] for c in COLUMNS]
    totals: dict[tuple, dict[str, float]] = {}
    for entry, ks in attribute(kernels, manifest["entries"]):
        total = sum(k["metrics"].get("us", 0.0) for k in ks) / launches
        check = "exact" if entry.get("check") is None else f"MISMATCH: {entry['check']}"
        out.append(f"{entry['key']}: {total:.1f} us a call, {len(ks) // launches} kernels ({check}); "
                   f"{entry.get('describe', '')}")
        out.append("| kernel | grid | block | " + " | ".join(labels) + " |")
        out.append("|" + "---|" * (3 + len(labels)))
        for k in ks:
            cells = [_cell(k["metrics"].get(label), label) for label in labels]
            out.append(f"| {short_name(k['name'])} | {k['grid']} | {k['block']} | " + " | ".join(cells) + " |")
        out.append("")
        totals.setdefault(tuple(entry["shape"]), {})[entry["subject"]] = total
    ratios, peers = [], []
    for shape, by_subject in totals.items():
        raw = by_subject.get("int8_matmul")
        for subject, us in by_subject.items():
            if subject.startswith("w8a8:") and raw:
                ratios.append(f"- {shape_text(shape)} {subject}: {us:.1f} us, {us / raw:.2f}x int8_matmul's {raw:.1f}")
        lt = by_subject.get("cublaslt")
        if lt and raw:
            peers.append(f"- {shape_text(shape)}: int8_matmul {raw:.1f} us, cuBLASLt {lt:.1f}: {lt / raw:.2f}x")
    if ratios:
        out += ["W8A8 against the raw GEMM (ncu durations, every kernel of a call):", *ratios, ""]
    if peers:
        out += ["The raw GEMM against cuBLASLt (ncu durations; above 1.00x int8_matmul is the faster):", *peers, ""]
    skipped = [e for e in manifest["entries"] if not e.get("profiled")]
    out += [f"not profiled: {e['key']}: {e.get('error', '?')}" for e in skipped]
    return "\n".join(out).rstrip() + "\n"


# ---- command line --------------------------------------------------------------------------------

def _env_line() -> str:
    import platform

    try:
        import mlx.core as mx
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA GPU"
        return f"{gpu}, mlx {mx.__version__}, torch {torch.__version__}, Python {platform.python_version()}"
    except Exception as exc:  # noqa: BLE001
        return f"(environment not read: {exc})"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m int8nax.bench.kernel.ncu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", action="append", default=[], metavar="SUBJECTS@SHAPES",
                        help="subjects (int8_matmul, bf16, w8a8:<dtype>[+bias], swiglu_quantize:<fused|staged>:<dtype> "
                             "at MxHxN, N unused) at shapes, e.g. "
                             "w8a8:bfloat16,int8_matmul@512x4096x4096; repeatable")
    parser.add_argument("--launches", type=int, default=1, help="profiled calls per item (default 1)")
    parser.add_argument("--manifest", required=True, help="the run writes it, the summary reads it")
    parser.add_argument("--time-limit", type=float, default=300.0,
                        help="seconds for the run: items not prepared (kernel builds) by half of it, or not profiled by "
                             f"{PROFILE_SHARE * 100:.0f}%% of it, are said not profiled (default 300)")  # %%: argparse's
    parser.add_argument("--summarize", metavar="CSV", help="summarize ncu's details CSV of a run instead")
    parser.add_argument("--profile", metavar="REPORT",
                        help="run the items under ncu into REPORT.ncu-rep, write REPORT.csv and print the summary")
    args = parser.parse_args(argv)
    if args.summarize:
        return _summarize(Path(args.summarize), Path(args.manifest))
    try:
        items = parse_sets(args.set)
    except ValueError as exc:
        parser.error(str(exc))
    if not items:
        parser.error("--set: give at least one SUBJECTS@SHAPES")
    if args.launches < 1:
        parser.error(f"--launches: expected a positive count, got {args.launches}")
    if args.profile:
        run_args = [a for s in args.set for a in ("--set", s)]
        run_args += ["--launches", str(args.launches), "--manifest", args.manifest, "--time-limit", str(args.time_limit)]
        return profile(args.profile, run_args, Path(args.manifest))
    from .cupti import skip_reason

    why = skip_reason()
    if why:
        print(f"int8nax.bench.kernel.ncu: {why}", file=sys.stderr)
        return 3
    start, stop = _profiler()
    t0 = time.time()
    entries = run(items, args.launches, l2=DEFAULT_L2_BYTES, backend="cuda", start=start, stop=stop,
                  mark=marker_kernel(), deadline=t0 + args.time_limit / 2,
                  profile_deadline=t0 + PROFILE_SHARE * args.time_limit)
    Path(args.manifest).write_text(json.dumps({"env": _env_line(), "launches": args.launches,
                                               "entries": entries}, indent=1))
    return 0


def _summarize(csv_path: Path, manifest_path: Path) -> int:
    try:
        manifest = json.loads(manifest_path.read_text())
        print(summary(read_kernels(csv_path.read_text()), manifest), end="")
    except (OSError, ValueError, KeyError) as exc:
        print(f"int8nax.bench.kernel.ncu: {exc}", file=sys.stderr)
        return 2
    return 0


def profile(report: str, run_args: list[str], manifest: Path, runner=subprocess.run) -> int:
    """The three steps (module docstring): the run under ncu, its details as `report`.csv, the summary."""
    if shutil.which("ncu") is None and runner is subprocess.run:
        print("int8nax.bench.kernel.ncu: needs Nsight Compute's ncu on the PATH", file=sys.stderr)
        return 3
    # ncu writes numbers in the locale's format ("9,00" under a comma-decimal one); read_kernels
    # takes C's, so both ncu steps run under it
    env = {**os.environ, "LC_ALL": "C"}
    rc = runner(ncu_command(report, run_args, sys.executable), env=env).returncode
    if rc != 0:
        print(f"int8nax.bench.kernel.ncu: the profiled run exited {rc}", file=sys.stderr)
        return rc
    csv_path = Path(f"{report}.csv")
    with open(csv_path, "w") as fh:
        rc = runner(["ncu", "--import", f"{report}.ncu-rep", "--csv", "--page", "details", "--print-units", "base"],
                    stdout=fh, env=env).returncode
    if rc != 0:
        print(f"int8nax.bench.kernel.ncu: ncu --import exited {rc}", file=sys.stderr)
        return rc
    return _summarize(csv_path, manifest)


if __name__ == "__main__":
    sys.exit(main())
