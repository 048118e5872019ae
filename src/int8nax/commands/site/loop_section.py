"""The comparison page's headline model section (`int8nax site`): whole models in mlx-lm's own
loop, per machine, from the asv results of benchmarks/bench_generate.py (prompt and generation
tokens per second, peak memory, per form) and benchmarks/bench_first_token.py (seconds to the first
token of a fresh process, bf16 and W8A8, and the one-time `int8nax warm`).

For each machine, the latest commit (by commit date) with any result of each benchmark, its
environments merged; the two benchmarks may come from different commits, and each table says
which. W8A8's ratios are computed here from the figures of that one commit, as mlx-lm's own
table would be read: W8A8's tokens/s over bf16's and over MLX 8-bit's, same model, prompt,
generated tokens and batch.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import asv_format
from .model_section import m5_only_cell, machine_heading
from ...bench import first_token, generate

_GENERATE = re.compile(r"^bench_generate\.GenerateFigures\.track_(prompt_tps|generation_tps|peak_memory)$")
_FIRST = "bench_first_token.FirstTokenFigures.track_first_token_s"
_WARM = "bench_first_token.FirstTokenWarm.track_w8a8_warm_s"


@dataclass
class Figures:
    """One benchmark's figures on one machine at one commit: key -> value."""

    commit: str = ""
    date: int = 0
    values: dict = field(default_factory=dict)


@dataclass
class MachineLoop:
    name: str
    info: dict
    generate: Figures
    """(config, P, G, B, form, figure) -> value; figure: prompt_tps, generation_tps (tokens/s), peak_memory (bytes)."""
    first_token: Figures
    """(config, P, form) -> seconds; (config, "warm") -> seconds."""


def _clean(value: str) -> str:
    return value.strip("'\"")


def _generate_values(raw: asv_format.ResultFile) -> dict:
    out = {}
    for bench, entry in raw.entries.items():
        m = _GENERATE.match(bench)
        if not m or len(entry.params) != 2:
            continue
        for (case, form), v in entry.pairs():
            cell = generate.parse_case(_clean(case))
            if cell and asv_format.finite(v):
                out[cell + (_clean(form), m.group(1))] = float(v)
    return out


def _first_token_values(raw: asv_format.ResultFile) -> dict:
    out = {}
    entry = raw.entries.get(_FIRST)
    if entry is not None and len(entry.params) == 2:
        for (case, form), v in entry.pairs():
            cell = first_token.parse_case(_clean(case))
            if cell and asv_format.finite(v):
                out[cell + (_clean(form),)] = float(v)
    warm = raw.entries.get(_WARM)
    if warm is not None and len(warm.params) == 1:
        for (config,), v in warm.pairs():
            if asv_format.finite(v):
                out[(_clean(config), "warm")] = float(v)
    return out


def _latest(found: list[tuple[int, str, dict]]) -> Figures:
    """The latest commit's figures, its result files (environments) merged."""
    date, commit, payloads = asv_format.latest(found)
    merged: dict = {}
    for values in payloads:
        merged.update(values)
    return Figures(commit, date, merged)


def read_machine(folder: Path, commits: set[str] | None = None) -> MachineLoop | None:
    gen, first = [], []
    for raw in asv_format.result_files(folder, commits):
        for into, values in ((gen, _generate_values(raw)), (first, _first_token_values(raw))):
            if values:
                into.append((raw.date, raw.commit, values))
    if not gen and not first:
        return None
    return MachineLoop(folder.name, asv_format.machine_info(folder), _latest(gen), _latest(first))


def read(results_dir: Path, commits: set[str] | None = None) -> list[MachineLoop]:
    found = [read_machine(d, commits) for d in asv_format.machine_folders(results_dir)]
    return [m for m in found if m is not None]


def ratio(block: MachineLoop, cell: tuple, form: str, base: str, figure: str) -> float | None:
    """`form`'s tokens/s over `base`'s at `cell` (config, P, G, B), or None where either is missing."""
    mine, ref = (block.generate.values.get(cell + (f, figure)) for f in (form, base))
    return mine / ref if mine and ref else None


def _cells(block: MachineLoop) -> list[tuple]:
    return sorted({k[:4] for k in block.generate.values})


def _forms(block: MachineLoop, config: str) -> list[str]:
    present = {k[4] for k in block.generate.values if k[0] == config}
    return [f for f in generate.FORMS if f in present]


def to_json(blocks: list[MachineLoop]) -> dict:
    out = {}
    for b in blocks:
        rows = []
        for cell in _cells(b):
            for form in _forms(b, cell[0]):
                figures = {name: b.generate.values.get(cell + (form, name))
                           for name in ("prompt_tps", "generation_tps", "peak_memory")}
                if figures["peak_memory"] is not None:
                    figures["peak_memory"] /= generate.GB
                if not any(v is not None for v in figures.values()):
                    continue
                rows.append({"configuration": cell[0], "prompt_tokens": cell[1], "generation_tokens": cell[2],
                             "batch": cell[3], "form": form, "prompt_tps": figures["prompt_tps"],
                             "generation_tps": figures["generation_tps"], "peak_memory_gb": figures["peak_memory"],
                             **{f"{w}_vs_{base}": ratio(b, cell, form, base, f"{w}_tps")
                                for base in generate.RATIO_BASES for w in ("prompt", "generation")}})
        first = [{"configuration": k[0], "prompt_tokens": k[1], "form": k[2], "seconds": v}
                 for k, v in sorted(b.first_token.values.items(), key=str) if len(k) == 3]
        warm = {k[0]: v for k, v in b.first_token.values.items() if len(k) == 2}
        out[b.name] = {"generate": {"commit": b.generate.commit, "date": b.generate.date, "rows": rows},
                       "first_token": {"commit": b.first_token.commit, "date": b.first_token.date,
                                       "rows": first, "warm_s": warm}}
    return out


