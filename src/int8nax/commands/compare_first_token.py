"""`int8nax compare --generate --first-token`: the time to the first token of a fresh process.

    int8nax compare --generate --first-token [--model M[,M]] [--prompt-tokens P,P] [--forms bf16,w8a8[,mlx-q8]]
                    [--layers N] [--vocab V] [--markdown] [--json FILE]

For each model (default: the profile's, int8nax.bench.first_token.PROFILES: Qwen2.5-7B at 300, 777,
1500 and 4096 prompt tokens on a GPU; the cut 0.5B at 16 and 64 on a CPU), one new kernel cache
folder (a new machine), then in new processes: `int8nax warm` to the longest prompt (the first run on
a new machine, reported apart), one bf16 request (MLX's own kernels), and each form at each prompt
length (bench.first_token's module doc). Printed per model: a table of seconds to the first token
by prompt length and form, with each form's difference from bf16 (W8A8 minus bf16), then the first
run's cost, each form's load and conversion, the kernels W8A8's processes built (0 after the warm),
and the check. Exit status 1 when an output is wrong or W8A8 fails, 2 on a usage error.
"""

from __future__ import annotations

import json
import sys
import time

from . import compare_gemm
from ..bench import first_token, generate, models
from ..bench.text import table_lines

NOT_WITH_FIRST_TOKEN = ("generation_tokens", "trials")
"""--generate options that --first-token (one request of one token a process) does not read."""


def usage_error(args) -> str | None:
    """Why the options do not go with --first-token (None: they do)."""
    for option in NOT_WITH_FIRST_TOKEN:
        if getattr(args, option, None) not in (None, False):
            return f"--generate --first-token (one request a process) does not take --{option.replace('_', '-')}"
    if args.batch and args.batch != (1,):
        return "--generate --first-token (one request a process) does not take --batch other than 1"
    return None


def _s(value: float | None, cell: first_token.Cell | None = None, signed: bool = False) -> str:
    if value is None:
        return "" if cell is None or signed else cell.status()
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def render(result: first_token.Result, markdown: bool) -> str:
    """One table (prompt tokens x form, seconds to the first token, then each form minus bf16) and the notes."""
    cfg = models.CONFIGS.get(result.config)
    depth = f"{result.layers} layers" + ("" if cfg is None or result.layers == cfg.depth else f" of {cfg.depth}")
    vocab = f"vocab {result.vocab}" + ("" if cfg is None or result.vocab == cfg.vocab else f" of {cfg.vocab}")
    out = [f"\n{'### ' if markdown else ''}{result.config} ({depth}, {vocab}): seconds to the first token, "
           "each cell a new process (load, convert, one request)\n"]
    others = [f for f in result.forms if f != "bf16"] if "bf16" in result.forms else []
    header = ["prompt tokens", *result.forms, *(f"{f} - bf16" for f in others)]
    cells = {(c.form, c.prompt_tokens): c for c in result.cells}
    rows = []
    for p in result.prompt_tokens:
        row = [str(p)] + [_s(cells[(f, p)].first_token_s, cells[(f, p)]) for f in result.forms]
        row += [_s(cells[(f, p)].minus_bf16, cells[(f, p)], signed=True) for f in others]
        rows.append(row)
    out += table_lines(header, rows, markdown)
    out.append("")
    prefix = "- " if markdown else ""
    out += [prefix + line for line in notes(result)]
    return "\n".join(out)


def warm_line(result: first_token.Result) -> str | None:
    """The first run on a new machine: `int8nax warm`'s cost, or why it has none."""
    w = result.warm
    if w is None:
        return None
    longest = max(result.prompt_tokens)
    if "failed" in w or "n/a" in w:
        return f"first run on a new machine: `int8nax warm --max-tokens {longest}`: {w.get('failed') or w.get('n/a')}"
    text = (f"first run on a new machine: `int8nax warm --max-tokens {longest}` took {w['process_s']:.1f} s in its "
            f"process (load {w['load_s']:.1f} s, quantize {w['quantize_s']:.1f} s, kernels {w['build_s']:.1f} s): "
            f"{w['built']} kernels built for {w['layers']} W8A8 layers on the {w['backend']} backend")
    if w["backend"] != "cuda":
        text += f"; the {w['backend']} backend keeps no kernel cache, so there is nothing to build once"
    elif w.get("kernels"):
        text += f"; {w['kernels']}"
    return text + (f" (exit {w['exit']})" if w.get("exit") else "")


def cache_line(result: first_token.Result) -> str | None:
    """The files each process added to the kernel cache folder: what it compiled."""
    first = [f"{what} {got['cache_added']}" for what, got in (("the warm", result.warm or {}),
                                                              ("MLX's first process", result.mlx_first or {}))
             if got.get("cache_added") is not None]
    ran = [c for c in result.cells if c.cache_added is not None]
    if not first and not ran:
        return None
    added = [f"{c.form} at {c.prompt_tokens}: {c.cache_added}" for c in ran if c.cache_added]
    later = ("; then " + ", ".join(added) if added else
             f"; then none by the table's {len(ran)} processes (nothing compiled)" if ran else "")
    return "files added to the kernel cache: " + ", ".join(first) + later


