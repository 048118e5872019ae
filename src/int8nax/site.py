"""`int8nax site HTML_DIR`: the comparison page of the published asv site.

Run after `asv publish`. It reads asv's result files (.asv/results/<machine>/*.json) directly
and writes, into the published site,
    compare.html  for each machine, at the latest commit that has results there, and for each
                  shape with results: the contenders side by side as a plot (inline SVG, no
                  JavaScript, so it opens offline) and a table: seconds per call in both modes
                  (time_<name>: one call then block; time_<name>_chain: per call of a dependent
                  chain), the speed ratio to each peer, TOPS = 2*M*K*N / time, and the fraction
                  of the machine's roofline (ceilings: int8nax.bench.machines)
    compare.json  the same entries, machine-readable (tools/asv_site.py checks the page and
                  this file against asv's own graph files)
and links the page from asv's index.html. asv 0.6.6's index loads its JavaScript from CDNs;
when they cannot load (offline), asv sends the browser to error.html. The command points that
fallback at compare.html#offline instead, which says why the interactive graphs are missing
and how to get them (tools/asv_site.py vendor).

asv's result format (version 2), as read here: a file holds "commit_hash", "date" (commit
date, ms), "env_name", "params" (the machine's), "result_columns" and "results":
{benchmark name: [column values in result_columns order]}; column "result" is a list with
one value per combination of column "params" (a list of parameter value lists, their
Cartesian product in order). A value is a number, NaN (skipped: n/a) or null (failed).
A benchmark absent from a file was not run at that commit.
"""

from __future__ import annotations

import argparse
import html
import itertools
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import site_models
from .bench import machines as machine_ceilings
from .bench import problems, timing

MODES = ("call", "chain")
MODE_TITLES = {"call": "one call", "chain": "per call, chained"}


@dataclass(frozen=True)
class Format:
    """How a contender's problem is held: the arithmetic's number format (a key of the
    machine's ceilings), bytes per element of A [M, K], of B [N, K] (weights, including their
    scales) and of the output [M, N], and whether it computes on the host CPU."""

    arithmetic: str
    a: float
    b: float
    out: float
    on_host: bool = False
    b_per_row: float = 0.0  # bytes per weight row on top of b per element (W8A8's float32 scale)

    def bytes_moved(self, m: int, k: int, n: int) -> float:
        """A + B + output, each read or written once."""
        return self.a * m * k + self.b * n * k + self.b_per_row * n + self.out * m * n


@dataclass(frozen=True)
class ContenderInfo:
    name: str  # the contender's name in int8nax.bench.contenders
    stem: str  # its asv benchmarks: time_<stem>, time_<stem>_chain, track_<stem>_tops
    fmt: Format
    peer: bool  # someone else's implementation (or a baseline): the others are compared to it


_RAW = Format("int8", a=1, b=1, out=4)
_W8A8 = Format("int8", a=2, b=1, out=2, b_per_row=4)  # float16 x in, int8 codes + float32 scale per row
CONTENDERS: tuple[ContenderInfo, ...] = (
    ContenderInfo("nax-gemm", "nax_gemm", _RAW, peer=False),
    ContenderInfo("cider-raw", "cider_raw", _RAW, peer=True),
    ContenderInfo("cublaslt-int8", "cublaslt_int8", _RAW, peer=True),
    ContenderInfo("torch-int8", "torch_int8", _RAW, peer=True),
    ContenderInfo("nax-full", "nax_full", _W8A8, peer=False),
    ContenderInfo("cider-full", "cider_full", _W8A8, peer=True),
    ContenderInfo("mlx-fp16", "mlx_fp16_matmul", Format("fp16", a=2, b=2, out=2), peer=True),
    # 8-bit codes plus a float16 scale and bias per group of 64 weights
    ContenderInfo("mlx-q8", "mlx_q8_matmul", Format("fp16", a=2, b=1 + 4 / 64, out=2), peer=True),
    ContenderInfo("numpy-sgemm", "numpy_sgemm", Format("fp32", a=4, b=4, out=4, on_host=True), peer=True),
)
"""Every contender of the asv suite (benchmarks/), in the order the page shows them.
A benchmark of an unknown stem still shows, under its stem, without a roofline."""

_BENCH = re.compile(r"^(?P<prefix>.+)\.time_(?P<stem>\w+?)(?P<chain>_chain)?$")

