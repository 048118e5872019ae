"""Whole models, not single GEMMs: a few decoder layers of mlx-lm's own Qwen classes, timed in
prefill and decode in each form a user would run them in, each form checked before it is timed.

Configurations (the public dimensions; mlx-lm's ModelArgs, random weights):
    qwen2.5-0.5b   hidden 896,  MLP 4864,  14/2 heads of 64,  q/k/v biases   (CPU profile, CI)
    qwen2.5-7b     hidden 3584, MLP 18944, 28/4 heads of 128, q/k/v biases
    qwen3-8b       hidden 4096, MLP 12288, 32/8 heads of 128, q/k RMSNorm, no biases
What is timed is mlx-lm's decoder stack, `model.model`: the embedding, `layers` decoder layers
and the final RMSNorm. The LM head is left out: a full-vocabulary head (151936 wide) is one
more GEMM whose cost does not shrink with fewer layers, and per-layer figures (time / layers)
are the point. The vocabulary is cut to VOCAB rows for the same reason (a lookup costs the same).

Weights are random, seeded (mx.random with fixed keys: counter-based, the same bits on every
device), and scaled like a trained model's: linear weights N(0, 1/fan_in) so that each
projection keeps its input's scale, RMSNorm gains near 1, q/k/v biases of order 0.1,
embeddings N(0, 0.02^2). Random weights have no outlier channels, so the relative errors
reported are what quantization costs on well-behaved activations: a trained model's outliers
make per-token W8A8 worse, not better.

Forms (FORMS): bf16 and fp16 (the float model), mlx-q8 (MLX's weight-only 8-bit,
nn.quantize(bits=8, group_size=64), the embedding too, as mlx-lm's converter does), w8a8
(int8nax.nn.quantize_linears, exactly as a user calls it) and cider (cider.convert_model; an
Apple M5 only). Each runs eager or under mx.compile (MODES).

Runs (`tokens`):
    tokens > 1    prefill: model.model(ids[:, :T]) with no cache
    tokens == 1   decode: one token through mlx-lm's prompt cache (make_prompt_cache) after a
                  prompt of `context` tokens; the cache is trimmed back after every step
                  (KVCache.trim), so every timed step sees the same context. Compiled, the
                  step is one mx.compile'd function of the token and the caches' buffers at
                  that fixed context (_compiled_decode_step), since mlx-lm's KVCache keeps its
                  offset in Python
The check (Prepared.prepare, at the first call of every `tokens`, before anything is timed):
during that call every projection of the eager model records sampled rows of its input and
the matching outputs (CHECK_ROWS x CHECK_COLS, spread over the whole output so that every
128-wide tile is sampled), and each is compared with a float64 simulation of that
projection as the form holds it, on the very input it received: for W8A8 the same per-token
and per-channel codes, exact integer products and float64 for the rest
(int8nax.reference.w8a8_linear_ref), within 1 ulp; for the float and weight-only forms x @ W.T
(+ b) in float64 with W as held (MLX's dequantized 8-bit codes for mlx-q8), normwise; for
cider, whose layers' arrays the check does not read, int8nax's W8A8 model of the bf16 weights
it converted (cider's per-channel quantization is int8nax's math), within 1 ulp. Checking
each projection on its own input, rather than the model's output against a float64 model,
is what makes the bound tight: a float64 model's activations drift from bf16's by ~1%, and
per-token codes of drifted activations differ by about as much as quantization changes
them (measured with 2 layers of the 0.5B shape: W8A8 4.2% from such a model, 4.5% from
bf16), so a whole-model bound could not tell W8A8 from another quantization. A compiled form
(no per-projection hook inside mx.compile) is held to the same form run eager at the same
tokens (COMPILED_REL_TOL).
The relative error of each form's output against the bf16 model's, on a prefill of
ERROR_TOKENS, is reported (rel_error_vs_bf16), not gated.

The package, by concern:
    qwen         the configurations (CONFIGS, PROFILE_CONFIGS) and mlx-lm's model of each, with seeded
                 random weights
    forms        the forms and the conversion of a bf16 model into each
    projections  the check: every projection against float64 on its own inputs
    prepared     a form ready to time (Prepared), its first call checked
    profiles     the runs each machine measures, and their figures for the asv suite
Their public names are also the package's: models.prepare, models.CONFIGS, models.PROFILES.
"""

from __future__ import annotations

from ..checks import MismatchError
from ..peers import Unavailable
from .forms import ALL_FORMS, FORMS, MLX_GROUP_SIZE, convert, weight_bytes
from .prepared import (COMPILED_REL_TOL, ERROR_TOKENS, MAX_REPEAT, MIN_SAMPLE_SECONDS, MIN_WARMUP_SECONDS, MODES,
                       Prepared, prepare)
from .profiles import ALL_TOKENS, PROFILES, Profile, gpu_time, profile_figures, skip_reason
from .projections import (CHECK_COLS, CHECK_ROWS, FLOAT_REL_TOL, W8A8_MAX_ULP, _projections, check_projection,
                          check_projections, float_tolerance, rel_error)
from .qwen import (CONFIGS, MAX_TOKENS, PROFILE_CONFIGS, SEED, VOCAB, Config, build, mlx_lm_module, model_args,
                   random_weight, token_ids)

__all__ = [
    "ALL_FORMS", "ALL_TOKENS", "CHECK_COLS", "CHECK_ROWS", "COMPILED_REL_TOL", "CONFIGS", "Config", "ERROR_TOKENS",
    "FLOAT_REL_TOL", "FORMS", "MAX_REPEAT", "MAX_TOKENS", "MIN_SAMPLE_SECONDS", "MIN_WARMUP_SECONDS", "MLX_GROUP_SIZE",
    "MODES", "MismatchError", "PROFILES", "PROFILE_CONFIGS", "Prepared", "Profile", "SEED", "Unavailable", "VOCAB", "W8A8_MAX_ULP",
    "build", "check_projection", "check_projections", "convert", "float_tolerance", "gpu_time", "mlx_lm_module",
    "model_args", "prepare", "profile_figures", "random_weight", "rel_error", "skip_reason", "token_ids",
    "weight_bytes",
    "_projections",  # bench.generate finds its models' projections by the paths the check records
]