def notes(result: first_token.Result) -> list[str]:
    lines = [f"every process used one new kernel cache folder ({first_token.KERNEL_CACHE_ENV}), as on a new machine"]
    line = warm_line(result)
    if line:
        lines.append(line)
    m = result.mlx_first or {}
    if "first_token_s" in m:
        lines.append(f"MLX's own kernels: the first bf16 process ({m['prompt_tokens']} tokens) took "
                     f"{m['first_token_s']:.2f} s to its first token (not in the table: each later process finds them)")
    elif m:
        lines.append(f"MLX's own kernels: the first bf16 process: {m.get('failed') or m.get('n/a')}")
    line = cache_line(result)
    if line:
        lines.append(line)
    for form in result.forms:
        mine = [c for c in result.cells if c.form == form]
        why = next((c for c in mine if c.mismatch or c.error or c.unavailable), None)
        if why is not None:
            lines.append(f"{form}: {why.status()} at {why.prompt_tokens} tokens: "
                         f"{why.mismatch or why.error or why.unavailable}")
        ran = [c for c in mine if c.first_token_s is not None]
        if not ran:
            continue
        each = ", ".join(f"{c.prompt_tokens}: {c.load_s:.1f} + {c.convert_s:.1f} s ({c.process_s:.1f} s in all)"
                         for c in ran)
        lines.append(f"{form}: load + convert before the request, per prompt length: {each}")
        counts = [c.kernels for c in ran if c.kernels]
        if counts:
            lines.append(f"{form}: kernels its processes built: {sum(k['built'] for k in counts)} "
                         f"({sum(k['found'] for k in counts)} loaded from the cache, "
                         f"{sum(k['failed'] for k in counts)} left to MLX)")
        elif form == "w8a8" and ran[0].backend:
            lines.append(f"w8a8: ran on the {ran[0].backend} backend (no kernel cache)")
        check = next((c.check for c in ran if c.check), None)
        if check:
            lines.append(f"{form}: checked after its first token (every projection on {generate.CHECK_TOKENS} "
                         f"prompt tokens against float64, worst): {check}")
    return lines


def main(args, profile_name: str, why: str) -> int:
    """--generate --first-token, after compare_model.generate_main's checks and profile choice."""
    bad = usage_error(args)
    if bad:
        print(f"int8nax compare: error: {bad}", file=sys.stderr)
        return 2
    profile = first_token.PROFILES[profile_name]
    configs = args.model or profile.configs
    forms = args.forms or first_token.DEFAULT_FORMS
    prompt_tokens = args.prompt_tokens or profile.prompt_tokens
    layers = args.layers or profile.layers
    vocab = args.vocab or profile.vocab
    meta = {**compare_gemm.environment(), **generate.versions(), "command": "int8nax " + " ".join(sys.argv[1:]),
            "profile": profile_name, "settings": {
                "forms": list(forms), "prompt_tokens": list(prompt_tokens), "layers": layers, "vocab": vocab,
                "prefill_step_size": generate.PREFILL_STEP_SIZE, "first_token": True}}
    print(f"int8nax compare --generate --first-token: backend {meta['backend']} ({meta['backend_reason']}); profile "
          f"{profile_name} ({why}); mlx-lm {meta['mlx_lm']}'s stream_generate, one token a process; random seeded "
          "weights", flush=True)
    lines = compare_gemm.Progress(sys.stderr, "none" if args.progress == "none" else "lines")
    t0 = time.perf_counter()

    def step(text: str) -> None:
        lines.say(f"[{time.perf_counter() - t0:.0f} s] {text}")

    results: list[first_token.Result] = []
    current: list[first_token.Result] = []  # the model being measured, as its last process left it

    def save(result: first_token.Result | None) -> None:
        current[:] = [] if result is None else [result]
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "first_token": [first_token.to_dict(r) for r in results + current]}, f,
                          indent=1)

    try:
        for config in configs:  # saved after every process, printed per model: a run cut short keeps what it had
            got = first_token.measure(config, forms, prompt_tokens, layers, vocab, progress=step, on_step=save)
            results.append(got)
            save(None)
            print(render(got, args.markdown), flush=True)
    except KeyboardInterrupt:  # a time limit's SIGINT: what was measured, then exit 130
        for result in current:
            print(render(result, args.markdown), flush=True)
        print(f"\ninterrupted after {time.perf_counter() - t0:.0f} s: the cells not run say so", flush=True)
        return 130
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 1 if first_token.failed(results) else 0
