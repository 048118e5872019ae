"""`int8nax compare`'s GEMM comparison (its default mode): contenders side by side, measured
here, in one run.

Every contender (int8nax.bench.contenders) gets the same problem per (M, K, N), is checked
once against the exact reference, and only then timed. The default columns are the seed's
table:

    M, K, N | cider-full | cider-raw | int8nax-gemm | full/raw | raw/gemm | int8nax-full | full/gemm
            | baselines (mlx-fp16, mlx-q8, cublaslt-int8, torch-int8) | their ratios

int8nax-gemm is int8nax's raw GEMM (int8_matmul) on whatever backend runs here (Metal NAX on an
Apple M5, CUDA, or the CPU); full/raw is cider-full / cider-raw and X/gemm is X's time over
int8nax-gemm's (above 1: int8nax is faster).
`--contenders` chooses other columns (numpy-sgemm, say, on a CPU box); `--mode` chooses the
figure (int8nax.bench.timing): one call + eval, per call in a dependent chain, or host build
time; `--mode kernel` is a mode of its own (int8nax.commands.compare lists the modes). Times
are medians in ms per call. A contender that cannot run shows n/a with its reason below the
table; one whose output is wrong shows MISMATCH, is not timed, and makes the
command exit 1, as does an int8nax contender that fails.

It finishes in minutes on any machine: a short probe first estimates each contender's time
per call at each shape here (int8nax.bench.estimate), and a contender expected to take more
than `--budget` seconds a call (1 by default) is n/a at that shape, with the estimate
(MLX's quantized_matmul on a 2-core CPU: ~7 s a call at 16x4096x4096, minutes at M = 512).
`--all` measures everything. The estimated total is printed before anything is timed, and
progress goes to stderr: a bar that moves with every timed sample on a terminal, a line per
measured cell otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass

from .. import backends
from ..bench import argtypes, contenders, estimate, host, problems, timing
from ..bench.text import table_lines

TITLES: dict[str, str] = {}
"""Column titles that differ from the contender's name (none: each names what runs on every backend)."""

DEFAULT_CONTENDERS = ("cider-full", "cider-raw", "int8nax-gemm", "int8nax-full", "mlx-fp16", "mlx-q8",
                      "cublaslt-int8", "torch-int8")
OURS = ("int8nax-gemm", "int8nax-full")

RATIOS = (
    ("full/raw", "cider-full", "cider-raw"),
    ("raw/gemm", "cider-raw", "int8nax-gemm"),
    ("full/gemm", "int8nax-full", "int8nax-gemm"),
    ("cuBLASLt/gemm", "cublaslt-int8", "int8nax-gemm"),
    ("torch/gemm", "torch-int8", "int8nax-gemm"),
    ("sgemm/gemm", "numpy-sgemm", "int8nax-gemm"),
)
"""(title, numerator, denominator) of time ratios, shown when both contenders are columns."""


DEFAULT_BUDGET_S = 1.0
"""Seconds a call may be expected to take here before its contender is skipped (--budget)."""

PREPARE_S = 1.0
"""About what building a cell's data, its exact reference and the contender takes at a seed
shape on a 2-core CPU (1-3 s at the largest): the estimate's allowance per measured cell."""

OVER_BUDGET = "skipped: expected time per call here over the budget"


@dataclass
class Task:
    """One cell to measure: `skip` says why it is not measured (None: it is); `estimate` is the
    probe's expected seconds per call (None: not probed or cannot run)."""

    mode: str
    shape: tuple
    name: str
    skip: timing.Cell | None = None
    estimate: float | None = None

    def samples(self, repeat: int, warmup: int) -> int:
        return 0 if self.skip else repeat + warmup

    def expected_seconds(self, repeat: int, warmup: int, chain_calls: int) -> float:
        """Wall seconds this cell should take: preparing the data and the exact reference
        (about PREPARE_S), the checked first call, then the samples."""
        if self.skip:
            return 0.0
        if self.estimate is None:
            return PREPARE_S
        per_sample = {"call": 1, "chain": chain_calls, "host": 0}[self.mode]
        return PREPARE_S + self.estimate * (1 + per_sample * (repeat + warmup))

    @property
    def label(self) -> str:
        return f"{self.mode} {self.name} {estimate.shape_text(self.shape)}"


