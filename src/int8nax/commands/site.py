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
and links the page from asv's index.html. asv 0.6.6's index loads its JavaScript from CDNs:
the command copies the same libraries, shipped with int8nax (int8nax.commands.site_vendor), into the
site and points index.html at them, so that the graphs work offline. Should they still fail
to load, asv sends the browser to error.html; the command points that fallback at
compare.html#offline instead, which says why the interactive graphs are missing.

asv's result files are read through int8nax.commands.asv_format (format version 2): a number is a
result, NaN n/a (skipped), null a failure; a benchmark absent from a file was not run at
that commit.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import asv_format, site_models, site_vendor
from ..bench import contenders as bench_contenders
from ..bench import machines as machine_ceilings
from ..bench import problems, timing

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
    ContenderInfo("int8nax-gemm", "int8nax_gemm", _RAW, peer=False),
    ContenderInfo("cider-raw", "cider_raw", _RAW, peer=True),
    ContenderInfo("cublaslt-int8", "cublaslt_int8", _RAW, peer=True),
    ContenderInfo("torch-int8", "torch_int8", _RAW, peer=True),
    ContenderInfo("int8nax-full", "int8nax_full", _W8A8, peer=False),
    ContenderInfo("cider-full", "cider_full", _W8A8, peer=True),
    ContenderInfo("mlx-fp16", "mlx_fp16_matmul", Format("fp16", a=2, b=2, out=2), peer=True),
    # 8-bit codes plus a float16 scale and bias per group of 64 weights
    ContenderInfo("mlx-q8", "mlx_q8_matmul", Format("fp16", a=2, b=1 + 4 / 64, out=2), peer=True),
    ContenderInfo("numpy-sgemm", "numpy_sgemm", Format("fp32", a=4, b=4, out=4, on_host=True), peer=True),
)
"""Every contender of the asv suite (benchmarks/), in the order the page shows them.
A benchmark of an unknown stem still shows, under its stem, without a roofline."""

_BENCH = re.compile(r"^(?P<prefix>.+)\.time_(?P<stem>\w+?)(?P<chain>_chain)?$")

RATIO_BENCH = re.compile(r"^bench_ratio\.\w+\.track_(?P<stem>\w+)_ratio$")
"""The regression gate's ratio benchmarks: int8nax's time over a reference's at the same shape,
unitless (benchmarks/bench_ratio.py). The page shows them apart from the contenders' times."""

_KERNEL = re.compile(r"^(?P<prefix>.+)\.track_(?P<stem>\w+)_kernel$")
"""The kernel records (benchmarks/bench_kernel.py): per shape, contenders.kernel_id of what ran."""

NOT_CONTENDERS = ("bench_ratio.", "bench_model.")
"""Benchmark modules whose time_ values are not times of a contender: the regression gate's
ratio benchmarks record int8nax's time over a reference's (benchmarks/bench_ratio.py); the
model benchmarks (benchmarks/bench_model.py) have their own section (int8nax.commands.site_models)."""


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
    ratios: dict[str, dict[str, Value]] = field(default_factory=dict)  # ratio benchmark -> parameter -> Value
    kernels: dict[str, dict[str, int]] = field(default_factory=dict)  # stem -> parameter repr -> kernel id


def _parse_value(raw) -> Value:
    if raw is None:
        return Value(status="failed")
    if asv_format.finite(raw):
        return Value(float(raw), "ok")
    return Value(status="skipped")


def _param_text(combo: tuple[str, ...]) -> str:
    """How the page keys a parameter combination: the value, or the values joined by ", "."""
    return ", ".join(combo) if len(combo) > 1 else combo[0]


def read_result_file(path: Path) -> ResultFile:
    """One asv result file (int8nax.commands.asv_format) -> its time_ values by benchmark and parameter."""
    try:
        raw = asv_format.read(path)
    except asv_format.NotAResultFile as exc:
        raise SiteError(str(exc)) from None
    values: dict[str, dict[str, Value]] = {}
    started = 0
    ratios: dict[str, dict[str, Value]] = {}
    kernels: dict[str, dict[str, int]] = {}
    for bench, entry in raw.entries.items():
        kernel = _KERNEL.match(bench)
        if kernel and entry.params:
            kernels[kernel.group("stem")] = {_param_text(c): int(r) for c, r in entry.pairs() if asv_format.finite(r)}
            continue
        is_ratio = bool(RATIO_BENCH.match(bench))
        if not is_ratio and (not _BENCH.match(bench) or bench.startswith(NOT_CONTENDERS)):
            continue
        started = max(started, entry.started)
        if not entry.params:  # not parametrized: no shape
            continue
        (ratios if is_ratio else values)[bench] = {_param_text(c): _parse_value(r) for c, r in entry.pairs()}
    return ResultFile(path, raw.commit, raw.date, raw.env, started, values, ratios, kernels)


