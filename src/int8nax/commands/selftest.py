"""`int8nax selftest`: the report an M5 owner runs first and pastes into an issue.

Exactness over a shape grid (M, K, N each in 1, 7, 33, 513, 4097 on a GPU backend; to 2049
and three timing shapes on the CPU backend, so that it takes a minute or two there) through the
checks of int8nax.exactness, the int8 cooperative-tensor layout (Metal), and timings of
int8nax next to cider through the measuring layer (int8nax.bench: every output checked before
it is timed), printed as markdown.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from .. import quant
from .._checks import MAX_K
from ..bench import argtypes, estimate, host, timing
from ..bench.peers import Unavailable
from ..exactness import DTYPES, check_int8_matmul, check_quantize, check_w8a8, special_rows

# ---------------------------------------------------------------------------------------------
# `int8nax selftest`
# ---------------------------------------------------------------------------------------------

DEFAULT_SIZES = (1, 7, 33, 513, 4097)
QUICK_SIZES = (1, 7, 33)
TIMING_SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (512, 4096, 4096),
                 (2048, 4096, 4096), (512, 3584, 18944)]
QUICK_TIMING_SHAPES = [(33, 513, 257)]


@dataclass(frozen=True)
class Grid:
    """The shapes a selftest checks (every (M, K, N) from `sizes`) and times."""

    name: str
    sizes: tuple[int, ...]
    timing_shapes: tuple
    about: str


GRIDS = {
    "full": Grid("full", DEFAULT_SIZES, tuple(TIMING_SHAPES),
                 "every size to 4097 and the seed's timing shapes (a GPU's grid: an hour or more on a small CPU)"),
    "cpu": Grid("cpu", (1, 7, 33, 513, 2049), ((16, 4096, 4096), (512, 4096, 4096), (128, 3584, 18944)),
                "sizes to 2049 and three timing shapes: a minute or two on a 2-core CPU"),
    "quick": Grid("quick", QUICK_SIZES, tuple(QUICK_TIMING_SHAPES), "sizes 1, 7, 33 and one small timing shape"),
}


def sizes(text: str) -> tuple[int, ...]:
    """--sizes: comma-separated positive whole numbers, each at most int8_matmul's K limit
    (every size is also a K of the grid, and a larger K is refused by the API)."""
    values = argtypes.sizes(text)
    if max(values) > MAX_K:
        raise argparse.ArgumentTypeError(f"expected sizes <= {MAX_K} (each is also a K, and int8_matmul takes "
                                         f"K <= {MAX_K}), got {text!r}")
    return values


GRID_BYTES_PER_ELEMENT = 65
"""Peak bytes per S * S of exactness_grid's largest check, int8_matmul at (S, S, S): the int8
inputs and their MLX copies, their int64 and float64 copies for the exact reference, the int32
output and its int64 copy (measured at S = 4000 on the CPU backend: 65)."""


def physical_memory() -> int | None:
    """Bytes of physical memory here, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def too_big(sizes) -> str | None:
    """Why the grid of `sizes` cannot fit in this machine's memory, or None. Asked before the
    run because MLX 0.32 ends the process (SIGSEGV) when an allocation fails, where numpy
    raises a MemoryError that main() can report."""
    total, largest = physical_memory(), max(sizes)
    need = GRID_BYTES_PER_ELEMENT * largest * largest
    if total is None or need <= total:
        return None
    return (f"the check at (M, K, N) = {(largest,) * 3} needs about {need / 2**30:.0f} GiB and this machine has "
            f"{total / 2**30:.0f} GiB: use smaller --sizes")


def choose_grid(requested: str, backend: str) -> tuple[Grid, str]:
    """(grid, why): `requested` unless it is "auto"; auto takes "cpu" for the CPU backend (its
    exact GEMM runs at ~0.1-0.5 TOPS on 2 cores, and MLX's float baselines far slower) and
    "full" for a GPU backend."""
    if requested != "auto":
        return GRIDS[requested], f"--grid {requested}"
    if backend == "cpu":
        return GRIDS["cpu"], "the CPU backend is under test; --grid full runs the GPU grid"
    return GRIDS["full"], f"the backend under test is {backend}"


@dataclass
class Tally:
    what: str
    shapes: int = 0
    failed: int = 0
    first_failure: str = ""

    def add(self, label: str, problem: str | None) -> None:
        self.shapes += 1
        if problem:
            self.failed += 1
            self.first_failure = self.first_failure or f"{label}: {problem}"


