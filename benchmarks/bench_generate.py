"""The generation benchmark: whole models through mlx-lm's own loop (int8nax.bench.generate), the
figures `mlx_lm.benchmark` prints, per form.

Parameters: (case, form), a case being "<model> p<prompt tokens> g<generated> b<batch>"
(generate.ALL_CASES). The suite declares every case of every profile (results of all machines
publish into one site); a machine measures its profile's
(generate.PROFILES: on a GPU Qwen2.5-7B and Qwen3-8B at their real depth, prompts of 512, 2048
and 4096 tokens, 128 generated, batch 1 and 8; on a CPU box the 0.5B shape cut to 2 layers and
a 1024-id vocabulary, a prompt of 64, 16 generated, batch 1). On the cpu profile MLX's 8- and
4-bit forms are n/a (generate.skip_reason: its CPU quantized_matmul would take most of the
suite's time); `int8nax compare --generate` measures them.

    GenerateFigures   track_prompt_tps, track_generation_tps (tokens/s, mlx-lm's prompt_tps and
                      generation_tps: median of the profile's trials) and track_peak_memory
                      (bytes: mlx-lm's peak_memory, reset before each cell)
    GenerateRatio     track_w8a8_prompt_vs_bf16, track_w8a8_generation_vs_bf16: W8A8's tokens/s
                      over bf16's from the same process (above 1: W8A8 faster)

Every figure comes from one measurement per process in setup_cache, which both classes share
(asv keys a cache by the function's source line, and GenerateRatio inherits it): the model folder
is built (or found in its cache) once, every form loaded, checked (greedy agreement reported,
every projection against float64: a wrong one fails the benchmark) and timed once. The track_
figures are for display (higher is better; asv reads a higher value as worse), as the model
suite's. INT8NAX_GENERATE_CONFIGS=qwen2.5-7b measures one model of the profile (the others n/a).
"""

from __future__ import annotations

from functools import lru_cache

from int8nax.bench import generate

from .common import measured, peak_bytes, profile, tokens_per_s

GB = generate.GB


@lru_cache(maxsize=None)
def generate_profile() -> str:
    return profile()[0]


def _entry(figures: dict, case: str, form: str) -> dict:
    """The measured cell, or the exception asv reports for it: NotImplementedError (n/a) with
    the reason where it is not measured here, MismatchError where its check failed."""
    if "profile" in figures:
        raise NotImplementedError(figures["profile"])
    name = generate_profile()
    if case not in generate.profile_cases(name):
        raise NotImplementedError(f"{case} is not in the {name!r} profile ({', '.join(generate.profile_cases(name))})")
    return measured(figures.get((case, form), {"skip": "not measured"}))


class _Generation:
    """Base class: the shared setup_cache (module doc)."""

    timeout = 1800  # setup_cache: every form of the profile's models, folders built on a first run
    version = "1"  # pinned: editing a comment must not hide the history (bump on purpose)
    rounds = 1

    def setup_cache(self):
        try:
            name = generate_profile()
        except NotImplementedError as exc:  # a bogus INT8NAX_BENCH_PROFILE: every cell n/a
            return {"profile": str(exc)}
        return generate.profile_figures(name)


def ratio(func):
    func.unit = "ratio"
    return func


class GenerateFigures(_Generation):
    """mlx-lm's figures of each form: prompt and generation tokens/s, peak memory."""

    params = [list(generate.ALL_CASES), list(generate.FORMS)]
    param_names = ["model, prompt, generation, batch", "form"]

    def setup(self, figures, case, form):
        self.entry = _entry(figures, case, form)

    @tokens_per_s
    def track_prompt_tps(self, figures, case, form):
        return self.entry["prompt_tps"]

    @tokens_per_s
    def track_generation_tps(self, figures, case, form):
        return self.entry["generation_tps"]

    @peak_bytes
    def track_peak_memory(self, figures, case, form):
        return self.entry["peak_memory_gb"] * GB


class GenerateRatio(_Generation):
    """W8A8's tokens/s over bf16's, measured in the same process."""

    params = [list(generate.ALL_CASES)]
    param_names = ["model, prompt, generation, batch"]

    def setup(self, figures, case):
        _entry(figures, case, "bf16")
        self.entry = _entry(figures, case, "w8a8")

    @ratio
    def track_w8a8_prompt_vs_bf16(self, figures, case):
        return self.entry["ratios"]["prompt_vs_bf16"]

    @ratio
    def track_w8a8_generation_vs_bf16(self, figures, case):
        return self.entry["ratios"]["generation_vs_bf16"]