@dataclass
class MachineResults:
    name: str
    info: dict  # machine.json
    commit: str
    date: int
    envs: list[str]
    values: dict[str, dict[str, Value]]  # benchmark -> parameter repr -> Value (merged envs)
    ratios: dict[str, dict[str, Value]] = field(default_factory=dict)  # the gate's ratios, merged alike
    kernels: dict[str, dict[str, int]] = field(default_factory=dict)  # stem -> parameter -> kernel id
    previous_commit: str = ""  # the latest earlier commit with kernel records ("" if none)
    previous_kernels: dict[str, dict[str, int]] = field(default_factory=dict)


def _merged_kernels(files: list[ResultFile]) -> dict[str, dict[str, int]]:
    merged: dict[str, dict[str, int]] = {}
    for f in sorted(files, key=lambda f: f.started):
        for stem, per in f.kernels.items():
            merged.setdefault(stem, {}).update(per)
    return merged


def _has_time(rf: ResultFile) -> bool:
    return any(v.status == "ok" for per in rf.values.values() for v in per.values())


def read_machine(folder: Path, commits: set[str] | None = None) -> MachineResults | None:
    """The latest commit (by commit date) of `folder` that has any time result, its files merged
    (several environments at one commit: a number beats n/a, the newer run beats the older).
    `commits`: only these are considered (the ones `asv publish` put on the site), if given."""
    every = [read_result_file(p) for p in asv_format.result_paths(folder)]
    every = [f for f in every if commits is None or f.commit in commits]
    files = [f for f in every if _has_time(f)]
    if not files:
        return None
    latest = max(files, key=lambda f: (f.date, f.started))
    earlier = [f for f in every if f.kernels and f.commit != latest.commit
               and (f.date, f.started) < (latest.date, latest.started)]
    previous = max(earlier, key=lambda f: (f.date, f.started)).commit if earlier else ""
    same = sorted((f for f in files if f.commit == latest.commit), key=lambda f: f.started)
    merged: dict[str, dict[str, Value]] = {}
    ratios: dict[str, dict[str, Value]] = {}
    for f in same:
        for into, source in ((merged, f.values), (ratios, f.ratios)):
            for bench, per in source.items():
                slot = into.setdefault(bench, {})
                for param, value in per.items():
                    old = slot.get(param)
                    if old is None or value.status == "ok" or old.status != "ok":
                        slot[param] = value
    # kernel records from every file of the commit: a run of bench_kernel alone has no time
    kernels = _merged_kernels([f for f in every if f.commit == latest.commit])
    return MachineResults(folder.name, asv_format.machine_info(folder), latest.commit, latest.date, [f.env for f in same], merged, ratios,
                          kernels, previous,
                          _merged_kernels([f for f in every if f.commit == previous]))


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
    kernel: int | None = None  # what ran at this commit (bench_kernel's id), int8nax's contenders only
    kernel_before: int | None = None  # the same at the machine's previous commit with records
    kernel_text: str = ""  # the id in words, where int8nax here describes the same kernel
    kernel_text_before: str = ""

    @property
    def kernel_changed(self) -> bool:
        return self.kernel is not None and self.kernel_before is not None and self.kernel != self.kernel_before

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
    absent: list[str] = field(default_factory=list)  # contenders with no result at any shape here
    unmeasured: list[str] = field(default_factory=list)  # declared shapes with no result here
    here: bool = False  # the machine this command runs on (its latest run is the user's own)
    backend: str = ""  # the int8nax backend its results ran on ("cpu", "cuda", "metal"; "" unknown)
    m5_only: list[str] = field(default_factory=list)  # cider contenders no machine has reported yet
    reasons: dict[str, str] = field(default_factory=dict)  # absent contender -> why (here only)
    skipped: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # why -> contender -> shapes (here)


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
        return None, "number format of this contender not declared (int8nax/commands/site.py CONTENDERS)"
    ceilings = declared.host if info.fmt.on_host else declared.device
    if ceilings is None:
        return None, "the host CPU's ceilings are not declared"
    return ceilings, ""


def _has_any(results: MachineResults, stem: str) -> bool:
    return any(v.status == "ok" for b, per in results.values.items()
               if (m := _BENCH.match(b)) and m.group("stem") == stem for v in per.values())


