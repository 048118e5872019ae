"""The calibration's report (markdown: the gate's verdicts, per benchmark, other factors, the
noise and the suggested factor), runs.json and --merge, which makes one report from several,
and the settings written back to benchmarks/gate.json."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path

from .. import gate
from .points import Point, Run, flagged
from .sandbox import REPO, has_history


def runs_json(runs: list[Run], args, settings: gate.Settings, command: str, started: str, load0) -> str:
    """Every run's verdict, ratios and raw points (asv's value, stats and samples), with what the
    report needs besides, as JSON: runs.json in --out-dir, which --merge reads back."""
    from dataclasses import asdict

    return json.dumps({
        "machine": args.machine, "argv": args.argv, "existing": getattr(args, "existing", None),
        "slowdowns": args.slowdowns, "settings": asdict(settings), "command": command, "started": started,
        "load0": list(load0), "load_end": list(os.getloadavg()),
        "machine_info": getattr(args, "machine_info", None) or machine_lines(args),
        "repetition_minutes": getattr(args, "repetition_minutes", []),
        "runs": [{"kind": r.kind, "planted": r.planted, "status": r.status, "seconds": r.seconds,
                  "load": list(r.load), "points": r.points,
                  "base": {n: asdict(p) for n, p in r.raw[0].items()},
                  "head": {n: asdict(p) for n, p in r.raw[1].items()}} for r in runs]}, indent=1)


def load_runs(path: Path) -> tuple[list[Run], dict]:
    """runs.json (runs_json) back: the runs, and the rest of the document."""
    document = json.loads(path.read_text())
    if not isinstance(document, dict) or "runs" not in document:
        raise SystemExit(f"--merge: {path} is not a runs.json of int8nax.commands.gate_calibrate --out-dir")
    runs = []
    for r in document.pop("runs"):
        run = Run(r["kind"], r["planted"], r["status"], r["seconds"], tuple(r["load"]),
                  {n: tuple(v) for n, v in r["points"].items()},
                  ({n: Point(**p) for n, p in r["base"].items()}, {n: Point(**p) for n, p in r["head"].items()}))
        runs.append(run)
    return runs, document


MEASURING_KEYS = ("rounds", "repeat", "bench", "threads", "cpu_affinity", "launch")
"""The settings that shape the samples. The factor is applied to them afterwards (--factors
evaluates several on the same runs), and the note and source only describe them."""


def measuring(settings: dict) -> dict:
    return {k: settings.get(k) for k in MEASURING_KEYS}


def merge(paths: list[Path], args) -> tuple[list[Run], gate.Settings, str, str, tuple]:
    """The runs of several runs.json of one machine and one set of settings (say, one per
    10-minute device call), for one report; `args` takes their machine, --existing and slowdowns."""
    runs: list[Run] = []
    first = None
    args.repetition_minutes = []
    for path in paths:
        path = path / "runs.json" if path.is_dir() else path
        more, meta = load_runs(path)
        if first is None:
            first = meta
        elif (meta["machine"], measuring(meta["settings"]), meta["slowdowns"]) != (
                first["machine"], measuring(first["settings"]), first["slowdowns"]):
            raise SystemExit(f"--merge: {path} has another machine, measuring settings or slowdowns than {paths[0]}")
        runs += more
        args.repetition_minutes += meta["repetition_minutes"]
    settings = gate.Settings(**{**first["settings"], "bench": tuple(first["settings"]["bench"])})
    args.machine, args.existing, args.slowdowns = first["machine"], first["existing"], first["slowdowns"]
    args.machine_info, args.load_end = first["machine_info"], tuple(meta["load_end"])
    args.runs = len(runs) // (1 + len(args.slowdowns))
    return runs, settings, first["command"], first["started"], tuple(first["load0"])


def worse_at(run: Run, name: str, factor: float) -> bool:
    base, other = run.raw
    return flagged(base[name], other[name], factor)[2]


def rms_log(ratios: list[float]) -> float:
    return math.sqrt(statistics.fmean(math.log(r) ** 2 for r in ratios)) if ratios else float("nan")


def suggest_factor(aa: list[Run], names: list[str]) -> tuple[float, float, float]:
    """(suggested factor, largest per-benchmark RMS of log A/A ratio, largest A/A ratio):
    4 standard deviations of the noisiest benchmark's A/A ratio, and at least 3 % above the
    largest A/A ratio seen, never below 1.05."""
    sigma = max((rms_log([r.points[n][0] for r in aa if n in r.points]) for n in names), default=float("nan"))
    worst = max((r.points[n][0] for r in aa for n in names if n in r.points), default=1.0)
    factor = max(1.05, math.exp(4 * sigma) if sigma == sigma else 1.05, worst * 1.03)
    return math.ceil(factor * 100) / 100, sigma, worst


def machine_lines(args) -> list[str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {}
    for module in ("asv", "asv_runner", "mlx", "numpy"):
        try:
            from importlib.metadata import version

            versions[module] = version(module.replace("_", "-"))
        except Exception:  # noqa: BLE001
            versions[module] = "not installed"
    backend = subprocess.run([sys.executable, "-c", "import int8nax, json; i = int8nax.info(); "
                              "print(i['backend'], '-', i['reason'])"], capture_output=True, text=True).stdout.strip()
    return [f"- machine: `{args.machine}` ({platform.node()}), {cpu}, {os.cpu_count()} logical CPUs, "
            f"{platform.system()} {platform.release()}",
            f"- Python {platform.python_version()}; " + ", ".join(f"{k} {v}" for k, v in versions.items()),
            f"- int8nax backend here: {backend or 'unknown'}",
            ("- commit calibrated: `" + subprocess.run(['git', '-C', str(REPO), 'rev-parse', 'HEAD'],
                                                       capture_output=True, text=True).stdout.strip() + "`"
             if has_history(REPO) else f"- calibrated: the files of {REPO} (a copy without git history, "
             "committed as A in the clone; the commit it came from is not known here)")]


def existing_lines(args, settings: gate.Settings) -> list[str]:
    """What --existing measured in, for the report."""
    commits = 2 + len(args.slowdowns)
    minutes = getattr(args, "repetition_minutes", [])
    timing = (f" A repetition took {statistics.median(minutes):.1f} min (median; max {max(minutes):.1f})."
              if minutes else "")
    return ["## Existing-environment variant (--existing)", "",
            f"Measured in asv's existing environment `{args.existing}`: no virtualenv was built, and each "
            "commit's own sources (a worktree of the clone at that commit) were on PYTHONPATH / "
            "ASV_PYTHONPATH. Each round of each commit is one `asv run -E existing:PYTHON --set-commit-hash "
            "C -a rounds=1` (the first round records fresh samples, the later ones `--append-samples`), "
            f"launched through {'src/int8nax/commands/asv_persistent.py' if settings.launch == 'persistent' else 'asv'}; "
            f"the script interleaves the rounds as `asv continuous --interleave-rounds` does ({settings.rounds} "
            f"rounds, the order of the {commits} commits A, A', B_f rotated every round). So every commit "
            "ends with the samples of asv continuous's rounds in one result file, and the ratio, the "
            "significance test and the verdict (asv's rule at the factor, `flagged`) are the ones asv "
            "continuous computes from them; what differs is that A, A' and every B_f are measured in the "
            "same rounds, so one repetition gives one A/A and one A/B per factor against the same samples "
            "of A (the A/A and A/B verdicts of a repetition are not independent), and the gate's own "
            "console log is not there (the verdicts are the script's). Minutes per run: the asv calls of "
            f"the pair's two commits.{timing}", ""]


def report(runs: list[Run], args, settings: gate.Settings, command: str, started: str, load0) -> tuple[str, float]:
    existing = getattr(args, "existing", None)
    if not runs:
        return (f"# Gate calibration on `{args.machine}`, {started}\n\n"
                f"`python -m int8nax.commands.gate_calibrate {' '.join(args.argv)}`\n\n"
                "No repetition completed (see the logs).\n", settings.factor)
    aa = [r for r in runs if r.kind == "A/A"]
    names = sorted({n for r in runs for n in r.points})
    factor = settings.factor
    suggested, sigma, worst = suggest_factor(aa, names)
    lines = [f"# Gate calibration on `{args.machine}`, {started}", "",
             f"`python -m int8nax.commands.gate_calibrate {' '.join(args.argv)}`", ""]
    lines += getattr(args, "machine_info", None) or machine_lines(args)
    load_end = getattr(args, "load_end", None) or os.getloadavg()
    lines += [f"- load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in load0)}; "
              f"at the end: {', '.join(f'{x:.2f}' for x in load_end)}; during the runs (1 min, at each "
              f"run's end): {min(r.load[0] for r in runs):.2f} to {max(r.load[0] for r in runs):.2f}",
              f"- gate settings: {settings.describe()} (from {settings.source})",
              (f"- asv command of each round (the last one run): `{command}`" if existing
               else f"- gate command of each run: `{command}`"),
              "- planted slowdown: every backend's int8_matmul and w8a8_linear wait (f - 1) times their own "
              "time after computing (int8nax.commands.gate_calibrate PLANT)", ""]
    lines += ["## Gate verdicts", "",
              "| pair | runs | exit 0 (quiet) | exit 1 (regression) | exit 2 (could not measure) | minutes per run (median, max) |",
              "|---|---|---|---|---|---|"]
    kinds = sorted({r.kind for r in runs}, key=lambda k: (k != "A/A", k))
    for kind in kinds:
        rs = [r for r in runs if r.kind == kind]
        count = {s: sum(r.status == s for r in rs) for s in (gate.QUIET, gate.REGRESSION, gate.UNMEASURED)}
        minutes = [r.seconds / 60 for r in rs]
        lines.append(f"| {kind} | {len(rs)} | {count[gate.QUIET]} | {count[gate.REGRESSION]} | "
                     f"{count[gate.UNMEASURED]} | {statistics.median(minutes):.1f}, {max(minutes):.1f} |")
    first = runs[0].seconds / 60 if runs else 0
    if existing:
        lines += [""] + existing_lines(args, settings)
    else:
        lines += ["", f"The first run also built asv's environment ({first:.1f} min in all).", ""]

    lines += ["## Per benchmark", "",
              f"Ratio = head median / base median. Flagged = asv's rule at factor {factor}: significant "
              "(Mann-Whitney, p < 0.002) and ratio above the factor.", "",
              "| benchmark | A/A ratio: median [min, max] | A/A false alarms | " +
              " | ".join(f"{k}: ratio median [min, max], detected" for k in kinds if k != "A/A") + " |",
              "|---|---|---|" + "---|" * (len(kinds) - 1)]
    for name in names:
        cells = []
        for kind in kinds:
            rs = [r for r in runs if r.kind == kind and name in r.points]
            ratios = [r.points[name][0] for r in rs]
            hits = sum(worse_at(r, name, factor) for r in rs)
            summary = (f"{statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]"
                       if ratios else "n/a")
            cells.append(f"{summary} | {hits}/{len(rs)}" if kind == "A/A" else f"{summary}, {hits}/{len(rs)}")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")

    lines += ["", "## Other factors, from the same samples", "",
              "What the gate would have said at other factors (asv's rule applied to the recorded samples; "
              "a run counts when any gated benchmark is flagged, and only runs that measured are counted).", "",
              "| factor | A/A false alarms | " + " | ".join(f"{k} detected" for k in kinds if k != "A/A") + " |",
              "|---|---|" + "---|" * (len(kinds) - 1)]
    for f in sorted(set(args.factors) | {factor, suggested}):
        cells = []
        for kind in kinds:
            rs = [r for r in runs if r.kind == kind and r.status != gate.UNMEASURED]
            hits = sum(any(worse_at(r, n, f) for n in r.points) for r in rs)
            cells.append(f"{hits}/{len(rs)}")
        lines.append(f"| {f:.2f}{' (ran)' if f == factor else ''}{' (suggested)' if f == suggested else ''} | "
                     + " | ".join(cells) + " |")
    lines += ["", "## Noise", "",
              f"- largest A/A ratio of any gated benchmark: {worst:.3f}; largest per-benchmark RMS of "
              f"log(A/A ratio): {sigma:.4f}",
              f"- suggested factor: {suggested:.2f} (4 RMS of the noisiest benchmark, at least 3 % above the "
              "largest A/A ratio, at least 1.05)", ""]
    return "\n".join(lines) + "\n", suggested


def write_settings(path: Path, machine: str, settings: gate.Settings, factor: float, results: str) -> None:
    document = json.loads(path.read_text()) if path.is_file() else {"machines": {}}
    entry = document["machines"].get(machine, {})
    entry.update({"factor": factor, "rounds": settings.rounds, "repeat": settings.repeat,
                  "bench": list(settings.bench), "threads": settings.threads,
                  "cpu_affinity": settings.cpu_affinity, "calibration": results})
    document["machines"][machine] = entry
    path.write_text(json.dumps(document, indent=2) + "\n")
