"""`int8nax compare --model CONFIG[,CONFIG] --tokens T[,T]`: whole models, form by form, here.

For each configuration (int8nax.bench.models.CONFIGS), mode (eager, and with --model-modes
also under mx.compile) and form (bf16, fp16, mlx-q8, w8a8, cider), the model is built from
the same seeded bf16 weights, converted as a user converts it, and at each token count run
once (its first call, timed and checked: every projection against float64 on its own inputs;
a wrong output is reported as MISMATCH and not timed), then timed. Tokens 1 is one decode
step after a prompt of --context tokens; more is a prefill of that many tokens. Columns:

    ms/layer     median time of one forward / layers
    tokens/s     tokens / median time of one forward
    peak GiB     the form's weights + the most extra memory MLX held during one forward
    vs bf16      bf16's time / this form's (above 1: faster than bf16), same mode and tokens
    rel err      ||y - y_bf16|| / ||y_bf16|| of the decoder stack's output on a 16-token
                 prefill (reported, not gated: what the speed costs in accuracy)
    first s      the first forward at this token count (kernel builds, compile tracing)

Forms run one after another and each is freed before the next, so that peak memory is its own.
Exit status 1 when an output is wrong or int8nax's W8A8 fails, as `int8nax compare`.

`int8nax compare --generate [--model M] [--prompt-tokens P,P] [--generation-tokens G] [--batch B,B]`
is the generation benchmark (int8nax.bench.generate): whole models at their real depth, saved as
mlx-lm folders, every form timed through mlx-lm's stream_generate / batch_generate, printed as
mlx-lm's table (Precision | Prompt (P) tok/sec | Generation (G) tok/sec | Memory GB) with each
form's tokens/s over bf16's and over mlx-q8's, and the greedy agreement with bf16.

`int8nax compare --generate --breakdown [--forms bf16,w8a8[,mlx-q8]]` explains the gap between the
two: per prompt length, batch 1, each form's prompt tokens/s on a ladder from mlx-lm's loop to one
bare forward (generate_breakdown.RUNGS: loop, no-clear, one-chunk, forward), forms interleaved in one process,
with each rung's ratio over bf16 and its peak memory: where the ratio changes, that step costs it
(and the stream_generate rungs' time to the first token by part: where the clear's cost lands);
then the generation phase: each form's ms a generated token in mlx-lm's loop beside the GPU's busy
ms for it (a CUDA GPU with torch), so a loop the host sets the pace of shows as idle GPU time, and
beside the host's own share of a decode step (its graph built; the step run without overlap).

`int8nax compare --generate --first-token [--prompt-tokens P,P] [--forms bf16,w8a8[,mlx-q8]]` is the
time to the first token of a fresh process (int8nax.bench.first_token; compare_first_token prints it).
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import time
from dataclasses import asdict, dataclass

from . import compare_first_token, compare_gemm
from ..bench import argtypes, first_token, generate, generate_breakdown, model_folder, models
from ..bench.checks import MismatchError
from ..bench.peers import Unavailable
from ..bench.text import table_lines

GIB = 2.0**30


@dataclass
class Row:
    """One (configuration, mode, form, tokens): its figures, or why there are none."""

    config: str
    mode: str
    form: str
    tokens: int
    layers: int
    context: int
    seconds: float | None = None
    ms_per_layer: float | None = None
    tokens_per_s: float | None = None
    peak_bytes: int | None = None
    first_call_s: float | None = None
    speed_vs_bf16: float | None = None
    rel_error_vs_bf16: float | None = None
    check: str | None = None
    detail: str | None = None
    unavailable: str | None = None
    mismatch: str | None = None
    error: str | None = None
    breakdown: dict | None = None
    """--breakdown: model_breakdown.Breakdown's fields (ms per layer), or {"n/a": why}."""

    def status(self) -> str:
        return "MISMATCH" if self.mismatch else "n/a" if self.seconds is None else ""


def measure(configs, tokens, forms=models.FORMS, modes=("eager",), layers: int = 4, context: int = 512,
            repeat: int = 5, progress=None, breakdown: bool = False) -> list[Row]:
    """Every (configuration, mode, form, tokens) as a Row, in that order (see the module doc);
    breakdown: also where each forward's time goes on the GPU (bench.model_breakdown)."""
    rows: list[Row] = []
    for config in configs:
        for form in forms:
            base = None
            try:
                base = models.prepare(config, form, "eager", layers=layers, context=context, error_vs_bf16=True)
            except Unavailable as exc:
                why = str(exc)
            except Exception as exc:  # a form that fails to build: n/a with the reason
                why = f"failed to build: {type(exc).__name__}: {exc}"
            for mode in modes:
                prepared, mode_why = None, None
                if base is not None:
                    try:
                        prepared = base if mode == "eager" else base.with_mode(mode)
                    except Unavailable as exc:
                        mode_why = str(exc)
                for t in tokens:
                    row = Row(config, mode, form, t, layers, context)
                    if prepared is None:
                        row.unavailable = mode_why or why
                    else:
                        _fill(row, prepared, repeat)
                        if breakdown and row.seconds is not None:
                            row.breakdown = _breakdown(prepared, t)
                    rows.append(row)
                    if progress:
                        progress(f"{config} {form} {mode} {t}")
            del base, prepared
            gc.collect()
    _speedups(rows)
    return rows


