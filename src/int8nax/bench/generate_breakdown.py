"""The breakdown of `int8nax compare --generate --breakdown`: mlx-lm's loop to the bare forward,
rung by rung (RUNGS), every form loaded at once and interleaved, so that the gap between what a
user's loop gets and what a forward pass of the same model gets is measured, not guessed, with each
stream_generate rung's time to the first token split by part (PROMPT_PARTS); then
the generation phase (Decode): each generated token's time in mlx-lm's loop beside the GPU's busy
time for it, which tells a loop the GPU sets the pace of from one the host does, and beside the
host's own share (building a step's graph; a step built, evaluated and waited for). The model
folders, forms and inputs are generate's."""

from __future__ import annotations

import copy
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx

from . import model_folder, models
from .checks import MismatchError
from . import generate
from .generate import (CHECK_TOKENS, FORMS, GB, RATIO_BASES, Figure, _free, front_end, load, median_interval,
                       paired_ratios, prompts)
from .peers import Unavailable

RUNGS = ("loop", "no-clear", "one-chunk", "forward")
"""The ladder of `breakdown`, each rung one difference from the one before (prompt phase only):

    loop       stream_generate(prompt, max_tokens=1, prefill_step_size=PREFILL_STEP_SIZE): what
               users run; mlx-lm's prompt_tps (prompt tokens / time to the first token). Its
               prefill is chunks of min(step, rest) of the first P - 1 tokens (mx.eval of the KV
               cache, then mx.clear_cache() after each), then one step on the last token, whose
               sampled token is waited for after the next step's graph is built; all on mlx-lm's
               generation stream.
    no-clear   the same with mlx_lm.generate's mx.clear_cache() a no-op (no_clear()).
    one-chunk  no-clear with prefill_step_size = P: the P - 1 tokens in one chunk (no 2048-token
               chunks, no remainder chunk); the last-token step remains.
    forward    one call of the decoder stack on all P tokens with a fresh KV cache
               (mlx_lm's make_prompt_cache), the LM head on the last position only, mx.eval of those
               logits; the default stream, no sampling, no next step.

The loop's chunks evaluate only the KV cache, so MLX skips the last layer's attention and MLP on
all but the last token (nothing needs them); the forward rung runs them on every token. That is
1/layers of the work more at the forward rung (with the real 28 layers about 3.5 %, for every
form alike; with the CPU profile's 2 layers almost half: there forward is slower than loop).
"""
BREAKDOWN_FORMS = ("bf16", "w8a8")
"""Forms `breakdown` measures by default (mlx-q8 on request)."""


PROMPT_PARTS = ("chunks", "clear", "launch", "wait", "other")
"""Where a loop-rung call's time to its first token goes (ms; timed_parts, mlx_lm.generate's own
calls in the order its generate_step makes them):

    chunks   mx.eval of each prefill chunk's KV cache (the chunk's launch and GPU time)
    clear    mx.clear_cache() after each chunk (0 where the rung makes it a no-op)
    launch   mx.async_eval of the last-token step and of the step after it
    wait     mx.eval of the first token (the last-token step's GPU time not yet done)
    other    the rest: building the chunks' and steps' graphs, sampling, mlx-lm's Python"""