NOT_CONTENDERS = ("bench_ratio.", "bench_model.")
"""Benchmark modules whose time_ values are not times of a contender: the regression gate's
ratio benchmarks record int8nax's time over a reference's (benchmarks/bench_ratio.py); the
model benchmarks (benchmarks/bench_model.py) have their own section (int8nax.site_models)."""


class SiteError(Exception):
    """What the command cannot do, and why (printed, exit status 1)."""


# --- reading asv's results -----------------------------------------------------------------

@dataclass
class Value:
    """One benchmark at one parameter value: seconds, or why there is none."""

    seconds: float | None = None
    status: str = "absent"  # "ok", "skipped" (NaN), "failed" (null), "absent" (not run)

    def text(self) -> str:
        return {"ok": "", "skipped": "n/a (skipped)", "failed": "failed",
                "absent": "no result at this commit"}[self.status]


@dataclass
class ResultFile:
    path: Path
    commit: str
    date: int
    env: str
    started: int
    values: dict[str, dict[str, Value]]  # benchmark -> parameter repr -> Value


def _parse_value(raw) -> Value:
    if raw is None:
        return Value(status="failed")
    if isinstance(raw, (int, float)) and math.isfinite(raw):
        return Value(float(raw), "ok")
    return Value(status="skipped")


def read_result_file(path: Path) -> ResultFile:
    """One asv result file (format version 2) -> its time_ values by benchmark and parameter."""
    try:
        data = json.loads(path.read_text())
        columns = data["result_columns"]
        i_result, i_params = columns.index("result"), columns.index("params")
        commit, date = data["commit_hash"], int(data.get("date") or 0)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SiteError(f"{path}: not an asv result file ({type(exc).__name__}: {exc})") from None
    i_started = columns.index("started_at") if "started_at" in columns else None
    values: dict[str, dict[str, Value]] = {}
    started = 0
    for bench, entry in data.get("results", {}).items():
        if not _BENCH.match(bench) or bench.startswith(NOT_CONTENDERS):
            continue
        result, params = entry[i_result], entry[i_params]
        if i_started is not None and len(entry) > i_started and entry[i_started]:
            started = max(started, int(entry[i_started]))
        if not params:  # not parametrized: no shape
            continue
        combos = [", ".join(c) if len(c) > 1 else c[0] for c in itertools.product(*params)]
        if not isinstance(result, list):
            result = [result] * len(combos)
        values[bench] = {c: _parse_value(r) for c, r in zip(combos, result)}
    return ResultFile(path, commit, date, data.get("env_name", ""), started, values)


@dataclass
class MachineResults:
    name: str
    info: dict  # machine.json
    commit: str
    date: int
    envs: list[str]
    values: dict[str, dict[str, Value]]  # benchmark -> parameter repr -> Value (merged envs)


def _has_time(rf: ResultFile) -> bool:
    return any(v.status == "ok" for per in rf.values.values() for v in per.values())


def read_machine(folder: Path, commits: set[str] | None = None) -> MachineResults | None:
    """The latest commit (by commit date) of `folder` that has any time result, its files merged
    (several environments at one commit: a number beats n/a, the newer run beats the older).
    `commits`: only these are considered (the ones `asv publish` put on the site), if given."""
    files = [read_result_file(p) for p in sorted(folder.glob("*.json")) if p.name != "machine.json"]
    files = [f for f in files if _has_time(f) and (commits is None or f.commit in commits)]
    if not files:
        return None
    latest = max(files, key=lambda f: (f.date, f.started))
    same = sorted((f for f in files if f.commit == latest.commit), key=lambda f: f.started)
    merged: dict[str, dict[str, Value]] = {}
    for f in same:
        for bench, per in f.values.items():
            slot = merged.setdefault(bench, {})
            for param, value in per.items():
                old = slot.get(param)
                if old is None or value.status == "ok" or old.status != "ok":
                    slot[param] = value
    info_path = folder / "machine.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    return MachineResults(folder.name, info, latest.commit, latest.date, [f.env for f in same], merged)


def read_results(results_dir: Path, commits: set[str] | None = None) -> list[MachineResults]:
    if not results_dir.is_dir():
        raise SiteError(f"{results_dir} does not exist: run `asv run` first, or pass --results")
    found = [read_machine(d, commits) for d in sorted(results_dir.iterdir()) if d.is_dir()]
    return [m for m in found if m is not None]


# --- the comparison ------------------------------------------------------------------------