def plan(shapes, names=DEFAULT_CONTENDERS, modes=("call",), budget: float | None = DEFAULT_BUDGET_S,
         profile: str | None = None, on_probe=None) -> list[Task]:
    """The cells to measure, in order. Unless `budget` is None (--all), each contender is
    probed once per shape (int8nax.bench.estimate) and skipped where one call is expected to
    take longer than `budget` seconds; on a profile's shapes (`profile` set) the contenders too
    slow for MLX's CPU device are skipped as in the asv suite (contenders.skip_reason).
    `on_probe(label)` is called before each probe."""
    guesses = {}
    tasks = []
    for mode in modes:
        for shape in shapes:
            for name in names:
                task = Task(mode, shape, name)
                why = contenders.skip_reason(name, shape) if profile and budget is not None else None
                if why:
                    task.skip = timing.Cell(unavailable=why)
                elif budget is not None:
                    if (name, shape) not in guesses:
                        if on_probe:
                            on_probe(f"probe {name} {estimate.shape_text(shape)}")
                        try:
                            guesses[name, shape] = estimate.expected_seconds(name, shape, budget=budget)
                        except contenders.Unavailable as exc:
                            guesses[name, shape] = timing.Cell(unavailable=str(exc))
                    guess = guesses[name, shape]
                    if isinstance(guess, timing.Cell):
                        task.skip = guess
                        tasks.append(task)
                        continue
                    task.estimate = guess.seconds if guess else None
                    if guess and guess.seconds > budget:
                        task.skip = timing.Cell(
                            unavailable=f"{OVER_BUDGET} of {estimate.seconds_text(budget)} "
                                        "(--budget SECONDS or --all runs it)",
                            detail=guess.text())
                tasks.append(task)
    return tasks


class Progress:
    """Where a run is, on a stream (stderr): `style` "bar" redraws one line per timed sample
    (for a terminal), "lines" writes a line per measured cell (for a log or a redirect),
    "none" writes nothing."""

    def __init__(self, stream, style: str):
        self.stream, self.style = stream, style
        self.total = self.done = 0
        self.remaining = 0.0

    def say(self, text: str) -> None:
        if self.style != "none":
            self.stream.write(text + "\n")
            self.stream.flush()

    def probe(self, label: str) -> None:
        if self.style == "bar":
            self.stream.write(f"\r{label:60.60s}")
            self.stream.flush()

    def start(self, tasks, repeat: int, warmup: int, chain_calls: int) -> None:
        if self.style == "bar":
            self.stream.write("\r" + " " * 60 + "\r")
        self.total = sum(t.samples(repeat, warmup) for t in tasks)
        self.remaining = sum(t.expected_seconds(repeat, warmup, chain_calls) for t in tasks)
        self.cells = sum(1 for t in tasks if not t.skip)
        self.cell = 0
        self.args = (repeat, warmup, chain_calls)

    def begin(self, task: Task) -> None:
        self.task, self.cell, self.t0 = task, self.cell + 1, time.perf_counter()
        self.expected = task.expected_seconds(*self.args)
        if self.style == "lines" and self.expected > 10:
            self.say(f"compare: [{self.cell}/{self.cells}] {task.label}: running, "
                     f"expected {estimate.seconds_text(self.expected)}")
        self._draw()

    def tick(self) -> None:
        self.done += 1
        self._draw()

    def end(self, cell: timing.Cell) -> None:
        took = time.perf_counter() - self.t0
        self.remaining = max(0.0, self.remaining - self.expected)
        if self.style == "lines":
            what = (f"{cell.seconds * 1e3:.3f} ms per call" if cell.seconds is not None
                    else cell.text() + (f" ({cell.unavailable or cell.error or cell.mismatch})"[:120]))
            left = f", ~{estimate.seconds_text(self.remaining)} left" if self.remaining >= 1 else ""
            self.say(f"compare: [{self.cell}/{self.cells}] {self.task.label}: {what} "
                     f"(took {estimate.seconds_text(took)}{left})")
        elif self.style == "bar" and self.cell == self.cells:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()

    def _draw(self) -> None:
        if self.style != "bar":
            return
        width = 30
        filled = width * self.done // max(self.total, 1)
        in_cell = max(0.0, self.expected - (time.perf_counter() - self.t0))
        left = self.remaining - self.expected + in_cell
        eta = f" ~{estimate.seconds_text(left)} left" if left >= 1 else ""
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} "
                          f"{self.task.label:36.36s}{eta:16s}")
        self.stream.flush()