def _fill(row: Row, prepared: models.Prepared, repeat: int) -> None:
    row.detail = prepared.detail
    row.rel_error_vs_bf16 = prepared.rel_error_vs_bf16
    try:
        prepared.prepare(row.tokens)
        row.check = prepared.check[row.tokens]
        row.first_call_s = prepared.first_call_s[row.tokens]
        row.seconds = prepared.seconds(row.tokens, repeat=repeat)
        row.peak_bytes = prepared.peak_bytes(row.tokens)
    except Unavailable as exc:
        row.unavailable = str(exc)
        return
    except MismatchError as exc:
        row.mismatch = str(exc)
        row.seconds = None
        return
    except Exception as exc:  # e.g. out of memory at a long prefill: n/a with the reason
        row.error = f"{type(exc).__name__}: {exc}"
        row.seconds = None
        return
    row.ms_per_layer = row.seconds / row.layers * 1e3
    row.tokens_per_s = row.tokens / row.seconds


def _breakdown(prepared: models.Prepared, tokens: int) -> dict:
    from ..bench import model_breakdown

    got, why = model_breakdown.measured(prepared, tokens)
    return {"n/a": why} if got is None else asdict(got)


def _speedups(rows: list[Row]) -> None:
    bf16 = {(r.config, r.mode, r.tokens): r.seconds for r in rows if r.form == "bf16"}
    for r in rows:
        ref = bf16.get((r.config, r.mode, r.tokens))
        if ref and r.seconds:
            r.speed_vs_bf16 = ref / r.seconds


def failed(rows: list[Row]) -> bool:
    return any(r.mismatch or (r.form == "w8a8" and r.error) for r in rows)


# --- output --------------------------------------------------------------------------------

HEADER = ["tokens", "form", "ms/layer", "tokens/s", "peak GiB", "vs bf16", "rel err", "first s"]


def _cells(r: Row) -> list[str]:
    def num(v, fmt):
        return format(v, fmt) if v is not None else (r.status() or "n/a")

    return [("1 (decode)" if r.tokens == 1 else str(r.tokens)), r.form, num(r.ms_per_layer, ".3f"),
            num(r.tokens_per_s, ".1f"), num(None if r.peak_bytes is None else r.peak_bytes / GIB, ".2f"),
            num(r.speed_vs_bf16, ".2f"), "" if r.rel_error_vs_bf16 is None else f"{r.rel_error_vs_bf16:.2g}",
            num(r.first_call_s, ".2f")]


def notes(rows: list[Row]) -> list[str]:
    """One line per form (and mode) that did not run everywhere: its first reason."""
    lines, seen = [], set()
    for r in rows:
        why = r.mismatch and f"MISMATCH at {r.tokens} tokens: {r.mismatch}" or r.error and \
            f"failed at {r.tokens} tokens: {r.error}" or r.unavailable and f"n/a: {r.unavailable}"
        key = (r.form, r.mode, why)
        if why and key not in seen:
            seen.add(key)
            lines.append(f"{r.form} ({r.mode}): {why}")
    return lines


def ran(rows: list[Row]) -> list[str]:
    """One line per quantized form that ran: what it is here (bench.models.convert's words: the
    backend, and the path its SwiGLU MLPs take)."""
    lines, seen = [], set()
    for r in rows:
        if r.detail and r.form not in ("bf16", "fp16") and r.form not in seen:
            seen.add(r.form)
            lines.append(f"{r.form} ran as: {r.detail}")
    return lines


def render(rows: list[Row], markdown: bool) -> str:
    out = []
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.config, r.mode), []).append(r)
    for (config, mode), group in groups.items():
        group = sorted(group, key=lambda r: (r.tokens, models.FORMS.index(r.form)))
        first = group[0]
        title = (f"{config}, {first.layers} layers, {mode}" + (", decode after a prompt of "
                 f"{first.context}" if any(r.tokens == 1 for r in group) else ""))
        out.append(f"\n{'### ' if markdown else ''}{title}\n")
        out += table_lines(HEADER, [_cells(r) for r in group], markdown)
        out.append("")
        out += [f"- {line}" if markdown else line for line in checked(group) + notes(group) + ran(group)]
        out += breakdown_lines(group, markdown)
    return "\n".join(out)


