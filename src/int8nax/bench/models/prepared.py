"""A model in one form and mode, ready to time (Prepared): a prefill of `tokens`, or one
decode step through mlx-lm's prompt cache, its first call at every `tokens` timed and checked
before anything else is; prepare() builds one."""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn

from ..checks import MismatchError
from ..peers import Unavailable
from .forms import FORMS, convert, weight_bytes
from .projections import _check_recorded, _check_swiglu_calls, _np64, _projections, _recording, rel_error
from .qwen import CONFIGS, MAX_TOKENS, Config, build, mlx_lm_module, token_ids

MODES = ("eager", "compiled")
ERROR_TOKENS = 16
"""Prefill tokens of the relative error against bf16 (rel_error_vs_bf16)."""


COMPILED_REL_TOL = 2.0**-3
"""Largest normwise relative distance of a compiled form's output from the same form run eager
(checked projection by projection) at the same tokens. mx.compile fuses elementwise work
(RoPE, SwiGLU, norms), which moves some activations by an ulp; W8A8's per-token codes turn such
a move near a rounding tie into a one-step change of a code, so the two runs may differ by up to
the quantization noise itself (5% W8A8 against bf16 over 6 layers on the CPU box), never by
the 50% to 100% of a wrong computation."""


MIN_SAMPLE_SECONDS = 0.25
"""Timed runs of a cell continue past `repeat` until they add up to this: a decode step of 4
layers takes 2-4 ms on the H200, where 5 samples span a few scheduler slices and the GPU's clock
ramp (host-bound cells moved by up to 40 % between runs with 5 samples)."""
MIN_WARMUP_SECONDS = 0.05
"""Untimed runs before the samples cover at least this, so the GPU leaves its idle clocks first."""
MAX_REPEAT = 200
"""Most samples (and warm-up runs) of one cell."""


