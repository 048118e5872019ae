"""Calibrate the regression gate on this machine: how often `int8nax gate` cries wolf, and how
often it catches a slowdown of known size.

In a temporary clone of the committed HEAD it makes
    A      HEAD itself (the base of every comparison)
    A'     an empty commit on top of A: the same compute code at another commit (A/A)
    B_f    A plus a planted slowdown f (PLANT below: every int8nax backend's int8_matmul and
           w8a8_linear spend f times their own measured time; the extra is a busy wait)
and runs the gate `--runs` times on each pair (A, A') and (A, B_f), interleaved, with this
machine's settings from benchmarks/gate.json (or the overrides given). From each run it keeps
the gate's exit status and wall time, and from asv's result files every gated benchmark's
ratio (head median / base median) and asv's significance test, so that the false-alarm and
detection rates can be given per benchmark and for other factors than the one run.

    python tools/gate_calibrate.py --machine cpu-2core --runs 10 --slowdowns 1.2,1.1 \
        --out docs/results/gate-cpu-2core-YYYY-MM-DD.md [--write-settings]

Runs anywhere asv runs (a CPU box, an H200 with asv.cuda.conf.json, an M5 with
asv.m5.conf.json); it needs asv and virtualenv in this Python and network for the first
environment (or a pip cache / wheelhouse). The report states the date, the machine, the load
during the runs, the settings and the command; --write-settings stores the settings and the
suggested factor for this machine in benchmarks/gate.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
from int8nax import gate  # noqa: E402

PLANT_TARGET = "src/int8nax/backends/__init__.py"
PLANT = '''

# --- Planted by tools/gate_calibrate.py: a slowdown of {factor}x of int8nax's GEMM and W8A8 ---
# Every backend's int8_matmul and w8a8_linear waits, after computing, for ({factor} - 1) times
# the time the call took, whichever backend and whichever CPU path runs.
import time as _planted_time

_PLANTED_FACTOR = {factor}
_planted_get = get


def _planted(method):
    def slowed(*args, **kwargs):
        start = _planted_time.perf_counter()
        out = method(*args, **kwargs)
        mx.eval(out)
        end = _planted_time.perf_counter()
        until = end + (_PLANTED_FACTOR - 1.0) * (end - start)
        while _planted_time.perf_counter() < until:
            pass
        return out
    return slowed


@lru_cache(maxsize=None)
def get(name):
    backend = _planted_get(name)
    if backend is not None and "int8_matmul" not in vars(backend):
        for method in ("int8_matmul", "w8a8_linear"):
            setattr(backend, method, _planted(getattr(backend, method)))
    return backend
'''


def plant(clone: Path, factor: float) -> None:
    """Append the planted slowdown to the clone's backend registry (not committed)."""
    target = clone / PLANT_TARGET
    text = target.read_text()
    if "def get(name" not in text or "lru_cache" not in text:
        raise SystemExit(f"{PLANT_TARGET} no longer defines get() with lru_cache: update PLANT")
    target.write_text(text + PLANT.format(factor=factor))


# --- the clone ------------------------------------------------------------------------------


def sandbox_env(home: Path, who: str) -> dict:
    """The environment for asv in a throwaway clone: a private HOME (asv's machine file), pip's
    cache kept, virtualenv finding this interpreter's python3.X on PATH, PYTHONPATH kept in
    benchmark processes (asv 0.6.6 drops it otherwise), and a git identity for the commits."""
    email = who.replace(" ", "-") + "@int8nax.invalid"
    return {
        **os.environ,
        "HOME": str(home),
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "ASV_PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "GIT_AUTHOR_NAME": who, "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": who, "GIT_COMMITTER_EMAIL": email,
    }