def breakdown_lines(rows: list[Row], markdown: bool) -> list[str]:
    """The --breakdown table of a group (ms per layer; bench.model_breakdown) and each row's
    largest kernels; nothing where no row has one."""
    from ..bench import model_breakdown

    have = [r for r in rows if r.breakdown and "wall_ms" in r.breakdown]
    if not have:
        why = next((r.breakdown["n/a"] for r in rows if r.breakdown), None)
        return [f"breakdown n/a: {why}"] if why else []
    cats = [c for c in model_breakdown.NAMES if any(r.breakdown["categories"][c] >= 0.0005 for r in have)]
    header = ["tokens", "form", "wall", "gpu busy", "idle %", *cats]
    cells = []
    for r in have:
        b = r.breakdown
        idle = max(0.0, 1.0 - b["busy_ms"] / b["wall_ms"]) * 100 if b["wall_ms"] else 0.0
        cells.append([("1 (decode)" if r.tokens == 1 else str(r.tokens)), r.form, f"{b['wall_ms']:.3f}",
                      f"{b['busy_ms']:.3f}", f"{idle:.0f}", *(f"{b['categories'][c]:.3f}" for c in cats)])
    out = ["", "where a forward's time goes, ms per layer (CUPTI; wall is the host's, under the profiler):", ""]
    out += table_lines(header, cells, markdown)
    out.append("")
    for r in have:
        top = ", ".join(f"{n} {ms:.3f} ms x{count}" for n, ms, count in r.breakdown["top"])
        out.append(f"{'- ' if markdown else ''}{r.tokens} {r.form}: {r.breakdown['kernels']} GPU activities; {top}")
    return out


def checked(rows: list[Row]) -> list[str]:
    """One line: each form's check at each token count that passed (the worst projection)."""
    seen: dict[str, list[str]] = {}
    for r in rows:
        if r.check:
            seen.setdefault(r.form, []).append(f"{r.tokens}: {r.check}")
    if not seen:
        return []
    return ["checked before timing (worst projection per token count; eager: against float64, compiled: "
            "against eager): " + "; ".join(f"{form} {', '.join(v)}" for form, v in seen.items())]


def to_json(rows: list[Row], meta: dict) -> dict:
    return {"meta": meta, "models": [asdict(r) for r in rows]}


# --- command line --------------------------------------------------------------------------

def _tokens_arg(text: str):
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and 1 <= int(p) <= models.MAX_TOKENS for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated token counts from 1 (decode) to {models.MAX_TOKENS}, got {text!r}")
    return tuple(dict.fromkeys(int(p) for p in parts))


MODEL_ONLY = ("tokens", "forms", "model_modes", "layers", "context", "breakdown")
"""Options that only --model and --generate read (int8nax.commands.compare refuses them elsewhere)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `int8nax compare`'s model modes: --model (main below) and --generate
    (generate_main), each in its group of the help."""
    group = parser.add_argument_group(
        "models", "with --model: whole models (mlx-lm's Qwen decoder layers) form by form instead of GEMMs")
    group.add_argument("--model", type=compare_gemm.names_arg(tuple(models.CONFIGS), "configurations"),
                       help=f"comma-separated configurations: {', '.join(models.CONFIGS)}")
    group.add_argument("--tokens", type=_tokens_arg,
                       help="comma-separated token counts: 1 is one decode step, more a prefill (default: "
                            "the benchmark profile's)")
    group.add_argument("--forms", type=compare_gemm.names_arg(models.ALL_FORMS, "forms"),
                       help=f"comma-separated, in order (default: {','.join(models.FORMS)}; with --generate "
                            f"{','.join(generate.FORMS)})")
    group.add_argument("--model-modes", type=compare_gemm.names_arg(models.MODES, "modes"), default=("eager",),
                       help="eager (the default), compiled (under mx.compile), or eager,compiled")
    group.add_argument("--layers", type=argtypes.count(1, 64),
                       help="decoder layers (default: the benchmark profile's, 4 on a GPU; with --generate the "
                            "real depth on a GPU, 2 on a CPU)")
    group.add_argument("--context", type=argtypes.count(1, models.MAX_TOKENS - 1),
                       help="prompt tokens before a decode step (default: the profile's, 512 on a GPU)")
    group.add_argument("--breakdown", action="store_true",
                       help="also profile each timed cell on a CUDA GPU: host wall against GPU busy time and the "
                            "kernels' time by category (int8nax GEMM, quantization, float GEMM, attention...); "
                            "with --generate: prompt tokens/s of each form on a ladder from mlx-lm's loop to one "
                            "bare forward (loop, no-clear, one-chunk, forward), batch 1, forms interleaved "
                            f"(default forms {','.join(generate_breakdown.BREAKDOWN_FORMS)}), then ms a generated "
                            "token beside the GPU's busy ms for it")

    gen = parser.add_argument_group(
        "generation", "with --generate: whole models at their real depth through mlx-lm's stream_generate / "
                      "batch_generate, mlx-lm's table (int8nax.bench.generate)")
    gen.add_argument("--generate", action="store_true",
                     help="the generation benchmark: --model's models (default: the profile's) saved as mlx-lm "
                          "folders, every form timed as mlx_lm.benchmark times it")
    gen.add_argument("--prompt-tokens", type=_counts_arg, metavar="P[,P]",
                     help="prompt lengths (default: the profile's: 512,2048,4096 on a GPU, 64 on a CPU)")
    gen.add_argument("--generation-tokens", type=argtypes.count(1, models.MAX_TOKENS), metavar="G",
                     help="tokens generated per request (default: the profile's: 128 on a GPU, 16 on a CPU)")
    gen.add_argument("--batch", type=_counts_arg, metavar="B[,B]",
                     help="batch sizes: 1 runs stream_generate, more batch_generate (default: the profile's: "
                          "1,8 on a GPU, 1 on a CPU)")
    gen.add_argument("--trials", type=argtypes.count(1, 100),
                     help="timed requests per cell after the warm-up (default: the profile's: 3 on a GPU, 2 on a CPU)")
    gen.add_argument("--vocab", type=argtypes.count(len(model_folder.ALPHABET)),
                     help="vocabulary of the saved model (default: the profile's: the real one on a GPU)")
    gen.add_argument("--first-token", action="store_true",
                     help="instead: the time to the first token of a fresh process, each form at each prompt length "
                          "in its own process, after W8A8's kernels were built once (`int8nax warm`, timed: the "
                          "first run on a new machine) into a new kernel cache (default forms "
                          f"{','.join(first_token.DEFAULT_FORMS)}; prompt lengths 300,777,1500,4096 on a GPU, "
                          "16,64 on a CPU)")
    gen.add_argument("--render", metavar="FILE",
                     help="instead of measuring: print the tables of a saved run, the JSON that --generate --json "
                          "(or --first-token --json) wrote or that the asv suite left where INT8NAX_BENCH_SAVE "
                          "named (with --markdown: as Markdown)")


