"""`int8nax gate [BASE] [HEAD]`: the regression gate, `asv continuous` with this machine's
calibrated settings and an exit status that means one thing each.

    0  quiet: no gated benchmark got slower beyond the factor with statistical significance
    1  regression: at least one did ("PERFORMANCE DECREASED"), and nothing failed
    2  could not measure: a benchmark failed or timed out, a commit is unknown, asv is missing
       or stopped with a usage error (asv itself uses 1 for those too, and 2 without a table)

The comparison table (`asv compare` of the two commits, the gated benchmarks only) is printed
whatever the outcome, because asv continuous prints none when a benchmark failed and only the
changed rows otherwise.

Settings (benchmarks/gate.json, one entry per asv machine name plus "default"; written by
int8nax.commands.gate_calibrate, which measures false alarms and detection on the machine):
    factor        asv's --factor: the slowdown that counts, derived from the measured noise
    rounds        asv rounds, interleaved between the two commits (each round a new process)
    repeat        asv's repeat per round: N, or "(min,max,seconds)"; the ratio benchmarks
                  (track_*_ratio, which sample themselves) get it as INT8NAX_RATIO_REPEAT
    bench         the gated benchmarks (asv -b regular expressions): the ratio benchmarks
                  (unitless, lower is better) or time_ ones, never the track_*_tops
                  throughputs (asv counts a higher value as worse)
    threads       BLAS/OpenMP threads in the benchmark processes (OMP/OPENBLAS/MKL/...), and
                  int8nax's CPU engine threads (INT8NAX_CPU_THREADS)
    cpu_affinity  asv's --cpu-affinity for the benchmark processes ("0", "0-1"), or null
    launch        how benchmark processes start: "spawn" (asv's default, a new Python per
                  benchmark and round), "forkserver", or "persistent" (one worker per commit
                  and round, src/int8nax/commands/asv_persistent.py: for GPU boxes, where a new
                  process costs ~10 s and forkserver cannot be used under CUDA)

This module uses the standard library only, so CI can run it as a script
(`python src/int8nax/commands/gate.py ...`) from a virtualenv that holds asv but not int8nax or MLX.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

QUIET, REGRESSION, UNMEASURED = 0, 1, 2
SETTINGS_FILE = Path("benchmarks") / "gate.json"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS",
                    # int8nax's CPU engine (onnxruntime) starts one thread per core otherwise, two
                    # on the CPU the gate pins to, which gives false alarms in A/A runs
                    # (docs/results/gate-cpu-2core.md)
                    "INT8NAX_CPU_THREADS")

# asv marks a failed benchmark with the word "failed" ("... time_x   failed", "setup_cache
# failed", "Failed to build the project"); --show-stderr prints the benchmark's traceback.
FAILURE_LINE = re.compile(r"\bfailed\b|Traceback \(most recent call last\)", re.IGNORECASE)
REGRESSION_MARK = "PERFORMANCE DECREASED"
RATIO_REPEAT_ENV = "INT8NAX_RATIO_REPEAT"  # read by benchmarks/bench_ratio.py
MAX_QUOTED_LINES = 20


class GateError(Exception):
    """The gate cannot run as asked (bad settings file, unknown commit...): exit status 2."""


@dataclass(frozen=True)
class Settings:
    """One machine's gate settings (see the module docstring), and where they came from."""

    # Without a settings file: the 2-core CPU box's calibrated settings (benchmarks/gate.json).
    factor: float = 1.08
    rounds: int = 4
    repeat: str = "(5,50,0.5)"
    bench: tuple[str, ...] = (r"^bench_ratio\.\w+\.track_\w+_ratio",)
    threads: int | None = 1
    cpu_affinity: str | None = "1"
    launch: str = "spawn"
    source: str = "built-in defaults"
    note: str = ""

    def describe(self) -> str:
        parts = [f"factor {self.factor}", f"rounds {self.rounds}", f"repeat {self.repeat}",
                 f"threads {self.threads if self.threads is not None else 'unset'}",
                 f"cpu_affinity {self.cpu_affinity or 'none'}", f"launch {self.launch}",
                 "bench " + " ".join(self.bench)]
        return ", ".join(parts)


