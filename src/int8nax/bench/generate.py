"""The generation benchmark: whole models through mlx-lm's own loop, as mlx-lm users measure them.

What `mlx_lm.benchmark -p P -g G [-b B]` reports, for every form of one model in one process:
the model is a local folder in mlx-lm's format (bench.model_folder: real depth and vocabulary
by default, random seeded weights, a tokenizer built here), loaded with `mlx_lm.load`,
converted as a user converts it (bench.models.convert), and timed through
`mlx_lm.stream_generate` (batch 1) or `mlx_lm.batch_generate` (batch B > 1) with mlx-lm's
defaults (prefill_step_size 2048, greedy sampling), one warm-up request right before each
(P, B)'s `trials` requests. Figures are mlx-lm's own, read off its responses:

    prompt_tps       prompt tokens / time to the first token (batch: all prompts' tokens / prefill time)
    generation_tps   generated tokens / time after the first token (batch: all sequences' tokens)
    peak_memory      mx.get_peak_memory() in GB (1e9 bytes), reset before each (P, B)'s warm-up,
                     so it is this form's weights, KV cache and activations (not the bf16 model a
                     quantized form was converted from: that is freed and the peak reset first)

each as the median over trials with the spread (min-max); memory as the largest. Forms run one
after another, each loaded afresh from the folder and freed (with MLX's cache) before the next.

Checked before anything is timed, per form:
- agreement: the greedy tokens of a batch-1 request at the first prompt length, against bf16's
  (the first form run). Reported as how many leading tokens agree (of G), not pass/fail: random
  weights make near-ties common, where any quantization may pick the other token.
- projections: one forward of the whole model on CHECK_TOKENS prompt tokens with every
  projection recorded and checked against float64 on its own inputs (models.check_projections:
  W8A8 within 1 ulp, float and weight-only forms normwise). A failure is MISMATCH: nothing timed.
That greedy request is also the form's first request in this process (first_request_s: kernel
builds included) and the warm-up of the first (P, 1). The time to the first token of a fresh
process, per prompt length, is bench.first_token's (`compare --generate --first-token`).

Ratios (`ratios`): each form's prompt and generation tokens/s over bf16's and over mlx-q8's from
the same run (above 1: faster), at the same (P, G, B).
The breakdown of the prompt phase, from mlx-lm's loop to one bare forward (compare --generate
--breakdown), is bench.generate_breakdown's.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mlx.core as mx

from . import host, model_folder, models, saved
from .checks import MismatchError
from .peers import Unavailable

FORMS = models.ALL_FORMS


def run_order(form: str) -> tuple:
    """The order `measure` runs forms in: bf16 first (the others' reference), then int8nax's
    W8A8 (the subject: a run cut short by a time limit keeps it), then FORMS order."""
    return form != "bf16", form != "w8a8", FORMS.index(form)


PREFILL_STEP_SIZE = 2048
"""mlx-lm's default prefill chunk (generate_step, BatchGenerator, mlx_lm.benchmark)."""
CHECK_TOKENS = 16
"""Prompt tokens of the projection check's forward (its sampled rows cover all of them)."""
PROMPT_SEED = models.SEED - 2
GB = 1e9
"""mlx-lm reports memory in 1e9 bytes."""
RATIO_BASES = ("bf16", "mlx-q8")


@dataclass(frozen=True)
class Profile:
    """What a machine runs by default (bench.problems.choose_profile names the profile)."""

    configs: tuple[str, ...]
    layers: int | None
    """Decoder layers (None: the configuration's real depth)."""
    vocab: int | None
    """Vocabulary (None: the configuration's real one)."""
    prompt_tokens: tuple[int, ...]
    generation_tokens: int
    batches: tuple[int, ...]
    trials: int


PROFILES: dict[str, Profile] = {
    # The real models (28 and 36 layers, 152k vocabularies), what a server sees.
    "full": Profile(models.PROFILE_CONFIGS["full"], None, None, (512, 2048, 4096), 128, (1, 8), trials=3),
    # The 0.5B shape cut to 2 layers and models.VOCAB ids: MLX's CPU quantized_matmul runs at
    # ~0.17 G multiply-adds/s on the 2-core box (20x slower than its bf16 GEMM), so one request
    # of 64 + 16 tokens through the real 24 layers and 152k-wide LM head in mlx-q8 would take
    # minutes; 2 layers keep every form in the 3-minute budget of `int8nax compare --generate`.
    "cpu": Profile(models.PROFILE_CONFIGS["cpu"], 2, models.VOCAB, (64,), 16, (1,), trials=2),
}


def case_name(config: str, prompt_tokens: int, generation_tokens: int, batch: int) -> str:
    """One cell's name in the asv suite: "qwen2.5-7b p512 g128 b8"."""
    return f"{config} p{prompt_tokens} g{generation_tokens} b{batch}"


def parse_case(name: str) -> tuple[str, int, int, int] | None:
    """case_name's (config, prompt tokens, generation tokens, batch), or None for another string."""
    parts = name.split(" ")
    if len(parts) != 4 or [p[:1] for p in parts[1:]] != ["p", "g", "b"] or not all(p[1:].isdigit() for p in parts[1:]):
        return None
    return parts[0], int(parts[1][1:]), int(parts[2][1:]), int(parts[3][1:])


def profile_cases(profile: str) -> dict[str, tuple[str, int, int, int]]:
    """{case name: (config, prompt tokens, generation tokens, batch)} of every cell `profile` measures."""
    prof = PROFILES[profile]
    return {case_name(c, p, prof.generation_tokens, b): (c, p, prof.generation_tokens, b)
            for c in prof.configs for p in prof.prompt_tokens for b in prof.batches}


ALL_CASES: tuple[str, ...] = tuple(dict.fromkeys(name for p in PROFILES for name in profile_cases(p)))
"""Every profile's cells: the asv suite declares all of them (one parameter, not four, so that
the many cells no machine measures cost few benchmark processes), so every machine's results
publish into one site."""
CONFIGS_ENV = "INT8NAX_GENERATE_CONFIGS"
"""Comma-separated configurations the asv suite measures of its profile's (default: all): a GPU
run of the full profile takes ~5 minutes per model, so one model per call fits a 10-minute limit."""
FORMS_ENV = "INT8NAX_GENERATE_FORMS"
"""Comma-separated forms the asv suite measures (default: all FORMS): bf16, W8A8 and MLX 8-bit of
Qwen2.5-7B took 401 s on an H100, so the five forms of one model take two device calls (their
results merge into the commit's file; W8A8's ratio needs bf16 in the same call)."""


def skip_reason(profile: str, form: str) -> str | None:
    """Why the asv suite does not measure `form` in `profile` (None: it does)."""
    if profile == "cpu" and form in ("mlx-q8", "mlx-q4"):
        return (f"{form} is not in the cpu profile of the asv suite: MLX's CPU quantized_matmul runs ~20x slower "
                "than its bf16 GEMM on the 2-core box (~12 s a request of the cut 2-layer model); "
                f"`int8nax compare --generate --forms {form}` measures it")
    return None


@dataclass
class Figure:
    """One figure over the trials: median, min, max."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values) -> "Figure":
        values = list(values)
        return cls(statistics.median(values), min(values), max(values))


MEDIAN_COVERAGE = 0.9
"""The least confidence of median_interval's interval."""


def median_interval(values) -> tuple[float, float, float] | None:
    """(low, high, coverage): a distribution-free interval for the median of what `values` sample,
    the order statistics k and n + 1 - k with the largest k whose coverage, 1 - 2 P(Binomial(n,
    1/2) < k), is at least MEDIAN_COVERAGE; None for fewer than 5 values (4 cover 87.5 %). Over
    trial-by-trial ratios of two forms run in one round each (paired_ratios), a drift of the machine
    between rounds cancels, where the forms' own min-max spreads carry it."""
    xs = sorted(values)
    n = len(xs)
    best = None
    for k in range(1, (n + 1) // 2 + 1):
        coverage = 1.0 - 2.0 * sum(math.comb(n, i) for i in range(k)) / 2.0 ** n
        if coverage < MEDIAN_COVERAGE:
            break
        best = (xs[k - 1], xs[n - k], coverage)
    return best


def paired_ratios(mine, theirs) -> list[float]:
    """mine[i] / theirs[i] for trials i run in the same round (interleaved forms); [] where the
    counts differ or a value of theirs is not positive."""
    mine, theirs = list(mine), list(theirs)
    if len(mine) != len(theirs) or any(t <= 0 for t in theirs):
        return []
    return [a / b for a, b in zip(mine, theirs)]


@dataclass
class Row:
    """One (configuration, form, prompt tokens, batch): mlx-lm's figures, or why there are none."""

    config: str
    form: str
    prompt_tokens: int
    generation_tokens: int
    batch: int
    layers: int
    vocab: int
    prompt_tps: Figure | None = None
    generation_tps: Figure | None = None
    peak_memory_gb: float | None = None
    trials: list = field(default_factory=list)
    """[{"prompt_tps", "generation_tps", "peak_memory", "seconds"}] of every timed request."""
    agree_tokens: int | None = None
    """Leading greedy tokens equal to bf16's (of generation_tokens); None where bf16 did not run."""
    check: str | None = None
    detail: str | None = None
    first_request_s: float | None = None
    """This form's first request in the benchmark's process (batch 1, first prompt length)."""
    ratios: dict = field(default_factory=dict)
    """{"prompt_vs_bf16", "generation_vs_bf16", "prompt_vs_mlx-q8", "generation_vs_mlx-q8"}."""
    unavailable: str | None = None
    mismatch: str | None = None
    error: str | None = None

    def status(self) -> str:
        return "MISMATCH" if self.mismatch else "failed" if self.error else "n/a"


# --- inputs ---------------------------------------------------------------------------------

def prompts(prompt_tokens: int, batch: int, vocab: int) -> list[list[int]]:
    """`batch` prompts of `prompt_tokens` seeded random ids (the same in every process and form),
    as mlx_lm.benchmark draws them."""
    key = mx.random.key(PROMPT_SEED + prompt_tokens)
    return mx.random.randint(0, vocab, (batch, prompt_tokens), key=key).tolist()


def front_end():
    """The mlx_lm package with its generation front end (load, stream_generate, batch_generate);
    Unavailable where it cannot be imported (it needs transformers, which the asv environments
    install beside mlx-lm's --no-deps wheel)."""
    models.mlx_lm_module("cache")  # Unavailable without mlx-lm
    try:
        import mlx_lm

        mlx_lm.stream_generate  # runs the package's __init__ where bench.models deferred it
    except (ImportError, AttributeError) as exc:  # AttributeError: a package whose __init__ failed before
        raise Unavailable(f"mlx-lm's generation front end cannot be imported: {exc} "
                          "(pip install 'int8nax[bench]', which brings transformers)") from None
    return mlx_lm


def load(path: Path, form: str):
    """(model, tokenizer, detail, sources) of the folder in `form`: mlx_lm.load, then the
    conversion (models.convert). End of sequence is switched off, as mlx_lm.benchmark does, so
    every request runs to its max_tokens. Unavailable where the form cannot run here."""
    if form == "cider":
        from .peers import cider

        cider.load()  # Unavailable off an M5: say so before loading anything
    mlx_lm_load = front_end().load
    model, tokenizer = mlx_lm_load(str(path))
    tokenizer._eos_token_ids = set()
    sources = models._projections(model) if form == "cider" else None
    detail = models.convert(model, form)
    mx.eval(model.parameters())
    return model, tokenizer, detail, sources


def _free() -> None:
    gc.collect()
    mx.synchronize()
    mx.clear_cache()


# --- one request, mlx-lm's way --------------------------------------------------------------

def request(model, tokenizer, batch_prompts: list[list[int]], generation_tokens: int) -> dict:
    """One timed request: stream_generate for one prompt, batch_generate for more.
    {"prompt_tps", "generation_tps", "peak_memory" (GB), "seconds", "tokens" (batch 1: the
    generated ids)}."""
    mlx_lm = front_end()
    t0 = time.perf_counter()
    if len(batch_prompts) == 1:
        tokens = []
        response = None
        for response in mlx_lm.stream_generate(model, tokenizer, batch_prompts[0], max_tokens=generation_tokens,
                                        prefill_step_size=PREFILL_STEP_SIZE):
            tokens.append(response.token)
        return {"prompt_tps": response.prompt_tps, "generation_tps": response.generation_tps,
                "peak_memory": response.peak_memory, "seconds": time.perf_counter() - t0, "tokens": tokens}
    stats = mlx_lm.batch_generate(model, tokenizer, batch_prompts, max_tokens=generation_tokens,
                           prefill_step_size=PREFILL_STEP_SIZE).stats
    return {"prompt_tps": stats.prompt_tps, "generation_tps": stats.generation_tps,
            "peak_memory": stats.peak_memory, "seconds": time.perf_counter() - t0}


def first_token(model, tokenizer, prompt: list[int]) -> float:
    """Seconds from a request's start to its first token (stream_generate, one token)."""
    t0 = time.perf_counter()
    for _ in front_end().stream_generate(model, tokenizer, prompt, max_tokens=1, prefill_step_size=PREFILL_STEP_SIZE):
        break
    return time.perf_counter() - t0


def agreement(tokens, reference) -> int:
    """How many leading tokens of `tokens` equal `reference`'s."""
    count = 0
    for a, b in zip(tokens, reference):
        if a != b:
            break
        count += 1
    return count


# --- a whole run ----------------------------------------------------------------------------

def measure(config: str | models.Config, forms=FORMS, prompt_tokens=(64,), generation_tokens: int = 16, batches=(1,),
            trials: int = 3, layers: int | None = None, vocab: int | None = None, cache: Path | None = None,
            progress=None, on_form=None) -> list[Row]:
    """Every (form, prompt tokens, batch) of `config` as a Row, forms in FORMS order, measured
    in run_order (module doc). Never raises for a form: a form that cannot run is n/a with the reason, one whose
    check fails MISMATCH, one that raises failed with the error. on_form(rows so far), if
    given, hears after every form (a caller can save them: a run cut short keeps its forms)."""
    if isinstance(config, str) and config not in models.CONFIGS:
        raise ValueError(f"config: expected one of {', '.join(models.CONFIGS)}, got {config!r}")
    bad = [f for f in forms if f not in FORMS]
    if bad or not forms:
        raise ValueError(f"forms: expected some of {', '.join(FORMS)}, got {forms!r}")
    for name, values in (("prompt_tokens", prompt_tokens), ("batches", batches),
                         ("generation_tokens", (generation_tokens,)), ("trials", (trials,))):
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            raise ValueError(f"{name}: expected positive whole numbers, got {values!r}")
    cfg = models.CONFIGS[config] if isinstance(config, str) else config
    config = cfg.name
    layers = cfg.depth if layers is None else layers
    vocab = cfg.vocab if vocab is None else vocab
    say = progress or (lambda text: None)
    rows: list[Row] = []
    try:
        front_end()
        path = model_folder.folder(cfg, layers, vocab, cache=cache, progress=say)
    except Unavailable as exc:
        rows = [Row(config, f, p, generation_tokens, b, layers, vocab, unavailable=str(exc))
                for f in sorted(forms, key=FORMS.index) for p in prompt_tokens for b in batches]
        return rows
    reference = None  # bf16's greedy tokens
    for form in sorted(forms, key=run_order):
        mine = [Row(config, form, p, generation_tokens, b, layers, vocab) for p in prompt_tokens for b in batches]
        rows += mine
        try:
            say(f"{config} {form}: loading and converting")
            tokens = _measure_form(path, form, mine, trials, vocab, say)
            if form == "bf16":
                reference = tokens
            if reference is not None:
                for r in mine:
                    r.agree_tokens = agreement(tokens, reference)
        except Unavailable as exc:
            _mark(mine, unavailable=str(exc))
        except MismatchError as exc:
            _mark(mine, mismatch=str(exc))
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: failed, with the reason
            _mark(mine, error=f"{type(exc).__name__}: {exc}")
        _free()
        if on_form:
            ratios(rows)
            on_form(sorted(rows, key=lambda r: FORMS.index(r.form)))
    ratios(rows)
    return sorted(rows, key=lambda r: FORMS.index(r.form))


def _mark(rows: list[Row], **why) -> None:
    for r in rows:
        for k, v in why.items():
            setattr(r, k, v)
        r.prompt_tps = r.generation_tps = r.peak_memory_gb = None
        r.trials = []


def _measure_form(path: Path, form: str, rows: list[Row], trials: int, vocab: int, say) -> list[int]:
    """Load, convert, check and time one form (every row); returns its greedy tokens."""
    model, tokenizer, detail, sources = load(path, form)
    try:
        for r in rows:
            r.detail = detail
        _free()
        first = rows[0]
        prompt = prompts(first.prompt_tokens, 1, vocab)
        mx.reset_peak_memory()
        got = request(model, tokenizer, prompt, first.generation_tokens)  # the first request: warm-up and check
        for r in rows:
            r.first_request_s = got["seconds"]
        what = f"{first.config} x{first.layers} {form}"
        check = models.check_projections(model, mx.array(prompt)[:, :CHECK_TOKENS], what, sources)
        for r in rows:
            r.check = check
        for r in rows:
            batch_prompts = prompts(r.prompt_tokens, r.batch, vocab)
            say(f"{r.config} {form}: prompt {r.prompt_tokens}, generation {r.generation_tokens}, batch {r.batch}")
            # A warm-up right before every cell's trials, the first cell's too: after the check's
            # forward (float64 on the host, buffers freed) the next request ran 34-36 % slower in
            # prompt (bf16 and W8A8, 512 tokens, H100).
            _free()
            mx.reset_peak_memory()
            request(model, tokenizer, batch_prompts, r.generation_tokens)
            for _ in range(trials):
                got_trial = request(model, tokenizer, batch_prompts, r.generation_tokens)
                got_trial.pop("tokens", None)
                r.trials.append(got_trial)
            r.prompt_tps = Figure.of(t["prompt_tps"] for t in r.trials)
            r.generation_tps = Figure.of(t["generation_tps"] for t in r.trials)
            r.peak_memory_gb = max(t["peak_memory"] for t in r.trials)
        return got["tokens"]
    finally:
        del model, tokenizer


def ratios(rows: list[Row]) -> None:
    """Fill each row's ratios over the RATIO_BASES' rows of the same (config, P, G, B)."""
    base = {(r.form, r.config, r.prompt_tokens, r.generation_tokens, r.batch): r for r in rows}
    for r in rows:
        for b in RATIO_BASES:
            ref = base.get((b, r.config, r.prompt_tokens, r.generation_tokens, r.batch))
            for what in ("prompt", "generation"):
                mine, theirs = getattr(r, f"{what}_tps"), ref and getattr(ref, f"{what}_tps")
                if mine and theirs and theirs.median > 0:
                    r.ratios[f"{what}_vs_{b}"] = mine.median / theirs.median


def profile_figures(profile: str) -> dict:
    """{(case name, form): {"prompt_tps", "generation_tps", "peak_memory_gb", "ratios"}} of every
    cell `profile` measures (profile_cases), or {"skip": why} / {"mismatch": what} / {"error": what}. Never raises: the asv suite calls it from setup_cache, where an exception
    fails every benchmark of the class."""
    prof = PROFILES[profile]
    wanted = [c.strip() for c in os.environ.get(CONFIGS_ENV, "").split(",") if c.strip()]
    chosen = [f.strip() for f in os.environ.get(FORMS_ENV, "").split(",") if f.strip()]
    if unknown := [f for f in chosen if f not in FORMS]:
        why = f"{FORMS_ENV}: expected forms of {', '.join(FORMS)}, got {unknown[0]!r}"
        return {(c, f): {"error": why} for c in profile_cases(profile) for f in FORMS}
    out: dict = {}
    g = prof.generation_tokens
    for config in prof.configs:
        cases = [case_name(config, p, g, b) for p in prof.prompt_tokens for b in prof.batches]
        forms = [f for f in FORMS if not skip_reason(profile, f) and (not chosen or f in chosen)]
        if wanted and config not in wanted:
            why = f"{config} is not in {CONFIGS_ENV}={','.join(wanted)}"
            out.update({(c, f): {"skip": why} for c in cases for f in FORMS})
            continue
        try:
            rows = measure(config, forms, prof.prompt_tokens, g, prof.batches, prof.trials, prof.layers, prof.vocab,
                           on_form=_saver(profile, config))
        except Exception as exc:  # noqa: BLE001 - e.g. the folder cannot be written: every cell says why
            out.update({(c, f): {"error": f"{type(exc).__name__}: {exc}"} for c in cases for f in FORMS})
            continue
        for r in rows:
            key = (case_name(config, r.prompt_tokens, g, r.batch), r.form)
            if r.unavailable:
                out[key] = {"skip": r.unavailable}
            elif r.mismatch:
                out[key] = {"mismatch": r.mismatch}
            elif r.error:
                out[key] = {"error": r.error}
            else:
                out[key] = {"prompt_tps": r.prompt_tps.median, "generation_tps": r.generation_tps.median,
                            "peak_memory_gb": r.peak_memory_gb, "ratios": dict(r.ratios)}
        for f in FORMS:
            why = skip_reason(profile, f) or (chosen and f not in chosen and f"{f} is not in {FORMS_ENV}={','.join(chosen)}")
            if why:
                out.update({(c, f): {"skip": why} for c in cases})
    return out


def _saver(profile: str, config: str):
    """on_form for profile_figures: the rows so far into bench.saved's folder (generate-<config>.json,
    compare --generate --json's form), or None where no folder is named."""
    write = saved.writer(f"generate-{config}")
    if write is None:
        return None
    meta = suite_meta(profile, "benchmarks/bench_generate.py")
    return lambda rows: write({"meta": meta, "generate": [to_dict(r) for r in rows]})


def suite_meta(profile: str, benchmark: str) -> dict:
    """The "meta" of a result the asv suite's `benchmark` saves (bench.saved): what ran, where, which
    profile; the same keys as compare's --json meta where they overlap."""
    return {**host.environment(), **versions(), "profile": profile, "command": f"asv: {benchmark} (setup_cache)"}


def failed(rows: list[Row]) -> bool:
    """A wrong output anywhere, or int8nax's W8A8 failing."""
    return any(r.mismatch or (r.form == "w8a8" and r.error) for r in rows)


def to_dict(row: Row) -> dict:
    return asdict(row)


def from_dict(data: dict) -> Row:
    """The Row that to_dict gave `data` (a saved run read back: compare --generate --render)."""
    figures = {k: None if data.get(k) is None else Figure(**data[k]) for k in ("prompt_tps", "generation_tps")}
    return Row(**{**data, **figures})


def versions() -> dict:
    """{"mlx_lm": its version, "driver": the NVIDIA driver (None off an NVIDIA GPU)}, for the records."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        mlx_lm = version("mlx-lm")
    except PackageNotFoundError:
        mlx_lm = None
    driver = None
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20)
        driver = done.stdout.strip() or None if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        pass
    return {"mlx_lm": mlx_lm, "driver": driver}
