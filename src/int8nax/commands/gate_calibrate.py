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

    python -m int8nax.commands.gate_calibrate --machine cpu-2core --runs 10 --slowdowns 1.2,1.1 \
        --out docs/results/gate-cpu-2core.md [--write-settings]

Runs anywhere asv runs (a CPU box, an H200 with asv.cuda.conf.json, an M5 with
asv.m5.conf.json); it needs asv and virtualenv in this Python and network for the first
environment (or a pip cache / wheelhouse).

--existing [PYTHON] is the variant for a machine without network or package index (the lent
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

from . import gate

REPO = Path(__file__).resolve().parents[3]
"""The checkout this module runs from (src/int8nax/ two levels down): the calibration clones it."""

PLANT_TARGET = "src/int8nax/backends/__init__.py"
PLANT = '''

# --- Planted by int8nax.commands.gate_calibrate: a slowdown of {factor}x of int8nax's GEMM and W8A8 ---
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
    benchmark processes (asv 0.6.6 drops it otherwise) less its entries that hold an int8nax
    package (a checkout's src/, relative or not, would shadow the commit asv built: a planted
    slowdown then measured nothing), and a git identity for the commits."""
    email = who.replace(" ", "-") + "@int8nax.invalid"
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and not (Path(p) / "int8nax" / "__init__.py").is_file()]
    return {
        **os.environ,
        "HOME": str(home),
        "PIP_CACHE_DIR": os.environ.get("PIP_CACHE_DIR", str(Path.home() / ".cache" / "pip")),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
        "ASV_PYTHONPATH": os.pathsep.join(kept),
        "GIT_AUTHOR_NAME": who, "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": who, "GIT_COMMITTER_EMAIL": email,
    }


COPY_LEFT_OUT = shutil.ignore_patterns(".git", ".venv", ".asv", ".pytest_cache", ".hypothesis", "build", "dist",
                                       "__pycache__", "node_modules", "*.egg-info")
"""What a copy of a working tree without git history leaves out (mostly .gitignore's list)."""


def has_history(repo: Path) -> bool:
    """Whether `repo` is a git checkout with a HEAD commit (a device's copy of the working
    tree is not: it holds the files only)."""
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "-q", "HEAD^{commit}"],
                          capture_output=True, text=True).returncode == 0 and (repo / ".git").exists()


class Clone:
    """A clone of `source`'s committed HEAD (default REPO) with a private HOME, a fixed asv
    machine, and the commits A, A' and B_f. A `source` without git history (the copy of the
    working tree a GPU box gets) is copied and committed instead: A is then that copy."""

    def __init__(self, root: Path, machine: str, source: Path = REPO, copy: bool = False):
        self.root = root
        self.path = root / "int8nax"
        home = root / "home"
        home.mkdir()
        self.env = sandbox_env(home, "gate calibration")
        self.copied = copy or not has_history(source)
        if self.copied:
            shutil.copytree(source, self.path, ignore=COPY_LEFT_OUT, symlinks=True)
            self.git("init", "-q")
            self.git("add", "-A")
            self.git("commit", "-q", "-m", "A: a copy of the working tree (no git history there)")
        else:
            self.git("clone", "-q", "--no-hardlinks", str(source), str(self.path), cwd=root)
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

    def tree(self, commit: str) -> Path:
        """A worktree of the clone at `commit` (detached), made once: that commit's own sources."""
        path = self.root / "trees" / commit[:12]
        if not path.is_dir():
            path.parent.mkdir(exist_ok=True)
            self.git("worktree", "add", "-q", "--detach", str(path), commit)
        return path

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
    command = [sys.executable, str(clone.path / "src/int8nax/commands/gate.py"), "--config",
               str(clone.path / args.config), "--machine", args.machine, *args.gate_args, clone.base, head]
    t0 = time.monotonic()
    result = subprocess.run(command, cwd=clone.path, env=clone.env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    (log_dir / f"{label}.log").write_text(result.stdout + result.stderr)
    return result.returncode, seconds, shlex_join(command)


def shlex_join(command) -> str:
    import shlex

    return shlex.join(str(c) for c in command)


def measure(clone: Clone, args, log_dir: Path, after_each=None, say=print,
            deadline: float | None = None) -> tuple[list[Run], str]:
    """Run the gate on every pair `args.runs` times; `after_each(runs, command)` is called after
    each repetition (the report is rewritten then, so an interrupted calibration keeps its data).
    A repetition that the longest one so far says would end past `deadline` is not started."""
    pairs = [("A/A", 1.0, clone.same)] + [(f"A/B {f}", f, clone.slow[f]) for f in args.slowdowns]
    runs: list[Run] = []
    command = ""
    results_dir = clone.path / ".asv" / "results" / args.machine
    durations: list[float] = []
    for r in range(args.runs):
        if deadline is not None and durations and time.monotonic() + max(durations) > deadline:
            say(f"budget: {r} repetition(s) done; another would end past --budget-min {args.budget_min}")
            break
        t0 = time.monotonic()
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
            say(f"[{time.strftime('%H:%M:%S')}] {label}: exit {status}, {seconds / 60:.1f} min, "
                f"load {run.load[0]:.2f}")
        durations.append(time.monotonic() - t0)
        if after_each:
            after_each(runs, command)
    return runs, command


# --- the existing-environment variant (--existing) ----------------------------------------------


@dataclass(frozen=True)
class Commit:
    """One commit measured in a repetition: its label ("A", "A'", "B 1.2"), planted factor, hash."""

    label: str
    planted: float
    sha: str


def commits_of(clone: Clone, slowdowns: list[float]) -> list[Commit]:
    return ([Commit("A", 1.0, clone.base), Commit("A'", 1.0, clone.same)]
            + [Commit(f"B {f}", f, clone.slow[f]) for f in slowdowns])


def round_orders(commits: list, repetition: int, rounds: int) -> list[list]:
    """The order of the commits in each round of repetition `repetition` (0-based): rotated by
    one every round, counting on across repetitions, so that over len(commits) rounds every
    commit runs once in every position (a slow or fast spell of the machine, or the first call
    after a pause, does not always fall on the same commit). With two commits this alternates
    as asv continuous --interleave-rounds does."""
    n = len(commits)
    orders = []
    for r in range(rounds):
        k = (repetition * rounds + r) % n
        orders.append(list(commits[k:]) + list(commits[:k]))
    return orders


def _method(name: str) -> str:
    """A benchmark's method and parameters: "track_x((16, 512, 512))" of "bench_ratio.Cls.track_x((16, 512, 512))"
    (a parameter may hold dots: "('qwen2.5-0.5b', 1)")."""
    head, paren, params = name.partition("(")
    return head.rsplit(".", 1)[-1] + paren + params


def repetition_pairs(commits: list[Commit]) -> list[tuple[str, float, Commit, Commit]]:
    """(kind, planted, base, head) of each comparison a repetition yields: A/A (A, A') and one
    A/B per planted factor (A, B_f), every one against the same samples of A."""
    base, same, *slow = commits
    return [("A/A", 1.0, base, same)] + [(f"A/B {c.planted}", c.planted, base, c) for c in slow]


def pair_status(ok: dict[str, bool], base: Commit, head: Commit, base_points: dict, head_points: dict,
                factor: float) -> int:
    """The gate's exit status for one pair of a repetition: 2 when an asv call of either commit
    failed or no gated benchmark was measured at both, else 1 when asv's rule flags any gated
    benchmark as worse at `factor` (what makes asv continuous print PERFORMANCE DECREASED), else 0."""
    names = set(base_points) & set(head_points)
    if not (ok.get(base.label) and ok.get(head.label)) or not names:
        return gate.UNMEASURED
    if any(flagged(base_points[n], head_points[n], factor)[2] for n in names):
        return gate.REGRESSION
    return gate.QUIET


def existing_command(settings: gate.Settings, commit: str, *, config: str, machine: str, python: str,
                     launcher: Path, append: bool) -> list[str]:
    """`asv run` of one round of one commit in the existing environment `python`, with the gate's
    settings (gate.continuous_command's options, minus what asv run does not take)."""
    asv = [str(launcher)] if settings.launch == "persistent" else ["-m", "asv"]
    command = [sys.executable, *asv, "run", "--config", config, "-E", f"existing:{python}",
               "--set-commit-hash", commit, "--machine", machine, "--show-stderr",
               "-a", "rounds=1", "-a", f"repeat={settings.repeat}",
               "--append-samples" if append else "--record-samples"]
    if settings.launch == "forkserver":
        command += ["--launch-method", "forkserver"]
    if settings.cpu_affinity:
        command += ["--cpu-affinity", settings.cpu_affinity]
    for regex in settings.bench:
        command += ["--bench", regex]
    return command


def commit_env(clone: Clone, settings: gate.Settings, tree: Path) -> dict[str, str]:
    """The clone's environment with the thread pins, and `tree`'s src/ first on PYTHONPATH (and
    ASV_PYTHONPATH, which asv 0.6.6 passes to benchmark processes instead), in place of this
    checkout's."""
    mine = (REPO / "src").resolve()
    kept = [p for p in clone.env.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != mine]
    path = os.pathsep.join([str(tree / "src"), *kept])
    return {**gate.benchmark_env(settings, clone.env), "PYTHONPATH": path, "ASV_PYTHONPATH": path}


def run_logged(command: list[str], env: dict, cwd: Path, log: Path, timeout: float | None) -> tuple[int, float, str]:
    """(exit status, seconds, output) of `command`, its output also written to `log`. Past
    `timeout` its process group gets SIGINT (asv then closes its benchmark worker, which has a
    process group of its own), and SIGKILL 20 s later: status -9."""
    import signal

    t0 = time.monotonic()
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", start_new_session=True) as proc:
        try:
            out, _ = proc.communicate(timeout=timeout)
            status = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                out, _ = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
            out = (out or "") + f"\ngate_calibrate: stopped after {timeout:.0f} s (--budget-min)\n"
            status = -9
    log.write_text(shlex_join(command) + "\n\n" + out)
    return status, time.monotonic() - t0, out


def measure_existing(clone: Clone, args, settings: gate.Settings, log_dir: Path, say, deadline: float | None,
                     after_each=None) -> tuple[list[Run], str]:
    """The --existing experiment (module docstring): `args.runs` repetitions, each measuring every
    commit in `settings.rounds` interleaved rounds, then one Run per pair. Stops before a
    repetition that the longest one so far says would end past `deadline` (time.monotonic()),
    and abandons one that reaches it; `after_each(runs, command)` follows each complete one."""
    commits = commits_of(clone, args.slowdowns)
    results_dir = clone.path / ".asv" / "results" / args.machine
    launcher = clone.path / "src" / "int8nax" / "commands" / "asv_persistent.py"
    config = str(clone.path / args.config)
    envs = {c.label: commit_env(clone, settings, clone.tree(c.sha)) for c in commits}
    runs: list[Run] = []
    durations: list[float] = []
    command = ""
    for rep in range(args.runs):
        if deadline is not None and durations and time.monotonic() + max(durations) > deadline:
            say(f"budget: {rep} repetition(s) done; another (up to {max(durations) / 60:.1f} min) would end "
                f"past --budget-min {args.budget_min}, so the calibration stops here")
            break
        for c in commits:  # fresh samples for every commit in every repetition
            for path in results_dir.glob(f"{c.sha[:8]}-*.json"):
                path.unlink()
        t0 = time.monotonic()
        ok = {c.label: True for c in commits}
        seconds = {c.label: 0.0 for c in commits}
        complete = True
        for r, order in enumerate(round_orders(commits, rep, settings.rounds)):
            for c in order:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    complete = False
                    break
                command_list = existing_command(settings, c.sha, config=config, machine=args.machine,
                                                python=args.existing, launcher=launcher, append=r > 0)
                command = shlex_join(command_list)
                label = f"rep{rep + 1:02d}-round{r + 1}-{c.label.replace(chr(39), 'p').replace(' ', '-')}"
                status, secs, out = run_logged(command_list, envs[c.label], clone.path, log_dir / f"{label}.log", left)
                seconds[c.label] += secs
                failed = status != 0 or any(gate.FAILURE_LINE.search(line) for line in out.splitlines())
                ok[c.label] = ok[c.label] and not failed
                say(f"[{time.strftime('%H:%M:%S')}] {label}: asv exit {status}, {secs:.0f} s"
                    + (" FAILED (see its log)" if failed else ""))
                if status == -9:
                    complete = False
                    break
            if not complete:
                break
            if rep == 0 and r == 0:
                first = time.monotonic() - t0
                say(f"first round: {first:.0f} s, so a repetition of {settings.rounds} rounds takes about "
                    f"{first * settings.rounds / 60:.1f} min"
                    + ("" if deadline is None else f"; {(deadline - time.monotonic()) / 60:.1f} min of the budget left"))
        if not complete:
            say(f"budget: repetition {rep + 1} reached --budget-min {args.budget_min} before its last round; "
                "it is left out, the report covers the complete ones")
            break
        durations.append(time.monotonic() - t0)
        points = {c.label: load_points(results_dir, c.sha) for c in commits}
        load = os.getloadavg()
        for kind, planted, base, head in repetition_pairs(commits):
            run = Run(kind, planted, pair_status(ok, base, head, points[base.label], points[head.label],
                                                 args.factor_ran),
                      seconds[base.label] + seconds[head.label], load)
            for name in sorted(set(points[base.label]) & set(points[head.label])):
                ratio, significant, _ = flagged(points[base.label][name], points[head.label][name], args.factor_ran)
                run.points[name] = (ratio, significant)
            run.raw = (points[base.label], points[head.label])
            runs.append(run)
            say(f"  {kind}: exit {run.status}, " + ", ".join(
                f"{_method(n)} {ratio:.3f}{'*' if sig else ''}" for n, (ratio, sig) in run.points.items()))
        say(f"repetition {rep + 1} of {args.runs}: {durations[-1] / 60:.1f} min")
        if after_each:
            after_each(runs, command)
    args.repetition_minutes = [d / 60 for d in durations]
    return runs, command


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
    10-minute device call), for one report; `args` takes their machine, variant and factors."""
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
    """What the --existing variant is, for the report."""
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
        count = {s: sum(r.status == s for r in rs) for s in (0, 1, 2)}
        minutes = [r.seconds / 60 for r in rs]
        lines.append(f"| {kind} | {len(rs)} | {count[0]} | {count[1]} | {count[2]} | "
                     f"{statistics.median(minutes):.1f}, {max(minutes):.1f} |")
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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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


if __name__ == "__main__":
    raise SystemExit(main())