def kernel_names(shapes) -> dict[int, str]:
    """{kernel id: description} of what int8nax's contenders run here at these shapes
    (bench.contenders.describe). An id stands for one description whichever machine recorded
    it, so a recorded id found here is shown in words; others stay numbers."""
    names: dict[int, str] = {}
    for text in shapes:
        dims = parse_shape(text)
        if dims is None:
            continue
        for name in bench_contenders.OPS:
            try:
                described = bench_contenders.describe(name, dims)
            except Exception:  # no int8nax backend here, or one that cannot say: ids stay numbers
                continue
            names[bench_contenders.kernel_id(described)] = described
    return names


def name_kernels(blocks: list[MachineBlock]) -> None:
    """Put the recorded kernel ids of every entry into words, where kernel_names knows them."""
    shapes = {sb.shape for b in blocks for sb in b.shapes if any(e.kernel is not None for e in sb.entries)}
    names = kernel_names(shapes) if shapes else {}
    for b in blocks:
        for sb in b.shapes:
            for e in sb.entries:
                e.kernel_text = names.get(e.kernel, "")
                e.kernel_text_before = names.get(e.kernel_before, "")


def compare_machine(results: MachineResults, roster: list[tuple[str, str]]) -> MachineBlock:
    """The machine's contenders side by side at each shape with results. A contender with no
    result at any shape here is not repeated at every shape: it is listed once (`absent`)."""
    declared, why_not = machine_ceilings.match(results.name, results.info)
    infos = {c.name: c for c in CONTENDERS}
    absent = [label for label, stem in roster if not _has_any(results, stem)]
    roster = [(label, stem) for label, stem in roster if label not in absent]
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
            entry.kernel = results.kernels.get(stem, {}).get(shape)
            entry.kernel_before = results.previous_kernels.get(stem, {}).get(shape)
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
    declared_shapes = [", ".join(map(str, s)) for s in problems.ALL_SHAPES]
    unmeasured = [f"({d})" for d in declared_shapes if f"({d})" not in shapes]
    return MachineBlock(results, declared, blocks, why_not, absent, unmeasured)


def published_commits(html_dir: Path) -> set[str] | None:
    """The commits `asv publish` put on the site (index.json's revision map): results of other
    commits (not on asv's `branches`, e.g. a PR's) are not on the site, so not compared either."""
    try:
        return set(json.loads((html_dir / "index.json").read_text())["revision_to_hash"].values())
    except (OSError, ValueError, KeyError, AttributeError):
        return None


def this_machine(machine_file: Path | None = None) -> str | None:
    """The asv machine name of this computer (asv keys ~/.asv-machine.json by host name, as
    `asv machine --yes` wrote it), or None when it has none."""
    import socket

    path = machine_file or Path.home() / ".asv-machine.json"
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    entry = entries.get(socket.gethostname()) if isinstance(entries, dict) else None
    return entry.get("machine") if isinstance(entry, dict) else None


def skip_reasons(names: list[str]) -> dict[str, str]:
    """Why each contender of `names` cannot run on this computer, as the benchmark suite's setup
    finds it (int8nax.bench.contenders: prepared at a tiny shape); a contender that can run is
    left out. asv records a skip as n/a without its reason, so the reasons are found again here."""
    from ..bench import contenders

    reasons = {}
    for name in names:
        if name not in contenders.CONTENDERS:
            continue
        try:
            contenders.get(name).prepare(4, 64, 64)
        except contenders.Unavailable as exc:
            reasons[name] = str(exc)
        except Exception as exc:  # noqa: BLE001 - a peer failing oddly: its reason, as the suite would show
            reasons[name] = f"{type(exc).__name__}: {exc}"
    return reasons


def skipped_shapes(block: MachineBlock) -> dict[str, dict[str, list[str]]]:
    """{why: {contender: [shape, ...]}} for the skipped (n/a) entries of this computer's block
    that the suite skips by rule (int8nax.bench.contenders.skip_reason: too slow here)."""
    from ..bench import contenders

    out: dict[str, dict[str, list[str]]] = {}
    for sb in block.shapes:
        dims = parse_shape(sb.shape)
        for e in sb.entries:
            if dims is None or e.values["call"].status != "skipped" or e.contender not in contenders.CONTENDERS:
                continue
            why = contenders.skip_reason(e.contender, dims)
            if why:
                out.setdefault(why, {}).setdefault(e.contender, []).append(sb.shape)
    return out


CIDER = ("cider-raw", "cider-full")
"""cider's contenders: they run only on an Apple M5 (cider is a Metal library)."""
M5_ONLY, M5_COMMAND = site_models.M5_ONLY, site_models.M5_COMMAND