class _TimedMx:
    """mlx.core as mlx_lm.generate sees it under timed_parts(): every attribute mlx.core's, but
    mx.eval, mx.async_eval and mx.clear_cache add their host time to `spent` (PROMPT_PARTS, s) and
    count in `calls` until stop(); clear_cache does nothing where `clear` is False (counted in
    `skipped`). `cached`: the bytes in MLX's buffer cache at each clear_cache call until stop(),
    summed, whether the call clears or is skipped: what the clear frees, or would have (its time
    follows them: docs/results/cuda-h100.md)."""

    def __init__(self, real, clear: bool = True):
        self._real, self._clear = real, clear
        self.skipped = 0
        self.cached = 0
        self.spent = dict.fromkeys(PROMPT_PARTS[:-1], 0.0)
        self.calls = dict.fromkeys(PROMPT_PARTS[:-1], 0)
        self._on, self._launched = True, False

    def _timed(self, part: str, fn, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            if self._on:
                self.spent[part] += time.perf_counter() - t0
                self.calls[part] += 1

    def eval(self, *args, **kwargs):
        return self._timed("wait" if self._launched else "chunks", self._real.eval, *args, **kwargs)

    def async_eval(self, *args, **kwargs):
        self._launched = True
        return self._timed("launch", self._real.async_eval, *args, **kwargs)

    def clear_cache(self) -> None:
        if self._on:
            self.cached += self._real.get_cache_memory()
        if not self._clear:
            self.skipped += 1
            return
        self._timed("clear", self._real.clear_cache)

    def stop(self) -> None:
        """Stop timing: the calls after the first token are not the prompt's."""
        self._on = False

    def __getattr__(self, name):
        return getattr(self._real, name)


class timed_parts:
    """Context manager: mlx_lm.generate's `mx` (its module-level mlx.core) swapped for a _TimedMx
    (clear=False: its mx.clear_cache() calls, after every prefill chunk and every 256 generated
    tokens, do nothing) for the duration; restored on exit, also on an exception. mlx.core itself,
    and every other caller of it, are untouched. `as` gives the proxy."""

    def __init__(self, clear: bool = True):
        self._clear = clear

    def __enter__(self) -> _TimedMx:
        front_end()
        gen = sys.modules["mlx_lm.generate"]  # the module: mlx_lm's `generate` attribute is the function

        self._module, self._real = gen, gen.mx
        gen.mx = self._proxy = _TimedMx(self._real, self._clear)
        return self._proxy

    def __exit__(self, *exc) -> bool:
        self._module.mx = self._real
        return False


def no_clear() -> timed_parts:
    """timed_parts(clear=False): mlx_lm.generate's `mx.clear_cache()` calls do nothing for its
    duration (`as` gives the proxy, whose `skipped` counts them)."""
    return timed_parts(clear=False)


def _last_logits(model, tokens: mx.array) -> mx.array:
    """The forward rung: logits (1, vocab) of the last of `tokens` (1, P) after the decoder stack
    ran on all of them into a fresh KV cache. mlx-lm's Qwen models split into `.model` (the
    stack) and the LM head (`lm_head`, or the tied embedding); any other model runs whole and is
    sliced (its LM head then runs on every position)."""
    cache = models.mlx_lm_module("cache").make_prompt_cache(model)
    stack = getattr(model, "model", None)
    args = getattr(model, "args", None)
    if stack is None or args is None:
        return model(tokens, cache=cache)[:, -1, :]
    h = stack(tokens, cache)[:, -1:, :]
    head = stack.embed_tokens.as_linear if getattr(args, "tie_word_embeddings", False) else model.lm_head
    return head(h)[:, -1, :]


def rung_call(model, tokenizer, prompt: list[int], rung: str, parts: dict | None = None,
              cached: list | None = None) -> float:
    """Prompt tokens/s of one prompt through `rung` (RUNGS' doc); parts: a dict given for the
    stream_generate rungs gets the call's time to its first token by PROMPT_PARTS, ms; cached: a
    list given for them gets the GB in MLX's buffer cache at its clear_cache calls (_TimedMx)."""
    if rung == "forward":
        tokens = mx.array(prompt)[None]
        t0 = time.perf_counter()
        mx.eval(_last_logits(model, tokens))
        return len(prompt) / (time.perf_counter() - t0)
    step = len(prompt) if rung == "one-chunk" else generate.PREFILL_STEP_SIZE
    with timed_parts(clear=rung == "loop") as timer:
        response = None
        for response in front_end().stream_generate(model, tokenizer, prompt, max_tokens=1, prefill_step_size=step):
            timer.stop()
    # generate_step has already queued the next token's step; stream_generate waits for it only
    # where it set a wired limit (Metal), so wait here, untimed: no call runs into the next one.
    mx.synchronize(sys.modules["mlx_lm.generate"].generation_stream)
    if parts is not None:
        total = len(prompt) / response.prompt_tps * 1e3
        parts.update({part: ms * 1e3 for part, ms in timer.spent.items()})
        parts["other"] = max(0.0, total - sum(parts[p] for p in PROMPT_PARTS[:-1]))
    if cached is not None:
        cached.append(timer.cached / GB)
    return response.prompt_tps


def decode_call(model, tokenizer, prompt: list[int], tokens: int) -> float:
    """ms per generated token of one stream_generate request of `tokens` new tokens after `prompt`:
    mlx-lm's generation_tps (tokens after the first / time after the first), inverted."""
    response = None
    for response in front_end().stream_generate(model, tokenizer, prompt, max_tokens=tokens):
        pass
    mx.synchronize(sys.modules["mlx_lm.generate"].generation_stream)  # the queued next step, untimed
    return 1e3 / response.generation_tps


def busy_per_token_ms(gpu: list[dict], ranges: list[dict], tokens: int) -> float:
    """GPU busy ms a generated token from a trace of two requests of one prompt, the first of 1
    new token and the second of 1 + `tokens` (gpu: activities, ranges: the two requests' host
    ranges, {ts, dur} in us): the second's busy time less the first's, over `tokens`. The prompt,
    the first token and the step generate_step queues ahead are in both, so only the extra decode
    steps remain. An activity belongs to the range its start falls in."""
    from .model_breakdown import busy_us

    if len(ranges) != 2:
        raise ValueError(f"expected the host ranges of 2 requests, got {len(ranges)}")
    busy = [busy_us([e for e in gpu if r["ts"] <= e["ts"] <= r["ts"] + r["dur"]]) for r in ranges]
    return (busy[1] - busy[0]) / tokens / 1e3


def decode_gpu_ms(model, tokenizer, prompt: list[int], tokens: int) -> tuple[float | None, str | None]:
    """(GPU busy ms a generated token of mlx-lm's loop, None), or (None, why not: no CUDA GPU or
    no torch here, or the recording failed). CUPTI records the kernels (as model_breakdown's
    figures): it slows the host, not the kernels, so the busy time stands beside the unprofiled
    loop's ms a token."""
    from .kernel.cupti import record, skip_reason

    why = skip_reason()
    if why:
        return None, why
    try:
        import torch

        with tempfile.TemporaryDirectory() as tmp:
            gpu, ranges = record(torch, lambda i: decode_call(model, tokenizer, prompt, 1 + i * tokens), 2, Path(tmp))
        return busy_per_token_ms(gpu, ranges, tokens), None
    except Exception as exc:  # noqa: BLE001 - the loop's figures stand without it
        return None, f"{type(exc).__name__}: {exc}"


def _prompt_cache(model, prompt: list[int]):
    """mlx-lm's prompt cache of `model` holding all of `prompt` but its last token, evaluated."""
    cache = models.mlx_lm_module("cache").make_prompt_cache(model)
    if len(prompt) > 1:
        model(mx.array(prompt[:-1])[None], cache=cache)
        mx.eval([c.state for c in cache])
    return cache


HOST_STEPS = 16
"""Decode steps decode_host times each way (the median is reported)."""


def decode_host(model, prompt: list[int], steps: int = HOST_STEPS) -> tuple[float | None, float]:
    """(graph ms, step ms) of a decode step of batch 1 after `prompt`, medians over `steps`:

        graph   building the model's graph for one token on the prompt's KV cache, nothing
                evaluated: the host work mlx-lm's loop overlaps with the GPU's previous step
                (None where the model's caches are not mlx-lm's KVCache, whose arrays it copies)
        step    building a step's graph, evaluating its greedy token and waiting for it, step
                after step: host work, MLX's evaluation and launches, and the GPU in series

    Each graph is built on shallow copies of the caches holding fresh array nodes (an update
    writes into the array object it holds), so nothing reaches the prompt's cache."""
    cache = _prompt_cache(model, prompt)
    y = mx.array([prompt[-1:]])
    graph = None
    if all(getattr(c, "keys", None) is not None and getattr(c, "values", None) is not None for c in cache):
        builds = []
        for _ in range(steps):
            fresh = []
            for c in cache:
                d = copy.copy(c)
                d.keys, d.values = mx.stop_gradient(c.keys), mx.stop_gradient(c.values)
                fresh.append(d)
            t0 = time.perf_counter()
            logits = model(y, cache=fresh)
            builds.append(time.perf_counter() - t0)
            del logits, fresh
        graph = statistics.median(builds) * 1e3
    step = []
    for _ in range(steps):
        t0 = time.perf_counter()
        y = model(y, cache=cache)[:, -1, :].argmax(axis=-1)[None]
        mx.eval(y)
        step.append(time.perf_counter() - t0)
    return graph, statistics.median(step) * 1e3


PHASES = ("graph", "launch", "wait")
"""decode_phases' parts of a step of mlx-lm's overlapped loop, in the order the host runs them."""


def decode_phases(model, prompt: list[int], steps: int = HOST_STEPS) -> dict[str, float]:
    """{phase: ms} (PHASES, medians over `steps`) of batch 1's decode steps run as mlx_lm's
    generate_step runs them, on its generation stream: the next step's graph built on the sampled
    token not yet computed (the model, the last position's logits, log-probabilities, the greedy
    sample), mx.async_eval of it, then the wait for the step before it (`.item()`). Where the host
    sets the pace, wait is near zero and graph + launch is the time a token; where the GPU does,
    wait takes up the rest. On a fresh cache filled with the prompt (left out of the figures)."""
    front_end()
    stream = sys.modules["mlx_lm.generate"].generation_stream
    times = {p: [] for p in PHASES}

    def step(y):
        logits = model(y[None], cache=cache)[:, -1, :]
        logprobs = logits - mx.logsumexp(logits, keepdims=True)
        return mx.argmax(logprobs, axis=-1)

    with mx.stream(stream):
        cache = _prompt_cache(model, prompt)
        y = step(mx.array(prompt[-1:]))
        mx.async_eval(y)
        for _ in range(steps):
            t0 = time.perf_counter()
            following = step(y)
            t1 = time.perf_counter()
            mx.async_eval(following)
            t2 = time.perf_counter()
            y.item()
            t3 = time.perf_counter()
            for p, a, b in zip(PHASES, (t0, t1, t2), (t1, t2, t3)):
                times[p].append(b - a)
            y = following
        y.item()
    return {p: statistics.median(v) * 1e3 for p, v in times.items()}


@dataclass
class Rung:
    """One (form, prompt tokens, rung) of the breakdown."""

    form: str
    prompt_tokens: int
    rung: str
    prompt_tps: Figure | None = None
    peak_memory_gb: float | None = None
    """The form's parameters + the most memory MLX held beyond what was live before a call (GB)."""
    trials: list = field(default_factory=list)
    """prompt tokens/s of every timed call."""
    vs_bf16: float | None = None
    """prompt_tps over bf16's at the same (prompt tokens, rung)."""
    vs_bf16_interval: tuple | None = None
    """generate.median_interval of the trial-by-trial ratios to bf16's (low, high, coverage): how
    settled vs_bf16 is; None under 5 trials."""
    parts: dict | None = None
    """The stream_generate rungs' time to the first token by PROMPT_PARTS ({part: median ms over
    the trials}); None for the forward rung."""
    part_trials: list = field(default_factory=list)
    """rung_call's parts of every timed call."""
    cached_gb: float | None = None
    """The stream_generate rungs' GB in MLX's buffer cache at their clear_cache calls (median over
    the trials): what mlx-lm's clear frees in the loop rung, or would free in the others."""
    cached_trials: list = field(default_factory=list)
    """rung_call's cached GB of every timed call."""


@dataclass
class Decode:
    """One (form, prompt tokens) of the generation phase: mlx-lm's loop's ms a generated token
    beside the GPU's busy ms for it (idle: the share of the loop's time the GPU waits on the host)."""

    form: str
    prompt_tokens: int
    generation_tokens: int
    ms_per_token: Figure | None = None
    trials: list = field(default_factory=list)
    """ms a token of every timed request."""
    gpu_ms_per_token: float | None = None
    gpu_why: str | None = None
    """Why there is no GPU figure (no CUDA GPU or torch here, or the recording failed)."""
    graph_ms: float | None = None
    step_ms: float | None = None
    """decode_host's figures: a step's graph built (host only), and a step built, evaluated and
    waited for (no overlap)."""
    host_why: str | None = None
    """Why decode_host gave no figures (it raised)."""
    phases: dict | None = None
    """decode_phases' {phase: ms} of the overlapped loop (None where it raised: host_why)."""
    vs: dict = field(default_factory=dict)
    """{form: generation speed over that form's} for each of generate.RATIO_BASES measured at the
    same prompt length (above 1: faster)."""
    vs_interval: dict = field(default_factory=dict)
    """{form: generate.median_interval of the trial-by-trial speed ratios} beside vs (5 trials or more)."""

    @property
    def idle(self) -> float | None:
        if self.gpu_ms_per_token is None or not self.ms_per_token:
            return None
        return max(0.0, 1.0 - self.gpu_ms_per_token / self.ms_per_token.median)


@dataclass
class Breakdown:
    """`breakdown`'s result: every (form, prompt tokens, rung), the generation phase per (form,
    prompt tokens), and per form why it did not run."""

    config: str
    layers: int
    vocab: int
    trials: int
    rungs: list[Rung] = field(default_factory=list)
    generation_tokens: int = 0
    decode: list[Decode] = field(default_factory=list)
    forms: dict = field(default_factory=dict)
    """{form: {"detail", "check"} or {"n/a" | "MISMATCH" | "failed": why}}."""


def _param_bytes(model) -> int:
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


def breakdown(config: str | models.Config, forms=BREAKDOWN_FORMS, prompt_tokens=(64,), trials: int = 3,
              layers: int | None = None, vocab: int | None = None, cache: Path | None = None,
              progress=None, generation_tokens: int = 0) -> Breakdown:
    """The ladder RUNGS for every form at every prompt length, batch 1, on one saved folder of
    `config`, in one process: every form loaded (and checked, as `measure` checks) before
    anything is timed, then per prompt length one warm-up call of each (rung, form), then
    `trials` rounds, each timing every rung of every form in turn (forms interleaved, so a drift
    of the machine falls on all of them). With generation_tokens G > 0, then per prompt length
    the generation phase the same way (requests of G new tokens: a warm-up, `trials` interleaved
    rounds), each form's GPU busy time a token (decode_gpu_ms) and its host figures (decode_host). Never raises for a form:
    one that cannot load is reported in .forms and has no rungs."""
    if isinstance(config, str) and config not in models.CONFIGS:
        raise ValueError(f"config: expected one of {', '.join(models.CONFIGS)}, got {config!r}")
    bad = [f for f in forms if f not in FORMS or f == "cider"]
    if bad or not forms:
        raise ValueError(f"forms: expected some of {', '.join(f for f in FORMS if f != 'cider')}, got {forms!r}")
    for name, values in (("prompt_tokens", prompt_tokens), ("trials", (trials,))):
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
            raise ValueError(f"{name}: expected positive whole numbers, got {values!r}")
    if not isinstance(generation_tokens, int) or isinstance(generation_tokens, bool) or generation_tokens < 0:
        raise ValueError(f"generation_tokens: expected a whole number >= 0, got {generation_tokens!r}")
    cfg = models.CONFIGS[config] if isinstance(config, str) else config
    layers = cfg.depth if layers is None else layers
    vocab = cfg.vocab if vocab is None else vocab
    say = progress or (lambda text: None)
    out = Breakdown(cfg.name, layers, vocab, trials, generation_tokens=generation_tokens)
    try:
        front_end()
        path = model_folder.folder(cfg, layers, vocab, cache=cache, progress=say)
    except Unavailable as exc:
        out.forms = {f: {"n/a": str(exc)} for f in forms}
        return out
    loaded = {}
    for form in sorted(forms, key=FORMS.index):
        say(f"{cfg.name} {form}: loading, converting, checking")
        try:
            model, tokenizer, detail, sources = load(path, form)
            check = models.check_projections(model, mx.array(prompts(CHECK_TOKENS, 1, vocab)), f"{cfg.name} {form}",
                                             sources)
            if form == "w8a8":
                from .. import nn as int8nn

                int8nn.warm_up(model, max(prompt_tokens))  # kernel builds in parallel, before any timing
            loaded[form] = (model, tokenizer, _param_bytes(model))
            out.forms[form] = {"detail": detail, "check": check}
        except Unavailable as exc:
            out.forms[form] = {"n/a": str(exc)}
        except MismatchError as exc:
            out.forms[form] = {"MISMATCH": str(exc)}
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: reported, the others still run
            out.forms[form] = {"failed": f"{type(exc).__name__}: {exc}"}
        _free()
    for p in prompt_tokens:
        prompt = prompts(p, 1, vocab)[0]
        cells = {(f, r): Rung(f, p, r) for r in RUNGS for f in loaded}
        for r in RUNGS:  # warm-up: kernels, plans and MLX's buffer cache for this length
            for f, (model, tokenizer, _) in loaded.items():
                rung_call(model, tokenizer, prompt, r)
        for t in range(trials):
            say(f"{cfg.name} prompt {p}: trial {t + 1} of {trials}")
            for r in RUNGS:
                for f, (model, tokenizer, weights) in loaded.items():
                    mx.synchronize()
                    before = mx.get_active_memory()
                    mx.reset_peak_memory()
                    cell = cells[(f, r)]
                    parts, cached = (None, None) if r == "forward" else ({}, [])
                    cell.trials.append(rung_call(model, tokenizer, prompt, r, parts, cached))
                    if parts is not None:
                        cell.part_trials.append(parts)
                        cell.cached_trials += cached
                    mx.synchronize()
                    extra = max(0, mx.get_peak_memory() - before)
                    cell.peak_memory_gb = max(cell.peak_memory_gb or 0.0, (weights + extra) / GB)
        for cell in cells.values():
            cell.prompt_tps = Figure.of(cell.trials)
            if cell.part_trials:
                cell.parts = {p: statistics.median(t[p] for t in cell.part_trials) for p in PROMPT_PARTS}
                cell.cached_gb = statistics.median(cell.cached_trials)
        for (f, r), cell in cells.items():
            ref = cells.get(("bf16", r))
            if ref is not None:
                cell.vs_bf16 = cell.prompt_tps.median / ref.prompt_tps.median
                cell.vs_bf16_interval = median_interval(paired_ratios(cell.trials, ref.trials))
        out.rungs += sorted(cells.values(), key=lambda c: (RUNGS.index(c.rung), FORMS.index(c.form)))
        if generation_tokens:
            out.decode += _decode(loaded, prompt, generation_tokens, trials, say, f"{cfg.name} prompt {p}")
    del loaded
    _free()
    return out


def _decode(loaded: dict, prompt: list[int], tokens: int, trials: int, say, label: str) -> list[Decode]:
    """breakdown's generation phase at one prompt: Decode per loaded form, in FORMS order."""
    cells = {f: Decode(f, len(prompt), tokens) for f in loaded}
    for f, (model, tokenizer, _) in loaded.items():  # warm-up: the decode kernels and buffers
        decode_call(model, tokenizer, prompt, tokens)
    for t in range(trials):
        say(f"{label}: generation, trial {t + 1} of {trials}")
        for f, (model, tokenizer, _) in loaded.items():
            cells[f].trials.append(decode_call(model, tokenizer, prompt, tokens))
    for f, (model, tokenizer, _) in loaded.items():
        cells[f].ms_per_token = Figure.of(cells[f].trials)
        try:  # the host's figures before this prompt's profiled requests (the profiler slows the host)
            cells[f].graph_ms, cells[f].step_ms = decode_host(model, prompt)
            cells[f].phases = decode_phases(model, prompt)
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: the loop's figures stand without it
            cells[f].host_why = f"{type(exc).__name__}: {exc}"
    for f, (model, tokenizer, _) in loaded.items():
        cells[f].gpu_ms_per_token, cells[f].gpu_why = decode_gpu_ms(model, tokenizer, prompt, tokens)
    for cell in cells.values():
        cell.vs = {b: cells[b].ms_per_token.median / cell.ms_per_token.median for b in RATIO_BASES if b in cells}
        cell.vs_interval = {b: got for b in cell.vs
                            if (got := median_interval(paired_ratios(cells[b].trials, cell.trials)))}
    return sorted(cells.values(), key=lambda c: FORMS.index(c.form))
