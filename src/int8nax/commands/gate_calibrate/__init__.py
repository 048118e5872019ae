"""Calibrate the regression gate on this machine: how often `int8nax gate` cries wolf, and how
often it catches a slowdown of known size.

In a temporary clone of the committed HEAD it makes
    A      HEAD itself (the base of every comparison)
    A'     an empty commit on top of A: the same compute code at another commit (A/A)
    B_f    A plus a planted slowdown f (sandbox.PLANT: every int8nax backend's int8_matmul and
           w8a8_linear spend f times their own measured time; the extra is a busy wait)
and runs the gate `--runs` times on each pair (A, A') and (A, B_f), interleaved, with this
machine's settings from benchmarks/gate.json (or the overrides given). From each run it keeps
the gate's exit status and wall time, and from asv's result files every gated benchmark's
ratio (head median / base median) and asv's significance test, so that the false-alarm and
detection rates can be given per benchmark and for other factors than the one run.

    python -m int8nax.commands.gate_calibrate --machine cpu-2core --runs 10 --slowdowns 1.2,1.1 \
        --out docs/results/gate-cpu-2core.md [--write-settings]

Runs anywhere asv runs (a CPU box, an H200 with asv.cuda.conf.json, an M5 with
asv.m5.conf.json); it needs asv and virtualenv in this Python and network for the first
environment (or a pip cache / wheelhouse).

--existing [PYTHON] calibrates on a machine without network or package index (the lent
H200): no virtualenv is built. Each commit is checked out in a worktree of the clone, and
`asv run -E existing:PYTHON --set-commit-hash C -a rounds=1` measures it with that tree's src/
on PYTHONPATH (and ASV_PYTHONPATH), through src/int8nax/commands/asv_persistent.py when the machine's
`launch` is "persistent". The script interleaves the rounds itself, as `asv continuous
--interleave-rounds` does (asv refuses to with an existing environment): the first round of a
repetition records fresh samples, the later ones --append-samples, so each commit ends with
`rounds` rounds of samples in one result file, as after asv continuous. One repetition measures
A, A' and every B_f in the same rounds (the order rotated every round) and gives one A/A and
one A/B per factor, all against the same samples of A; the verdict of each pair is asv's rule
(`flagged`), as asv continuous applies it. --budget-min stops before a repetition that would
not finish in time (the report covers the complete ones); --out-dir collects, in four files
(a device call brings back eight at most), the report, the console log (calibrate.log), every
asv log (logs.tar.gz) and the raw points (runs.json):

    PYTHONPATH=/tmp/site:$PWD/src python3 -m int8nax.commands.gate_calibrate --existing \
        --config asv.cuda.conf.json --machine int8nax-cuda --runs 5 --slowdowns 1.1 \
        --budget-min 9 --out-dir "$OUT/gate"

A copy of the working tree without git history (what a device call gets) is committed as A in
the clone; --copy does the same where a .git is present but stale (the lent H200's copy). --merge DIR... makes one report from the runs.json of several such calls.

The report states the date, the machine, the load during the runs, the settings and the
command; --write-settings stores the settings and the suggested factor for this machine in
benchmarks/gate.json.

The package, by concern:
    sandbox    the clone with a private HOME, its commits A, A', B_f and the planted slowdown
    points     asv's samples of a commit, asv's rule on a pair (flagged), one run's record (Run)
    gate_runs  the calibration through `int8nax gate` itself, pair by pair
    existing   the calibration in asv's existing environment (--existing), rounds interleaved here
    reporting  the markdown report, runs.json and --merge, the settings written back
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .. import gate
from .existing import measure_existing
from .gate_runs import measure
from .reporting import machine_lines, merge, report, runs_json, write_settings
from .sandbox import REPO, Clone


def pack_logs(log_dir: Path, target: Path) -> None:
    """Every log in `log_dir` in one archive (a device call brings back a few files only)."""
    import tarfile

    partial = target.with_name(target.name + ".part")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(log_dir, arcname="logs")
    partial.replace(target)


def parse_floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    t_start = time.monotonic()
    argv = sys.argv[1:] if argv is None else argv
    # argparse would name the program after sys.argv[0], which is __main__.py under `python -m`
    p = argparse.ArgumentParser(prog="python -m int8nax.commands.gate_calibrate",
                                description=__doc__.splitlines()[0])
    p.add_argument("--machine", help="asv machine name (and settings entry) to calibrate (required unless --merge)")
    p.add_argument("--config", default="asv.conf.json", help="asv configuration, relative to the repo")
    p.add_argument("--runs", type=int, default=10, help="repetitions of each pair (10)")
    p.add_argument("--slowdowns", type=parse_floats, default=[1.2], help="planted factors, comma-separated (1.2)")
    p.add_argument("--factors", type=parse_floats, default=[1.05, 1.08, 1.10, 1.15],
                   help="factors to evaluate offline on the same samples")
    p.add_argument("--existing", nargs="?", const=sys.executable, metavar="PYTHON",
                   help="measure in asv's existing environment PYTHON (default: this Python) with "
                   "`asv run -E existing:PYTHON`, rounds interleaved by this script, A, A' and every B_f "
                   "in the same rounds: for machines without network (module docstring)")
    p.add_argument("--copy", action="store_true",
                   help="calibrate a copy of the working tree (committed as A) even where git has a HEAD: a device's "
                   "copy of the tree may carry a stale .git, whose HEAD is not the code there")
    p.add_argument("--budget-min", type=float, metavar="MIN",
                   help="stop after the last repetition that ends within MIN minutes of the start "
                   "(the report covers the complete repetitions)")
    p.add_argument("--out-dir", metavar="DIR", help="write everything here, in four files: the report "
                   "(unless --out), calibrate.log (this console), logs.tar.gz (every asv or gate log), "
                   "runs.json (raw points, for --merge)")
    p.add_argument("--merge", nargs="+", type=Path, metavar="RUNS",
                   help="measure nothing: one report from the runs.json files (or --out-dir folders) of "
                   "earlier calibrations of one machine with the same settings, e.g. one per device call")
    p.add_argument("--out", help="markdown report (default: DIR/gate-MACHINE-DATE.md with --out-dir, else print it)")
    p.add_argument("--write-settings", action="store_true",
                   help=f"store the settings and the suggested factor for --machine in {gate.SETTINGS_FILE}")
    p.add_argument("--keep", action="store_true", help="keep the temporary clone (its path is printed)")
    p.add_argument("gate_args", nargs=argparse.REMAINDER,
                   help="after --: options for the gate (--factor, --rounds, --repeat, --bench, --cpu-affinity)")
    args = p.parse_args(argv)
    args.argv = argv
    args.gate_args = [a for a in args.gate_args if a != "--"]
    if args.runs < 1:
        p.error("--runs must be >= 1")
    if not args.machine and not args.merge:
        p.error("--machine is required (unless --merge)")
    if args.budget_min is not None and args.budget_min <= 0:
        p.error("--budget-min must be > 0")
    if args.existing:
        args.existing = shutil.which(args.existing) or args.existing
        if not Path(args.existing).is_file():
            p.error(f"--existing: no Python at {args.existing}")
        args.existing = str(Path(args.existing).absolute())
    gp = argparse.ArgumentParser()
    gate.add_arguments(gp)
    gargs = gp.parse_args([*args.gate_args, "--machine", args.machine or "merged"])
    settings = gate.load_settings(REPO / gate.SETTINGS_FILE, args.machine)
    settings = gate.with_overrides(settings, gargs)
    args.factor_ran = settings.factor
    deadline = None if args.budget_min is None else t_start + 60 * args.budget_min

    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if args.merge:
        runs, settings, command, started, load0 = merge(args.merge, args)
    out_dir = Path(args.out_dir).absolute() if args.out_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
        if not args.out:
            args.out = str(out_dir / f"gate-{args.machine}-{started[:10]}.md")
    console = out_dir / "calibrate.log" if out_dir else None

    def say(text: str) -> None:
        print(text, flush=True)
        if console:
            with console.open("a") as f:
                f.write(text + "\n")

    def publish(runs, text, suggested):
        """The final report to --out (or stdout), and the suggested factor to gate.json on request."""
        if args.out:
            Path(args.out).write_text(text)
            say(f"wrote {args.out}")
        else:
            print(text)
        if args.write_settings and runs:
            write_settings(REPO / gate.SETTINGS_FILE, args.machine, settings, suggested,
                           args.out or "(report not saved)")
            say(f"stored factor {suggested} for {args.machine} in {gate.SETTINGS_FILE}")

    if args.merge:
        text, suggested = report(runs, args, settings, command, started, load0)
        text += "\nMerged from " + ", ".join(f"`{m}`" for m in args.merge) + " (int8nax.commands.gate_calibrate --merge).\n"
        publish(runs, text, suggested)
        return 0
    load0 = os.getloadavg()
    args.machine_info = machine_lines(args)
    root = Path(tempfile.mkdtemp(prefix="gate-calibrate-"))
    try:
        clone = Clone(root, args.machine, copy=args.copy)
        for f in args.slowdowns:
            clone.add_slowdown(f)
        log_dir = root / "logs"
        log_dir.mkdir()
        say(f"calibrating {args.machine}: {args.runs} x (A/A" + "".join(f", A/B {f}" for f in args.slowdowns)
            + f"){' in the existing environment ' + args.existing if args.existing else ''}; "
            f"settings: {settings.describe()}; clone {clone.path}; logs {log_dir}")
        per_rep = 1 + len(args.slowdowns)

        def write(runs, command):
            if out_dir:
                pack_logs(log_dir, out_dir / "logs.tar.gz")
                (out_dir / "runs.json").write_text(runs_json(runs, args, settings, command, started, load0))
            if args.out:
                done = len(runs) // per_rep
                note = "" if done == args.runs else f"\n(partial: {done} of {args.runs} repetitions so far)\n"
                Path(args.out).write_text(report(runs, args, settings, command, started, load0)[0] + note)

        if args.existing:
            runs, command = measure_existing(clone, args, settings, log_dir, say, deadline, after_each=write)
        else:
            runs, command = measure(clone, args, log_dir, after_each=write, say=say, deadline=deadline)
        text, suggested = report(runs, args, settings, command, started, load0)
        done = len(runs) // per_rep
        if done < args.runs:
            text += f"\n(stopped by --budget-min {args.budget_min}: {done} of {args.runs} repetitions)\n"
        if out_dir:
            (out_dir / "runs.json").write_text(runs_json(runs, args, settings, command, started, load0))
        publish(runs, text, suggested)
    finally:
        if out_dir and (root / "logs").is_dir():
            pack_logs(root / "logs", out_dir / "logs.tar.gz")
        if args.keep:
            say(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0
