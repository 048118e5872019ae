"""`int8nax compare`: contenders side by side, measured here, in one run.

Every contender (int8nax.bench.contenders) gets the same problem per (M, K, N), is checked
once against the exact reference, and only then timed. The default columns are the seed's
table:

    M, K, N | cider-full | cider-raw | NAX | full/raw | raw/NAX | nax-full | nax-full/NAX
            | baselines (mlx-fp16, mlx-q8, cublaslt-int8, torch-int8) | their ratios

NAX is int8nax's raw GEMM (int8_matmul) on whatever backend runs here; full/raw is
cider-full / cider-raw and X/NAX is X's time over NAX's (above 1: int8nax is faster).
`--contenders` chooses other columns (numpy-sgemm, say, on a CPU box); `--mode` chooses the
figure (int8nax.bench.timing): one call + eval, per call in a dependent chain, or host build
time; `--mode kernel` is a run of its own on CUDA (int8nax.bench.kernel_time). Times are medians in ms per call. A contender that cannot run shows n/a with its reason
below the table; one whose output is wrong shows MISMATCH, is not timed, and makes the
command exit 1, as does an int8nax contender that fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from . import backends
from .bench import contenders, host, kernel_time, problems, timing

TITLES = {"nax-gemm": "NAX"}
"""Column titles that differ from the contender's name (the seed's table calls it NAX)."""

DEFAULT_CONTENDERS = ("cider-full", "cider-raw", "nax-gemm", "nax-full", "mlx-fp16", "mlx-q8",
                      "cublaslt-int8", "torch-int8")
OURS = ("nax-gemm", "nax-full")

RATIOS = (
    ("full/raw", "cider-full", "cider-raw"),
    ("raw/NAX", "cider-raw", "nax-gemm"),
    ("nax-full/NAX", "nax-full", "nax-gemm"),
    ("cuBLASLt/NAX", "cublaslt-int8", "nax-gemm"),
    ("torch/NAX", "torch-int8", "nax-gemm"),
    ("sgemm/NAX", "numpy-sgemm", "nax-gemm"),
)
"""(title, numerator, denominator) of time ratios, shown when both contenders are columns."""


class Progress:
    """A one-line progress bar on a stream (stderr), redrawn in place."""

    def __init__(self, total: int, stream, enabled: bool):
        self.total, self.done, self.stream, self.enabled = total, 0, stream, enabled

    def step(self, label: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 30
        filled = width * self.done // self.total
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label:40.40s}")
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def run(shapes, names=DEFAULT_CONTENDERS, modes=("call",), repeat: int = 5, chain_calls: int = 100,
        progress: Progress | None = None, profile: str | None = None) -> dict:
    """{mode: {shape: {contender: Cell}}}; each contender is prepared and checked per mode.
    Contenders too slow for a shape here (contenders.skip_reason) are n/a with the reason,
    except where the shapes were asked for by name (`profile` None)."""
    results = {}
    for mode in modes:
        per_shape = {}
        for shape in shapes:
            row = {}
            for name in names:
                why = contenders.skip_reason(name, shape) if profile else None
                row[name] = (timing.Cell(unavailable=why) if why
                             else timing.measure(shape, name, mode, repeat, chain_calls))
                if progress:
                    progress.step(f"{mode} {name} {'x'.join(map(str, shape))}")
            per_shape[shape] = row
        results[mode] = per_shape
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
    """One line per contender that did not run everywhere: its reason (first seen)."""
    lines = []
    for name in names:
        for shape, row in per_shape.items():
            cell = row[name]
            if cell.mismatch:
                lines.append(f"{name}: MISMATCH at {shape}: {cell.mismatch}")
                break
            if cell.error:
                lines.append(f"{name}: n/a: failed at {shape}: {cell.error}")
                break
            if cell.unavailable:
                lines.append(f"{name}: n/a: {cell.unavailable}")
                break
    return lines


def render(per_shape, names, markdown: bool) -> str:
    header = ["M", "K", "N", *columns(names)]
    rows = table_rows(per_shape, names)
    out = []
    if markdown:
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join("---" for _ in header) + "|")
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
        out += [f"- {line}" for line in notes(per_shape, names)]
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        out.append("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
        out.append("")
        out += notes(per_shape, names)
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


def _contenders_arg(text: str):
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in contenders.CONTENDERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated names from {', '.join(contenders.CONTENDERS)}, got {text!r}")
    return tuple(dict.fromkeys(names))


def _modes_arg(text: str):
    modes = [t.strip() for t in text.split(",") if t.strip()]
    if "kernel" in modes:  # kernel time is its own run (int8nax.bench.kernel_time)
        if modes != ["kernel"]:
            raise argparse.ArgumentTypeError(f"mode kernel runs alone, got {text!r}")
        return ("kernel",)
    if not modes or any(m not in timing.MODES for m in modes):
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
    if args.mode == ("kernel",):
        return kernel_time.main(args)
    profile = None
    if args.shapes:
        shapes, chosen = args.shapes, "--shapes"
    else:
        try:
            profile, why = (args.profile, "--profile") if args.profile else problems.choose_profile()
        except problems.ProfileError as exc:
            print(f"int8nax compare: error: {exc}", file=sys.stderr)
            return 2
        shapes, chosen = list(problems.profile_shapes(profile)), f"profile {profile} ({why})"
    names = args.contenders or DEFAULT_CONTENDERS
    meta = environment()
    print(f"int8nax compare: backend {meta['backend']} ({meta['backend_reason']}); shapes: {chosen}; "
          f"median of {args.repeat}, ms per call")
    show = args.progress or (args.progress is None and sys.stderr.isatty())
    total = len(shapes) * len(names) * len(args.mode)
    results = run(shapes, names, args.mode, args.repeat, args.chain_calls, Progress(total, sys.stderr, show),
                  profile)
    text = []
    for mode, per_shape in results.items():
        what = {"call": "one call + eval", "chain": f"per call in a chain of {args.chain_calls}, one eval",
                "host": f"host time to build one lazy call ({args.chain_calls} independent calls, no eval)"}[mode]
        text.append(f"\n{'### ' if args.markdown else ''}mode {mode}: {what}\n")
        text.append(render(per_shape, names, args.markdown))
    print("\n".join(text))
    if args.json:
        meta["command"] = "int8nax compare " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "int8nax compare"
        with open(args.json, "w") as f:
            json.dump(to_json(results, meta), f, indent=1)
    return 1 if failed(results) else 0


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="side-by-side timings of int8nax, cider and baselines",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", type=_shapes_arg, help="comma-separated MxKxN (default: the benchmark profile's shapes)")
    p.add_argument("--profile", choices=sorted(problems.PROFILES),
                   help="shape profile (default: chosen by backend, INT8NAX_BENCH_PROFILE overrides)")
    p.add_argument("--contenders", type=_contenders_arg,
                   help=f"comma-separated, in column order (default: {','.join(DEFAULT_CONTENDERS)}; "
                        f"all: {','.join(contenders.CONTENDERS)})")
    p.add_argument("--mode", type=_modes_arg, default=("call",),
                   help="comma-separated figures: call (one call + eval, the default), chain, host; or kernel "
                        "alone (CUDA kernel time against cuBLASLt, int8nax.bench.kernel_time; it reads --shapes, "
                        "--w8a8, --bf16, --budget, --launches, --markdown and --json)")
    p.add_argument("--chain-calls", type=_positive_int, default=100, help="calls per chain (modes chain, host; 100)")
    p.add_argument("--repeat", type=_positive_int, default=5, help="timed samples per contender and shape (default 5)")
    p.add_argument("--markdown", action="store_true", help="print markdown tables (paste into an issue)")
    p.add_argument("--json", metavar="FILE", help="also write every cell, with the environment, as JSON")
    p.add_argument("--progress", action="store_true", default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    kernel_time.add_arguments(p)
    p.set_defaults(func=main)
