"""Whole models: prefill and decode through a few decoder layers of mlx-lm's Qwen classes, in
each form a user runs them in (int8nax.bench.models: the configurations, the forms, the check).

Parameters: (configuration, tokens); tokens 1 is one decode step after a prompt of the
profile's context, more is a prefill of that many tokens. The suite declares every
configuration and token count of every profile (results of all machines publish into one
site); a machine measures its profile's (models.PROFILES: the 7B and 8B shapes at decode and
16-4096 tokens on a GPU, the 0.5B shape at decode and 16 tokens on a CPU box).

One class per form and mode (eager, or under mx.compile), four figures each:
    time_<form>...                 seconds per decoder layer of one forward (its clock ticks
                                   once per layer, as the chain benchmarks' once per call)
    track_<form>..._tokens_per_s   tokens per second (decode: 1 / step time), higher is better
    track_<form>..._peak_bytes     the model's weights plus the most extra memory MLX holds
                                   during one forward
    track_<form>..._first_call_s   the first forward at a token count this process had not run:
                                   what a server with varying prompt lengths pays (kernel builds,
                                   compiled-graph tracing)
The track_ figures are for display; asv reads a higher value as worse, so the regression gate
watches bench_ratio's model ratio instead. Each (configuration, form, mode) is built and
checked once per process (every projection against float64 at each token count's first call:
a wrong output fails the benchmark and nothing wrong is timed); a form that cannot run here
(cider off an M5, W8A8 compiled on the CPU backend, compiled decode) is n/a with the reason.
"""

from __future__ import annotations

import sys
import time
from functools import lru_cache

from int8nax.bench import models

from .common import profile

_prepared: dict[tuple[str, str, str], models.Prepared] = {}


@lru_cache(maxsize=None)
def model_profile() -> tuple[str, models.Profile]:
    name = profile()[0]
    return name, models.PROFILES[name]


def per_layer_clock() -> float:
    """A clock that advances by 1 s per `layers` s of wall time: a forward timed with it reads
    seconds per decoder layer."""
    return time.perf_counter() / model_profile()[1].layers


def prepared(form: str, mode: str, config: str, tokens: int) -> models.Prepared:
    """The (config, form, mode) model, built once per process, prepared and checked at
    `tokens`; NotImplementedError (asv's n/a) with the reason where it is not measured here."""
    name, prof = model_profile()
    if config not in prof.configs or tokens not in prof.tokens:
        raise NotImplementedError(f"{config} at {tokens} tokens is not in the {name!r} profile "
                                  f"({', '.join(prof.configs)} at {', '.join(map(str, prof.tokens))} tokens)")
    why = models.skip_reason(name, form, mode, tokens)
    if why:
        raise NotImplementedError(why)
    key = (config, form, mode)
    try:
        if key not in _prepared:
            _prepared[key] = models.prepare(config, form, mode, layers=prof.layers, context=prof.context)
        model = _prepared[key]
        model.prepare(tokens)
    except models.Unavailable as exc:
        print(f"{form} {mode} skipped: {exc}", file=sys.stderr)
        raise NotImplementedError(str(exc)) from None
    return model


class ModelBenchmark:
    """Base class: `form` in `mode` over every (configuration, tokens)."""

    form = ""
    mode = "eager"
    params = [list(models.CONFIGS), list(models.ALL_TOKENS)]
    param_names = ["configuration", "tokens"]
    timeout = 900  # a GPU's first compiled W8A8 forward has taken 28-35 s (H200), per token count
    version = "1"  # pinned: editing a comment must not hide the history (bump on purpose)
    warmup_time = 0  # setup has run the forward (the checked first call) and once more
    repeat = (2, 10, 2.0)

    def setup(self, config, tokens):
        self.model = prepared(self.form, self.mode, config, tokens)
        self.tokens = tokens
        self.model.run(tokens)

    def forward(self):
        self.model.run(self.tokens)

    def tokens_per_s(self) -> float:
        return self.tokens / self.model.seconds(self.tokens, repeat=3, warmup=0)

    def peak_bytes(self) -> int:
        return self.model.peak_bytes(self.tokens)

    def first_call_s(self) -> float:
        return self.model.first_call_s[self.tokens]


