"""The contenders side by side: for each machine and each shape with results, every contender's
seconds in both modes, TOPS, the fraction of the machine's roofline (ceilings:
int8nax.bench.machines), the speed ratio to each peer and the kernel that ran; what has no
result, and why where this computer can say."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ... import backends
from ...bench import contenders as bench_contenders
from ...bench import machines as machine_ceilings
from ...bench import problems, timing
from .model_section import M5_COMMAND, M5_ONLY
from .results import _BENCH, MachineResults, Value, read_results

MODES = ("call", "chain")

CONTENDERS = tuple(bench_contenders.CONTENDERS[name] for name in bench_contenders.SUITE)
"""Every contender of the asv suite (benchmarks/), in the order the page shows them, as the registry
(int8nax.bench.contenders.CONTENDERS) has them: name, asv stem, number format (fmt). A benchmark of
an unknown stem still shows, under its stem, without a roofline."""


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
    kernel_time: list[KernelTimeRow] = field(default_factory=list)  # KernelTime's records, by shape
    decode_time: list[DecodeRow] = field(default_factory=list)  # DecodeTime's records, by layer


@dataclass
class KernelTimeRow:
    """One shape of the KernelTime record (CUPTI µs, cold L2): int8nax's GEMM, cuBLASLt's, W8A8's."""

    shape: str
    gemm_us: float | None
    cublaslt_us: float | None
    w8a8_us: float | None

    @property
    def vs_cublaslt(self) -> float | None:
        """cuBLASLt's time / int8nax's GEMM's (above 1: int8nax faster), as compare --mode kernel."""
        return self.cublaslt_us / self.gemm_us if self.gemm_us and self.cublaslt_us else None

    @property
    def w8a8_vs_raw(self) -> float | None:
        """W8A8's time / the raw GEMM's (the cost of quantizing and the epilogue)."""
        return self.w8a8_us / self.gemm_us if self.gemm_us and self.w8a8_us else None


KERNEL_TIME_STEMS = ("int8nax_gemm", "cublaslt_int8", "int8nax_full")
"""KernelTime's contenders (benchmarks/bench_kernel.py: track_<stem>_kernel_us)."""


def kernel_time_rows(results: MachineResults) -> list[KernelTimeRow]:
    """The machine's KernelTime figures at its commit, one row per shape that has int8nax's GEMM."""
    gemm, lt, w8a8 = (results.kernel_us.get(stem, {}) for stem in KERNEL_TIME_STEMS)
    return [KernelTimeRow(shape, us, lt.get(shape), w8a8.get(shape)) for shape, us in gemm.items()]


@dataclass
class DecodeRow:
    """One layer of the DecodeTime record (CUPTI µs at one token, cold L2): W8A8's, MLX 8-bit's and
    MLX bfloat16's."""

    shape: str
    w8a8_us: float | None
    mlx_q8_us: float | None
    bf16_us: float | None

    @property
    def vs_mlx_q8(self) -> float | None:
        """MLX 8-bit's time / W8A8's (above 1: W8A8 faster)."""
        return self.mlx_q8_us / self.w8a8_us if self.w8a8_us and self.mlx_q8_us else None

    @property
    def vs_bf16(self) -> float | None:
        """bfloat16's time / W8A8's (above 1: W8A8 faster)."""
        return self.bf16_us / self.w8a8_us if self.w8a8_us and self.bf16_us else None

    @property
    def w8a8_tb_per_s(self) -> float | None:
        """W8A8's weight stream: the int8 weight's K x N bytes over its time, in TB/s."""
        shape = parse_shape(self.shape)
        return shape[1] * shape[2] / (self.w8a8_us * 1e6) if shape and self.w8a8_us else None


DECODE_TIME_STEMS = ("w8a8_decode", "mlx_q8_decode", "bf16_decode")
"""DecodeTime's contenders (benchmarks/bench_kernel.py: track_<stem>_kernel_us)."""


