"""Whole models: prefill and decode through a few decoder layers of mlx-lm's Qwen classes, in
each form a user runs them in (int8nax.bench.models: the configurations, the forms, the check).

Parameters: (configuration, tokens); tokens 1 is one decode step after a prompt of the
profile's context, more is a prefill of that many tokens. The suite declares every
configuration and token count of every profile (results of all machines publish into one
site); a machine measures its profile's (models.PROFILES: the 7B and 8B shapes at decode and
16-4096 tokens on a GPU, one layer of the 0.5B shape at decode and 16 tokens on a CPU box).

Two classes per form and mode (eager, or under mx.compile):
    <Form>Model[Compiled]            time_<form>[_compiled]: seconds per decoder layer of one
                                     forward (its clock ticks once per layer, as the chain
                                     benchmarks' once per call)
    <Form>Model[Compiled]Figures     track_<form>[_compiled]_tokens_per_s (decode: 1 / step time),
                                     _peak_bytes (the model's weights plus the most extra memory
                                     MLX holds during one forward), _first_call_s (the first
                                     forward at a token count the process had not run: what a
                                     server with varying prompt lengths pays in kernel builds and
                                     compiled-graph tracing) and _gpu_s_per_layer (CUDA with torch:
                                     the GPU's busy time of a forward per layer, CUPTI; where a
                                     forward is host-bound, the kernels' share that tokens/s hides)
The figures are measured once per class, for every run of the profile, in setup_cache (one
model build per configuration), and each track_ reads its number: each asv benchmark process
would otherwise build and check its own model, which on the 2-core CPU box (one layer of the
0.5B shape: ~1 s to build, ~0.7 s to check) made the suite's model part take minutes.
A run whose check failed (every projection against float64 at each token count's first call)
fails its benchmarks: nothing wrong is timed. A form that cannot run here (cider off an M5,
the cpu profile's compiled forms) is n/a with the reason. The track_ figures
are for display (asv reads a higher value as worse); bench_ratio's ModelRatio is the ratio a gate
can watch (not the CPU box's: it moves by up to 20 % between processes there, docs/benchmarking.md).
"""

from __future__ import annotations

import sys
import time
from functools import lru_cache

from asv_runner.benchmarks.mark import SkipNotImplemented

from int8nax.bench import models

from .common import measured, peak_bytes, profile, tokens_per_s

_prepared: dict[tuple[str, str, str], models.Prepared] = {}


@lru_cache(maxsize=None)
def model_profile() -> tuple[str, models.Profile]:
    name = profile()[0]
    return name, models.PROFILES[name]


def per_layer_clock() -> float:
    """A clock that advances by 1 s per `layers` s of wall time: a forward timed with it reads
    seconds per decoder layer."""
    return time.perf_counter() / model_profile()[1].layers


def _in_profile(form: str, mode: str, config: str, tokens: int) -> None:
    """NotImplementedError (asv's n/a) with the reason where this run is not measured here."""
    name, prof = model_profile()
    if config not in prof.configs or tokens not in prof.tokens:
        raise NotImplementedError(f"{config} at {tokens} tokens is not in the {name!r} profile "
                                  f"({', '.join(prof.configs)} at {', '.join(map(str, prof.tokens))} tokens)")
    why = models.skip_reason(name, form, mode, tokens)
    if why:
        raise NotImplementedError(why)


def prepared(form: str, mode: str, config: str, tokens: int) -> models.Prepared:
    """The (config, form, mode) model, built once per process, prepared and checked at
    `tokens`; NotImplementedError (asv's n/a) with the reason where it is not measured here."""
    _in_profile(form, mode, config, tokens)
    name, prof = model_profile()
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