def run(shapes, names=DEFAULT_CONTENDERS, modes=("call",), repeat: int = 5, chain_calls: int = 100,
        progress: Progress | None = None, profile: str | None = None,
        budget: float | None = DEFAULT_BUDGET_S, tasks: list[Task] | None = None, warmup: int = 1) -> dict:
    """{mode: {shape: {contender: Cell}}}; each contender is prepared and checked per mode.
    The cells are `tasks` (default: plan(...) with these arguments): a skipped one is n/a
    with its reason."""
    if tasks is None:
        tasks = plan(shapes, names, modes, budget, profile, progress.probe if progress else None)
    if progress:
        progress.start(tasks, repeat, warmup, chain_calls)
    results: dict = {}
    for task in tasks:
        if task.skip:
            cell = task.skip
        else:
            if progress:
                progress.begin(task)
            cell = timing.measure(task.shape, task.name, task.mode, repeat, chain_calls, warmup=warmup,
                                  tick=progress.tick if progress else None)
            if progress:
                progress.end(cell)
        results.setdefault(task.mode, {}).setdefault(task.shape, {})[task.name] = cell
    return results


def _ratio(row, num: str, den: str) -> str:
    a, b = row[num].seconds, row[den].seconds
    return f"{a / b:.2f}" if a is not None and b is not None else "n/a"


def columns(names) -> list[str]:
    """Column titles in order: each contender, each ratio placed after its later operand."""
    cols = []
    ratios = [r for r in RATIOS if r[1] in names and r[2] in names]
    placed = set()
    for name in names:
        cols.append(TITLES.get(name, name))
        seen = set(names[: names.index(name) + 1])
        for title, num, den in ratios:
            if title not in placed and num in seen and den in seen:
                cols.append(title)
                placed.add(title)
    return cols


def table_rows(per_shape, names) -> list[list[str]]:
    rows = []
    for (m, k, n), row in per_shape.items():
        cells = {TITLES.get(name, name): row[name].text() for name in names}
        cells.update({title: _ratio(row, num, den) for title, num, den in RATIOS if num in row and den in row})
        rows.append([str(m), str(k), str(n)] + [cells[c] for c in columns(names)])
    return rows


def notes(per_shape, names) -> list[str]:
    """Lines for each contender that did not run everywhere: its first mismatch; each reason
    it failed or could not run, with the shapes it applies to (none named where it applies to
    every shape); the shapes skipped over the time budget together, each with its estimate."""
    lines = []
    for name in names:
        over = [f"{estimate.shape_text(shape)} ({row[name].detail})" for shape, row in per_shape.items()
                if (row[name].unavailable or "").startswith(OVER_BUDGET)]
        if over:
            why = next(row[name].unavailable for row in per_shape.values()
                       if (row[name].unavailable or "").startswith(OVER_BUDGET))
            lines.append(f"{name}: n/a at {', '.join(over)}: {why.removeprefix('skipped: ')}")
        mismatch = next((f"{shape}: {row[name].mismatch}" for shape, row in per_shape.items()
                         if row[name].mismatch), None)
        if mismatch:
            lines.append(f"{name}: MISMATCH at {mismatch}")
        failed: dict[str, list[str]] = {}  # the error -> the shapes it came at
        gone: dict[str, list[problems.Shape]] = {}  # the reason -> the shapes it applies to
        for shape, row in per_shape.items():
            cell = row[name]
            if cell.error:
                failed.setdefault(cell.error, []).append(str(shape))
            elif cell.unavailable and not cell.unavailable.startswith(OVER_BUDGET):
                gone.setdefault(cell.unavailable, []).append(shape)
        for error, shapes in failed.items():
            lines.append(f"{name}: n/a: failed at {', '.join(shapes)}: {error}")
        for why, shapes in gone.items():
            where = ("" if len(per_shape) == 1 else " at every shape" if len(shapes) == len(per_shape)
                     else f" at {', '.join(map(estimate.shape_text, shapes))}")
            lines.append(f"{name}: n/a{where}: {why}")
    faster = [estimate.shape_text(shape) for shape, row in per_shape.items()
              if _w8a8_beats_raw_on_cpu(row)]
    if faster:
        lines.append(f"full/gemm below 1 at {', '.join(faster)}: {W8A8_ON_CPU}")
    return lines