class Clone:
    """A clone of REPO's committed HEAD with a private HOME, a fixed asv machine, and the
    commits A, A' and B_f."""

    def __init__(self, root: Path, machine: str):
        self.root = root
        self.path = root / "int8nax"
        home = root / "home"
        home.mkdir()
        self.env = sandbox_env(home, "gate calibration")
        self.git("clone", "-q", "--no-hardlinks", str(REPO), str(self.path), cwd=root)
        self.git("checkout", "-q", "-B", "main")
        self.run(sys.executable, str(self.path / ".github/scripts/asv_machine.py"), "--name", machine)
        self.base = self.head()
        self.git("commit", "-q", "--allow-empty", "-m", "A/A: no change")
        self.same = self.head()
        self.slow: dict[float, str] = {}

    def run(self, *args, cwd=None):
        result = subprocess.run(args, cwd=cwd or self.path, env=self.env, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stdout}{result.stderr}")
        return result.stdout

    def git(self, *args, cwd=None):
        return self.run("git", *args, cwd=cwd)

    def head(self) -> str:
        return self.git("rev-parse", "HEAD").strip()

    def add_slowdown(self, factor: float) -> str:
        self.git("checkout", "-q", "-B", f"slow-{factor}", self.base)
        plant(self.path, factor)
        self.git("commit", "-q", "-am", f"A/B: planted {factor}x slowdown")
        self.slow[factor] = self.head()
        self.git("checkout", "-q", "main")
        return self.slow[factor]


# --- reading asv's results ------------------------------------------------------------------


@dataclass
class Point:
    """One benchmark at one parameter combination in one result file."""

    value: float
    stats: dict | None
    samples: list | None


def load_points(results_dir: Path, commit: str) -> dict[str, Point]:
    """'name(params)' -> Point for every measured benchmark of `commit` in `results_dir`."""
    from asv.results import Results

    points: dict[str, Point] = {}
    for path in sorted(results_dir.glob(f"{commit[:8]}-*.json")):
        res = Results.load(str(path))
        for key in res.get_all_result_keys():
            params = res.get_result_params(key)
            values = res.get_result_value(key, params)
            stats = res.get_result_stats(key, params)
            samples = res.get_result_samples(key, params)
            combos = list(itertools.product(*params)) if params else [()]
            if not params:
                values, stats, samples = [values], [stats], [samples]
            for combo, v, st, sa in zip(combos, values, stats, samples):
                if v is None or (isinstance(v, float) and math.isnan(v)):
                    continue
                name = f"{key}({', '.join(combo)})" if combo else key
                points[name] = Point(v, st, sa)
    return points


def flagged(base: Point, head: Point, factor: float) -> tuple[float, bool, bool]:
    """(ratio head/base, significant by asv's test, flagged as worse by asv's rule at `factor`)."""
    from asv import _stats
    from asv.commands.compare import _is_result_better

    ratio = head.value / base.value
    significant = True
    if base.stats and head.stats and base.samples is not None and head.samples is not None:
        significant = _stats.is_different(base.samples, head.samples, base.stats, head.stats)
    worse = _is_result_better(base.value, head.value, (base.stats, base.samples),
                              (head.stats, head.samples), factor)
    return ratio, significant, worse


@dataclass
class Run:
    kind: str  # "A/A" or "A/B 1.2"
    planted: float  # 1.0 for A/A
    status: int
    seconds: float
    load: tuple[float, float, float]
    points: dict[str, tuple[float, bool]] = field(default_factory=dict)  # name -> (ratio, significant)
    raw: tuple[dict, dict] = ({}, {})  # (base points, head points)


# --- the experiment -------------------------------------------------------------------------


def gate_run(clone: Clone, head: str, args, log_dir: Path, label: str) -> tuple[int, float, str]:
    command = [sys.executable, str(clone.path / "src/int8nax/gate.py"), "--config",
               str(clone.path / args.config), "--machine", args.machine, *args.gate_args, clone.base, head]
    t0 = time.monotonic()
    result = subprocess.run(command, cwd=clone.path, env=clone.env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    (log_dir / f"{label}.log").write_text(result.stdout + result.stderr)
    return result.returncode, seconds, shlex_join(command)


def shlex_join(command) -> str:
    import shlex

    return shlex.join(str(c) for c in command)


def measure(clone: Clone, args, log_dir: Path, after_each=None) -> tuple[list[Run], str]:
    """Run the gate on every pair `args.runs` times; `after_each(runs, command)` is called after
    each repetition (the report is rewritten then, so an interrupted calibration keeps its data)."""
    pairs = [("A/A", 1.0, clone.same)] + [(f"A/B {f}", f, clone.slow[f]) for f in args.slowdowns]
    runs: list[Run] = []
    command = ""
    results_dir = clone.path / ".asv" / "results" / args.machine
    for r in range(args.runs):
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
            print(f"[{time.strftime('%H:%M:%S')}] {label}: exit {status}, {seconds / 60:.1f} min, "
                  f"load {run.load[0]:.2f}", flush=True)
        if after_each:
            after_each(runs, command)
    return runs, command


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
            f"- commit calibrated: `{subprocess.run(['git', '-C', str(REPO), 'rev-parse', 'HEAD'], capture_output=True, text=True).stdout.strip()}`"]


