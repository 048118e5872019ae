"""Whole models saved as a user's model is: a local folder in mlx-lm's format, built here.

    folder(config, layers, vocab) -> Path of <cache>/<name>-<digest>/ holding
        config.json                      Hugging Face style: model_type, sizes, vocab_size, dtype
        model-0000i-of-0000n.safetensors bf16 weights under the checkpoint's names
                                         (model.layers.0.self_attn.q_proj.weight, lm_head.weight)
        tokenizer.json, tokenizer_config.json
                                         a byte-level BPE tokenizer built here (nothing downloaded)

so that `mlx_lm.load(folder)`, `mlx_lm.generate --model folder` and `mlx_lm.benchmark --model
folder` run on it as on a downloaded checkpoint. Weights are bench.models' random seeded ones
(models.random_weight: the same scaling as the forward benchmark's), generated one array at a
time and written in shards of about SHARD_BYTES, so a 7B model never holds float32 copies of
more than one array.

The tokenizer's vocabulary is exactly the model's ids 0..vocab-1, every one a string of letters,
digits or spaces (the byte-level alphabet's "Ġ"), so any id the model generates decodes to
printable text, and any text of those characters encodes. transformers reads a Qwen folder's
tokenizer as its Qwen2Tokenizer (a byte-level BPE from tokenizer.json's vocab and merges)
whatever tokenizer_config.json names, which is why the tokenizer is a byte-level BPE rather
than a word list. Its special token <|endoftext|> is added past the model's vocabulary (id
`vocab`): a random model never generates it, so generation runs to max_tokens as
mlx_lm.benchmark's does.

The folder is cached: its name carries a digest of everything that goes into it (the
configuration, layers, vocab, seed and FORMAT_VERSION), it is written into a temporary sibling
and renamed when complete, and a complete folder is reused. The cache is INT8NAX_MODEL_CACHE,
else $XDG_CACHE_HOME/int8nax/models, else ~/.cache/int8nax/models.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import string
from pathlib import Path

import mlx.core as mx

from . import models
from .peers import import_optional

CACHE_ENV = "INT8NAX_MODEL_CACHE"
FORMAT_VERSION = 1
"""Bump when what a folder holds changes: the digest, and so the cache, follows it."""
SHARD_BYTES = 2 * 2**30
ALPHABET = "Ġ" + string.ascii_letters + string.digits
"""The tokenizer's base symbols: a space as byte-level BPE writes it, letters and digits."""
MAX_POSITIONS = 32768


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "int8nax" / "models"


def hf_config(config: models.Config, layers: int, vocab: int) -> dict:
    """config.json of `config` with `layers` decoder layers and `vocab` ids, as a checkpoint
    of that family writes it (the keys mlx-lm's ModelArgs read, and transformers' model_type)."""
    out = {
        "architectures": ["Qwen2ForCausalLM" if config.family == "qwen2" else "Qwen3ForCausalLM"],
        "model_type": config.family, "hidden_size": config.hidden, "intermediate_size": config.intermediate,
        "num_hidden_layers": layers, "num_attention_heads": config.heads, "num_key_value_heads": config.kv_heads,
        "rms_norm_eps": config.rms_norm_eps, "rope_theta": config.rope_theta, "vocab_size": vocab,
        "max_position_embeddings": MAX_POSITIONS, "tie_word_embeddings": config.tied, "torch_dtype": "bfloat16",
        "hidden_act": "silu",
    }
    if config.family == "qwen3":
        out["head_dim"] = config.head_dim
    return out


def digest(config: models.Config, layers: int, vocab: int, seed: int = models.SEED) -> str:
    what = {"config": hf_config(config, layers, vocab), "seed": seed, "format": FORMAT_VERSION}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:12]