def api_callables(backend: str):
    """(int8_matmul, quantize_activations, w8a8_linear) of the public API on `backend`."""
    import int8nax

    return (lambda a, b: int8nax.int8_matmul(a, b, backend=backend),
            lambda x: int8nax.quantize_activations(x, backend=backend),
            lambda x, w, s, bias: int8nax.w8a8_linear(x, w, s, bias, backend=backend))


def exactness_grid(callables, sizes, seed: int = 0, log=None) -> list[Tally]:
    """Every (M, K, N) in sizes^3 for int8_matmul; every (M, K) for quantization; W8A8 on the
    shapes whose K and N are at most 513 (dtype and bias taking turns). `callables` is
    (int8_matmul, quantize_activations, w8a8_linear) taking mx.arrays (api_callables, or a
    Metal kernel variant's raw launches)."""
    api_gemm, api_quant, api_w8a8 = callables
    rng = np.random.default_rng(seed)
    gemm = Tally("int8_matmul: bit-exact vs exact int product")
    quantize = Tally("quantize_activations: bit-exact vs int8nax.quant")
    w8a8 = Tally("w8a8_linear: within 1 ulp of float64 model")

    dtypes = list(DTYPES)
    turn = 0
    for m in sizes:
        for k in sizes:
            for n in sizes:
                if log:
                    log(f"int8_matmul {(m, k, n)}")
                a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
                b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
                gemm.add(f"{(m, k, n)}", check_int8_matmul(api_gemm, a, b))
                if k <= 513 and n <= 513:
                    dtype, with_bias = dtypes[turn % 3], turn % 2 == 1
                    turn += 1
                    x = mx.array(special_rows(rng, m, k)).astype(DTYPES[dtype])
                    w, s_w = quant.quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32))
                    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
                    label = f"{dtype}{' +bias' if with_bias else ''} {(m, k, n)}"
                    w8a8.add(label, check_w8a8(api_w8a8, x, w, s_w, bias))
            dtype = dtypes[(m + k) % 3]
            x = mx.array(special_rows(rng, m, k)).astype(DTYPES[dtype])
            quantize.add(f"{dtype} {(m, k)}", check_quantize(api_quant, x))
    return [gemm, quantize, w8a8]


TIMED = (("int8nax int8_matmul", "int8nax-gemm"), ("cider int8_matmul_int32", "cider-raw"),
         ("int8nax w8a8_linear", "int8nax-full"), ("cider linear (w8a8)", "cider-full"),
         ("mx.matmul fp16", "mlx-fp16"))
"""(column, contender): each output is checked (int8nax.bench.checks) before it is timed."""