def per_layer(func):
    """Mark a time_ method as seconds per decoder layer."""
    func.timer = per_layer_clock
    return func


def tokens_per_s(func):
    func.unit = "tokens/s"
    func.rounds = 1
    return func


def peak_bytes(func):
    func.unit = "bytes"
    func.rounds = 1
    return func


def first_call(func):
    func.unit = "seconds"
    func.rounds = 1
    return func


class Bf16Model(ModelBenchmark):
    """bfloat16 weights and activations: the reference every form is compared with."""

    form = "bf16"

    @per_layer
    def time_bf16(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_bf16_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_bf16_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_bf16_first_call_s(self, config, tokens):
        return self.first_call_s()


class Bf16ModelCompiled(ModelBenchmark):
    """bfloat16 under mx.compile."""

    form, mode = "bf16", "compiled"

    @per_layer
    def time_bf16_compiled(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_bf16_compiled_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_bf16_compiled_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_bf16_compiled_first_call_s(self, config, tokens):
        return self.first_call_s()


class Fp16Model(ModelBenchmark):
    """float16 weights and activations."""

    form = "fp16"

    @per_layer
    def time_fp16(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_fp16_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_fp16_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_fp16_first_call_s(self, config, tokens):
        return self.first_call_s()


class Fp16ModelCompiled(ModelBenchmark):
    """float16 under mx.compile."""

    form, mode = "fp16", "compiled"

    @per_layer
    def time_fp16_compiled(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_fp16_compiled_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_fp16_compiled_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_fp16_compiled_first_call_s(self, config, tokens):
        return self.first_call_s()


class MlxQ8Model(ModelBenchmark):
    """MLX's weight-only 8-bit: nn.quantize(bits=8, group_size=64), bf16 activations."""

    form = "mlx-q8"

    @per_layer
    def time_mlx_q8(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_mlx_q8_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_mlx_q8_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_mlx_q8_first_call_s(self, config, tokens):
        return self.first_call_s()


class MlxQ8ModelCompiled(ModelBenchmark):
    """MLX's weight-only 8-bit under mx.compile."""

    form, mode = "mlx-q8", "compiled"

    @per_layer
    def time_mlx_q8_compiled(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_mlx_q8_compiled_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_mlx_q8_compiled_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_mlx_q8_compiled_first_call_s(self, config, tokens):
        return self.first_call_s()


class W8A8Model(ModelBenchmark):
    """int8nax W8A8: int8nax.nn.quantize_linears on the bf16 model."""

    form = "w8a8"

    @per_layer
    def time_w8a8(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_w8a8_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_w8a8_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_w8a8_first_call_s(self, config, tokens):
        return self.first_call_s()


class W8A8ModelCompiled(ModelBenchmark):
    """int8nax W8A8 under mx.compile (n/a where int8nax's backend computes outside MLX's graph)."""

    form, mode = "w8a8", "compiled"

    @per_layer
    def time_w8a8_compiled(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_w8a8_compiled_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_w8a8_compiled_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_w8a8_compiled_first_call_s(self, config, tokens):
        return self.first_call_s()


class CiderModel(ModelBenchmark):
    """cider's W8A8 (cider.convert_model), Apple M5 only."""

    form = "cider"

    @per_layer
    def time_cider(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_cider_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_cider_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_cider_first_call_s(self, config, tokens):
        return self.first_call_s()


class CiderModelCompiled(ModelBenchmark):
    """cider's W8A8 under mx.compile, Apple M5 only."""

    form, mode = "cider", "compiled"

    @per_layer
    def time_cider_compiled(self, config, tokens):
        self.forward()

    @tokens_per_s
    def track_cider_compiled_tokens_per_s(self, config, tokens):
        return self.tokens_per_s()

    @peak_bytes
    def track_cider_compiled_peak_bytes(self, config, tokens):
        return self.peak_bytes()

    @first_call
    def track_cider_compiled_first_call_s(self, config, tokens):
        return self.first_call_s()
