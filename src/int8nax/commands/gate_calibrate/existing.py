"""The calibration in asv's existing environment (--existing; the package docstring says more): each
commit's own sources on the path, `asv run` per round, the rounds interleaved here as `asv
continuous --interleave-rounds` would, and the verdict of each pair by asv's rule."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .. import gate
from .points import Run, flagged, load_points
from .sandbox import REPO, Clone, shlex_join


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
    """The --existing experiment (package docstring): `args.runs` repetitions, each measuring every
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