KEYS = {"factor": (int, float), "rounds": int, "repeat": str, "bench": list, "threads": (int, type(None)),
        "cpu_affinity": (str, type(None)), "launch": str}
LAUNCH_METHODS = ("spawn", "forkserver", "persistent")

REPEAT_FORMS = "N (a whole number >= 1) or (min,max,seconds) with whole 1 <= min <= max and seconds >= 0"
AFFINITY_FORMS = "CPU numbers and ranges, as asv's --cpu-affinity takes them ('1', '0,2', '0-3', '0-1,4')"


def repeat_rule(text: str) -> tuple[int, int, float]:
    """(least, most, seconds) of a repeat the gate hands to asv's -a repeat (an int, or three
    comma-separated values int,int,float, parentheses optional) and to the ratio benchmarks
    (benchmarks/bench_ratio.py reads INT8NAX_RATIO_REPEAT with this rule), else ValueError.
    asv alone would take 0 or a negative N, which would fail the ratio benchmarks mid-run,
    after the build."""
    parts = [p.strip() for p in text.strip().removeprefix("(").removesuffix(")").split(",")]
    try:
        if len(parts) == 1 and parts[0].isdecimal() and int(parts[0]) >= 1:
            return int(parts[0]), int(parts[0]), 0.0
        if len(parts) == 3 and parts[0].isdecimal() and parts[1].isdecimal():
            least, most, seconds = int(parts[0]), int(parts[1]), float(parts[2])
            if 1 <= least <= most and 0 <= seconds < float("inf"):
                return least, most, seconds
    except ValueError:
        pass
    raise ValueError(f"expected {REPEAT_FORMS}, got {text!r}")


def check_repeat(text: str) -> str:
    """`text` where repeat_rule takes it, else its ValueError."""
    repeat_rule(text)
    return text


def affinity_cpus(text: str, forms: str = AFFINITY_FORMS) -> list[int]:
    """The CPUs an asv --cpu-affinity value names ("1", "0,2", "0-3"), or ValueError saying
    `forms` were expected. asv reads the same form (taskset's list form is this one too); a
    range must run upwards, since asv would take "3-1" as no CPU at all."""
    cpus = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.strip().isdecimal() or (dash and not last.strip().isdecimal()):
            raise ValueError(f"expected {forms}, got {text!r}")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise ValueError(f"expected {forms}, got {text!r}, whose range {part.strip()!r} runs downwards")
        cpus.extend(range(low, high + 1))
    return cpus


def _check_entry(entry: dict, where: str) -> dict:
    if not isinstance(entry, dict):
        raise GateError(f"{where}: expected an object of settings, got {type(entry).__name__}")
    out = {}
    for key, value in entry.items():
        if key.startswith("//") or key in ("calibration", "note"):
            continue
        if key not in KEYS:
            raise GateError(f"{where}: unknown setting {key!r}; expected one of {', '.join(KEYS)}")
        if not isinstance(value, KEYS[key]) or isinstance(value, bool):
            raise GateError(f"{where}: {key!r} has the wrong type ({type(value).__name__})")
        out[key] = tuple(value) if key == "bench" else value
    if "factor" in out and not out["factor"] > 1.0:
        raise GateError(f"{where}: 'factor' must be > 1, got {out['factor']}")
    if "rounds" in out and out["rounds"] < 1:
        raise GateError(f"{where}: 'rounds' must be >= 1, got {out['rounds']}")
    if "launch" in out and out["launch"] not in LAUNCH_METHODS:
        raise GateError(f"{where}: 'launch' takes one of {', '.join(LAUNCH_METHODS)}, got {out['launch']!r}")
    # The same forms as on the command line: asv gets them as they are written.
    for key, check in (("repeat", check_repeat), ("cpu_affinity", affinity_cpus)):
        if out.get(key) is not None:
            try:
                check(out[key])
            except ValueError as exc:
                raise GateError(f"{where}: {key!r}: {exc}") from None
    return out