def parse_shape(text: str) -> tuple[int, ...] | None:
    """'(16, 4096, 4096)' -> (16, 4096, 4096); None for anything that is not three integers."""
    parts = re.findall(r"-?\d+", text)
    return tuple(int(p) for p in parts) if len(parts) == 3 else None


@dataclass
class Entry:
    """One contender at one shape on one machine."""

    contender: str
    benchmarks: dict[str, str | None]  # mode -> asv benchmark name (None: not in the results)
    values: dict[str, Value]  # mode -> Value
    tops: dict[str, float | None] = field(default_factory=dict)
    roofline: dict[str, float | None] = field(default_factory=dict)
    ceiling: tuple[float, str] | None = None  # (attainable TOPS, "compute" | "memory")
    ceiling_note: str = ""
    ratios: dict[str, dict[str, float | None]] = field(default_factory=dict)  # peer -> mode -> t_peer/t_self

    @property
    def has_result(self) -> bool:
        return any(v.status == "ok" for v in self.values.values())

    def seconds(self, mode: str) -> float | None:
        return self.values[mode].seconds


@dataclass
class ShapeBlock:
    shape: str
    entries: list[Entry]
    peers: list[str]  # peers with a time at this shape: the ratio columns


@dataclass
class MachineBlock:
    results: MachineResults
    declared: machine_ceilings.Machine | None
    shapes: list[ShapeBlock]
    why_not: str = ""  # why no ceilings apply, when declared is None


def _roster(all_results: list[MachineResults]) -> list[tuple[str, str]]:
    """(contender label, stem) of every contender of the suite plus any other stem that has
    time_ results on some machine: every machine lists all of them, missing ones as missing."""
    known = [(c.name, c.stem) for c in CONTENDERS]
    stems = {c.stem for c in CONTENDERS}
    extra = sorted({m.group("stem") for r in all_results for b in r.values
                    if (m := _BENCH.match(b)) and m.group("stem") not in stems})
    return known + [(s, s) for s in extra]


def _find(values: dict, stem: str, chain: bool) -> str | None:
    for bench in sorted(values):
        m = _BENCH.match(bench)
        if m and m.group("stem") == stem and bool(m.group("chain")) == chain:
            return bench
    return None


def _ceilings_for(declared: machine_ceilings.Machine | None, info: ContenderInfo | None, why_not: str):
    if declared is None:
        return None, why_not
    if info is None:
        return None, "number format of this contender not declared (int8nax/site.py CONTENDERS)"
    ceilings = declared.host if info.fmt.on_host else declared.device
    if ceilings is None:
        return None, "the host CPU's ceilings are not declared"
    return ceilings, ""


def compare_machine(results: MachineResults, roster: list[tuple[str, str]]) -> MachineBlock:
    declared, why_not = machine_ceilings.match(results.name, results.info)
    infos = {c.name: c for c in CONTENDERS}
    shapes: list[str] = []
    for per in results.values.values():
        for param, value in per.items():
            if value.status == "ok" and param not in shapes:
                shapes.append(param)
    order = {}
    for per in results.values.values():
        for i, param in enumerate(per):
            order.setdefault(param, i)
    shapes.sort(key=lambda p: order[p])

    blocks = []
    for shape in shapes:
        dims = parse_shape(shape)
        entries = []
        for label, stem in roster:
            benches = {"call": _find(results.values, stem, False), "chain": _find(results.values, stem, True)}
            values = {mode: (results.values[b].get(shape, Value()) if b else Value()) for mode, b in benches.items()}
            entry = Entry(label, benches, values)
            info = infos.get(label)
            ceilings, note = _ceilings_for(declared, info, why_not)
            if dims is not None:
                for mode in MODES:
                    s = entry.seconds(mode)
                    entry.tops[mode] = timing.tops(dims, s) if s else None
                if ceilings is not None:
                    entry.ceiling = machine_ceilings.attainable_tops(
                        ceilings, info.fmt.arithmetic, problems.ops(dims), info.fmt.bytes_moved(*dims))
                    if entry.ceiling is None:
                        note = f"no {info.fmt.arithmetic} ceiling declared for this machine"
            else:
                note = f"parameter {shape!r} is not an (M, K, N) shape"
            entry.ceiling_note = note
            for mode in MODES:
                t = entry.tops.get(mode)
                entry.roofline[mode] = t / entry.ceiling[0] if (t is not None and entry.ceiling) else None
            entries.append(entry)
        peer_names = [c.name for c in CONTENDERS if c.peer]
        peers = [e.contender for e in entries if e.has_result and
                 (e.contender in peer_names or e.contender not in infos)]
        by_name = {e.contender: e for e in entries}
        for entry in entries:
            for peer in peers:
                entry.ratios[peer] = {}
                for mode in MODES:
                    mine, theirs = entry.seconds(mode), by_name[peer].seconds(mode)
                    entry.ratios[peer][mode] = theirs / mine if (mine and theirs and peer != entry.contender) else None
        blocks.append(ShapeBlock(shape, entries, peers))
    return MachineBlock(results, declared, blocks, why_not)