def kernels(per_shape, names) -> list[str]:
    """One line per int8nax contender and kernel: what ran (Backend.describe), at which shapes."""
    lines = []
    for name in names:
        ran: dict[str, list[str]] = {}
        for shape, row in per_shape.items():
            if row[name].kernel:
                ran.setdefault(row[name].kernel, []).append(estimate.shape_text(shape))
        for text, shapes in ran.items():
            where = "every shape" if len(shapes) == len(per_shape) else ", ".join(shapes)
            lines.append(f"{name} ran: {text} ({where})")
    return lines


W8A8_ON_CPU = ("on the CPU backend w8a8_linear prepares its weight once (packed at its second use as the "
               "same array) and every later call reuses it, while int8_matmul keeps no state and packs its b "
               "on every call (and writes int32, not float16); INT8NAX_CPU_PREPARE=0 times W8A8 without it")


def _w8a8_beats_raw_on_cpu(row) -> bool:
    full, raw = row.get("int8nax-full"), row.get("int8nax-gemm")
    return bool(full and raw and full.seconds and raw.seconds and full.seconds < raw.seconds
                and "backend cpu" in (full.detail or ""))


def render(per_shape, names, markdown: bool) -> str:
    header = ["M", "K", "N", *columns(names)]
    lines = notes(per_shape, names) + kernels(per_shape, names)
    out = table_lines(header, table_rows(per_shape, names), markdown) + [""]
    out += [f"- {line}" for line in lines] if markdown else lines
    return "\n".join(out)


def failed(results) -> bool:
    """A wrong output anywhere, or an int8nax contender that raised."""
    return any(cell.mismatch or (name in OURS and cell.error)
               for per_shape in results.values() for row in per_shape.values() for name, cell in row.items())


def environment() -> dict:
    """What ran (bench.host.environment) and the backend int8nax picked, for the committed records."""
    try:
        name, reason = backends.choose(None)
    except (RuntimeError, ValueError) as exc:  # a bad INT8NAX_BACKEND: the int8nax cells say so too
        name, reason = None, str(exc)
    return {**host.environment(), "backend": name, "backend_reason": reason}


def to_json(results, meta: dict) -> dict:
    rows = []
    for mode, per_shape in results.items():
        for shape, row in per_shape.items():
            for name, cell in row.items():
                entry = {"mode": mode, "shape": list(shape), "contender": name, **asdict(cell)}
                if cell.seconds is not None:
                    entry["tops"] = timing.tops(shape, cell.seconds)
                rows.append(entry)
    return {"meta": meta, "results": rows}


# --- command line ------------------------------------------------------------------------

def _shapes_arg(text: str):
    try:
        return problems.parse_shapes(text, "--shapes")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--shapes: ")) from None


def names_arg(choices, what: str):
    """An argparse type: comma-separated names from `choices` (read at each parse), in order,
    repeats dropped; an empty name (a stray comma) is refused, as a name lost in editing
    the list may have been meant there."""
    def parse(text: str):
        names = [t.strip() for t in text.split(",")]
        if any(n not in choices for n in names):
            empty = " (an empty name)" if "" in names else ""
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {what} from {', '.join(choices)}, got {text!r}{empty}")
        return tuple(dict.fromkeys(names))
    return parse


_contenders_arg = names_arg(contenders.CONTENDERS, "names")


def _modes_arg(text: str):
    modes = [t.strip() for t in text.split(",")]  # an empty one is refused below, as in names_arg
    if "kernel" in modes:  # kernel time is its own run (int8nax.bench.kernel.mode)
        if modes != ["kernel"]:
            raise argparse.ArgumentTypeError(f"mode kernel runs alone, got {text!r}")
        return ("kernel",)
    if any(m not in timing.MODES for m in modes):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated modes from {', '.join(timing.MODES)}, or kernel alone, got {text!r}")
    return tuple(dict.fromkeys(modes))


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {value}")
    return value