def load_settings(path: Path, machine: str) -> Settings:
    """The settings for asv machine `machine`: its entry in `path` laid over the file's
    "default" entry, laid over the built-in defaults. A missing file gives the built-ins."""
    if not path.is_file():
        return Settings(source=f"built-in defaults ({path} not found)")
    try:
        document = json.loads(path.read_text())
        machines = document["machines"]
    except (ValueError, KeyError, TypeError) as exc:
        raise GateError(f"{path}: expected JSON with a 'machines' object ({exc})") from None
    merged = _check_entry(machines.get("default", {}), f"{path} machines.default")
    chosen = "default"
    if machine in machines:
        merged.update(_check_entry(machines[machine], f"{path} machines.{machine}"))
        chosen = machine
    entry = machines.get(chosen, {})
    note = entry.get("calibration") or entry.get("note") or ""
    return replace(Settings(), **merged, source=f"{path} [{chosen}]", note=note)


def with_overrides(settings: Settings, args) -> Settings:
    """`settings` with the command line's --factor, --rounds, --repeat, --bench, --cpu-affinity."""
    affinity = getattr(args, "cpu_affinity", None)
    overrides = {k: v for k, v in (("factor", args.factor), ("rounds", args.rounds), ("repeat", args.repeat),
                                   ("bench", tuple(args.bench) if args.bench else None),
                                   ("cpu_affinity", affinity)) if v is not None}
    if overrides.get("cpu_affinity") == "none":
        overrides["cpu_affinity"] = None
    if not overrides:
        return settings
    return replace(settings, **overrides, source=settings.source + " + command-line overrides")


def _cpus_exist(affinity: str) -> bool:
    """Whether every CPU named in an asv --cpu-affinity value ("1", "0,2", "0-3") exists here
    (the value's form was checked where it was read: the settings file or --cpu-affinity)."""
    return max(affinity_cpus(affinity)) < (os.cpu_count() or 1)


def asv_machine_name(machine: str | None) -> str:
    """The machine asv will use: `machine`, else this host's entry in ~/.asv-machine.json,
    else its only entry, else the hostname (asv's own rule)."""
    if machine:
        return machine
    host = socket.gethostname()
    try:
        entries = [k for k in json.loads((Path.home() / ".asv-machine.json").read_text()) if k != "version"]
    except (OSError, ValueError):
        return host
    if host in entries or len(entries) != 1:
        return host
    return entries[0]