def published_commits(html_dir: Path) -> set[str] | None:
    """The commits `asv publish` put on the site (index.json's revision map): results of other
    commits (not on asv's `branches`, e.g. a PR's) are not on the site, so not compared either."""
    try:
        return set(json.loads((html_dir / "index.json").read_text())["revision_to_hash"].values())
    except (OSError, ValueError, KeyError, AttributeError):
        return None


def compare(results_dir: Path, commits: set[str] | None = None) -> list[MachineBlock]:
    all_results = read_results(results_dir, commits)
    roster = _roster(all_results)
    return [compare_machine(r, roster) for r in all_results]


# --- output --------------------------------------------------------------------------------

def fmt_seconds(s: float | None) -> str:
    if s is None:
        return ""
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    return f"{s:.3g} s"


def fmt_number(x: float | None, digits: int = 3) -> str:
    if x is None:
        return ""
    if x == 0:
        return "0"
    return f"{x:.{digits}g}" if abs(x) >= 10 ** -(digits + 1) else f"{x:.1e}"


def fmt_ratio(x: float | None) -> str:
    if x is None:
        return ""
    if x >= 100:
        return f"{x:.0f}×"
    return f"{x:.2f}×" if x >= 0.1 else f"{x:.2g}×"  # 0.00073×, not 0.00×