def main(args) -> int:
    from ..bench import problems

    if args.shapes or args.contenders or args.profile:
        print("int8nax compare: error: --model does not take --shapes, --contenders or --profile", file=sys.stderr)
        return 2
    try:
        profile_name, _ = problems.choose_profile()
    except problems.ProfileError as exc:
        print(f"int8nax compare: error: {exc}", file=sys.stderr)
        return 2
    profile = models.PROFILES[profile_name]
    if args.forms and any(f not in models.FORMS for f in args.forms):
        print(f"int8nax compare: error: --forms: --model without --generate takes {', '.join(models.FORMS)}, "
              f"got {','.join(args.forms)}", file=sys.stderr)
        return 2
    tokens = args.tokens or profile.tokens
    layers = args.layers or profile.layers
    context = args.context or profile.context
    forms = args.forms or models.FORMS
    if args.breakdown:
        from ..bench import model_breakdown

        model_breakdown.start()
    meta = compare_gemm.environment()
    print(f"int8nax compare --model: backend {meta['backend']} ({meta['backend_reason']}); {layers} layers, "
          f"mlx-lm's classes with random seeded weights; median of {args.repeat}")
    # One line per measured cell on stderr (a model cell takes seconds: no bar needed), unless
    # --progress none.
    total = len(args.model) * len(forms) * len(args.model_modes) * len(tokens)
    lines = compare_gemm.Progress(sys.stderr, "none" if args.progress == "none" else "lines")
    counter = itertools.count(1)

    def step(label: str) -> None:
        lines.say(f"[{next(counter)}/{total}] {label}")
    meta["command"] = "int8nax " + " ".join(sys.argv[1:])
    t0 = time.perf_counter()
    rows: list[Row] = []
    for config in args.model:  # printed and saved per configuration: a run cut short keeps what it had
        got = measure([config], tokens, forms, args.model_modes, layers, context, args.repeat, step, args.breakdown)
        rows += got
        print(render(got, args.markdown), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(to_json(rows, meta), f, indent=1)
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 1 if failed(rows) else 0


# --- --generate: the generation benchmark (int8nax.bench.generate) ---------------------------

GENERATE_ONLY = ("prompt_tokens", "generation_tokens", "batch", "trials", "vocab", "first_token", "render")
"""Options that only --generate reads (int8nax.commands.compare refuses them elsewhere)."""
NOT_WITH_GENERATE = ("shapes", "contenders", "profile", "tokens", "context")
NOT_WITH_BREAKDOWN = ("first_token",)
"""--generate options that --generate --breakdown (batch 1) does not read."""


def _counts_arg(text: str) -> tuple[int, ...]:
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and 1 <= int(p) <= models.MAX_TOKENS for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated whole numbers from 1 to {models.MAX_TOKENS}, got {text!r}")
    return tuple(dict.fromkeys(int(p) for p in parts))


def _tps(fig) -> str:
    return f"{fig.median:.1f} ({fig.low:.1f}-{fig.high:.1f})"


def generate_header(prompt_tokens: int, generation_tokens: int) -> list[str]:
    """mlx-lm's BENCHMARKS.md columns, then the ratios and the greedy agreement."""
    return (["Precision", f"Prompt ({prompt_tokens}) tok/sec", f"Generation ({generation_tokens}) tok/sec",
             "Memory GB"] + [f"{w} vs {b}" for b in generate.RATIO_BASES for w in ("P", "G")] + ["agree"])


def generate_cells(r: generate.Row) -> list[str]:
    if r.prompt_tps is None:
        cells = [r.form, r.status(), r.status(), r.status()]
    else:
        cells = [r.form, _tps(r.prompt_tps), _tps(r.generation_tps), f"{r.peak_memory_gb:.2f}"]
    for b in generate.RATIO_BASES:
        for w in ("prompt", "generation"):
            v = r.ratios.get(f"{w}_vs_{b}")
            cells.append("" if v is None else f"{v:.2f}")
    cells.append("" if r.agree_tokens is None else f"{r.agree_tokens}/{r.generation_tokens}")
    return cells


def generate_notes(rows: list[generate.Row]) -> list[str]:
    """Per form, once: why it did not run, its check, what it ran as and its first request here."""
    lines, seen = [], set()
    for r in rows:
        if r.form in seen:
            continue
        seen.add(r.form)
        if r.unavailable:
            lines.append(f"{r.form}: n/a: {r.unavailable}")
        elif r.mismatch:
            lines.append(f"{r.form}: MISMATCH: {r.mismatch}")
        elif r.error:
            lines.append(f"{r.form}: failed: {r.error}")
        if r.check:
            lines.append(f"{r.form}: checked before timing (every projection on {generate.CHECK_TOKENS} prompt "
                         f"tokens against float64, worst): {r.check}")
        if r.detail and r.form not in ("bf16", "fp16"):
            lines.append(f"{r.form} ran as: {r.detail}")
        if r.first_request_s is not None:
            lines.append(f"{r.form}: first request in this process {r.first_request_s:.2f} s")
    return lines


def generate_render(rows: list[generate.Row], markdown: bool) -> str:
    """One mlx-lm table per (configuration, prompt tokens, batch), then the notes."""
    out = []
    groups: dict[tuple, list[generate.Row]] = {}
    for r in rows:
        groups.setdefault((r.config, r.prompt_tokens, r.generation_tokens, r.batch), []).append(r)
    for (config, p, g, b), group in groups.items():
        first = group[0]
        cfg = models.CONFIGS.get(config)
        depth = f"{first.layers} layers" + ("" if cfg is None or first.layers == cfg.depth else f" of {cfg.depth}")
        vocab = f"vocab {first.vocab}" + ("" if cfg is None or first.vocab == cfg.vocab else f" of {cfg.vocab}")
        loop = "stream_generate" if b == 1 else "batch_generate"
        trials = max((len(r.trials) for r in group), default=0)
        out.append(f"\n{'### ' if markdown else ''}{config} ({depth}, {vocab}): prompt {p}, generation {g}, "
                   f"batch {b} ({loop}; median of {trials} trials, min-max)\n")
        out += table_lines(generate_header(p, g), [generate_cells(r) for r in group], markdown)
    out.append("")
    prefix = "- " if markdown else ""
    out += [prefix + line for line in generate_notes(rows)]
    return "\n".join(out)


def generate_json(rows: list[generate.Row], meta: dict) -> dict:
    return {"meta": meta, "generate": [generate.to_dict(r) for r in rows]}


def generate_main(args) -> int:
    from ..bench import problems

    given = [o for o in NOT_WITH_GENERATE if getattr(args, o, None) not in (None, False)]
    if given or args.model_modes != ("eager",):
        name = given[0] if given else "model_modes"
        print(f"int8nax compare: error: --generate does not take --{name.replace('_', '-')}", file=sys.stderr)
        return 2
    if args.render is not None:  # '' too: a path to read (and refuse), not a run to start
        return render_main(args)
    try:
        profile_name, why = problems.choose_profile()
    except problems.ProfileError as exc:
        print(f"int8nax compare: error: {exc}", file=sys.stderr)
        return 2
    profile = generate.PROFILES[profile_name]
    if args.first_token and not args.breakdown:
        return compare_first_token.main(args, profile_name, why)
    if args.breakdown:
        bad = [o for o in NOT_WITH_BREAKDOWN if getattr(args, o) not in (None, False)]
        bad += ["forms"] if args.forms and "cider" in args.forms else []
        bad += ["batch"] if args.batch and args.batch != (1,) else []
        if bad:
            what = {"forms": "--forms with cider", "batch": "--batch other than 1"}.get(bad[0], f"--{bad[0]}")
            print(f"int8nax compare: error: --generate --breakdown (batch 1) does not take "
                  f"{what.replace('_', '-')}", file=sys.stderr)
            return 2
    if args.breakdown:
        from ..bench import model_breakdown

        model_breakdown.start()  # CUPTI's context before MLX's first kernel (the generation phase's GPU busy time)
    configs = args.model or profile.configs
    forms = args.forms or (generate_breakdown.BREAKDOWN_FORMS if args.breakdown else generate.FORMS)
    prompt_tokens = args.prompt_tokens or profile.prompt_tokens
    generation_tokens = args.generation_tokens or profile.generation_tokens
    batches = args.batch or profile.batches
    trials = args.trials or profile.trials
    layers = args.layers or profile.layers
    vocab = args.vocab or profile.vocab
    meta = {**compare_gemm.environment(), **generate.versions(), "command": "int8nax " + " ".join(sys.argv[1:]),
            "profile": profile_name, "settings": {
                "forms": list(forms), "prompt_tokens": list(prompt_tokens), "generation_tokens": generation_tokens,
                "batches": list(batches), "trials": trials, "layers": layers, "vocab": vocab,
                "prefill_step_size": generate.PREFILL_STEP_SIZE, "breakdown": args.breakdown}}
    print(f"int8nax compare --generate: backend {meta['backend']} ({meta['backend_reason']}); profile {profile_name} "
          f"({why}); mlx-lm {meta['mlx_lm']}'s stream_generate / batch_generate, prefill step "
          f"{generate.PREFILL_STEP_SIZE}; random seeded weights", flush=True)
    lines = compare_gemm.Progress(sys.stderr, "none" if args.progress == "none" else "lines")
    t0 = time.perf_counter()

    def step(text: str) -> None:
        lines.say(f"[{time.perf_counter() - t0:.0f} s] {text}")

    rows: list[generate.Row] = []

    def save(current: list[generate.Row]) -> None:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(generate_json(rows + current, meta), f, indent=1)

    if args.breakdown:
        return breakdown_main(args, profile, configs, meta, step)
    for config in configs:  # saved after every form, printed per model: a run cut short keeps what it had
        got = generate.measure(config, forms, prompt_tokens, generation_tokens, batches, trials, layers, vocab,
                               progress=step, on_form=save)
        rows += got
        print(generate_render(got, args.markdown), flush=True)
        save([])
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 1 if generate.failed(rows) else 0


MEASURING_OPTIONS = ("model", "forms", "layers", "breakdown", "json") + tuple(o for o in GENERATE_ONLY if o != "render")
"""What --render refuses: a saved run's tables are printed as they were measured."""


def render_main(args) -> int:
    """--generate --render FILE: a saved run's tables (generate rows and first-token results), measuring nothing."""
    given = [o for o in MEASURING_OPTIONS + NOT_WITH_GENERATE if getattr(args, o, None) not in (None, False)]
    if given or args.model_modes != ("eager",):
        name = given[0] if given else "model_modes"
        print(f"int8nax compare: error: --render prints a saved run as it was and takes only --markdown, got "
              f"--{name.replace('_', '-')}", file=sys.stderr)
        return 2
    try:
        with open(args.render) as f:
            saved = json.load(f)
        rows = [generate.from_dict(r) for r in saved.get("generate", [])]
        results = [first_token.from_dict(r) for r in saved.get("first_token", [])]
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        print(f"int8nax compare: error: --render: cannot read {args.render!r} as a saved run ({exc})", file=sys.stderr)
        return 2
    if not rows and not results:
        print(f"int8nax compare: error: --render: {args.render!r} holds no \"generate\" rows or \"first_token\" "
              f"results (what --generate --json writes); its keys: {', '.join(saved) or 'none'}", file=sys.stderr)
        return 2
    meta = saved.get("meta") or {}
    if meta:
        print(f"saved run: {meta.get('command', 'command not saved')}; " + ", ".join(
            f"{k} {meta[k]}" for k in ("date", "mlx", "mlx_lm", "driver") if meta.get(k)), flush=True)
    if rows:
        print(generate_render(rows, args.markdown), flush=True)
    for result in results:
        print(compare_first_token.render(result, args.markdown), flush=True)
    return 0


# --- --generate --breakdown: the ladder from mlx-lm's loop to the bare forward ---------------

def breakdown_render(result: generate_breakdown.Breakdown, markdown: bool) -> str:
    """Per prompt length one table: a row per rung, per form its prompt tokens/s (median,
    min-max) and peak GB, each form's ratio over bf16; then the forms' notes."""
    out = []
    forms = list(dict.fromkeys(c.form for c in result.rungs))
    others = [f for f in forms if f != "bf16"]
    for p in dict.fromkeys(c.prompt_tokens for c in result.rungs):
        cells = {(c.form, c.rung): c for c in result.rungs if c.prompt_tokens == p}
        out.append(f"\n{'### ' if markdown else ''}{result.config} ({result.layers} layers, vocab {result.vocab}): "
                   f"prompt {p}, batch 1, ladder from mlx-lm's loop to the bare forward (median of "
                   f"{result.trials} trials, min-max; forms interleaved)\n")
        header = (["rung"] + [f"{f} vs bf16" for f in others if "bf16" in forms]
                  + [f"{f} tok/s" for f in forms] + [f"{f} peak GB" for f in forms])
        rows = []
        for r in generate_breakdown.RUNGS:
            row = [r]
            row += [_ratio(cells[(f, r)].vs_bf16, cells[(f, r)].vs_bf16_interval)
                    if (f, r) in cells and cells[(f, r)].vs_bf16 else "" for f in others if "bf16" in forms]
            row += [_tps(cells[(f, r)].prompt_tps) if (f, r) in cells else "n/a" for f in forms]
            row += [f"{cells[(f, r)].peak_memory_gb:.3g}" if (f, r) in cells else "n/a" for f in forms]
            rows.append(row)
        out += table_lines(header, rows, markdown)
        out += parts_lines(result, p, markdown)
        out += decode_lines(result, p, markdown)
    out.append("")
    prefix = "- " if markdown else ""
    if any(c.vs_bf16_interval for c in result.rungs) or any(d.vs_interval for d in result.decode):
        out.append(prefix + INTERVAL_NOTE.format(generate.MEDIAN_COVERAGE))
    out.append(prefix + "rungs: loop = stream_generate (max_tokens 1, prefill step "
               f"{generate.PREFILL_STEP_SIZE}) as users run it; no-clear = loop with mlx_lm.generate's "
               "mx.clear_cache() a no-op; one-chunk = no-clear with prefill step = prompt length (P - 1 tokens "
               "in one chunk, then the last-token step); forward = the decoder stack on all P tokens with a fresh "
               "KV cache, the LM head on the last position, default stream (it also runs the last layer's attention and MLP "
               "on every token, which the loop's chunks skip: 1/layers of the work more)")
    for f, info in result.forms.items():
        for k, v in info.items():
            out.append(prefix + (f"{f}: checked before timing (every projection on {generate.CHECK_TOKENS} prompt "
                                 f"tokens against float64, worst): {v}" if k == "check" else
                                 f"{f} ran as: {v}" if k == "detail" else f"{f}: {k}: {v}"))
    return "\n".join(out)


def _ratio(value: float, interval) -> str:
    """"1.45 [1.38-1.52]": a ratio of medians and, where measured, the interval of the trial-by-trial
    ratios' median (generate.median_interval)."""
    return f"{value:.2f}" + (f" [{interval[0]:.2f}-{interval[1]:.2f}]" if interval else "")


INTERVAL_NOTE = ("[low-high]: where 5 or more trials ran, an interval for the median of the trial-by-trial ratios "
                 "(each trial's forms ran in one round, so a drift of the machine between rounds cancels), "
                 "distribution-free, covering at least {:.0%}")


def parts_lines(result: generate_breakdown.Breakdown, prompt_tokens: int, markdown: bool) -> list[str]:
    """The stream_generate rungs' time to the first token at one prompt length by part
    (generate_breakdown.PROMPT_PARTS, median ms), a row per rung and a column per form: where the
    loop's clear_cache costs (loop against no-clear), part by part; after each, the GB in MLX's
    buffer cache at the clear_cache calls (what the loop's clear frees), where measured."""
    cells = {(c.form, c.rung): c for c in result.rungs if c.prompt_tokens == prompt_tokens and c.parts}
    if not cells:
        return []
    forms = list(dict.fromkeys(f for f, _ in cells))
    out = [f"\n{'### ' if markdown else ''}{result.config}: prompt {prompt_tokens}, the time to the first token "
           f"by part, ms ({' / '.join(generate_breakdown.PROMPT_PARTS)}; median of {result.trials} trials; "
           f"in brackets the GB in MLX's buffer cache at mlx-lm's clear_cache calls)\n"]

    def cell(c) -> str:
        text = " / ".join(f"{c.parts[p]:.2f}" for p in generate_breakdown.PROMPT_PARTS)
        return text if c.cached_gb is None else f"{text} ({c.cached_gb:.2f} GB)"

    rows = []
    for r in dict.fromkeys(r for _, r in cells):
        rows.append([r] + [cell(cells[(f, r)]) if (f, r) in cells else "n/a" for f in forms])
    return out + table_lines(["rung"] + forms, rows, markdown) + clear_cost_lines(cells, forms, markdown)


def clear_cost_lines(cells: dict, forms: list[str], markdown: bool) -> list[str]:
    """Per form, what mlx-lm's clear_cache costs its loop (issue 48's measure: the loop rung's
    prompt tokens/s against the no-clear rung's, the median trials', and from 5 trials in brackets
    the interval of the trial-by-trial cost, generate.median_interval), the clear's own ms and the
    GB it frees; nothing for a form without both rungs."""
    out = []
    for f in forms:
        loop, kept = cells.get((f, "loop")), cells.get((f, "no-clear"))
        if loop is None or kept is None or not loop.prompt_tps or not kept.prompt_tps:
            continue
        cost = 100 * (1 - loop.prompt_tps.median / kept.prompt_tps.median)
        # the two rungs of a trial run in one round, so their trial-by-trial ratios pair up
        interval = generate.median_interval(generate.paired_ratios(loop.trials, kept.trials))
        spread = "" if interval is None else f" [{100 * (1 - interval[1]):.1f}-{100 * (1 - interval[0]):.1f} %]"
        freed = "" if loop.cached_gb is None else f", freeing {loop.cached_gb:.2f} GB"
        out.append(f"{'- ' if markdown else ''}{f}: mlx-lm's clear_cache costs the loop {cost:.1f} %{spread} of its "
                   f"prompt tokens/s against no-clear's; the call itself {loop.parts['clear']:.2f} ms a prompt{freed}")
    return ([""] + out) if out else []


def decode_lines(result: generate_breakdown.Breakdown, prompt_tokens: int, markdown: bool) -> list[str]:
    """The generation phase's table at one prompt length (none where it was not measured): per
    form ms a generated token in mlx-lm's loop (median, min-max), its speed over each
    generate.RATIO_BASES form's, the GPU's busy ms a token, the share of the loop the GPU sat idle,
    and the host's figures (generate_breakdown.decode_host)."""
    cells = [d for d in result.decode if d.prompt_tokens == prompt_tokens]
    if not cells:
        return []
    out = [f"\n{'### ' if markdown else ''}{result.config}: prompt {prompt_tokens}, {result.generation_tokens} "
           f"generated tokens, batch 1: mlx-lm's loop against the GPU's busy time (median of {result.trials} "
           "trials, min-max; forms interleaved)\n"]
    header = (["form", "ms a token (loop)"] + [f"vs {b}" for b in generate.RATIO_BASES]
              + ["GPU busy ms a token", "GPU idle", "graph ms a step", "step ms, no overlap",
                 "loop: " + " / ".join(generate_breakdown.PHASES) + " ms"])
    rows = []
    for d in cells:
        f = d.ms_per_token
        rows.append([d.form, f"{f.median:.3f} ({f.low:.3f}-{f.high:.3f})"]
                    + [_ratio(d.vs[b], d.vs_interval.get(b)) if b in d.vs else "" for b in generate.RATIO_BASES]
                    + [f"{d.gpu_ms_per_token:.3f}" if d.gpu_ms_per_token is not None else "n/a",
                       f"{d.idle:.0%}" if d.idle is not None else "n/a",
                       f"{d.graph_ms:.3f}" if d.graph_ms is not None else "n/a",
                       f"{d.step_ms:.3f}" if d.step_ms is not None else "n/a",
                       " / ".join(f"{d.phases[p]:.3f}" for p in generate_breakdown.PHASES) if d.phases else "n/a"])
    out += table_lines(header, rows, markdown)
    out.append(f"{'- ' if markdown else ''}graph: one decode step's graph built on the prompt's KV cache, not "
               "evaluated (the host work the loop overlaps with the GPU); step: a step built, evaluated and "
               "waited for, step after step; loop: a step as mlx-lm's generate_step runs it, the next step's graph "
               "built, then launched (mx.async_eval), then the wait for the token before it (medians of "
               f"{generate_breakdown.HOST_STEPS})")
    why = next((d.gpu_why for d in cells if d.gpu_why), None)
    if why:
        out.append(f"{'- ' if markdown else ''}GPU busy n/a: {why}")
    out += [f"{'- ' if markdown else ''}{d.form}: graph and step n/a: {d.host_why}" for d in cells if d.host_why]
    return out


def breakdown_main(args, profile, configs, meta, step) -> int:
    prompt_tokens = args.prompt_tokens or profile.prompt_tokens
    trials = args.trials or profile.trials
    layers = args.layers or profile.layers
    vocab = args.vocab or profile.vocab
    forms = args.forms or generate_breakdown.BREAKDOWN_FORMS
    generation_tokens = args.generation_tokens or profile.generation_tokens
    meta["settings"].update(forms=list(forms), batches=[1], generation_tokens=generation_tokens)
    t0 = time.perf_counter()
    results = []
    failed = False
    for config in configs:
        got = generate_breakdown.breakdown(config, forms, prompt_tokens, trials, layers, vocab, progress=step,
                                           generation_tokens=generation_tokens)
        results.append(got)
        print(breakdown_render(got, args.markdown), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"meta": meta, "breakdown": [asdict(r) for r in results]}, f, indent=1)
        failed |= any("MISMATCH" in info or (form == "w8a8" and "failed" in info) for form, info in got.forms.items())
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 1 if failed else 0