def benchmark_env(settings: Settings, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for asv and its benchmark processes: the thread pins laid over it, and
    the repeat rule of the ratio benchmarks (benchmarks/bench_ratio.py: they take their own
    samples, so asv's -a repeat does not reach them)."""
    env = dict(os.environ if environ is None else environ)
    env[RATIO_REPEAT_ENV] = settings.repeat
    if settings.threads is not None:
        env.update({name: str(settings.threads) for name in THREAD_VARIABLES})
    return env


def continuous_command(settings: Settings, base: str, head: str, *, config: str, machine: str,
                       python: str = sys.executable, split: bool = False) -> list[str]:
    """The `asv continuous` command line of the gate (base first, then the contender)."""
    if settings.launch == "persistent":
        asv = [str(Path(__file__).resolve().with_name("asv_persistent.py"))]
    else:
        asv = ["-m", "asv"]
    command = [python, *asv, "continuous", "--config", config, "--machine", machine,
               "--factor", str(settings.factor), "--interleave-rounds", "--show-stderr",
               "-a", f"rounds={settings.rounds}", "-a", f"repeat={settings.repeat}"]
    if settings.launch == "forkserver":
        command += ["--launch-method", "forkserver"]
    if settings.cpu_affinity:
        command += ["--cpu-affinity", settings.cpu_affinity]
    if split:
        command.append("--split")
    for regex in settings.bench:
        command += ["--bench", regex]
    return command + [base, head]


def compare_command(settings: Settings, base: str, head: str, *, config: str, machine: str,
                    python: str = sys.executable, split: bool = False) -> list[str]:
    command = [python, "-m", "asv", "compare", "--config", config, "--machine", machine,
               "--factor", str(settings.factor)]
    if split:
        command.append("--split")
    return command + [base, head]


def gated_table(compare_output: str, bench: tuple[str, ...]) -> str:
    """asv compare's output with only the gated benchmarks' rows that hold a result at either
    commit (results of other benchmarks from earlier runs may share the results directory, and
    every machine declares the other profiles' shapes too)."""
    patterns = [re.compile(b) for b in bench]
    kept = []
    for line in compare_output.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and len(cells) >= 5 and cells[-1] and not set(cells[-1]) <= {"-"}:
            name = cells[-1]
            if not name.startswith("Benchmark") and not any(p.search(name) for p in patterns):
                continue
            if cells[1:3] == ["n/a", "n/a"]:  # measured at neither commit (another profile's shape)
                continue
        kept.append(line)
    return "\n".join(kept)


@dataclass(frozen=True)
class Outcome:
    """The gate's verdict: exit status (QUIET, REGRESSION, UNMEASURED), why, and quoted lines."""

    status: int
    reason: str
    evidence: tuple[str, ...] = field(default=())

    @property
    def word(self) -> str:
        return {QUIET: "quiet", REGRESSION: "REGRESSION"}.get(self.status, "COULD NOT MEASURE")


def classify(returncode: int, log: str) -> Outcome:
    """The verdict from `asv continuous`'s exit status and console log (asv 0.6.6: 0 nothing
    worse, 1 "PERFORMANCE DECREASED" or a usage error, 2 a benchmark failed, without a table).
    A failure can also hide behind status 0 or 1 (a benchmark failing at both commits compares
    as n/a), so the log is searched too: a regression is reported only with a clean log."""
    failures = tuple(line.rstrip() for line in log.splitlines() if FAILURE_LINE.search(line))
    if returncode == 2 or failures:
        return Outcome(UNMEASURED, f"A benchmark failed (asv exit status {returncode}, "
                       f"{len(failures)} failure line(s) in its log)", failures[:MAX_QUOTED_LINES])
    if returncode == 1 and REGRESSION_MARK in log:
        return Outcome(REGRESSION, "Performance decreased: a gated benchmark got slower beyond the "
                       "factor, and asv's statistics call the change significant")
    if returncode == 1 and "No information stored about machine" in log:
        return Outcome(UNMEASURED, "asv knows no such machine: record it first (`asv machine --yes`, or "
                       "`python .github/scripts/asv_machine.py --name NAME`) and pass --machine NAME")
    if returncode == 1:
        last = tuple(line for line in log.splitlines() if line.strip())[-MAX_QUOTED_LINES:]
        return Outcome(UNMEASURED, "asv exited with status 1 without reporting a regression: a usage "
                       "error (unknown commit, no machine file, ...)", last)
    if returncode != 0:
        return Outcome(UNMEASURED, f"Unexpected asv exit status {returncode}")
    return Outcome(QUIET, "No benchmark slowed down beyond the factor, and none failed")


VERDICT_LINE = re.compile(r"^int8nax gate: (quiet|REGRESSION|COULD NOT MEASURE) \(exit (\d+)\): (.*)$", re.MULTILINE)


def verdict_line(outcome: Outcome, minutes: float | None = None) -> str:
    """The gate's last line, which .github/scripts/asv_gate.py reads back (VERDICT_LINE)."""
    tail = f"; {minutes:.1f} min" if minutes is not None else ""
    return f"int8nax gate: {outcome.word} (exit {outcome.status}): {outcome.reason}{tail}"


def read_verdict(log: str) -> Outcome | None:
    """The verdict a gate run printed (its last verdict line), or None in a log without one."""
    found = VERDICT_LINE.findall(log)
    if not found:
        return None
    _, status, reason = found[-1]
    return Outcome(int(status), reason)


def resolve_commit(repo: Path, name: str) -> str:
    """The full hash of commit `name` in `repo`; GateError (exit 2) if there is none."""
    result = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0 or not result.stdout.strip():
        hint = " (a shallow clone? fetch with fetch-depth: 0)" if (repo / ".git" / "shallow").exists() else ""
        raise GateError(f"unknown commit {name!r} in {repo}{hint}")
    return result.stdout.strip()


def _run_teed(command: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str]:
    """Run `command`, echoing its output as it comes, and return (exit status, output)."""
    lines = []
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace", bufsize=1) as proc:
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line)
    return proc.returncode, "".join(lines)


def markdown(outcome: Outcome, table: str, settings: Settings, machine: str, base: str, head: str,
             seconds: float) -> str:
    text = [f"### int8nax gate on {machine}: {outcome.word}", "",
            f"{outcome.reason} (exit status {outcome.status}).", "",
            f"Base `{base}`, head `{head}`, {seconds / 60:.1f} min. Settings from {settings.source}: "
            f"{settings.describe()}.", ""]
    if outcome.evidence:
        text += ["```", *outcome.evidence, "```", ""]
    if table.strip():
        text += ["```", table.strip(), "```", ""]
    return "\n".join(text)


def run(args) -> int:
    started = time.monotonic()
    config = Path(args.config).resolve()
    if not config.is_file():
        raise GateError(f"--config: no asv configuration at {config}")
    repo = config.parent
    machine = asv_machine_name(args.machine)
    settings = load_settings(Path(args.settings) if args.settings else repo / SETTINGS_FILE, machine)
    settings = with_overrides(settings, args)
    if settings.cpu_affinity and not _cpus_exist(settings.cpu_affinity):
        print(f"note: this machine has {os.cpu_count()} CPU(s); cpu_affinity {settings.cpu_affinity!r} dropped")
        settings = replace(settings, cpu_affinity=None)
    base = resolve_commit(repo, args.base)
    head = resolve_commit(repo, args.head)
    env = benchmark_env(settings)
    common = dict(config=str(config), machine=machine, python=args.python, split=args.split)
    command = continuous_command(settings, base, head, **common)
    print(f"int8nax gate: {args.base} ({base[:8]}) -> {args.head} ({head[:8]}) on machine {machine!r}")
    if base == head:
        # Not an error (a fresh clone on main gets here by default), but a quiet verdict then
        # says nothing about any change.
        print(f"warning: {args.base} and {args.head} are the same commit ({base[:8]}): asv compares it with "
              "itself, so nothing can differ (name an older BASE, e.g. `int8nax gate main~1`)")
    print(f"settings from {settings.source}: {settings.describe()}")
    if settings.note:
        print(f"calibration: {settings.note}")
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--", "src"],
                           capture_output=True, text=True, check=False).stdout.strip()
    if dirty:
        print("note: uncommitted changes under src/ are not measured (asv builds the two commits; "
              "the benchmarks and these settings come from the working tree)")
    pins = " ".join(f"{v}={env[v]}" for v in THREAD_VARIABLES if settings.threads is not None)
    print("+ " + (pins + " " if pins else "") + shlex.join(command), flush=True)
    if args.dry_run:
        return QUIET
    if subprocess.run([args.python, "-c", "import asv"], capture_output=True, check=False).returncode != 0:
        raise GateError(f"asv is not installed for {args.python} (pip install -e '.[bench]')")
    try:
        returncode, log = _run_teed(command, env, repo)
    except FileNotFoundError as exc:
        raise GateError(f"cannot start asv: {exc}") from None
    if args.log:
        Path(args.log).write_text(log)
    outcome = classify(returncode, log)
    compared = subprocess.run(compare_command(settings, base, head, **common), cwd=repo, env=env,
                              capture_output=True, text=True, errors="replace", check=False)
    table = gated_table(compared.stdout, settings.bench) if compared.returncode == 0 else compared.stderr
    print("\nint8nax gate: comparison table (asv compare, gated benchmarks)")
    print(table.strip() or "(asv compare found no results for these commits)")
    seconds = time.monotonic() - started
    for line in outcome.evidence:
        print(f"  {line}")
    print("\n" + verdict_line(outcome, seconds / 60))
    if args.summary:
        with open(args.summary, "a", encoding="utf-8") as f:
            f.write(markdown(outcome, table, settings, machine, base, head, seconds) + "\n")
    return outcome.status


