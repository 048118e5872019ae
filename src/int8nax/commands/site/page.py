"""compare.html: for each machine its notes, the gate's ratios and, per shape, the contenders as
a plot (inline SVG, no JavaScript, so it opens offline) and a table."""

from __future__ import annotations

import html
import math
import re
import time

from ...bench import contenders as bench_contenders
from ...bench import machines as machine_ceilings
from ...bench.kernel.mode import geomean
from . import asv_format
from .comparison import MODES, Entry, MachineBlock, ShapeBlock
from .model_section import M5_COMMAND, M5_ONLY
from .results import RATIO_BENCH, MachineResults, Value

MODE_TITLES = {"call": "one call", "chain": "per call, chained"}


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


def _figure_table(css: str, data: dict[str, float | None], text: str, heads: list[str], rows) -> str:
    """A figures table under its sentence: `rows` are (shape, cells) with the cells' HTML, `heads`
    the columns after (M, K, N); `data` goes on the block as data-<name> attributes (the figures the
    sentence gives, for tools that read the page)."""
    attrs = "".join(f' data-{name}="{fmt_number(value)}"' for name, value in data.items())
    body = "".join(f'<tr data-shape="{html.escape(shape)}"><td class="name">{html.escape(shape)}</td>'
                   + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>" for shape, cells in rows)
    head = "".join(f"<th>{h}</th>" for h in heads)
    return (f'<div class="{css}"{attrs}><p>{text}</p><table class="{css}"><tr><th class="name">(M, K, N)</th>'
            f'{head}</tr>{body}</table></div>')


def _kernel_time_table(b: MachineBlock) -> str:
    """KernelTime at this commit: int8nax's GEMM against cuBLASLt and W8A8 against the raw GEMM in
    kernel time, per shape and as geometric means (what `int8nax compare --mode kernel` reports)."""
    rows = b.kernel_time
    if not rows:
        return ""
    vs_lt, w8a8 = geomean(k.vs_cublaslt for k in rows), geomean(k.w8a8_vs_raw for k in rows)
    text = (f'<b>Kernel time</b> (CUPTI, inputs rotated over the L2; <code>bench_kernel.KernelTime</code>, '
            f'the measure of <code>int8nax compare --mode kernel</code>): <code>int8_matmul</code> '
            f'<b>{fmt_ratio(vs_lt)} cuBLASLt</b>\'s speed, W8A8 <b>{fmt_ratio(w8a8)}</b> the raw GEMM\'s time '
            f'(geometric means of {len(rows)} shapes). The seconds above are one call or a chain, launch and '
            f'MLX\'s work included.')
    cells = [(k.shape, [fmt_number(k.gemm_us), fmt_number(k.cublaslt_us), fmt_number(k.w8a8_us),
                        fmt_ratio(k.vs_cublaslt), fmt_ratio(k.w8a8_vs_raw)]) for k in rows]
    return _figure_table("kernel-time", {"vs-cublaslt": vs_lt, "w8a8-vs-raw": w8a8}, text,
                         ["int8nax GEMM µs", "cuBLASLt µs", "W8A8 µs", "speed vs cuBLASLt", "W8A8 / GEMM"], cells)


def _decode_table(b: MachineBlock) -> str:
    """DecodeTime at this commit: each model layer at one token, W8A8 against MLX's 8-bit and
    bfloat16 matmuls in kernel time, and W8A8's weight stream in TB/s."""
    rows = b.decode_time
    if not rows:
        return ""
    q8, bf16 = geomean(d.vs_mlx_q8 for d in rows), geomean(d.vs_bf16 for d in rows)
    text = (f'<b>Decode</b> (one token, the models\' layers; CUPTI, inputs rotated over the L2; '
            f'<code>bench_kernel.DecodeTime</code>): W8A8 at <b>{fmt_ratio(q8)} MLX 8-bit</b>\'s speed and '
            f'<b>{fmt_ratio(bf16)} bfloat16</b>\'s (geometric means of {len(rows)} layers). At one token a '
            f'linear streams its weight: these set a generated token\'s pace.')
    cells = [(d.shape, [fmt_number(d.w8a8_us), fmt_number(d.mlx_q8_us), fmt_number(d.bf16_us),
                        fmt_number(d.w8a8_tb_per_s), fmt_ratio(d.vs_mlx_q8), fmt_ratio(d.vs_bf16)]) for d in rows]
    return _figure_table("decode-time", {"vs-mlx-q8": q8, "vs-bf16": bf16}, text,
                         ["W8A8 µs", "MLX 8-bit µs", "bfloat16 µs", "W8A8 weight TB/s", "speed vs MLX 8-bit",
                          "speed vs bfloat16"], cells)


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
        hw = asv_format.hardware(r.info)
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
        out.append(_kernel_time_table(b))
        out.append(_decode_table(b))
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
