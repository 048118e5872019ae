"""What each machine measures: the model runs of a shape profile (PROFILES), why a run is left
out (skip_reason), and every run's figures for the asv suite (profile_figures), never raising."""

from __future__ import annotations

import gc
from dataclasses import dataclass

from ..checks import MismatchError
from ..peers import Unavailable
from .prepared import Prepared, prepare
from .qwen import PROFILE_CONFIGS


@dataclass(frozen=True)
class Profile:
    """The model runs of a shape profile (int8nax.bench.problems.choose_profile names it)."""

    configs: tuple[str, ...]
    tokens: tuple[int, ...]
    layers: int
    context: int


PROFILES: dict[str, Profile] = {
    # 4 layers: the embedding, final norm and MLX's per-evaluation cost (~25 us on CUDA) come
    # to a few percent of a decode step (0.34 ms per bf16 layer of the 7B on the H200), and two
    # configurations in four forms stay near 15 GB.
    "full": Profile(PROFILE_CONFIGS["full"], (1, 16, 128, 512, 2048, 4096), layers=4, context=512),
    # One layer of the small configuration at decode and 16 tokens: MLX's CPU bf16 GEMM runs
    # a 16-token layer in ~0.25 s on the 2-core box, and every benchmark process builds its model.
    # A prompt of 8: at this size a decode step's cost is its projections (attention over 8 or
    # 512 keys of 14 heads of 64 is a rounding error next to 15 M weights).
    "cpu": Profile(PROFILE_CONFIGS["cpu"], (1, 16), layers=1, context=8),
}
ALL_TOKENS: tuple[int, ...] = tuple(sorted({t for p in PROFILES.values() for t in p.tokens}))


def skip_reason(profile: str, form: str, mode: str, tokens: int) -> str | None:
    """Why a run of this profile is not measured (None: it is)."""
    if profile == "cpu" and mode == "compiled":
        return ("compiled forms are not in the cpu profile: MLX's CPU device builds a compiled graph's "
                "kernels with the system C++ compiler at its first call (16-27 s per form on the 2-core box)")
    if profile == "cpu" and form == "mlx-q8":
        return ("mlx-q8 is not in the cpu profile: MLX's CPU quantized_matmul takes ~0.35 s per token and "
                "layer of the 0.5B shape on the 2-core box (its prompt alone would take seconds); "
                "`int8nax compare --model qwen2.5-0.5b --forms mlx-q8` measures it")
    if profile == "cpu" and form == "fp16" and tokens > 1:
        return ("fp16 measures decode only on the cpu profile: its prefill runs on the MLX CPU GEMM that bf16's "
                "does (0.25-0.3 s per layer at 16 tokens on the 2-core box), which bf16 already shows")
    return None


def gpu_time(model: Prepared, tokens: int) -> dict:
    """{"gpu_ms_per_layer": the GPU's busy time of one forward per layer (bench.model_breakdown:
    CUPTI, the figure that host-bound token counts do not blur)}, or {"gpu_na": why not}."""
    from .. import model_breakdown

    got, why = model_breakdown.measured(model, tokens, forwards=2)
    if got is None:
        return {"gpu_na": f"GPU time: {why}"}
    return {"gpu_ms_per_layer": got.busy_ms} if got.busy_ms > 0 else {"gpu_na": "GPU time: CUPTI saw no kernel"}


def profile_figures(profile: str, form: str, mode: str, repeat: int = 3) -> dict:
    """{(configuration, tokens): figures} of every run of `profile` in `form` and `mode`, one
    model per configuration: {"tokens_per_s", "peak_bytes", "first_call_s", "check"} where it
    ran and passed its check, {"skip": why} where it is not measured here, {"mismatch": what}
    where the check failed (nothing timed), {"error": what} where it raised. Never raises:
    asv calls it from setup_cache, where an exception fails the whole class."""
    prof = PROFILES[profile]
    out: dict = {}
    from .. import model_breakdown
    from ..kernel import cupti

    if cupti.skip_reason() is None:
        model_breakdown.start()  # torch's CUDA context (and CUPTI's) first, as compare --breakdown
    for config in prof.configs:
        skips = {t: skip_reason(profile, form, mode, t) for t in prof.tokens}
        if all(skips.values()):
            out.update({(config, t): {"skip": why} for t, why in skips.items()})
            continue
        try:
            base = prepare(config, form, "eager", layers=prof.layers, context=prof.context)
            model = base if mode == "eager" else base.with_mode(mode)
        except Unavailable as exc:
            out.update({(config, t): {"skip": str(exc)} for t in prof.tokens})
            continue
        except Exception as exc:  # noqa: BLE001 - reported per run below
            out.update({(config, t): {"error": f"{type(exc).__name__}: {exc}"} for t in prof.tokens})
            continue
        for t in prof.tokens:
            why = skips[t]
            if why:
                out[(config, t)] = {"skip": why}
                continue
            try:
                model.prepare(t)
                out[(config, t)] = {"tokens_per_s": t / model.seconds(t, repeat=repeat, warmup=1),
                                    "peak_bytes": model.peak_bytes(t), "first_call_s": model.first_call_s[t],
                                    "check": model.check[t], **gpu_time(model, t)}
            except Unavailable as exc:
                out[(config, t)] = {"skip": str(exc)}
            except MismatchError as exc:
                out[(config, t)] = {"mismatch": str(exc)}
            except Exception as exc:  # noqa: BLE001
                out[(config, t)] = {"error": f"{type(exc).__name__}: {exc}"}
        del base, model
        gc.collect()
    return out