def decode_rows(results: MachineResults) -> list[DecodeRow]:
    """The machine's DecodeTime figures at its commit, one row per layer that has W8A8's."""
    w8a8, q8, bf16 = (results.kernel_us.get(stem, {}) for stem in DECODE_TIME_STEMS)
    return [DecodeRow(shape, us, q8.get(shape), bf16.get(shape)) for shape, us in w8a8.items()]


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


def _ceilings_for(declared: machine_ceilings.Machine | None, info: bench_contenders.Contender | None,
                 why_not: str):
    if declared is None:
        return None, why_not
    if info is None:
        return None, "number format of this contender not declared (int8nax/bench/contenders.py CONTENDERS)"
    ceilings = declared.host if info.fmt.on_host else declared.device
    if ceilings is None:
        return None, "the host CPU's ceilings are not declared"
    return ceilings, ""


def _has_any(results: MachineResults, stem: str) -> bool:
    return any(v.status == "ok" for b, per in results.values.items()
               if (m := _BENCH.match(b)) and m.group("stem") == stem for v in per.values())


def kernel_names(shapes) -> dict[int, str]:
    """{kernel id: description} of what int8nax's contenders run here at these shapes
    (bench.contenders.describe) and on a Hopper GPU (hopper_description, computed without one).
    An id stands for one description whichever machine recorded it, so a recorded id found here
    is shown in words; others stay numbers."""
    names: dict[int, str] = {}
    for text in shapes:
        dims = parse_shape(text)
        if dims is None:
            continue
        for name in bench_contenders.OPS:
            for describe in (bench_contenders.describe, bench_contenders.hopper_description):
                try:
                    described = describe(name, dims)
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
    block = MachineBlock(results, declared, blocks, why_not, absent, unmeasured)
    block.kernel_time = kernel_time_rows(results)
    block.decode_time = decode_rows(results)
    return block


def skip_reasons(names: list[str]) -> dict[str, str]:
    """Why each contender of `names` cannot run on this computer, as the benchmark suite's setup
    finds it (int8nax.bench.contenders: prepared at a tiny shape); a contender that can run is
    left out. asv records a skip as n/a without its reason, so the reasons are found again here."""
    from ...bench import contenders

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
    from ...bench import contenders

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


CIDER = tuple(c.name for c in CONTENDERS if c.m5_only)
"""cider's contenders: they run only on an Apple M5 (cider is a Metal library)."""


def backend_of(results: MachineResults, texts: list[str] = ()) -> str:
    """The int8nax backend a machine's results ran on: the first word of a recorded kernel's
    description where int8nax here can name one (e.g. "cuda tma-ws-cooperative ..."), else its
    machine.json: an NVIDIA GPU -> "cuda", an Apple GPU -> "metal", no GPU -> "cpu"; "" unknown."""
    for text in texts:
        word = text.split(" ", 1)[0]
        if word in backends.NAMES:
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
                            "shapes": [sb.shape for sb in block.shapes], "entries": entries,
                            "kernel_time": [{"shape": k.shape, "int8nax_gemm_us": k.gemm_us, "cublaslt_int8_us": k.cublaslt_us,
                                             "int8nax_full_us": k.w8a8_us, "vs_cublaslt": k.vs_cublaslt,
                                             "w8a8_vs_raw": k.w8a8_vs_raw} for k in block.kernel_time],
                            "decode_time": [{"shape": d.shape, "w8a8_us": d.w8a8_us, "mlx_q8_us": d.mlx_q8_us,
                                             "bf16_us": d.bf16_us, "vs_mlx_q8": d.vs_mlx_q8, "vs_bf16": d.vs_bf16,
                                             "w8a8_tb_per_s": d.w8a8_tb_per_s} for d in block.decode_time]}
    return {"generated_by": "int8nax site", "modes": list(MODES), "machines": machines,
            "m5_only": {"text": M5_ONLY, "command": M5_COMMAND}}