class ModelTime:
    """Base class: time_ of `form` in `mode` over every (configuration, tokens)."""

    form = ""
    mode = "eager"
    params = [list(models.CONFIGS), list(models.ALL_TOKENS)]
    param_names = ["configuration", "tokens"]
    timeout = 900  # a GPU's first compiled W8A8 forward has taken 28-35 s (H200) per token count
    version = "1"  # pinned: editing a comment must not hide the history (bump on purpose)
    # Untimed forwards first, as the measuring layer's own timing does (models.seconds): setup's
    # check runs on the CPU for seconds while the GPU idles, and its two forwards are too short
    # for the GPU's clocks to leave idle (without them, time_ read W8A8 on the H200 at 2048
    # tokens 20 % slower than the tracks, which warm up first).
    warmup_time = models.MIN_WARMUP_SECONDS
    rounds = 1  # every round is a new process and a new model; bench_ratio's ModelRatio is gated
    repeat = (2, 5, 1.0)

    def setup(self, config, tokens):
        self.model = prepared(self.form, self.mode, config, tokens)
        self.tokens = tokens
        self.model.run(tokens)

    def forward(self):
        self.model.run(self.tokens)


class ModelFigures:
    """Base class: the track_ figures of `form` in `mode`, measured in setup_cache (module doc).
    Each subclass defines its own setup_cache: asv keys a cache by its source line."""

    form = ""
    mode = "eager"
    params = ModelTime.params
    param_names = ModelTime.param_names
    timeout = 1800  # setup_cache: every configuration and token count of the profile, first calls included
    version = "1"
    rounds = 1

    def figures(self) -> dict:
        try:
            name = model_profile()[0]
        except NotImplementedError as exc:  # a bogus INT8NAX_BENCH_PROFILE: every run n/a
            return {"profile": str(exc)}
        return models.profile_figures(name, self.form, self.mode)

    def setup(self, figures, config, tokens):
        if "profile" in figures:
            raise NotImplementedError(figures["profile"])
        _in_profile(self.form, self.mode, config, tokens)
        self.entry = measured(figures.get((config, tokens), {"skip": "not measured"}))

    def gpu_seconds_per_layer(self) -> float:
        """The GPU's busy time per layer of one forward (models.gpu_time); n/a where not measured
        (asv's SkipNotImplemented: raised in a benchmark's body, not its setup, which the other
        figures of the same run share, a plain NotImplementedError is a failure)."""
        if "gpu_ms_per_layer" not in self.entry:
            raise SkipNotImplemented(self.entry.get("gpu_na", "GPU time: not measured"))
        return self.entry["gpu_ms_per_layer"] / 1e3


def per_layer(func):
    """Mark a time_ method as seconds per decoder layer."""
    func.timer = per_layer_clock
    return func


def first_call(func):
    func.unit = "seconds"
    return func


def gpu_seconds(func):
    func.unit = "seconds"
    return func


class Bf16Model(ModelTime):
    """bfloat16 weights and activations: the reference every form is compared with."""

    form = "bf16"

    @per_layer
    def time_bf16(self, config, tokens):
        self.forward()


class Bf16ModelFigures(ModelFigures):
    """bfloat16 weights and activations: the reference every form is compared with: tokens/s, peak memory, first call."""

    form = "bf16"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_bf16_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_bf16_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_bf16_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_bf16_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()


class Bf16ModelCompiled(ModelTime):
    """bfloat16 weights and activations, under mx.compile."""

    form, mode = "bf16", "compiled"

    @per_layer
    def time_bf16_compiled(self, config, tokens):
        self.forward()


class Bf16ModelCompiledFigures(ModelFigures):
    """bfloat16 weights and activations, under mx.compile: tokens/s, peak memory, first call."""

    form, mode = "bf16", "compiled"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_bf16_compiled_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_bf16_compiled_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_bf16_compiled_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_bf16_compiled_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()


class Fp16Model(ModelTime):
    """float16 weights and activations."""

    form = "fp16"

    @per_layer
    def time_fp16(self, config, tokens):
        self.forward()


class Fp16ModelFigures(ModelFigures):
    """float16 weights and activations: tokens/s, peak memory, first call."""

    form = "fp16"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_fp16_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_fp16_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_fp16_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_fp16_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()


class Fp16ModelCompiled(ModelTime):
    """float16 weights and activations, under mx.compile."""

    form, mode = "fp16", "compiled"

    @per_layer
    def time_fp16_compiled(self, config, tokens):
        self.forward()