@dataclass
class Prepared:
    """One (configuration, form, mode) model, ready to run at any checked `tokens`.

    run(tokens) is one forward plus evaluation: a prefill of `tokens`, or (tokens == 1) one
    decode step after `context` tokens of prompt. prepare(tokens) must come first for each
    `tokens`: it times the first call (first_call_s[tokens]) and checks it (MismatchError).
    """

    config: Config
    form: str
    mode: str
    layers: int
    context: int
    model: nn.Module
    detail: str
    weight_bytes: int
    rel_error_vs_bf16: float | None = None
    sources: dict | None = None
    """path -> the nn.Linear a projection was converted from, where the check needs it (cider)."""
    check: dict = field(default_factory=dict)
    first_call_s: dict = field(default_factory=dict)
    _ids: mx.array | None = None
    _inputs: dict = field(default_factory=dict)
    """tokens -> the ids a run(tokens) feeds (sliced and evaluated in prepare, not in the timed body)."""
    _forward: object = None
    _cache: list | None = None
    _step: object = None
    """The compiled decode step (compiled mode, after prepare(1))."""
    _buffers: list | None = None
    """[(keys, values)] of every layer's cache: the compiled step's inputs."""

    def __post_init__(self):
        self._ids = token_ids()
        inner = self.model.model
        self._forward = mx.compile(inner) if self.mode == "compiled" else inner

    # -- the timed bodies --
    def _prefill(self, tokens: int) -> mx.array:
        out = self._forward(self._inputs[tokens])
        mx.eval(out)
        return out

    def _decode(self) -> mx.array:
        if self._step is not None:
            out = self._step(self._inputs[1], self._buffers)
            mx.eval(out)
            return out
        return self._decode_eager()

    def _decode_eager(self) -> mx.array:
        out = self.model.model(self._inputs[1], cache=self._cache)
        mx.eval(out)
        for c in self._cache:
            c.trim(1)
        return out

    def run(self, tokens: int) -> mx.array:
        return self._decode() if tokens == 1 else self._prefill(tokens)

    # -- setup --
    def _start_decode(self) -> None:
        cache_module = mlx_lm_module("cache")
        self._cache = cache_module.make_prompt_cache(self.model)
        if self.mode == "compiled" and not all(type(c) is cache_module.KVCache for c in self._cache):
            kinds = sorted({type(c).__name__ for c in self._cache})
            raise Unavailable(f"compiled decode takes mlx-lm's KVCache only; this model's cache is {', '.join(kinds)}")
        mx.eval(self.model.model(self._ids[:, :self.context], cache=self._cache))
        mx.eval([c.state for c in self._cache])
        if self.mode == "compiled":
            # One eager step (trimmed back) first: it grows the buffers past the prompt to the size
            # every later step sees, so the compiled step writes in place of growing them.
            self._decode_eager()
            self._buffers = [tuple(c.state[:2]) for c in self._cache]
            self._step = _compiled_decode_step(self.model, self.context, cache_module)

    def prepare(self, tokens: int) -> None:
        """Time the first call at `tokens` and check it; Unavailable where this mode cannot
        run `tokens`, MismatchError where the output is wrong."""
        if tokens in self.first_call_s:
            return
        if not 1 <= tokens <= MAX_TOKENS:
            raise ValueError(f"tokens: expected 1 to {MAX_TOKENS}, got {tokens}")
        self._inputs[tokens] = self._ids[:, self.context:self.context + 1] if tokens == 1 else self._ids[:, :tokens]
        mx.eval(self._inputs[tokens])
        if tokens == 1:
            self._start_decode()
        t0 = time.perf_counter()
        if self.mode == "eager":
            with _recording(self.model) as recorders:
                out = self.run(tokens)
            first = time.perf_counter() - t0
            self.check[tokens] = _check_recorded(recorders, self.describe(tokens), self.sources)
            self.check[tokens] += _check_swiglu_calls(self.model, recorders, self.describe(tokens))
        else:
            out = self.run(tokens)
            first = time.perf_counter() - t0
            eager = self._decode_eager() if tokens == 1 else self.model.model(self._inputs[tokens])
            err = rel_error(out, _np64(eager))
            if not err <= COMPILED_REL_TOL:
                raise MismatchError(f"{self.describe(tokens)}: normwise relative distance {err:.3g} from the same "
                                    f"form run eager, more than {COMPILED_REL_TOL}")
            self.check[tokens] = f"{err:.2g} from eager"
        del out
        self.first_call_s[tokens] = first

    def with_mode(self, mode: str) -> "Prepared":
        """The same model (same weights, no rebuild) run in `mode`; Unavailable where it cannot."""
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        if mode == "compiled" and self.form == "w8a8":
            _check_compilable(self.model)
        return Prepared(self.config, self.form, mode, self.layers, self.context, self.model, self.detail,
                        self.weight_bytes, self.rel_error_vs_bf16, self.sources)

    def describe(self, tokens: int) -> str:
        what = f"decode after {self.context}" if tokens == 1 else f"prefill of {tokens}"
        return f"{self.config.name} x{self.layers} {self.form} {self.mode}, {what}"

    # -- figures --
    def seconds(self, tokens: int, repeat: int = 5, warmup: int = 1, min_seconds: float = MIN_SAMPLE_SECONDS,
                max_repeat: int = MAX_REPEAT) -> float:
        """Median seconds of one run(tokens): after `warmup` runs and at least MIN_WARMUP_SECONDS of
        them, `repeat` samples or more, until they cover min_seconds (at most max_repeat)."""
        t0 = time.perf_counter()
        done = 0
        while done < warmup or (time.perf_counter() - t0 < MIN_WARMUP_SECONDS and done < max_repeat):
            self.run(tokens)
            done += 1
        samples = []
        while len(samples) < repeat or (sum(samples) < min_seconds and len(samples) < max_repeat):
            t0 = time.perf_counter()
            self.run(tokens)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    def peak_bytes(self, tokens: int) -> int:
        """The model's weights plus the most extra memory MLX holds during one run(tokens)
        (mx.reset_peak_memory / mx.get_peak_memory around it): what this form needs, whatever
        else the process holds."""
        gc.collect()
        mx.synchronize()
        before = mx.get_active_memory()
        mx.reset_peak_memory()
        self.run(tokens)
        return self.weight_bytes + max(0, mx.get_peak_memory() - before)