def report(runs: list[Run], args, settings: gate.Settings, command: str, started: str, load0) -> tuple[str, float]:
    aa = [r for r in runs if r.kind == "A/A"]
    names = sorted({n for r in runs for n in r.points})
    factor = settings.factor
    suggested, sigma, worst = suggest_factor(aa, names)
    lines = [f"# Gate calibration on `{args.machine}`, {started}", "",
             f"`python tools/gate_calibrate.py {' '.join(args.argv)}`", ""]
    lines += machine_lines(args)
    lines += [f"- load average (1, 5, 15 min) at the start: {', '.join(f'{x:.2f}' for x in load0)}; "
              f"at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}; during the runs (1 min, at each "
              f"run's end): {min(r.load[0] for r in runs):.2f} to {max(r.load[0] for r in runs):.2f}",
              f"- gate settings: {settings.describe()} (from {settings.source})",
              f"- gate command of each run: `{command}`",
              "- planted slowdown: every backend's int8_matmul and w8a8_linear wait (f - 1) times their own "
              "time after computing (tools/gate_calibrate.py PLANT)", ""]
    lines += ["## Gate verdicts", "",
              "| pair | runs | exit 0 (quiet) | exit 1 (regression) | exit 2 (could not measure) | minutes per run (median, max) |",
              "|---|---|---|---|---|---|"]
    kinds = sorted({r.kind for r in runs}, key=lambda k: (k != "A/A", k))
    for kind in kinds:
        rs = [r for r in runs if r.kind == kind]
        count = {s: sum(r.status == s for r in rs) for s in (0, 1, 2)}
        minutes = [r.seconds / 60 for r in rs]
        lines.append(f"| {kind} | {len(rs)} | {count[0]} | {count[1]} | {count[2]} | "
                     f"{statistics.median(minutes):.1f}, {max(minutes):.1f} |")
    first = runs[0].seconds / 60 if runs else 0
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
            rs = [r for r in runs if r.kind == kind and r.status != 2]
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


def parse_floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--machine", required=True, help="asv machine name (and settings entry) to calibrate")
    p.add_argument("--config", default="asv.conf.json", help="asv configuration, relative to the repo")
    p.add_argument("--runs", type=int, default=10, help="repetitions of each pair (10)")
    p.add_argument("--slowdowns", type=parse_floats, default=[1.2], help="planted factors, comma-separated (1.2)")
    p.add_argument("--factors", type=parse_floats, default=[1.05, 1.08, 1.10, 1.15],
                   help="factors to evaluate offline on the same samples")
    p.add_argument("--out", help="markdown report (default: print it)")
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
    gp = argparse.ArgumentParser()
    gate.add_arguments(gp)
    gargs = gp.parse_args([*args.gate_args, "--machine", args.machine])
    settings = gate.load_settings(REPO / gate.SETTINGS_FILE, args.machine)
    settings = gate.with_overrides(settings, gargs)
    args.factor_ran = settings.factor

    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load0 = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="gate-calibrate-"))
    try:
        clone = Clone(root, args.machine)
        for f in args.slowdowns:
            clone.add_slowdown(f)
        log_dir = root / "logs"
        log_dir.mkdir()
        print(f"calibrating {args.machine}: {args.runs} x (A/A" + "".join(f", A/B {f}" for f in args.slowdowns)
              + f"); clone {clone.path}; logs {log_dir}", flush=True)
        def write(runs, command):
            if args.out:
                done = len(runs) // (1 + len(args.slowdowns))
                note = "" if done == args.runs else f"\n(partial: {done} of {args.runs} repetitions so far)\n"
                Path(args.out).write_text(report(runs, args, settings, command, started, load0)[0] + note)

        runs, command = measure(clone, args, log_dir, after_each=write)
        text, suggested = report(runs, args, settings, command, started, load0)
        if args.out:
            Path(args.out).write_text(text)
            print(f"wrote {args.out}")
        else:
            print(text)
        if args.write_settings:
            write_settings(REPO / gate.SETTINGS_FILE, args.machine, settings, suggested,
                           args.out or "(report not saved)")
            print(f"stored factor {suggested} for {args.machine} in {gate.SETTINGS_FILE}")
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