# --- HTML ----------------------------------------------------------------------------------

def _fmt(v: float | None, spec: str, unit: str = "") -> str:
    return "-" if v is None else f"{v:{spec}}{unit}"


def _generate_table(block: MachineLoop, config: str, m5_only: bool) -> str:
    forms = _forms(block, config)
    cells = [c for c in _cells(block) if c[0] == config]
    head = "".join(f"<th>{html.escape(f)}<br><span class='small'>prompt / generation tok/s, GB</span></th>"
                   for f in forms)
    head += "".join(f"<th>W8A8 vs {html.escape(b)}<br><span class='small'>prompt / generation</span></th>"
                    for b in generate.RATIO_BASES)
    head += "<th>cider</th>" if m5_only else ""
    rows = []
    for i, cell in enumerate(cells):
        tds = []
        for form in forms:
            get = block.generate.values.get
            p, g, mem = (get(cell + (form, n)) for n in ("prompt_tps", "generation_tps", "peak_memory"))
            gb = None if mem is None else mem / generate.GB  # asv keeps bytes
            tds.append(f"<td>{_fmt(p, ',.0f')} / {_fmt(g, ',.1f')}<br><span class='small'>{_fmt(gb, '.3g', ' GB')}"
                       "</span></td>")
        for base in generate.RATIO_BASES:
            rp, rg = (ratio(block, cell, "w8a8", base, f"{w}_tps") for w in ("prompt", "generation"))
            tds.append(f"<td><b>{_fmt(rp, '.2f', 'x')}</b> / <b>{_fmt(rg, '.2f', 'x')}</b></td>")
        if m5_only and i == 0:
            tds.append(m5_only_cell(len(cells)))
        rows.append(f"<tr><th>prompt {cell[1]}, generation {cell[2]}, batch {cell[3]}</th>{''.join(tds)}</tr>")
    return (f'<table class="loop" data-config="{html.escape(config)}"><thead><tr><th>request</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _first_token_table(block: MachineLoop, config: str) -> str:
    vals = block.first_token.values
    prompts = sorted({k[1] for k in vals if len(k) == 3 and k[0] == config})
    rows = []
    for p in prompts:
        bf16, w8a8 = vals.get((config, p, "bf16")), vals.get((config, p, "w8a8"))
        diff = None if bf16 is None or w8a8 is None else w8a8 - bf16
        rows.append(f"<tr><th>{p}</th><td>{_fmt(bf16, '.2f', ' s')}</td><td>{_fmt(w8a8, '.2f', ' s')}</td>"
                    f"<td>{_fmt(diff, '+.2f', ' s')}</td></tr>")
    warm = vals.get((config, "warm"))
    note = ("" if warm is None else f'<p class="small">The first run on a new machine, <code>int8nax warm</code> '
            f'to the longest prompt: {warm:.1f} s, once.</p>')
    return (f'<table class="first-token" data-config="{html.escape(config)}"><thead><tr><th>prompt tokens</th>'
            f"<th>bf16</th><th>W8A8</th><th>W8A8 - bf16</th></tr></thead><tbody>{''.join(rows)}</tbody></table>{note}")


def section(results_dir: Path, commits: set[str] | None = None, first: str | None = None) -> str:
    """The page's section of mlx-lm's loop (a note when no machine has its results); `first`: the
    machine shown first (the user's own), the others in name order."""
    blocks = sorted(read(results_dir, commits), key=lambda b: b.name != first)
    m5_only = not any(k[4] == "cider" for b in blocks for k in b.generate.values)
    out = ['<section id="loop"><style>table.loop,table.first-token{border-collapse:collapse;margin:.5em 0 1.5em}'
           'table.loop td,table.loop th,table.first-token td,table.first-token th{border:1px solid #ddd;'
           'padding:2px 8px;text-align:right}</style><h2>Models in mlx-lm\'s loop: what a user\'s model gets</h2>',
           '<p class="small">benchmarks/bench_generate.py: whole models at their real depth (random seeded '
           'weights), saved as mlx-lm folders and timed through <code>mlx_lm.stream_generate</code> (batch 1) '
           'or <code>batch_generate</code> with mlx-lm\'s defaults, as <code>mlx_lm.benchmark</code> reports '
           'them: prompt tokens/s, generation tokens/s and peak memory, the median of the trials after a '
           'warm-up; W8A8\'s speed over bf16\'s and MLX 8-bit\'s from the same run (above 1: faster). '
           'benchmarks/bench_first_token.py: the seconds to the first token of a new process. This is the '
           'headline; the section after it, a few layers\' forward pass, is the diagnostic. Missing means no '
           'number (n/a, failed or not run there).</p>']
    if not blocks:
        out.append("<p>No results of mlx-lm's loop yet: run the suite with benchmarks/bench_generate.py.</p>")
    for b in blocks:
        out.append(machine_heading("loop", b.name, b.info, first))
        for config in sorted({k[0] for k in b.generate.values}):
            out.append(f'<h4>{html.escape(config)}: tokens per second in mlx-lm\'s loop <span class="small">'
                       f'(commit <code>{html.escape(b.generate.commit[:8])}</code>)</span></h4>'
                       + _generate_table(b, config, m5_only))
        for config in sorted({k[0] for k in b.first_token.values}):
            out.append(f'<h4>{html.escape(config)}: seconds to the first token of a fresh process '
                       f'<span class="small">(commit <code>{html.escape(b.first_token.commit[:8])}</code>)</span>'
                       f'</h4>' + _first_token_table(b, config))
    out.append("</section>")
    return "\n".join(out)