def _compiled_decode_step(model: nn.Module, context: int, cache_module):
    """mx.compile of one decode step at `context`: (ids [1, 1], [(keys, values)] of each layer's
    KVCache buffers) -> the decoder stack's output [1, 1, hidden].

    mlx-lm's KVCache keeps its offset in Python and writes its buffers in place, so a compiled
    call of the model with a live cache would freeze one step's offset into the graph and leave
    the cache holding the trace's arrays. Here every trace gets caches of its own, set to the given
    buffers at offset `context`: the step's graph is fixed, and it is the right one because every
    step the benchmark times sees the same context. The new token's keys and values are written
    into a copy of the buffers (the caller keeps them), which eager decode writes in place: per
    layer, 2 x kv_heads x head_dim x buffer length x 2 bytes more traffic (1.5 MB for the 7B at
    768 positions: under 1 us at the H200's HBM speed)."""

    def step(ids, buffers):
        cache = cache_module.make_prompt_cache(model)
        for c, (keys, values) in zip(cache, buffers):
            c.state = (keys, values, context)
        return model.model(ids, cache=cache)

    return mx.compile(step)


def prepare(config: str | Config, form: str, mode: str = "eager", layers: int = 4, context: int = 512,
            error_vs_bf16: bool = False) -> Prepared:
    """Build `config` with `layers` layers in `form` (from the bf16 model, as a user converts a
    bf16 checkpoint), ready to run in `mode`; Unavailable with the reason where it cannot run here.
    error_vs_bf16: also measure rel_error_vs_bf16 (a prefill of ERROR_TOKENS in bf16 and in the
    form)."""
    if isinstance(config, str):
        if config not in CONFIGS:
            raise ValueError(f"config: expected one of {', '.join(CONFIGS)}, got {config!r}")
        config = CONFIGS[config]
    if form not in FORMS:
        raise ValueError(f"form: expected one of {', '.join(FORMS)}, got {form!r}")
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers: expected a positive int, got {layers!r}")
    if not 1 <= context <= MAX_TOKENS - 1:
        raise ValueError(f"context: expected 1 to {MAX_TOKENS - 1} tokens, got {context}")
    if form == "cider":
        from ..peers import cider

        cider.load()  # Unavailable off an M5: say so before building anything
    model = build(config, layers)
    probe = token_ids()[:, :ERROR_TOKENS]
    if error_vs_bf16:
        bf16_out = model.model(probe)
        mx.eval(bf16_out)
    sources = _projections(model) if form == "cider" else None
    detail = convert(model, form)
    mx.eval(model.parameters())
    if mode == "compiled" and form == "w8a8":
        _check_compilable(model)
    prepared = Prepared(config, form, mode, layers, context, model, detail, weight_bytes(model), sources=sources)
    if error_vs_bf16:
        prepared.rel_error_vs_bf16 = rel_error(model.model(probe), _np64(bf16_out))
    return prepared


def _check_compilable(model: nn.Module) -> None:
    """Unavailable where int8nax's backend here cannot run inside mx.compile, with int8nax's own
    reason (every backend can: the CPU backend's cpu_graph path, the GPUs' kernels)."""
    layer = model.model.layers[0].mlp.up_proj
    x = mx.zeros((1, layer.input_dims), dtype=mx.bfloat16)
    try:
        mx.eval(mx.compile(layer)(x))
    except ValueError as exc:
        raise Unavailable(f"not compilable here: {exc}") from None