def backend_of(results: MachineResults, texts: list[str] = ()) -> str:
    """The int8nax backend a machine's results ran on: the first word of a recorded kernel's
    description where int8nax here can name one (e.g. "cuda tma-ws-cooperative ..."), else its
    machine.json: an NVIDIA GPU -> "cuda", an Apple GPU -> "metal", no GPU -> "cpu"; "" unknown."""
    for text in texts:
        word = text.split(" ", 1)[0]
        if word in ("cpu", "cuda", "metal"):
            return word
    gpu = str(results.info.get("gpu", "")).strip()
    if "NVIDIA" in gpu:
        return "cuda"
    if "Apple" in gpu or gpu.startswith("M5"):
        return "metal"
    if gpu in ("", "none"):
        return "cpu"
    return ""


def compare(results_dir: Path, commits: set[str] | None = None, first: str | None = None,
            here: str | None = None) -> list[MachineBlock]:
    """Every machine's block, `first` (a machine name) at the top, then the others in name order.
    `here`: the machine this command runs on; its absent contenders get their reasons."""
    all_results = read_results(results_dir, commits)
    roster = _roster(all_results)
    blocks = [compare_machine(r, roster) for r in all_results]
    name_kernels(blocks)
    stems = {c.name: c.stem for c in CONTENDERS}
    unreported = [c for c in CIDER if not any(_has_any(r, stems[c]) for r in all_results)]
    for b in blocks:
        b.backend = backend_of(b.results, [e.kernel_text for sb in b.shapes for e in sb.entries if e.kernel_text])
        b.m5_only = [c for c in unreported if c in b.absent]
        if here and b.results.name == here:
            b.here = True
            b.reasons = skip_reasons(b.absent)
            b.skipped = skipped_shapes(b)
    return sorted(blocks, key=lambda b: b.results.name != first)


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
                    "kernel": e.kernel, "kernel_text": e.kernel_text or None,
                    "kernel_before": e.kernel_before, "kernel_changed": e.kernel_changed,
                })
        machines[r.name] = {"commit": r.commit, "date": r.date, "envs": r.envs, "backend": block.backend or None,
                            "m5_only": block.m5_only,
                            "previous_commit": r.previous_commit or None,
                            "declared": block.declared.name if block.declared else None,
                            "here": block.here,
                            "ratios": {b: {p: v.seconds for p, v in per.items() if v.status == "ok"}
                                       for b, per in r.ratios.items()}, "absent": {c: block.reasons.get(c) for c in block.absent},
                            "unmeasured_shapes": block.unmeasured,
                            "shapes": [sb.shape for sb in block.shapes], "entries": entries}
    return {"generated_by": "int8nax site", "modes": list(MODES), "machines": machines,
            "m5_only": {"text": M5_ONLY, "command": M5_COMMAND}}


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
td.kernel{text-align:left;font-size:11.5px} .changed{color:#b3261e;font-weight:bold}
.call{fill:#4e79a7} .chain{fill:#f28e2b} details{margin:6px 0}
p.here{background:#eef5ff;border:1px solid #9cc0ef;padding:8px 12px} details.absent ul{margin:4px 0}
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


def _kernel_words(kernel: int, text: str) -> str:
    return text or f"kernel #{kernel:08x}"


def _kernel_cell(e: Entry, previous: str) -> str:
    """What ran (bench_kernel's record), and whether it differs at the machine's previous commit."""
    if e.kernel is None:
        if e.contender in bench_contenders.OPS:  # int8nax's own: bench_kernel did not record this commit
            return '<td class="kernel none">no kernel id at this commit</td>'
        return ('<td class="kernel peer" title="a peer: its own library picks its kernel; its detail is in '
                '`int8nax compare`">—</td>')
    text = html.escape(_kernel_words(e.kernel, e.kernel_text))
    if e.kernel_changed:
        before = html.escape(_kernel_words(e.kernel_before, e.kernel_text_before))
        text += (f'<br><span class="changed" title="at {html.escape(previous[:8])}: {before}">changed since '
                 f'{html.escape(previous[:8])}</span> (was {before})')
    title = "" if e.kernel_text else (' title="the id of what ran there (bench_kernel); `int8nax compare` on that '
                                      'machine prints it in words"')
    return (f'<td class="kernel" data-kernel="{e.kernel}" data-changed="{str(e.kernel_changed).lower()}"{title}>'
            f'{text}</td>')


def _m5_only_row(name: str, span: int) -> str:
    return (f'<tr class="missing" data-m5-only="true" data-contender="{html.escape(name)}"><td class="name">{html.escape(name)}</td>'
            f'<td colspan="{span}" style="text-align:left"><b>{M5_ONLY}</b>: an M5 owner runs '
            f'<code>{html.escape(M5_COMMAND)}</code></td></tr>')


def _table(sb: ShapeBlock, previous: str = "", m5_only: list[str] = ()) -> str:
    head = ('<tr><th class="name" rowspan="2">contender</th><th class="kernel" rowspan="2">kernel</th>'
            '<th colspan="2">time per call</th>'
            '<th colspan="2">TOPS</th><th colspan="2">of roofline</th>'
            + (f'<th colspan="{len(sb.peers)}">speed vs peer: peer time / this time (one call · chained)</th>'
               if sb.peers else "")
            + '</tr><tr><th>one call</th><th>chained</th><th>one call</th><th>chained</th>'
              '<th>one call</th><th>chained</th>'
            + "".join(f'<th>{html.escape(p)}</th>' for p in sb.peers) + "</tr>")
    body = []
    span = 7 + len(sb.peers)
    for e in sb.entries:
        name = html.escape(e.contender)
        if not e.has_result:
            why = e.values["call"].text()
            if e.values["chain"].status != e.values["call"].status:
                why += f"; chained: {e.values['chain'].text()}"
            body.append(f'<tr class="missing" data-contender="{name}"><td class="name">{name}</td>'
                        f'<td colspan="{span}" style="text-align:left">missing: {html.escape(why)}</td></tr>')
            continue
        cells = [f'<td class="name">{name}</td>', _kernel_cell(e, previous)]
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
    body += [_m5_only_row(c, span + 1) for c in m5_only]
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


W8A8_NOTES = {
    "cpu": (
    "Why <b>int8nax-full</b> (W8A8: quantize, int8 GEMM, dequantize) can take less time than "
    "<b>int8nax-gemm</b> (the raw int8 GEMM alone) on the CPU backend: <code>w8a8_linear</code> prepares "
    "a weight once (at its second use as the same array it is transposed and packed into an "
    "onnxruntime session, ~0.1 s for 4096&times;4096) and every later call reuses it, as a model's "
    "layers do; <code>int8_matmul</code> keeps no state, so every call shifts and packs its int8 "
    "<i>b</i> (N&middot;K bytes) again, and it writes int32 (4 bytes per output) where W8A8 writes "
    "float16 (2). Both are timed as a user calls them. <code>INT8NAX_CPU_PREPARE=0</code> times W8A8 "
    "without the prepared weight."),
    "cuda": (
    "Why <b>int8nax-full</b> (W8A8: quantize, int8 GEMM, dequantize) can take less time than "
    "<b>int8nax-gemm</b> (the raw int8 GEMM alone) on the CUDA backend: the two calls are dispatched "
    "separately, kernel and plan per shape (the kernel column says which ran; at M &le; 16 W8A8 can run "
    "the GEMV, which streams the weight once), and W8A8 writes float16 (2 bytes per output) where "
    "<code>int8_matmul</code> writes int32 (4)."),
}
"""Why W8A8 can beat the raw GEMM, per backend: shown only under a machine of that backend."""
W8A8_NOTE_OTHER = ("The two calls can run different kernels (the kernel column says which ran), and W8A8 "
                   "writes float16 (2 bytes per output) where <code>int8_matmul</code> writes int32 (4).")


def _w8a8_faster(b: MachineBlock) -> list[str]:
    """Shapes where int8nax-full's one call took less time than int8nax-gemm's."""
    out = []
    for sb in b.shapes:
        by = {e.contender: e for e in sb.entries}
        full, raw = by.get("int8nax-full"), by.get("int8nax-gemm")
        if full and raw and full.seconds("call") and raw.seconds("call") and full.seconds("call") < raw.seconds("call"):
            out.append(sb.shape)
    return out


def _absent_text(b: MachineBlock) -> str:
    """The contenders and shapes with no result on this machine, each reason once."""
    items = []
    if b.absent:
        groups: dict[str, list[str]] = {}
        for name in b.absent:
            why = b.reasons.get(name) or (
                "no result at this commit here (asv records a skip without its reason; on this machine, "
                "`int8nax compare` says why)" if not b.here else "it ran but recorded no time")
            groups.setdefault(why, []).append(name)
        items += [f'<li data-absent="{html.escape(" ".join(names))}"><b>{html.escape(", ".join(names))}</b>: '
                  f'{html.escape(why)}</li>' for why, names in groups.items()]
    for why, where in b.skipped.items():
        which = "; ".join(f"<b>{html.escape(name)}</b> at {html.escape(', '.join(shapes))}" for name, shapes in where.items())
        items.append(f"<li>{which}: skipped by the suite: {html.escape(why)}</li>")
    if b.unmeasured:
        items.append(f"<li><b>{len(b.unmeasured)} of {len(b.unmeasured) + len(b.shapes)} declared shapes</b> "
                     f"have no result here ({html.escape(', '.join(b.unmeasured))}): each machine measures "
                     "its profile's shapes (a CPU box the small ones and four seed shapes, a GPU every seed "
                     "shape; INT8NAX_BENCH_PROFILE=full runs all)</li>")
    if not items:
        return ""
    return (f'<details class="absent" open><summary>Not measured on {html.escape(b.results.name)} '
            f'(n/a in asv\'s output)</summary><ul class="small">{"".join(items)}</ul></details>')


def _here_text(blocks: list[MachineBlock]) -> str:
    here = next((b for b in blocks if b.here), None)
    if here is None:
        return ""
    others = [b.results.name for b in blocks if not b.here]
    name = html.escape(here.results.name)
    return (f'<p class="here"><b>Your run:</b> this computer is asv machine <code>{name}</code>; its section '
            f'comes first, at its latest commit <code>{html.escape(here.results.commit[:8])}</code>. '
            + (f'The other sections ({html.escape(", ".join(others))}) are the results committed with the '
               'repository, measured on the project\'s own machines and often at other commits. Compare '
               'your speed-vs-peer ratios and roofline fractions with theirs, not your times: a time '
               'says first which hardware it ran on. A ratio far from theirs on similar hardware is '
               'worth an issue (with <code>int8nax compare --markdown</code>).' if others else "")
            + "</p>")


def _ratios_table(r: MachineResults) -> str:
    """The gate's ratios at this commit: one row per shape with a value, one column per ratio."""
    benches = sorted(b for b, per in r.ratios.items() if any(v.status == "ok" for v in per.values()))
    if not benches:
        return ""
    shapes = [p for p in next(iter(r.ratios.values())) if any(r.ratios[b].get(p, Value()).status == "ok" for b in benches)]
    head = "".join(f"<th>{html.escape(RATIO_BENCH.match(b).group('stem').replace('_', '-'))} / reference</th>"
                   for b in benches)
    rows = []
    for shape in shapes:
        cells = "".join(f'<td data-bench="{html.escape(b)}">{fmt_number(r.ratios[b].get(shape, Value()).seconds)}</td>'
                        for b in benches)
        rows.append(f'<tr><td class="name">{html.escape(shape)}</td>{cells}</tr>')
    return ('<details class="ratios"><summary>The regression gate\'s ratios at this commit (unitless, lower '
            'is better)</summary><p class="small">int8nax\'s time over a reference\'s at the same shape, both '
            'measured in one process (<code>bench_ratio</code>, asv unit <code>ratio</code>): numpy\'s float32 '
            'matmul on a CPU box, MLX\'s float16 matmul on a GPU. They move only when int8nax does; '
            'asv\'s graphs show their history.</p>'
            f'<table class="ratios"><tr><th class="name">(M, K, N)</th>{head}</tr>{"".join(rows)}</table></details>')


def render(blocks: list[MachineBlock], results_dir: str = ".asv/results") -> str:
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    toc = " ".join(f'<a href="#machine-{html.escape(b.results.name)}">{html.escape(b.results.name)}</a>'
                   for b in blocks)
    out = ['<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           '<link rel="icon" href="swallow.ico">',  # asv's icon, in the site: no request that 404s
           f'<title>int8nax: contenders compared</title><style>{_CSS}</style></head><body>',
           '<div id="offline" class="notice"><b>The interactive asv graphs could not load.</b> asv '
           '0.6.6 loads jQuery, Flot and Bootstrap, which this browser could not reach: from CDNs where '
           '<code>int8nax site</code> has not run on this site (offline?), else from its <code>vendor/</code> '
           'folder. This page needs none of them. <code>int8nax site .asv/html</code> after '
           '<code>asv publish</code> serves them with the site.</div>',
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
           'never zero. <b>Kernel</b>: what int8nax ran at that shape (<code>track_&lt;name&gt;_kernel</code>, '
           'an id of the backend\'s description; in words where int8nax here describes the same kernel), '
           'marked <span class="changed">changed</span> where the machine\'s previous commit with records '
           'ran another; <i>no kernel id at this commit</i> where the machine\'s run recorded none (commits '
           'before the records, or a run without <code>bench_kernel</code>). '
           f'<b>cider</b> runs only on an Apple M5: its rows say <i>{M5_ONLY}</i> until an M5 owner\'s '
           'results are committed.</p>',
           f'<nav class="toc">Machines: {toc}</nav>', _here_text(blocks)]
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
                   + _kernel_summary(b) + _ceiling_text(b.declared, b.why_not) + _absent_text(b))
        faster = _w8a8_faster(b)
        if faster:
            out.append(f'<p class="small w8a8-note" data-shapes="{html.escape(";".join(faster))}">'
                       f'At {html.escape(", ".join(faster))}, W8A8 took less time than the raw GEMM. '
                       f'{W8A8_NOTES.get(b.backend, W8A8_NOTE_OTHER)}</p>')
        out.append(_ratios_table(r))
        out.append('<nav class="toc small">Shapes: ' + " ".join(
            f'<a href="#{name}-{_anchor(sb.shape)}">{html.escape(sb.shape)}</a>' for sb in b.shapes) + "</nav>")
        for sb in b.shapes:
            n = sum(e.has_result for e in sb.entries)
            out.append(f'<h3 id="{name}-{_anchor(sb.shape)}">(M, K, N) = {html.escape(sb.shape)} '
                       f'<span class="small">{n} of {len(sb.entries)} contenders have results</span></h3>'
                       f'<div class="shape" data-machine="{name}" data-shape="{html.escape(sb.shape)}">'
                       f'{_svg(sb)}{_table(sb, r.previous_commit, b.m5_only)}</div>')
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)


def _kernel_summary(b: MachineBlock) -> str:
    """One line: how many of the machine's kernel records changed since its previous commit."""
    records = [e for sb in b.shapes for e in sb.entries if e.kernel is not None]
    if not records:
        return ""
    previous = b.results.previous_commit
    if not previous:
        return f'<p class="small kernels">Kernels recorded at {len(records)} (contender, shape) pairs; no earlier commit to compare.</p>'
    changed = [f"{e.contender} at {sb.shape}" for sb in b.shapes for e in sb.entries if e.kernel_changed]
    text = (f'<span class="changed">{len(changed)} of {len(records)} changed</span>: {html.escape("; ".join(changed))}'
            if changed else f"none of {len(records)} changed")
    return (f'<p class="small kernels" data-changed="{len(changed)}">Kernels since '
            f'<code>{html.escape(previous[:8])}</code>: {text}.</p>')


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


# asv 0.6.6's graph page draws every machine's results on one linear axis, with a legend of one
# entry per series (machine x shape) drawn over the top left of the plot. These edits of the
# published graphdisplay.js and index.html make the default readable: one machine per graph
# (the others a click away in the left panel, or in the URL), every declared shape (asv shows the
# first 8 parameter values, which leaves out the CPU box's small shapes), a log y axis (the
# shapes' times span three decades), and the legend in a column beside the plot. Each edit is found by its exact
# text in asv 0.6.6's files: with a different asv, `int8nax site` says what it could not change
# and carries on (the page it writes does not depend on them).
_GRAPH_EDITS = (
    ("graphdisplay.js", "one machine per graph",
     "            state = {};\n            state.machine = index.params.machine;\n\n"
     "            $.each(index.params, function(param, values) {\n                state[param] = values;\n"
     "                if (values.length > 1 && param !== 'machine') {\n                    if (param == 'branch') {\n"
     "                        state[param] = [values[0]];\n                    }\n                }\n            });\n",
     None),
    ("graphdisplay.js", "every shape",
     "            var max_curves = 8;\n",
     "            var max_curves = 16; /* int8nax: all 14 declared shapes, not the first 8 */\n"),
    ("graphdisplay.js", "log y axis by default",
     "            delete params['y-axis-scale'];\n        }\n",
     "            delete params['y-axis-scale'];\n        }\n"
     "        else { /* int8nax: log y axis by default */\n"
     "            $('#log-scale').addClass('active');\n            log_scale = true;\n        }\n"),
    ("graphdisplay.js", "legend beside the plot",
     "                show: show_legend,\n                position: \"nw\",\n",
     "                show: show_legend,\n                position: \"nw\",\n"
     "                container: $('#int8nax-legend'), /* int8nax: beside the plot, not over it */\n"),
    ("index.html", "room for the legend",
     '<div style="position: absolute; top: 48px; left: 0; right: 0; bottom: 100px;">',
     '<div id="int8nax-legend" style="position: absolute; top: 48px; right: 0; width: 230px; bottom: 100px; '
     'overflow-y: auto; font-size: 11px"></div>\n'
     '          <div style="position: absolute; top: 48px; left: 0; right: 240px; bottom: 100px;">'),
)
_FIRST_MACHINE = re.compile(r"/\* int8nax: one machine per graph \*/ state\.machine = .*\n")


def tune_graphs(html_dir: Path, first: str | None) -> tuple[list[str], list[str]]:
    """Apply _GRAPH_EDITS to the published site (idempotent); `first` is the machine a graph
    shows by default (None: the first in asv's list). Returns (what was changed, what could not
    be: an edit whose text is not found, another asv version). A site without asv's graph
    page (no graphdisplay.js) is left alone."""
    changed, failed = [], []
    if not (html_dir / "graphdisplay.js").is_file():
        return changed, failed
    pick = (f"[{json.dumps(first)}]" if first else "[]")
    line = (f"/* int8nax: one machine per graph */ state.machine = {pick}.filter(function (m) "
            "{ return index.params.machine.indexOf(m) >= 0; }).concat(index.params.machine).slice(0, 1);\n")
    for name, what, old, new in _GRAPH_EDITS:
        path = html_dir / name
        text = path.read_text()
        if what == "one machine per graph":
            if _FIRST_MACHINE.search(text):
                updated = _FIRST_MACHINE.sub(lambda m: line, text)
            elif old in text:
                updated = text.replace(old, old + line, 1)
            else:
                failed.append(f"{what} (asv 0.6.6's text not found in {name})")
                continue
        elif new in text:
            continue
        elif old in text:
            updated = text.replace(old, new, 1)
        else:
            failed.append(f"{what} (asv 0.6.6's text not found in {name})")
            continue
        if updated != text:
            path.write_text(updated)
            changed.append(what)
    return changed, failed


def publish(html_dir: Path, results_dir: Path, first: str | None = None, here: str | None = None) -> dict:
    """Write compare.html and compare.json into html_dir and link them from index.html.
    `here`: this computer's asv machine (its section first unless `first` names another)."""
    index = html_dir / "index.html"
    if not index.is_file():
        raise SiteError(f"{index} does not exist: run `asv publish` first")
    commits = published_commits(html_dir)
    blocks = compare(results_dir, commits, first or here, here)
    page = render(blocks, str(results_dir))
    # The model section (int8nax.commands.site_models) goes at the end of the page.
    page = page.replace("</body></html>", site_models.section(results_dir, commits, first or here) + "\n</body></html>")
    (html_dir / "compare.html").write_text(page)
    data = to_json(blocks)
    data["models"] = site_models.to_json(site_models.read(results_dir, commits))
    (html_dir / "compare.json").write_text(json.dumps(data, indent=1, allow_nan=False))
    tuned, untuned = tune_graphs(html_dir, first or (here if here in data["machines"] else None))
    changed = link_index(index) + tuned
    try:
        if site_vendor.vendor(html_dir):
            changed.append("libraries served with the site (vendor/)")
    except site_vendor.VendorError as exc:
        raise SiteError(str(exc)) from None
    return {"page": str(html_dir / "compare.html"), "index": changed, "untuned": untuned,
            "machines": {m: sum(e["has_result"] for e in v["entries"]) for m, v in data["machines"].items()},
            "absent": {m: v["absent"] for m, v in data["machines"].items()},
            "unmeasured": {m: len(v["unmeasured_shapes"]) for m, v in data["machines"].items()},
            "here": here if here in data["machines"] else None}


def add_parser(sub) -> None:
    p = sub.add_parser(
        "site", help="write the comparison page into a published asv site (after `asv publish`)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("html_dir", type=Path, help="asv's html_dir (.asv/html)")
    p.add_argument("--results", type=Path,
                   help="asv's results_dir (default: 'results' beside html_dir, i.e. .asv/results)")
    p.add_argument("--machine", help="the machine whose section comes first (default: this computer's asv "
                                     "machine, from ~/.asv-machine.json)")
    p.set_defaults(func=main)


def main(args) -> int:
    results = args.results or args.html_dir.parent / "results"
    try:
        report = publish(args.html_dir, results, args.machine, this_machine())
    except SiteError as exc:
        print(f"int8nax site: {exc}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{m}: {n}" for m, n in report["machines"].items()) or "no machine has results"
    print(f"wrote {report['page']} (entries with results per machine: {counts}); "
          f"index.html: {', '.join(report['index']) or 'already linked'}")
    if report["untuned"]:
        print(f"int8nax site: asv's graph page left as it is: {'; '.join(report['untuned'])}", file=sys.stderr)
    here = report["here"]
    if here:
        # asv's own output shows a skip as n/a, without its reason: the reasons, once each
        print(f"what asv showed as n/a on this machine ({here}):")
        groups: dict[str, list[str]] = {}
        for name, why in report["absent"][here].items():
            groups.setdefault(why or "ran, but recorded no time", []).append(name)
        for why, names in groups.items():
            print(f"  {', '.join(names)}: {why}")
        if report["unmeasured"][here]:
            print(f"  {report['unmeasured'][here]} of the {len(problems.ALL_SHAPES)} declared shapes: not in this "
                  "machine's profile (INT8NAX_BENCH_PROFILE=full measures them)")
        print("  other n/a cells: a contender too slow for a shape on this device, skipped by the suite "
              "(see compare.html)")
    return 0