def main(args) -> int:
    """The GEMM comparison (args: compare's parsed options). Exit status: 0 every cell measured
    or n/a, 1 a wrong output or a failed int8nax contender, 2 a usage error."""
    profile = None
    if args.shapes:
        shapes = args.shapes
        chosen = f"{', '.join(map(estimate.shape_text, shapes))} (--shapes)"
    else:
        try:
            profile, why = (args.profile, "--profile") if args.profile else problems.choose_profile()
        except problems.ProfileError as exc:
            print(f"int8nax compare: error: {exc}", file=sys.stderr)
            return 2
        shapes = list(problems.profile_shapes(profile))
        chosen = f"profile {profile}: {', '.join(map(estimate.shape_text, shapes))} ({why})"
    names = args.contenders or DEFAULT_CONTENDERS
    meta = environment()
    budget = None if args.all else args.budget
    print(f"int8nax compare: backend {meta['backend']} ({meta['backend_reason']}); shapes: {chosen}; "
          f"median of {args.repeat}, ms per call")
    sys.stdout.flush()
    style = args.progress or ("bar" if sys.stderr.isatty() else "lines")
    progress = Progress(sys.stderr, style)
    if budget is not None:
        progress.say(f"compare: probing {len(names)} contenders at {len(shapes)} shapes for their time per call "
                     f"here (budget {estimate.seconds_text(budget)} a call; --all skips the probe)")
    t0 = time.perf_counter()
    tasks = plan(shapes, names, args.mode, budget, profile, progress.probe)
    measured = [t for t in tasks if not t.skip]
    total = sum(t.expected_seconds(args.repeat, 1, args.chain_calls) for t in tasks)
    skipped = sorted({t.label.split(' ', 1)[1] for t in tasks if t.skip and t.skip.unavailable.startswith(OVER_BUDGET)})
    progress.say(f"compare: {len(measured)} of {len(tasks)} cells to measure, expected "
                 f"~{estimate.seconds_text(total)} (probe took {estimate.seconds_text(time.perf_counter() - t0)})"
                 + (f"; over the budget, skipped: {', '.join(skipped)}" if skipped else ""))
    results = run(shapes, names, args.mode, args.repeat, args.chain_calls, progress, profile, budget, tasks)
    text = []
    for mode, per_shape in results.items():
        what = {"call": "one call + eval", "chain": f"per call in a chain of {args.chain_calls}, one eval",
                "host": f"host time to build one lazy call ({args.chain_calls} independent calls, no eval)"}[mode]
        text.append(f"\n{'### ' if args.markdown else ''}mode {mode}: {what}\n")
        text.append(render(per_shape, names, args.markdown))
    print("\n".join(text))
    progress.say(f"compare: done in {estimate.seconds_text(time.perf_counter() - t0)}")
    if args.json:
        meta["command"] = "int8nax compare " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "int8nax compare"
        meta["budget_s"] = budget
        with open(args.json, "w") as f:
            json.dump(to_json(results, meta), f, indent=1)
    return 1 if failed(results) else 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The GEMM comparison's options; the other modes read some of them too (--shapes, --repeat,
    --markdown, --json, --progress: each mode's module says which)."""
    p.add_argument("--shapes", type=_shapes_arg, help="comma-separated MxKxN (default: the benchmark profile's shapes)")
    p.add_argument("--profile", choices=sorted(problems.PROFILES),
                   help="shape profile (default: chosen by backend, INT8NAX_BENCH_PROFILE overrides)")
    p.add_argument("--contenders", type=_contenders_arg,
                   help=f"comma-separated, in column order (default: {','.join(DEFAULT_CONTENDERS)}; "
                        f"all: {','.join(contenders.CONTENDERS)})")
    p.add_argument("--mode", type=_modes_arg, default=("call",),
                   help="comma-separated figures: call (one call + eval, the default), chain, host; or kernel "
                        "alone (CUDA kernel time against cuBLASLt, int8nax.bench.kernel.mode; it reads --shapes, "
                        "--w8a8, --bf16, --time-limit, --launches, --markdown and --json)")
    p.add_argument("--chain-calls", type=_positive_int, default=100, help="calls per chain (modes chain, host; 100)")
    p.add_argument("--repeat", type=_positive_int, default=5, help="timed samples per contender and shape (default 5)")
    p.add_argument("--markdown", action="store_true", help="print markdown tables (paste into an issue)")
    p.add_argument("--json", metavar="FILE", type=argtypes.output_file,
                   help="also write every cell, with the environment, as JSON")
    p.add_argument("--budget", type=argtypes.seconds, default=DEFAULT_BUDGET_S, metavar="SECONDS",
                   help="skip a contender at a shape where one call is expected to take longer than this "
                        f"here (a short probe first estimates it; default {DEFAULT_BUDGET_S:g})")
    p.add_argument("--all", action="store_true",
                   help="no probe and no budget: measure every contender at every shape, however long it takes")
    p.add_argument("--progress", nargs="?", const="bar", choices=("bar", "lines", "none"),
                   help="progress on stderr: a bar per timed sample (default on a terminal), a line per "
                        "cell (default otherwise), or none")
