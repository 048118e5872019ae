"""The diagnostic model section of the comparison page (`int8nax site`): tokens per second against tokens,
per form and machine, from the asv results of benchmarks/bench_model.py, with the speed-up table.

Read from asv's result files (asv_format): for each machine, the latest
commit (by commit date) with any model result, its environments merged. Figures:
    track_<form>[_compiled]_tokens_per_s   the plotted value
    time_<form>[_compiled]                 seconds per decoder layer (the table's ms/layer)
Speed-up = this form's tokens/s / bf16's, same machine, configuration, mode and tokens.
"""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import asv_format
from ...bench.models import FORMS, MODES

M5_ONLY = "M5 only: no report yet"
M5_COMMAND = ("asv machine --machine int8nax-m5 --yes && asv run --config asv.m5.conf.json "
              "(cider installed as docs/results/m5.md says), or int8nax selftest --json and "
              "int8nax compare --markdown in an issue")
"""cider runs only on an Apple M5: what its columns say until an M5 owner's results are committed,
and what that owner runs (docs/results/m5.md). The contender tables (comparison, page) say the same."""


def m5_only_cell(rows: int) -> str:
    """A table's cider column over `rows` rows: no M5 has reported, and what its owner runs."""
    return (f'<td class="m5-only" rowspan="{rows}" style="text-align:left;max-width:18em">'
            f'<b>{M5_ONLY}</b>: an M5 owner runs <code>{html.escape(M5_COMMAND)}</code></td>')


def machine_heading(section: str, machine: str, info: dict, first: str | None, tail: str = "") -> str:
    """A model section's heading of one machine (id "<section>-<machine>"; "(your run)" where it is
    `first`), its hardware, then `tail` (HTML)."""
    name = html.escape(machine)
    mine = " (your run)" if first and machine == first else ""
    return (f'<h3 id="{section}-{name}">{name}{mine}</h3><p class="small">'
            f'{html.escape(asv_format.hardware(info))}.{tail}</p>')


STEMS = {f.replace("-", "_"): f for f in FORMS}
COLORS = {"bf16": "#444444", "fp16": "#888888", "mlx-q8": "#1f77b4", "w8a8": "#d62728", "cider": "#2ca02c"}
_TRACK = re.compile(r"^bench_model\.\w+\.track_(\w+?)(_compiled)?_tokens_per_s$")
_TIME = re.compile(r"^bench_model\.\w+\.time_(\w+?)(_compiled)?$")


@dataclass
class MachineModels:
    """One machine's model results at one commit: (config, mode, form, tokens) -> value."""

    name: str
    info: dict
    commit: str
    date: int
    tokens_per_s: dict = field(default_factory=dict)
    s_per_layer: dict = field(default_factory=dict)


def _values(entry: asv_format.Entry) -> dict[tuple[str, int], float]:
    """{(configuration, tokens): number} of one benchmark's results (numbers only)."""
    if len(entry.params) != 2:
        return {}
    return {(config.strip("'\""), int(tokens)): float(value)
            for (config, tokens), value in entry.pairs() if asv_format.finite(value)}


def read_machine(folder: Path, commits: set[str] | None = None) -> MachineModels | None:
    found = []
    for raw in asv_format.result_files(folder, commits):
        tps, spl = {}, {}
        for bench, entry in raw.entries.items():
            for pattern, into in ((_TRACK, tps), (_TIME, spl)):
                m = pattern.match(bench)
                if m and m.group(1) in STEMS:
                    mode = "compiled" if m.group(2) else "eager"
                    for (config, tokens), v in _values(entry).items():
                        into[(config, mode, STEMS[m.group(1)], tokens)] = v
        if tps:
            found.append((raw.date, raw.commit, (tps, spl)))
    if not found:
        return None
    date, commit, payloads = asv_format.latest(found)
    block = MachineModels(folder.name, asv_format.machine_info(folder), commit, date)
    for tps, spl in payloads:
        block.tokens_per_s.update(tps)
        block.s_per_layer.update(spl)
    return block


