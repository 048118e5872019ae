"""mlx-lm's Qwen models as the measurements build them: the configurations (CONFIGS, the public
dimensions; PROFILE_CONFIGS, those each profile measures), mlx-lm's model classes imported without its generation front end, and each model
built with seeded random weights scaled like a trained model's (the package docstring says how)."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass

import mlx.core as mx
import mlx.nn as nn

from ..peers import Unavailable


@dataclass(frozen=True)
class Config:
    """One model shape, as mlx-lm's ModelArgs of `family` ("qwen2" or "qwen3") takes it."""

    name: str
    family: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    depth: int = 2
    """Decoder layers of the real model (the generation benchmark's default; the forward
    benchmark runs a few of them). The defaults of depth, vocab and tied make a small model,
    for tests' own configurations."""
    vocab: int = 1024
    """The real model's vocabulary (its embedding and LM head rows)."""
    tied: bool = True
    """Whether the LM head is the embedding (tie_word_embeddings)."""
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6


CONFIGS: dict[str, Config] = {c.name: c for c in (
    Config("qwen2.5-0.5b", "qwen2", 896, 4864, 14, 2, 64, depth=24, vocab=151936, tied=True),
    Config("qwen2.5-7b", "qwen2", 3584, 18944, 28, 4, 128, depth=28, vocab=152064, tied=False),
    Config("qwen3-8b", "qwen3", 4096, 12288, 32, 8, 128, depth=36, vocab=151936, tied=False),
)}

PROFILE_CONFIGS: dict[str, tuple[str, ...]] = {"full": ("qwen2.5-7b", "qwen3-8b"), "cpu": ("qwen2.5-0.5b",)}
"""The configurations each shape profile measures (bench.problems.choose_profile names it): the
model and generation suites' (models.PROFILES, generate.PROFILES), and on a GPU, the full
profile's, the layers the CUDA plan sweep times (kernel.plans.model_shapes)."""


VOCAB = 1024
SEED = 20261204
MAX_TOKENS = 8192
"""Longest sequence (prompt + new tokens) a run may ask for: the seeded ids have this many."""


def mlx_lm_module(name: str):
    """mlx_lm.models.<name> (qwen2, qwen3, cache).

    mlx-lm's package __init__ imports its generation and conversion front end, which needs
    transformers (1.5 s and some 600 modules on the CPU box; absent on machines that carry
    only the mlx-lm wheel). The model classes need only MLX. So, unless mlx_lm is already
    imported, its package module is created without running __init__, and runs it in place
    the first time anything outside `mlx_lm.models` is looked up on it (`mlx_lm.generate`,
    `from mlx_lm import load`): a later user of the full package notices nothing.
    Raises Unavailable when mlx-lm is not installed.
    """
    if "mlx_lm" not in sys.modules:
        spec = importlib.util.find_spec("mlx_lm")
        if spec is None:
            raise Unavailable("mlx-lm is not installed (pip install 'int8nax[bench]', or pip install mlx-lm)")
        package = importlib.util.module_from_spec(spec)

        def run_init(attr):
            del package.__dict__["__getattr__"]
            spec.loader.exec_module(package)
            return getattr(package, attr)

        package.__getattr__ = run_init
        sys.modules["mlx_lm"] = package
    try:
        return importlib.import_module(f"mlx_lm.models.{name}")
    except ImportError as exc:
        raise Unavailable(f"mlx-lm cannot import mlx_lm.models.{name}: {exc}") from None


def model_args(config: Config, layers: int):
    """mlx-lm's ModelArgs of `config` with `layers` decoder layers."""
    module = mlx_lm_module(config.family)
    extra = {"head_dim": config.head_dim, "max_position_embeddings": 40960} if config.family == "qwen3" else {}
    return module.ModelArgs(
        model_type=config.family, hidden_size=config.hidden, num_hidden_layers=layers,
        intermediate_size=config.intermediate, num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads, rms_norm_eps=config.rms_norm_eps, vocab_size=VOCAB,
        rope_theta=config.rope_theta, tie_word_embeddings=True, **extra)


def random_weight(path: str, shape: tuple[int, ...], index: int, seed: int = SEED) -> mx.array:
    """The float32 parameter at `path` (lazy), seeded by its `index` in the model's
    parameter order, scaled as the package docstring says."""
    key = mx.random.key(seed + index)
    leaf = path.rsplit(".", 1)[-1]
    if "norm" in path:
        return 1.0 + 0.1 * mx.random.normal(shape, key=key)
    if leaf == "bias":
        return 0.1 * mx.random.normal(shape, key=key)
    if "embed_tokens" in path:
        return 0.02 * mx.random.normal(shape, key=key)
    return mx.random.normal(shape, key=key) * (shape[-1] ** -0.5)


def _random_weights(model: nn.Module) -> list[tuple[str, mx.array]]:
    """(path, float32 array) for every parameter, seeded per path (see the package docstring)."""
    from mlx.utils import tree_flatten

    return [(path, random_weight(path, value.shape, i)) for i, (path, value) in enumerate(tree_flatten(model.parameters()))]


def build(config: Config, layers: int, dtype=mx.bfloat16) -> nn.Module:
    """mlx-lm's Model for `config` with `layers` layers, random weights in `dtype`, evaluated.
    Every form starts from the bf16 model, as a user converts a bf16 checkpoint (fp16 by
    set_dtype: exact, float16 has the wider significand)."""
    module = mlx_lm_module(config.family)
    model = module.Model(model_args(config, layers))
    weights = [(p, w.astype(dtype)) for p, w in _random_weights(model)]
    model.load_weights(weights)
    mx.eval(model.parameters())
    model.eval()
    return model


def token_ids() -> mx.array:
    """int32 [1, MAX_TOKENS]: the seeded ids every run takes its first tokens from."""
    return mx.random.randint(0, VOCAB, (1, MAX_TOKENS), key=mx.random.key(SEED - 1)).astype(mx.int32)