# argparse types of the overrides: each refuses what asv would get unchecked (argparse puts the
# option's name in front of the message; usage error, exit status 2).

def _factor(text: str) -> float:
    """A finite number > 1, as the settings file's factor demands. Below 1 asv compare asks
    "better?" first (new < old / factor), so a slowdown short of 1/factor reads as an
    improvement and nothing is flagged; at inf nothing ever is."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 1.0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number > 1 (the slowdown that counts, e.g. 1.1), got {text!r}")
    return value


def _rounds(text: str) -> int:
    if not text.strip().isdecimal() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _repeat(text: str) -> str:
    try:
        return check_repeat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cpu_affinity(text: str) -> str:
    if text == "none":
        return text
    try:
        affinity_cpus(text, AFFINITY_FORMS + ", or 'none'")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _settings_file(text: str) -> str:
    """A settings file named on the command line must be there: falling back to the built-in
    defaults would gate with settings the user did not choose."""
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"expected an existing settings file, got {text!r} (no such file)")
    return text


def _output_file(text: str) -> str:
    """A file the gate writes after asv's run, checked before it: a path that cannot be written
    would fail only after minutes to an hour of measuring. The rule of int8nax.bench.argtypes's
    output_file, here again because this file runs as a script without the package (CI runs it
    from asv's virtualenv, where int8nax is not installed)."""
    folder = os.path.dirname(text) or os.curdir
    if not text or os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"expected a file to write, got {text!r}" + (", a folder" if text else ""))
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"expected a file in an existing folder, got {text!r}: no folder {folder!r}")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(text) and not os.access(text, os.W_OK)):
        raise argparse.ArgumentTypeError(f"expected a file this user can write, got {text!r}")
    return text


