"""W8A8 models saved as folders: quantize once, then load with no quantization at each start.

    convert(src, dst, *, skip_lm_head=False) -> dict        an mlx-lm folder -> a W8A8 folder
    load(folder, *, lazy=False, backend=None) -> (model, tokenizer)
    w8a8_layers(folder) -> list[str] | None                  the W8A8 layers a folder records

A W8A8 folder is an mlx-lm model folder (config.json, model*.safetensors, the tokenizer's files)
holding each W8A8Linear's parameters as they are in memory (weight int8 [N, K], scales float32
[N], bias), written by mlx-lm's own `save`. Its config.json carries CONFIG_KEY: {"format": "w8a8",
"version": 1, "layers": the module paths that are W8A8Linear}. `mlx_lm.load` refuses such a folder
(its strict load finds the scales); `load` builds the model with mlx-lm's classes, swaps the recorded
layers for W8A8Linear ones without reading any weight (quantize_linears(weights=False), sibling
groups and SwiGLU MLPs included) and loads every parameter, checked by name and shape. The result
computes what `quantize_linears` on the source folder's model computes, bit for bit: the same
parameters, the same layers. Why: quantizing a 7B model's weights costs a process about 11 s on an
H100 box (docs/results/cuda-h100.md), and the int8 weights are half of bf16's bytes to read.

mlx-lm is needed (it is in the `bench` and `test` extras): without it, convert and load raise
ImportError saying so.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import mlx.core as mx

from .model import quantize_linears

CONFIG_KEY = "int8nax"
"""The key of config.json that marks a W8A8 folder and lists its W8A8 layers."""
FORMAT = {"format": "w8a8", "version": 1}


def _mlx_lm_utils(func: str):
    try:
        from mlx_lm import utils
    except ImportError as exc:
        raise ImportError(f"{func}: needs mlx-lm (pip install 'int8nax[bench]' or mlx-lm==0.32.2): {exc}") from None
    return utils


def _folder_path(value, func: str, name: str) -> Path:
    """A folder argument as a Path: a str or os.PathLike, else a TypeError naming it (Path's own
    names no argument)."""
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{func}: '{name}' must be a folder path (str or os.PathLike), "
                        f"got {type(value).__name__} {value!r}")
    return Path(value)


def _config(folder: Path, func: str, name: str) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise ValueError(f"{func}: '{name}' must be an mlx-lm model folder (with a config.json), got {str(folder)!r}")
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{func}: '{name}': {path} is not JSON ({exc})") from None


def _layers(config) -> list[str] | None:
    """The W8A8 layers a parsed config.json records, or None where it marks no W8A8 folder."""
    entry = config.get(CONFIG_KEY) if isinstance(config, dict) else None
    if not isinstance(entry, dict) or {k: entry.get(k) for k in FORMAT} != FORMAT:
        return None
    layers = entry.get("layers")
    return list(layers) if isinstance(layers, list) and all(isinstance(p, str) for p in layers) else None


def w8a8_layers(folder) -> list[str] | None:
    """The module paths a W8A8 folder records as W8A8Linear, or None for a folder that is not one
    (an mlx-lm folder of another form, or no folder)."""
    try:
        return _layers(json.loads((Path(folder) / "config.json").read_text()))
    except (OSError, ValueError):
        return None


def convert(src, dst, *, skip_lm_head: bool = False, backend: str | None = None) -> dict:
    """Quantize the mlx-lm model folder `src` (every nn.Linear; not the lm_head with skip_lm_head)
    and save it as the W8A8 folder `dst` (new, or empty). Returns {"layers": how many, "seconds",
    "src_bytes", "dst_bytes"} (the weight files' sizes). Raises ValueError naming the argument for a
    src that is not an mlx-lm folder, is W8A8 already or has no nn.Linear (MLX-quantized), or a dst
    that holds files; nothing is written then."""
    func = "convert"
    src, dst = _folder_path(src, func, "src"), _folder_path(dst, func, "dst")
    if _layers(_config(src, func, "src")) is not None:
        raise ValueError(f"{func}: 'src' must be a model folder not yet in W8A8 form, got {str(src)!r} (it is one)")
    if dst.exists() and (not dst.is_dir() or any(dst.iterdir())):
        raise ValueError(f"{func}: 'dst' must be a new or empty folder, got {str(dst)!r}, which holds files")
    utils = _mlx_lm_utils(func)
    start = time.perf_counter()
    model, tokenizer, config = utils.load(str(src), lazy=True, return_config=True)
    layers: list[str] = []

    def chosen(path, module) -> bool:
        if skip_lm_head and path.endswith("lm_head"):
            return False
        layers.append(path)
        return True

    count = quantize_linears(model, backend=backend, predicate=chosen)
    if not count:
        raise ValueError(f"{func}: 'src' must hold nn.Linear layers to quantize, got {str(src)!r} with none "
                         "(a folder MLX has quantized already?)")
    config[CONFIG_KEY] = {**FORMAT, "layers": layers}
    utils.save(dst, src, model, tokenizer, config, donate_model=False)  # donating empties W8A8Linear's int8 weight
    return {"layers": count, "seconds": time.perf_counter() - start,
            "src_bytes": _weight_bytes(src), "dst_bytes": _weight_bytes(dst)}


def _weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("model*.safetensors"))


def load(folder, *, lazy: bool = False, backend: str | None = None):
    """(model, tokenizer) of the W8A8 folder `folder` (convert's): mlx-lm's model classes with the
    recorded layers as W8A8Linear ones on `backend` (None: the default choice), every parameter read
    from the folder (lazily with lazy=True: read when first used). Raises ValueError naming
    'folder' where it is not a W8A8 folder (an mlx-lm folder of another form: mlx_lm.load reads it)
    or its weights do not fit its model (a parameter missing, extra or of another shape)."""
    func = "load"
    folder = _folder_path(folder, func, "folder")
    layers = _layers(_config(folder, func, "folder"))
    if layers is None:
        raise ValueError(f"{func}: 'folder' must be a W8A8 folder (int8nax convert's: config.json with "
                         f"{CONFIG_KEY!r} {FORMAT}), got {str(folder)!r}; mlx_lm.load reads other model folders")
    utils = _mlx_lm_utils(func)
    # mlx-lm builds the model and sanitizes; its non-strict load puts the int8 weights into the
    # linears and leaves the scales (no such parameter yet), and nothing is read (lazy).
    model, config = utils.load_model(folder, lazy=True, strict=False)
    wanted = set(layers)
    quantize_linears(model, backend=backend, predicate=lambda path, module: path in wanted, weights=False)
    weights = {}
    for path in sorted(folder.glob("model*.safetensors")):
        weights.update(mx.load(str(path)))
    try:
        model.load_weights(list(weights.items()), strict=True)
    except ValueError as exc:
        raise ValueError(f"{func}: 'folder' {str(folder)!r}: its weights do not fit its model: {exc}") from None
    if not lazy:
        mx.eval(model.parameters())
    tokenizer = utils.load_tokenizer(folder, eos_token_ids=config.get("eos_token_id"))
    return model, tokenizer
