"""`int8nax compare`: the seed's side-by-side table, measured here, in one run.

Every contender (int8nax.contenders) gets the same problem per (M, K, N), is checked once
against the exact reference, and only then timed. Columns, as in cider's published table:

    M, K, N | cider-full | cider-raw | NAX | full/raw | raw/NAX
            | nax-full | nax-full/NAX | baselines (mlx-fp16, mlx-q8, torch-int8)

NAX is int8nax's raw GEMM (int8_matmul) on whatever backend runs here; full/raw is
cider-full / cider-raw and raw/NAX is cider-raw / NAX (above 1: int8nax is faster).
Times are medians of wall time per blocking call, in ms. A contender that cannot run shows
n/a with its reason below the table; one whose output is wrong shows MISMATCH, is not
timed, and makes the command exit 1.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from . import backends, contenders
from .bench.peers import Unavailable

# (column title, contender) in table order; ratio columns are computed from these.
TIMED = (
    ("cider-full", "cider-full"),
    ("cider-raw", "cider-raw"),
    ("NAX", "nax-gemm"),
    ("nax-full", "nax-full"),
    ("mlx-fp16", "mlx-fp16"),
    ("mlx-q8", "mlx-q8"),
    ("torch-int8", "torch-int8"),
)
RATIOS = (
    ("full/raw", "cider-full", "cider-raw"),
    ("raw/NAX", "cider-raw", "nax-gemm"),
    ("nax-full/NAX", "nax-full", "nax-gemm"),
)
COLUMNS = ("cider-full", "cider-raw", "NAX", "full/raw", "raw/NAX", "nax-full", "nax-full/NAX",
           "mlx-fp16", "mlx-q8", "torch-int8")


@dataclass
class Cell:
    """One contender at one shape: seconds, or why there is no time."""

    seconds: float | None = None
    unavailable: str | None = None
    mismatch: str | None = None

    def text(self) -> str:
        if self.seconds is not None:
            return f"{self.seconds * 1e3:.3f}"
        return "MISMATCH" if self.mismatch else "n/a"


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """'16x4096x4096,128x3584x18944' -> [(16, 4096, 4096), (128, 3584, 18944)]."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"--shapes: expected MxKxN with positive integers, got {item.strip()!r}")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def measure(shape, name: str, repeat: int) -> Cell:
    try:
        prepared = contenders.get(name).ready(*shape)
    except Unavailable as exc:
        return Cell(unavailable=str(exc))
    except contenders.MismatchError as exc:
        return Cell(mismatch=str(exc))
    return Cell(seconds=contenders.median_seconds(prepared.run, repeat))


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


def run(shapes, repeat: int = 5, progress: Progress | None = None) -> dict:
    """{shape: {contender: Cell}} over every shape and timed contender."""
    results = {}
    for shape in shapes:
        row = {}
        for _, name in TIMED:
            row[name] = measure(shape, name, repeat)
            if progress:
                progress.step(f"{name} {'x'.join(map(str, shape))}")
        results[shape] = row
    return results


def _ratio(row, num: str, den: str) -> str:
    a, b = row[num].seconds, row[den].seconds
    return f"{a / b:.2f}" if a is not None and b is not None else "n/a"


def table_rows(results) -> list[list[str]]:
    rows = []
    for (m, k, n), row in results.items():
        cells = {title: row[name].text() for title, name in TIMED}
        cells.update({title: _ratio(row, num, den) for title, num, den in RATIOS})
        rows.append([str(m), str(k), str(n)] + [cells[c] for c in COLUMNS])
    return rows


def notes(results) -> list[str]:
    """One line per contender that did not run everywhere: its reason (first seen)."""
    lines = []
    for _, name in TIMED:
        for shape, row in results.items():
            cell = row[name]
            if cell.mismatch:
                lines.append(f"{name}: MISMATCH at {shape}: {cell.mismatch}")
                break
            if cell.unavailable:
                lines.append(f"{name}: n/a: {cell.unavailable}")
                break
    return lines


def render(results, markdown: bool) -> str:
    header = ["M", "K", "N", *COLUMNS]
    rows = table_rows(results)
    out = []
    if markdown:
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "|".join("---" for _ in header) + "|")
        out += ["| " + " | ".join(r) + " |" for r in rows]
        out.append("")
        out += [f"- {line}" for line in notes(results)]
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        out.append("  ".join(h.rjust(w) for h, w in zip(header, widths)))
        out += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
        out.append("")
        out += notes(results)
    return "\n".join(out)


def any_mismatch(results) -> bool:
    return any(cell.mismatch for row in results.values() for cell in row.values())


def main(args) -> int:
    if args.shapes:
        shapes = parse_shapes(args.shapes)
        chosen = "--shapes"
    else:
        if args.profile:
            profile, why = args.profile, "--profile"
        else:
            profile, why = contenders.choose_profile()
        shapes = list(contenders.profile_shapes(profile))
        chosen = f"profile {profile} ({why})"
    name, reason = backends.choose(None)
    print(f"int8nax compare: backend {name} ({reason}); shapes: {chosen}; "
          f"median of {args.repeat} calls, ms per call")
    show = args.progress or (args.progress is None and sys.stderr.isatty())
    results = run(shapes, args.repeat, Progress(len(shapes) * len(TIMED), sys.stderr, show))
    print(render(results, args.markdown))
    return 1 if any_mismatch(results) else 0


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="side-by-side timings of int8nax, cider and baselines",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", help="comma-separated MxKxN (default: the benchmark profile's shapes)")
    p.add_argument("--profile", choices=sorted(contenders.PROFILES),
                   help="shape profile (default: chosen by backend, INT8NAX_BENCH_PROFILE overrides)")
    p.add_argument("--repeat", type=int, default=5, help="timed calls per contender and shape (default 5)")
    p.add_argument("--markdown", action="store_true", help="print a markdown table (paste into an issue)")
    p.add_argument("--progress", action="store_true", default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    p.set_defaults(func=main)