def _python(text: str) -> str:
    """The interpreter that runs asv, as given: one that cannot be started would otherwise fail
    as a traceback, after the settings and commits were read."""
    if not text or shutil.which(text) is None:
        raise argparse.ArgumentTypeError(f"expected a Python this user can run (a path, or a name on PATH), "
                                         f"got {text!r}")
    return text


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("base", nargs="?", default="main", help="the commit to compare against (default main)")
    p.add_argument("head", nargs="?", default="HEAD", help="the commit under test (default HEAD)")
    p.add_argument("--config", default="asv.conf.json", help="asv configuration (default asv.conf.json)")
    p.add_argument("--machine", help="asv machine name (default: asv's own choice); picks the settings")
    p.add_argument("--settings", type=_settings_file,
                   help=f"settings file (default <repo>/{SETTINGS_FILE}, built-in defaults where that is absent; "
                        "a file named here must exist)")
    p.add_argument("--factor", type=_factor, help="override the calibrated factor (a number > 1)")
    p.add_argument("--rounds", type=_rounds, help="override the calibrated rounds (a whole number >= 1)")
    p.add_argument("--repeat", type=_repeat,
                   help="override the calibrated repeat: N or '(min,max,seconds)', the forms asv's -a repeat "
                        "takes (parentheses optional), with 1 <= min <= max")
    p.add_argument("--bench", action="append", help="override the gated benchmarks (asv -b regex; repeatable)")
    p.add_argument("--cpu-affinity", type=_cpu_affinity,
                   help="override the calibrated CPU pinning, as asv's --cpu-affinity takes it ('1', '0,2', "
                        "'0-3'); 'none' for none")
    p.add_argument("--split", action="store_true", help="asv's --split tables (better / worse / same)")
    p.add_argument("--log", type=_output_file, help="also write asv continuous's output to this file")
    p.add_argument("--summary", type=_output_file,
                   help="append the verdict and table as markdown to this file (e.g. $GITHUB_STEP_SUMMARY)")
    p.add_argument("--python", type=_python, default=sys.executable, help="the Python that runs asv (default: this one)")
    p.add_argument("--dry-run", action="store_true", help="print the settings and the asv command, run nothing")


DESCRIPTION = ("Compare BASE (default main) with HEAD (default HEAD) with asv continuous and this "
               "machine's calibrated settings (benchmarks/gate.json). Exit status: 0 quiet, "
               "1 regression, 2 could not measure. The comparison table is printed either way.")


def main(args) -> int:
    try:
        return run(args)
    except GateError as exc:
        print(verdict_line(Outcome(UNMEASURED, str(exc))), file=sys.stderr)
        return UNMEASURED


def add_parser(sub) -> None:
    """Register `int8nax gate` on the CLI's subparsers."""
    p = sub.add_parser("gate", help="regression gate: asv continuous BASE HEAD with calibrated settings",
                       description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=main)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="int8nax gate", description=DESCRIPTION)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