def timing_table(backend: str, shapes, warmup: int, repeat: int, budget: float | None = 1.0,
                 log=None) -> tuple[list[str], list[str]]:
    """Markdown rows of median ms (and TOPS) per call + mx.eval, and the notes: why a cell is
    n/a, or MISMATCH with the reason (a wrong output is never timed). A contender whose call
    is expected to take more than `budget` seconds here (int8nax.bench.estimate; None: no
    limit) is n/a with its estimate, so that the report takes minutes, not hours."""
    columns = [title for title, _ in TIMED]
    lines = ["| M, K, N | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    notes: dict[str, str] = {}
    over: dict[str, list[str]] = {}
    for shape in shapes:
        cells = []
        for title, name in TIMED:
            if log:
                log(f"timing {name} at {estimate.shape_text(shape)}")
            guess = None
            if budget is not None:
                try:
                    guess = estimate.expected_seconds(name, shape, backend)
                except Unavailable as exc:
                    cells.append("n/a")
                    notes.setdefault(title, f"n/a at {shape}: {exc}")
                    continue
            if guess and guess.seconds > budget:
                cells.append("n/a")
                over.setdefault(title, []).append(f"{estimate.shape_text(shape)} ({guess.text()})")
                continue
            cell = timing.measure(shape, name, "call", repeat, backend=backend, warmup=warmup)
            if cell.seconds is not None:
                cells.append(f"{cell.seconds * 1e3:.3f} ms ({timing.tops(shape, cell.seconds):.3g} TOPS)")
                notes.setdefault(f"{title} ran", cell.detail)
            else:
                cells.append(cell.text())
                why = cell.mismatch or cell.error or cell.unavailable
                notes.setdefault(title, f"{cell.text()} at {shape}: {why}")
        lines.append(f"| {', '.join(map(str, shape))} | " + " | ".join(cells) + " |")
    for title, where in over.items():
        notes[f"{title} skipped"] = (f"n/a at {', '.join(where)}: expected time per call here over the budget of "
                                     f"{estimate.seconds_text(budget)} (--budget SECONDS or --all times it)")
    return lines, [f"{k}: {v}" for k, v in notes.items()]


class Progress:
    """Where the selftest is, on stderr: one line per stage and every `every` shapes of the
    exactness grid (each shape with --verbose); on a terminal the shape counter is redrawn."""

    def __init__(self, stream, verbose: bool = False, every: int = 25):
        self.stream, self.verbose, self.every = stream, verbose, every
        self.tty = stream.isatty() and not verbose
        self.count, self.stage_name = 0, ""

    def __call__(self, message: str) -> None:
        stage = message.split(" ", 1)[0]
        if stage != self.stage_name:
            self.stage_name, self.count = stage, 0
            self._line(f"selftest: {'exactness grid' if stage != 'timing' else 'timings'} ...")
        self.count += 1
        if self.verbose:
            self._line(f"selftest: {message}")
        elif self.tty:
            self.stream.write(f"\rselftest: {self.count} done, now {message:50.50s}")
            self.stream.flush()
        elif self.count % self.every == 0 or stage == "timing":
            self._line(f"selftest: {self.count} done, now {message}")

    def _line(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r" + " " * 90 + "\r")
        self.stream.write(text + "\n")
        self.stream.flush()


def collect(backend: str, sizes, timing_shapes, warmup: int, repeat: int,
            layout_out: str | None = None, progress=None, grid: dict | None = None,
            budget: float | None = 1.0) -> dict:
    """Everything the report says, as plain data (the --json output); `exit` is the status:
    0 all exact, 1 a check failed, 2 backend unavailable."""
    from .. import backends

    report: dict = host.environment()
    report["backends"] = {n: {"available": backends.probe(n).available, "reason": backends.probe(n).reason}
                          for n in backends.NAMES}
    name = backends.canonical(backend)
    if name == "auto":
        name, _ = backends.choose(None)
    report["under_test"] = name
    if grid:
        report["grid"] = grid
    if name == "metal":  # even when NAX was refused: the variants' reports say why
        report["metal"] = metal_section(sizes, layout_out, progress)
    probe = backends.probe(name)
    if not probe.available:
        report["unavailable"] = probe.reason
        report["exit"] = 2
        return report
    with np.errstate(invalid="ignore"):  # NaN/inf rows are part of the grid
        tallies = exactness_grid(api_callables(name), sizes, log=progress)
    report["exactness"] = {"sizes": list(sizes), "checks": [vars(t) for t in tallies]}
    if timing_shapes:
        lines, timing_notes = timing_table(name, timing_shapes, warmup, repeat, budget, progress)
        report["timings"] = {"method": f"median of {repeat} after {warmup} warm-up calls, call + mx.eval, "
                                       "each output checked first, TOPS = 2MNK / time",
                             "table": lines, "notes": timing_notes}
    failed = sum(t.failed for t in tallies)
    report["failed"] = failed
    report["exit"] = 1 if failed else 0
    return report


def metal_section(sizes, layout_out: str | None = None, progress=None) -> dict:
    """What the Metal backend did on first use, and every kernel variant on its own:
    the hardware verdict, the layout probe, the variant chosen and why (with each self-test's
    failures), then per variant (both load paths x both relaxed_precision values) whether each
    kernel built (the compiler's message if not) and exactness over the shape grid."""
    from ..backends.metal import backend as metal, launch as metal_launch, source as metal_source

    backend = metal.BACKEND
    hardware = backend.hardware()
    section: dict = {"hardware": {"available": hardware.available, "reason": hardware.reason}}
    if not hardware.available:
        return section
    selection = backend.selection()
    layout = selection.layout
    section["layout"] = {
        "ran": layout.ran, "summary": layout.summary(), "matches_mlx": layout.matches_mlx,
        "same": dict(layout.same), "problems": list(layout.problems), "notes": list(layout.notes),
        "error": layout.error or None,
    }
    if layout.dump is not None:
        dump = np.asarray(layout.dump)
        section["layout"]["fingerprint"] = "sha256:" + hashlib.sha256(dump.astype("<i4").tobytes()).hexdigest()[:16]
        if layout_out:
            np.save(layout_out, dump)
            section["layout"]["dump_file"] = layout_out
    section["selection"] = {"variant": selection.variant.name if selection.variant else None,
                            "probe": selection.probe, "decided_by": selection.decided_by,
                            "reason": selection.reason, "self_tests": dict(selection.self_tests)}
    section["decode"] = {
        "kernel": backend.describe("w8a8_linear", 1, 4096, 4096, dtype=mx.float16),
        "against": "cider's M = 1 kernel (w8a8_int8_mv.metal: float16 activations, no quantization, 8 bytes a "
                   "lane): the timing table's rows with M <= 4 put int8nax w8a8_linear next to cider linear (w8a8)"}
    tiles = backend.tiles
    if tiles is not None:
        section["tiles"] = {"tile": tiles.config.name, "source": tiles.source, "timings_ms": dict(tiles.timings_ms),
                            "shape": list(tiles.shape), "notes": list(tiles.notes), "summary": tiles.summary()}
    backend.kernels.time_builds = True  # the builds below are timed too (first launch + eval)
    section["subnormals"] = metal_launch.probe_subnormals(backend.kernels)
    section["variants"] = []
    for variant in metal_source.variants():
        ops = backend.variant_ops(variant)
        built = ops.compile_report()
        entry = {"name": variant.name, "compile": built}
        if all(error is None for error in built.values()):
            with np.errstate(invalid="ignore"):
                tallies = exactness_grid((ops.int8_matmul, ops.quantize_activations, ops.w8a8_linear),
                                         sizes, log=progress)
            entry["exactness"] = [vars(t) for t in tallies]
        section["variants"].append(entry)
    section["builds"] = [{"build": inst.label(), "seconds": seconds} for inst, seconds in backend.kernels.builds()]
    section["thread_limits"] = backend.kernels.thread_limits()
    section["build_bound"] = len(metal_source.instantiations())
    return section


def render_metal(section: dict) -> list[str]:
    hw = section["hardware"]
    lines = ["### Metal NAX\n", f"- hardware: {'qualifies' if hw['available'] else 'does not qualify'}: {hw['reason']}"]
    if "layout" not in section:
        return lines + [""]
    lay = section["layout"]
    lines.append(f"- layout probe: {lay['summary']}" + (f"; problems: {'; '.join(lay['problems'])}" if lay["problems"] else ""))
    if "fingerprint" in lay:
        lines.append(f"- layout fingerprint {lay['fingerprint']}" + (f" (dump: {lay['dump_file']})" if "dump_file" in lay
                                                                    else " (full dump: --layout-out FILE.npy)"))
    sel = section["selection"]
    lines.append(f"- variant serving this process: **{sel['variant'] or 'none (NAX refused)'}** (layout probe "
                 f"{sel.get('probe', '?')}, chosen by: {sel.get('decided_by', '?')}): {sel['reason']}")
    if "tiles" in section:
        lines.append(f"- {section['tiles']['summary']}")
    if "decode" in section:
        lines.append(f"- decode path: {section['decode']['kernel']}; against {section['decode']['against']}")
    sub = section.get("subnormals", {})
    lines.append(f"- float32 subnormals: {sub.get('summary', 'not probed')}"
                 + "".join(f"; {op}: {v}" for op, v in sub.items() if op != "summary" and v != "kept"))
    lines += ["", "| variant | kernels built | int8_matmul failed | quantize failed | w8a8 failed | first failure |",
              "|---|---|---|---|---|---|"]
    for v in section["variants"]:
        errors = {k: e for k, e in v["compile"].items() if e}
        built = f"{len(v['compile']) - len(errors)}/{len(v['compile'])}"
        if "exactness" in v:
            fails = [f"{t['failed']}/{t['shapes']}" for t in v["exactness"]]
            first = next((t["first_failure"] for t in v["exactness"] if t["first_failure"]), "-")
        else:
            fails, first = ["not run"] * 3, "; ".join(f"{k}: {e}" for k, e in errors.items())
        lines.append(f"| {v['name']} | {built} | {' | '.join(fails)} | {first} |")
    limits = section.get("thread_limits", {})
    lines.append("- threadgroup limits: " + ("; ".join(f"`{b}` allows {n} threads, served by a smaller tile"
                                                      for b, n in limits.items())
                                             if limits else "every build launched at its own threadgroup size"))
    builds = section.get("builds", [])
    if builds:
        lines += ["", f"Metal library builds in this process: {len(builds)} (the runtime can build at most "
                  f"{section['build_bound']} for shapes of 8+ elements per input; first launch + eval, seconds):", "",
                  "| build | seconds |", "|---|---|"]
        for b in builds:
            seconds = "-" if b["seconds"] is None else f"{b['seconds']:.3f}"
            lines.append(f"| `{b['build']}` | {seconds} |")
    return lines + [""]


def render_markdown(report: dict) -> str:
    lines = ["## int8nax selftest\n",
             f"- int8nax {report['int8nax']}, mlx {report['mlx']}, Python {report['python']}, {report['platform']}",
             f"- device: {report['device'].get('device_name', '?')}, architecture "
             f"{report['device'].get('architecture', '?')}"]
    for n, b in report["backends"].items():
        lines.append(f"- backend {n}: {'available' if b['available'] else 'unavailable'}: {b['reason']}")
    name = report["under_test"]
    if "metal" in report:
        lines += [""] + render_metal(report["metal"])
    if "unavailable" in report:
        label = "NAX" if name == "metal" else f"backend {name!r}"
        lines.append(f"\n**{label} unavailable here: {report['unavailable']}.** Nothing was run. "
                     "(`int8nax selftest --backend cpu` exercises the command on any machine.)")
        return "\n".join(lines)
    lines.append(f"- under test: **{name}** (exactness and timings below go through the public API)")
    if "grid" in report:
        g = report["grid"]
        lines.append(f"- grid: **{g['name']}** ({g['why']}): {g['about']}")
    lines.append("")
    ex = report["exactness"]
    lines += [f"### Exactness (sizes {', '.join(map(str, ex['sizes']))} in M, K, N)\n",
              "| check | shapes | failed | first failure |", "|---|---|---|---|"]
    lines += [f"| {t['what']} | {t['shapes']} | {t['failed']} | {t['first_failure'] or '-'} |" for t in ex["checks"]]
    lines.append("")
    if "timings" in report:
        t = report["timings"]
        lines += [f"### Timings ({t['method']})\n", *t["table"], "", *(f"- {note}" for note in t["notes"])]
    failed = report["failed"]
    lines.append(f"\n**{'ALL EXACT' if not failed else f'{failed} CHECKS FAILED'}**")
    return "\n".join(lines)


def run_selftest(backend: str, sizes, timing_shapes, warmup: int, repeat: int, out=print,
                 layout_out: str | None = None, progress=None, as_json: bool = False,
                 grid: dict | None = None, budget: float | None = 1.0) -> int:
    """Print the report (markdown, or JSON); returns the exit status (see collect)."""
    report = collect(backend, sizes, timing_shapes, warmup, repeat, layout_out, progress, grid, budget)
    out(json.dumps(report, indent=1) if as_json else render_markdown(report))
    return report["exit"]


TIMING_DEFAULTS = {"warmup": 5, "repeat": 20, "budget": 1.0}
"""--warmup, --repeat and --budget where not given (the parser leaves them None, so that
--no-timing can tell a given one from the default)."""


def usage_error(args) -> str | None:
    """Why the options contradict each other (None: they do not); the parser's mutually exclusive
    groups refuse the other pairs."""
    if args.no_timing:
        given = [f"--{name}" for name in TIMING_DEFAULTS if getattr(args, name) is not None]
        given += ["--all"] if args.all else []
        if given:
            return f"--no-timing times nothing: it does not take {' or '.join(given)}"
    return None


def main(args) -> int:
    from .. import backends

    bad = usage_error(args)
    if bad:
        print(f"int8nax selftest: error: {bad} (see int8nax selftest --help)", file=sys.stderr)
        return 2
    for option, default in TIMING_DEFAULTS.items():
        if getattr(args, option) is None:
            setattr(args, option, default)
    name = args.backend
    if name == "auto":
        try:
            name, _ = backends.choose(None)
        except (RuntimeError, ValueError):
            name = "auto"  # collect() reports why
    grid, why = choose_grid("quick" if args.quick else args.grid, name)
    sizes = args.sizes or grid.sizes
    shapes = [] if args.no_timing else list(grid.timing_shapes)
    about = grid.about if not args.sizes else f"sizes {', '.join(map(str, sizes))} (--sizes)"
    chosen = {"name": grid.name, "why": why, "about": about, "sizes": list(sizes),
              "timing_shapes": [list(s) for s in shapes]}
    problem = too_big(sizes)
    if problem:
        print(f"int8nax selftest: {problem}", file=sys.stderr)
        return 2
    progress = Progress(sys.stderr, verbose=args.verbose) if not args.quiet else None
    if progress:
        progress._line(f"selftest: backend {name}, grid {grid.name} ({why}): {about}")
    try:
        return run_selftest(args.backend, sizes, shapes, args.warmup, args.repeat,
                            layout_out=args.layout_out, progress=progress, as_json=args.json, grid=chosen,
                            budget=None if args.all else args.budget)
    except MemoryError as exc:  # numpy's _ArrayMemoryError among them: what was asked for, one line
        print(f"int8nax selftest: out of memory ({exc}); the largest size is {max(sizes)}: use smaller --sizes",
              file=sys.stderr)
        return 2