def read(results_dir: Path, commits: set[str] | None = None) -> list[MachineModels]:
    found = [read_machine(d, commits) for d in asv_format.machine_folders(results_dir)]
    return [m for m in found if m is not None]


def speedup(block: MachineModels, config: str, mode: str, form: str, tokens: int) -> float | None:
    mine = block.tokens_per_s.get((config, mode, form, tokens))
    ref = block.tokens_per_s.get((config, mode, "bf16", tokens))
    return mine / ref if mine and ref else None


def ms_per_forward(tokens_per_s: float, tokens: int) -> float:
    """The same figure as tokens/s, in ms per forward of all the profile's layers (decode: one step)."""
    return 1e3 * tokens / tokens_per_s


def to_json(blocks: list[MachineModels]) -> dict:
    out = {}
    for b in blocks:
        rows = []
        for (config, mode, form, tokens), v in sorted(b.tokens_per_s.items()):
            spl = b.s_per_layer.get((config, mode, form, tokens))
            rows.append({"configuration": config, "mode": mode, "form": form, "tokens": tokens,
                         "tokens_per_s": v, "ms_per_forward": ms_per_forward(v, tokens),
                         "ms_per_layer": None if spl is None else spl * 1e3,
                         "speed_vs_bf16": speedup(b, config, mode, form, tokens)})
        out[b.name] = {"commit": b.commit, "date": b.date, "rows": rows}
    return out


# --- HTML ----------------------------------------------------------------------------------

def _svg(block: MachineModels, config: str) -> str:
    """tokens/s against tokens, both log scales; a line per form, dashed when compiled."""
    points = {k: v for k, v in block.tokens_per_s.items() if k[0] == config}
    tokens = sorted({k[3] for k in points})
    values = list(points.values())
    w, h, left, bottom, top, right = 560, 280, 60, 30, 10, 110
    lo, hi = math.log10(min(values)), math.log10(max(values))
    lo, hi = math.floor(lo), math.ceil(hi) if hi > math.floor(lo) else math.floor(lo) + 1
    tx = {t: left + (w - left - right) * (i / max(1, len(tokens) - 1)) for i, t in enumerate(tokens)}

    def y(v):
        return top + (h - top - bottom) * (1 - (math.log10(v) - lo) / (hi - lo))

    out = [f'<svg class="models" width="{w}" height="{h}" role="img" '
           f'aria-label="tokens per second against tokens, {html.escape(config)}">']
    for e in range(lo, hi + 1):
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y(10**e):.1f}" y2="{y(10**e):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 4}" y="{y(10**e) + 4:.1f}" text-anchor="end" font-size="10">1e{e}</text>')
    for t, x in tx.items():
        out.append(f'<text x="{x:.1f}" y="{h - 12}" text-anchor="middle" font-size="10">'
                   f'{"decode" if t == 1 else t}</text>')
    out.append(f'<text x="{left}" y="{h - 1}" font-size="10">tokens (prefill; decode = 1 step)</text>')
    legend = 0
    for form in FORMS:
        for mode in MODES:
            line = [(tx[t], y(points[(config, mode, form, t)])) for t in tokens if (config, mode, form, t) in points]
            if not line:
                continue
            dash = ' stroke-dasharray="5,3"' if mode == "compiled" else ""
            path = " ".join(f"{x:.1f},{yy:.1f}" for x, yy in line)
            out.append(f'<polyline fill="none" stroke="{COLORS[form]}" stroke-width="2"{dash} points="{path}">'
                       f'<title>{html.escape(form)} {mode}</title></polyline>')
            out += [f'<circle cx="{x:.1f}" cy="{yy:.1f}" r="2.5" fill="{COLORS[form]}"/>' for x, yy in line]
            ly = top + 14 * legend
            out.append(f'<line x1="{w - right + 8}" x2="{w - right + 28}" y1="{ly + 5}" y2="{ly + 5}" '
                       f'stroke="{COLORS[form]}" stroke-width="2"{dash}/><text x="{w - right + 32}" y="{ly + 9}" '
                       f'font-size="10">{html.escape(form)}{" (c)" if mode == "compiled" else ""}</text>')
            legend += 1
    out.append("</svg>")
    return "".join(out)