class Fp16ModelCompiledFigures(ModelFigures):
    """float16 weights and activations, under mx.compile: tokens/s, peak memory, first call."""

    form, mode = "fp16", "compiled"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_fp16_compiled_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_fp16_compiled_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_fp16_compiled_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_fp16_compiled_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()


class MlxQ8Model(ModelTime):
    """MLX's weight-only 8-bit: nn.quantize(bits=8, group_size=64), bf16 activations."""

    form = "mlx-q8"

    @per_layer
    def time_mlx_q8(self, config, tokens):
        self.forward()


class MlxQ8ModelFigures(ModelFigures):
    """MLX's weight-only 8-bit: nn.quantize(bits=8, group_size=64), bf16 activations: tokens/s, peak memory, first call."""

    form = "mlx-q8"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_mlx_q8_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_mlx_q8_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_mlx_q8_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_mlx_q8_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()


class MlxQ8ModelCompiled(ModelTime):
    """MLX's weight-only 8-bit, under mx.compile."""

    form, mode = "mlx-q8", "compiled"

    @per_layer
    def time_mlx_q8_compiled(self, config, tokens):
        self.forward()


class MlxQ8ModelCompiledFigures(ModelFigures):
    """MLX's weight-only 8-bit, under mx.compile: tokens/s, peak memory, first call."""

    form, mode = "mlx-q8", "compiled"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_mlx_q8_compiled_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_mlx_q8_compiled_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_mlx_q8_compiled_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_mlx_q8_compiled_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()


class W8A8Model(ModelTime):
    """int8nax W8A8: int8nax.nn.quantize_linears on the bf16 model."""

    form = "w8a8"

    @per_layer
    def time_w8a8(self, config, tokens):
        self.forward()


class W8A8ModelFigures(ModelFigures):
    """int8nax W8A8: int8nax.nn.quantize_linears on the bf16 model: tokens/s, peak memory, first call."""

    form = "w8a8"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_w8a8_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_w8a8_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_w8a8_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_w8a8_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()


class W8A8ModelCompiled(ModelTime):
    """int8nax W8A8, under mx.compile."""

    form, mode = "w8a8", "compiled"

    @per_layer
    def time_w8a8_compiled(self, config, tokens):
        self.forward()


class W8A8ModelCompiledFigures(ModelFigures):
    """int8nax W8A8, under mx.compile: tokens/s, peak memory, first call."""

    form, mode = "w8a8", "compiled"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_w8a8_compiled_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_w8a8_compiled_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_w8a8_compiled_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_w8a8_compiled_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()


class CiderModel(ModelTime):
    """cider's W8A8 (cider.convert_model), Apple M5 only."""

    form = "cider"

    @per_layer
    def time_cider(self, config, tokens):
        self.forward()


class CiderModelFigures(ModelFigures):
    """cider's W8A8 (cider.convert_model), Apple M5 only: tokens/s, peak memory, first call."""

    form = "cider"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_cider_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_cider_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_cider_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_cider_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()


class CiderModelCompiled(ModelTime):
    """cider's W8A8, under mx.compile."""

    form, mode = "cider", "compiled"

    @per_layer
    def time_cider_compiled(self, config, tokens):
        self.forward()


class CiderModelCompiledFigures(ModelFigures):
    """cider's W8A8, under mx.compile: tokens/s, peak memory, first call."""

    form, mode = "cider", "compiled"

    def setup_cache(self):
        return self.figures()

    @tokens_per_s
    def track_cider_compiled_tokens_per_s(self, figures, config, tokens):
        return self.entry["tokens_per_s"]

    @peak_bytes
    def track_cider_compiled_peak_bytes(self, figures, config, tokens):
        return self.entry["peak_bytes"]

    @first_call
    def track_cider_compiled_first_call_s(self, figures, config, tokens):
        return self.entry["first_call_s"]

    @gpu_seconds
    def track_cider_compiled_gpu_s_per_layer(self, figures, config, tokens):
        return self.gpu_seconds_per_layer()