def folder(config: str | models.Config, layers: int | None = None, vocab: int | None = None,
           seed: int = models.SEED, cache: Path | None = None, progress=None) -> Path:
    """The folder of `config` (a models.CONFIGS name or a Config) with `layers` decoder layers
    (default: the real depth) and `vocab` ids (default: the real vocabulary), built if the cache
    has none. progress(text), if given, hears about a build (it can take a minute for a 7B)."""
    if isinstance(config, str):
        if config not in models.CONFIGS:
            raise ValueError(f"config: expected one of {', '.join(models.CONFIGS)}, got {config!r}")
        config = models.CONFIGS[config]
    layers = config.depth if layers is None else layers
    vocab = config.vocab if vocab is None else vocab
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers: expected a positive int, got {layers!r}")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < len(ALPHABET):
        raise ValueError(f"vocab: expected an int of at least {len(ALPHABET)}, got {vocab!r}")
    root = Path(cache) if cache is not None else cache_dir()
    path = root / f"{config.name}-{layers}l-{vocab}v-{digest(config, layers, vocab, seed)}"
    if (path / "config.json").is_file():
        return path
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{path.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        if progress:
            progress(f"building {path.name} ({layers} layers, vocab {vocab}) in {root}")
        _write_weights(tmp, config, layers, vocab, seed)
        _write_tokenizer(tmp, vocab)
        # config.json last: its presence marks a complete folder
        (tmp / "config.json").write_text(json.dumps(hf_config(config, layers, vocab), indent=1) + "\n")
        try:
            tmp.rename(path)
        except OSError:  # another process finished the same folder first
            if not (path / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _write_weights(where: Path, config: models.Config, layers: int, vocab: int, seed: int) -> None:
    """Shards of bf16 weights under the checkpoint's names: mlx-lm's own Model is built lazily
    (nothing evaluated) only to read the parameters' names and shapes."""
    from mlx.utils import tree_flatten

    module = models.mlx_lm_module(config.family)
    model = module.Model(module.ModelArgs.from_dict(hf_config(config, layers, vocab)))
    params = tree_flatten(model.parameters())
    del model
    shards: list[dict[str, mx.array]] = [{}]
    size = 0
    for i, (name, value) in enumerate(params):
        w = models.random_weight(name, value.shape, i, seed).astype(mx.bfloat16)
        mx.eval(w)
        if size and size + w.nbytes > SHARD_BYTES:
            _save(where, shards, len(shards) - 1)
            shards.append({})
            size = 0
        shards[-1][name] = w
        size += w.nbytes
    total = len(shards)
    _save(where, shards, total - 1)
    for i in range(total):  # names carry the count, known only at the end
        (where / f"part-{i}.safetensors").rename(where / f"model-{i + 1:05d}-of-{total:05d}.safetensors")


def _save(where: Path, shards: list, i: int) -> None:
    mx.save_safetensors(str(where / f"part-{i}.safetensors"), shards[i], metadata={"format": "mlx"})
    shards[i] = {}  # free the arrays: only the file keeps them


def vocabulary(vocab: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(token -> id for ids 0..vocab-1, merges in rank order) of the byte-level BPE: the
    ALPHABET's symbols first, then every pair of symbols, then longer tokens each a shorter
    token merged with one symbol, until there are `vocab` tokens. Every token is made by its
    own merge, so the BPE can produce (and encode) every id."""
    tokens = list(ALPHABET)
    merges: list[tuple[str, str]] = []
    level = list(ALPHABET)
    while len(tokens) < vocab:
        nxt = []
        for left in level:
            for right in ALPHABET:
                if len(tokens) == vocab:
                    break
                tokens.append(left + right)
                merges.append((left, right))
                nxt.append(left + right)
        level = nxt
    return {t: i for i, t in enumerate(tokens[:vocab])}, merges


def _write_tokenizer(where: Path, vocab: int) -> None:
    tokenizers = import_optional("tokenizers", "it comes with transformers, which mlx-lm's front end needs")
    Tokenizer, decoders, pre_tokenizers = tokenizers.Tokenizer, tokenizers.decoders, tokenizers.pre_tokenizers
    BPE = tokenizers.models.BPE

    ids, merges = vocabulary(vocab)
    tok = Tokenizer(BPE(vocab=ids, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.save(str(where / "tokenizer.json"))
    (where / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "Qwen2Tokenizer", "model_max_length": MAX_POSITIONS,
        "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": None,
        "add_prefix_space": False, "clean_up_tokenization_spaces": False,
    }, indent=1) + "\n")