def to_json(blocks: list[MachineBlock]) -> dict:
    machines = {}
    for block in blocks:
        r = block.results
        entries = []
        for sb in block.shapes:
            for e in sb.entries:
                entries.append({
                    "shape": sb.shape, "contender": e.contender, "has_result": e.has_result,
                    "benchmarks": e.benchmarks,
                    "seconds": {m: e.seconds(m) for m in MODES},
                    "status": {m: e.values[m].status for m in MODES},
                    "tops": e.tops, "roofline": e.roofline,
                    "ceiling_tops": e.ceiling[0] if e.ceiling else None,
                    "bound": e.ceiling[1] if e.ceiling else None,
                    "ratios": e.ratios,
                })
        machines[r.name] = {"commit": r.commit, "date": r.date, "envs": r.envs,
                            "declared": block.declared.name if block.declared else None,
                            "shapes": [sb.shape for sb in block.shapes], "entries": entries}
    return {"generated_by": "int8nax site", "modes": list(MODES), "machines": machines}


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 24px 40px;color:#222}
h1{font-size:22px;margin:18px 0 4px} h2{font-size:19px;margin:28px 0 4px;border-bottom:2px solid #ccc}
h3{font-size:15px;margin:18px 0 6px} .small{font-size:12px;color:#555}
.notice{display:none;background:#fff3cd;border:1px solid #e0c060;padding:8px 12px;margin:12px 0}
.notice:target{display:block}
nav.toc a{margin-right:10px} .shape{display:flex;flex-wrap:wrap;gap:18px;align-items:flex-start}
table{border-collapse:collapse;font-size:12.5px} th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f3f3f3} td.name,th.name{text-align:left;white-space:nowrap}
tr.missing td{color:#999;font-style:italic} td.self{color:#bbb}
.better{color:#1a7f37} .worse{color:#b3261e}
svg text{font-size:11px;fill:#333} svg .axis{stroke:#999} svg .grid{stroke:#eee}
.call{fill:#4e79a7} .chain{fill:#f28e2b} details{margin:6px 0}
"""


def _svg(sb: ShapeBlock) -> str:
    """Horizontal bars of TOPS, two per contender (one call, chained); missing ones labelled."""
    rows = sb.entries
    label_w, bar_w, row_h, top = 110, 420, 26, 26
    height = top + row_h * len(rows) + 24
    tops = [t for e in rows for t in e.tops.values() if t]
    scale_max = _nice_max(max(tops) if tops else 1.0)
    out = [f'<svg class="plot" xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 70}" '
           f'height="{height}" role="img" aria-label="TOPS per contender at {html.escape(sb.shape)}">',
           f'<rect class="call" x="{label_w}" y="6" width="10" height="10"/>'
           f'<text x="{label_w + 14}" y="15">one call</text>'
           f'<rect class="chain" x="{label_w + 90}" y="6" width="10" height="10"/>'
           f'<text x="{label_w + 104}" y="15">per call, chained</text>'
           f'<text x="{label_w + bar_w + 66}" y="15" text-anchor="end">TOPS</text>']
    for i in range(5):
        x = label_w + bar_w * i / 4
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 20}"/>'
                   f'<text x="{x:.1f}" y="{height - 6}" text-anchor="middle">{fmt_number(scale_max * i / 4)}</text>')
    for r, e in enumerate(rows):
        y = top + r * row_h
        name = html.escape(e.contender)
        out.append(f'<text x="{label_w - 6}" y="{y + 15}" text-anchor="end">{name}</text>')
        if not e.has_result:
            out.append(f'<text class="missing" x="{label_w + 4}" y="{y + 15}" fill="#999">missing: '
                       f'{html.escape(e.values["call"].text())}</text>')
            continue
        for j, mode in enumerate(MODES):
            t = e.tops[mode]
            yy = y + 2 + j * 11
            if t is None:
                out.append(f'<text x="{label_w + 4}" y="{yy + 9}" fill="#999">{mode}: missing</text>')
                continue
            w = max(bar_w * t / scale_max, 0.5)
            out.append(f'<rect class="bar {mode}" data-contender="{name}" data-mode="{mode}" '
                       f'data-tops="{t!r}" x="{label_w}" y="{yy}" width="{w:.2f}" height="10">'
                       f'<title>{name}, {MODE_TITLES[mode]}: {fmt_number(t)} TOPS, '
                       f'{fmt_seconds(e.seconds(mode))}</title></rect>'
                       f'<text x="{label_w + w + 4:.1f}" y="{yy + 9}">{fmt_number(t)}</text>')
    out.append(f'<line class="axis" x1="{label_w}" y1="{top - 4}" x2="{label_w}" y2="{height - 20}"/></svg>')
    return "".join(out)


def _nice_max(x: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is >= 1.05 x."""
    x *= 1.05
    power = 10 ** math.floor(math.log10(x))
    return next(power * f for f in (1, 2, 2.5, 5, 10) if power * f >= x)


def _table(sb: ShapeBlock) -> str:
    head = ('<tr><th class="name" rowspan="2">contender</th><th colspan="2">time per call</th>'
            '<th colspan="2">TOPS</th><th colspan="2">of roofline</th>'
            + (f'<th colspan="{len(sb.peers)}">speed vs peer: peer time / this time (one call · chained)</th>'
               if sb.peers else "")
            + '</tr><tr><th>one call</th><th>chained</th><th>one call</th><th>chained</th>'
              '<th>one call</th><th>chained</th>'
            + "".join(f'<th>{html.escape(p)}</th>' for p in sb.peers) + "</tr>")
    body = []
    span = 6 + len(sb.peers)
    for e in sb.entries:
        name = html.escape(e.contender)
        if not e.has_result:
            why = e.values["call"].text()
            if e.values["chain"].status != e.values["call"].status:
                why += f"; chained: {e.values['chain'].text()}"
            body.append(f'<tr class="missing" data-contender="{name}"><td class="name">{name}</td>'
                        f'<td colspan="{span}" style="text-align:left">missing: {html.escape(why)}</td></tr>')
            continue
        cells = [f'<td class="name">{name}</td>']
        for mode in MODES:
            v = e.values[mode]
            text = fmt_seconds(v.seconds) if v.status == "ok" else f"missing: {v.text()}"
            cells.append(f'<td class="seconds" data-mode="{mode}" data-seconds="{v.seconds!r}">{html.escape(text)}</td>')
        for mode in MODES:
            cells.append(f'<td class="tops" data-mode="{mode}">{fmt_number(e.tops.get(mode))}</td>')
        for mode in MODES:
            frac = e.roofline.get(mode)
            title = ""
            if e.ceiling:
                title = f' title="ceiling {fmt_number(e.ceiling[0])} TOPS ({e.ceiling[1]} bound)"'
            elif e.ceiling_note:
                title = f' title="{html.escape(e.ceiling_note)}"'
            text = f"{frac * 100:.3g} %" if frac is not None else ("n/a" if e.values[mode].status == "ok" else "")
            cells.append(f'<td class="roofline" data-mode="{mode}"{title}>{text}</td>')
        for peer in sb.peers:
            if peer == e.contender:
                cells.append(f'<td class="ratio self" data-peer="{html.escape(peer)}">—</td>')
                continue
            rs = e.ratios[peer]
            attrs = "".join(f' data-{m}="{rs[m]!r}"' for m in MODES if rs[m] is not None)
            parts = [f'<span class="{"better" if r >= 1 else "worse"}">{fmt_ratio(r)}</span>'
                     if r is not None else "–" for r in (rs[m] for m in MODES)]
            cells.append(f'<td class="ratio" data-peer="{html.escape(peer)}"{attrs}>{" · ".join(parts)}</td>')
        body.append(f'<tr class="result" data-contender="{name}">{"".join(cells)}</tr>')
    return f'<table class="contenders" data-shape="{html.escape(sb.shape)}">{head}{"".join(body)}</table>'


def _ceiling_text(declared: machine_ceilings.Machine | None, why_not: str) -> str:
    if declared is None:
        return f'<p class="small">No roofline fractions: {html.escape(why_not)}.</p>'
    parts = []
    for label, c in (("device", declared.device), ("host", declared.host)):
        if c is None:
            continue
        peaks = ", ".join(f"{f} {fmt_number(v)} TOPS" for f, v in c.compute_tops.items())
        mem = f"memory {fmt_number(c.memory_tbps)} TB/s" if c.memory_tbps else "memory: not declared"
        mark = " <b>(estimates)</b>" if c.estimate else ""
        srcs = "".join(f"<li>{html.escape(k)}: {html.escape(v)}</li>" for k, v in c.sources.items())
        parts.append(f"<details><summary>{label} ceilings{mark}: {html.escape(peaks)}; {html.escape(mem)}"
                     f"</summary><ul class='small'>{srcs}</ul></details>")
    return f'<p class="small">{html.escape(declared.description)}</p>' + "".join(parts)


def render(blocks: list[MachineBlock], results_dir: str = ".asv/results") -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    toc = " ".join(f'<a href="#machine-{html.escape(b.results.name)}">{html.escape(b.results.name)}</a>'
                   for b in blocks)
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           '<link rel="icon" href="swallow.ico">',  # asv's icon, in the site: no request that 404s
           f'<title>int8nax: contenders compared</title><style>{_CSS}</style></head><body>',
           '<div id="offline" class="notice"><b>The interactive asv graphs could not load.</b> asv '
           '0.6.6 loads jQuery, Flot and Bootstrap from CDNs, which this browser cannot reach (offline?). '
           'This page needs none of them. To serve the libraries with the site: '
           '<code>npm ci --prefix tools/asv-site &amp;&amp; python tools/asv_site.py vendor .asv/html</code>.</div>',
           '<h1>int8nax: contenders compared</h1>',
           f'<p class="small">Generated by <code>int8nax site</code> from <code>{html.escape(results_dir)}</code> '
           f'on {stamp}. <a href="index.html">The asv site</a> has the history per commit.</p>',
           '<p class="small">For each machine, the latest commit with results there (of those on the '
           'site\'s branches); for each shape '
           '(M, K, N) with results, every contender. <b>One call</b>: <code>time_&lt;name&gt;</code>, one call '
           'then block (mostly MLX\'s per-evaluation cost at small M). <b>Chained</b>: '
           '<code>time_&lt;name&gt;_chain</code>, seconds per call of a dependent chain with one block at '
           'the end. TOPS = 2·M·K·N / time. Roofline = TOPS / min(compute peak of the contender\'s '
           'arithmetic, memory bandwidth × 2·M·K·N / bytes moved), bytes moved = A + B + output, each '
           'once. Speed vs a peer = the peer\'s time / this contender\'s time (above 1: faster than '
           'the peer). Missing means no number: skipped (n/a), failed, or not run at that commit; '
           'never zero.</p>',
           f'<nav class="toc">Machines: {toc}</nav>']
    if not blocks:
        out.append("<p><b>No results.</b> Run <code>asv run</code> first.</p>")
    for b in blocks:
        r = b.results
        name = html.escape(r.name)
        date = time.strftime("%Y-%m-%d", time.gmtime(r.date / 1000)) if r.date else "?"
        hw = ", ".join(f"{k} {r.info[k]}" for k in ("cpu", "num_cpu", "gpu") if r.info.get(k))
        out.append(f'<section class="machine" id="machine-{name}" data-machine="{name}" '
                   f'data-commit="{html.escape(r.commit)}"><h2>{name}</h2>'
                   f'<p class="small">{html.escape(hw)}. Commit <code>{html.escape(r.commit[:8])}</code> '
                   f'(committed {date}); environment(s): {html.escape(", ".join(r.envs))}.</p>'
                   + _ceiling_text(b.declared, b.why_not))
        out.append('<nav class="toc small">Shapes: ' + " ".join(
            f'<a href="#{name}-{_anchor(sb.shape)}">{html.escape(sb.shape)}</a>' for sb in b.shapes) + "</nav>")
        for sb in b.shapes:
            n = sum(e.has_result for e in sb.entries)
            out.append(f'<h3 id="{name}-{_anchor(sb.shape)}">(M, K, N) = {html.escape(sb.shape)} '
                       f'<span class="small">{n} of {len(sb.entries)} contenders have results</span></h3>'
                       f'<div class="shape" data-machine="{name}" data-shape="{html.escape(sb.shape)}">'
                       f'{_svg(sb)}{_table(sb)}</div>')
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)


def _anchor(shape: str) -> str:
    return "x".join(re.findall(r"\d+", shape)) or re.sub(r"\W+", "-", shape)


# --- publishing into the site ---------------------------------------------------------------

NAV_ID = "nav-li-compare"
_NAV_AFTER = re.compile(r'(<li id="nav-li-regressions">.*?</li>)', re.S)
_FALLBACK = re.compile(r'(function js_load_failure\(\)\s*\{\s*window\.location\s*=\s*)"error\.html"')


def link_index(index: Path) -> list[str]:
    """Link compare.html from asv's index.html (idempotent); returns what was changed."""
    text = index.read_text()
    changed = []
    if NAV_ID not in text:
        link = f'\n\t<li id="{NAV_ID}"><a href="compare.html">Contenders compared</a></li>'
        text, n = _NAV_AFTER.subn(lambda m: m.group(1) + link, text, count=1)
        if not n:
            raise SiteError(f"{index}: no 'nav-li-regressions' entry to put the link after "
                            "(not asv 0.6's index.html?)")
        changed.append("link")
    text, n = _FALLBACK.subn(lambda m: m.group(1) + '"compare.html#offline"', text, count=1)
    if n:
        changed.append("offline fallback")
    index.write_text(text)
    return changed


def publish(html_dir: Path, results_dir: Path) -> dict:
    """Write compare.html and compare.json into html_dir and link them from index.html."""
    index = html_dir / "index.html"
    if not index.is_file():
        raise SiteError(f"{index} does not exist: run `asv publish` first")
    commits = published_commits(html_dir)
    blocks = compare(results_dir, commits)
    page = render(blocks, str(results_dir))
    # The model section (int8nax.site_models) goes at the end of the page.
    page = page.replace("</body></html>", site_models.section(results_dir, commits) + "\n</body></html>")
    (html_dir / "compare.html").write_text(page)
    data = to_json(blocks)
    data["models"] = site_models.to_json(site_models.read(results_dir, commits))
    (html_dir / "compare.json").write_text(json.dumps(data, indent=1, allow_nan=False))
    changed = link_index(index)
    return {"page": str(html_dir / "compare.html"), "index": changed,
            "machines": {m: sum(e["has_result"] for e in v["entries"]) for m, v in data["machines"].items()}}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "site", help="write the comparison page into a published asv site (after `asv publish`)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("html_dir", type=Path, help="asv's html_dir (.asv/html)")
    p.add_argument("--results", type=Path,
                   help="asv's results_dir (default: 'results' beside html_dir, i.e. .asv/results)")
    p.set_defaults(func=main)


def main(args) -> int:
    results = args.results or args.html_dir.parent / "results"
    try:
        report = publish(args.html_dir, results)
    except SiteError as exc:
        print(f"int8nax site: {exc}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{m}: {n}" for m, n in report["machines"].items()) or "no machine has results"
    print(f"wrote {report['page']} (entries with results per machine: {counts}); "
          f"index.html: {', '.join(report['index']) or 'already linked'}")
    return 0