def _table(block: MachineModels, config: str, m5_only: bool = False) -> str:
    """tokens x forms: each cell one figure in one unit (tokens/s, and the same as ms per forward),
    the speed-up over bf16; `m5_only`: a cider column saying no M5 has reported yet."""
    keys = [k for k in block.tokens_per_s if k[0] == config]
    cols = [(form, mode) for mode in MODES for form in FORMS
            if any(k[1] == mode and k[2] == form for k in keys)]
    tokens = sorted({k[3] for k in keys})
    head = "".join(f"<th>{html.escape(f)}{' compiled' if m == 'compiled' else ''}</th>" for f, m in cols)
    if m5_only:
        head += "<th>cider</th>"
    rows = []
    for i, t in enumerate(tokens):
        cells = []
        for form, mode in cols:
            v = block.tokens_per_s.get((config, mode, form, t))
            s = speedup(block, config, mode, form, t)
            spl = block.s_per_layer.get((config, mode, form, t))
            if v is None:
                cells.append('<td class="na">-</td>')
                continue
            cells.append(f"<td>{v:,.1f} tok/s<br><b>{'%.2fx' % s if s else '-'}</b>"
                         f"<br><span class='small'>{ms_per_forward(v, t):.3g} ms a forward</span></td>")
        if m5_only and i == 0:
            cells.append(m5_only_cell(len(tokens)))
        rows.append(f"<tr><th>{'decode' if t == 1 else t}</th>{''.join(cells)}</tr>")
    return (f'<table class="models"><thead><tr><th>tokens</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def section(results_dir: Path, commits: set[str] | None = None, first: str | None = None) -> str:
    """The page's model section (an empty-results note when no machine has model results);
    `first`: the machine shown first (the user's own), the others in name order."""
    blocks = sorted(read(results_dir, commits), key=lambda b: b.name != first)
    m5_only = not any(k[2] == "cider" for b in blocks for k in b.tokens_per_s)
    out = ['<section id="models"><style>table.models{border-collapse:collapse;margin:.5em 0 1.5em}'
           'table.models td,table.models th{border:1px solid #ddd;padding:2px 8px;text-align:right}'
           'svg.models{display:block}</style><h2>Models, the diagnostic: a few decoder layers\' forward pass, '
           'tokens per second</h2>',
           '<p class="small">benchmarks/bench_model.py: a few decoder layers of mlx-lm\'s Qwen classes '
           '(random seeded weights, the public configurations\' dimensions), prefill of T tokens or one '
           'decode step after a prompt, in each form: bf16, fp16, MLX 8-bit weight-only (mlx-q8), int8nax '
           'W8A8, cider (M5 only); dashed lines and "compiled" columns run under mx.compile. Each cell: '
           'tokens/s, the speed-up over bf16 in the same mode (bold; above 1 is faster) and the same '
           'figure as the time of one forward through the profile\'s layers (decode: one step). asv\'s '
           '<code>time_&lt;form&gt;</code> per layer, a separate measurement, is in its graphs. Missing '
           'means no number (n/a, failed or not run).</p>']
    if not blocks:
        out.append("<p>No model results yet: run the suite with benchmarks/bench_model.py.</p>")
    for b in blocks:
        name = html.escape(b.name)
        commit = f" Commit <code>{html.escape(b.commit[:8])}</code>."
        out.append(machine_heading("models", b.name, b.info, first, commit))
        for config in sorted({k[0] for k in b.tokens_per_s}):
            out.append(f'<h4>{html.escape(config)}</h4><div class="model" data-machine="{name}" '
                       f'data-config="{html.escape(config)}">{_svg(b, config)}{_table(b, config, m5_only)}</div>')
    out.append("</section>")
    return "\n".join(out)
