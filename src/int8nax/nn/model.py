"""A whole model's W8A8 layers: quantize_linears swaps its nn.Linear layers for W8A8Linear ones
(sibling groups and the SwiGLU MLPs' call included), kernel_calls lists the calls they make as
their backends see them, and warm_up builds those calls' kernels before a first request."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map_with_path

from .. import backends
from ..backends import tape
from .._checks import check_backend, check_float_dtype
from .linear import W8A8Linear, _positive_int
from .siblings import _sibling_sets, group_siblings
from .swiglu_mlp import SwiGLUMLPCall, take_over_swiglu_mlps


def quantize_linears(model: nn.Module, backend: str | None = None, predicate=None, fuse=True, *,
                     weights: bool = True) -> int:
    """Replace every nn.Linear in `model` (in place) by a W8A8Linear; returns how many.

    predicate(path, module) -> bool narrows the choice (e.g. skip an lm_head). A layer that
    cannot be quantized (NaN/inf or out-of-range weights) raises a ValueError naming its
    path in the model; the model is then left unchanged.

    fuse: True (default: the child names of SIBLINGS), a sequence of tuples of child names, or
    False. Layers so named under one module that agree in input width, bias and backend become
    a SiblingGroup: called with one input, they quantize it once and run one GEMM (see
    int8nax.nn.siblings); the module tree, its parameter keys and shapes are unchanged. A SwiGLU
    MLP so grouped (mlx-lm's call) then computes its down projection's input and quantization
    in one step (take_over_swiglu_mlps), with the same bits.

    weights=False reads no weight: each W8A8Linear gets a fresh layer's zero weights, unit scales
    and zero float32 bias in its linear's shapes, so the model computes zeros. That is all
    kernel_calls and warm_up read (`int8nax warm` builds a model's kernels from a lazily loaded
    folder this way, without its load or quantization).
    """
    func = "quantize_linears"
    if not isinstance(weights, bool):
        raise TypeError(f"{func}: 'weights' must be True or False, got {type(weights).__name__} {weights!r}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"{func}: 'model' must be an mlx.nn.Module, got {type(model).__name__}")
    if predicate is not None and not callable(predicate):
        raise TypeError(f"{func}: 'predicate' must be callable (path, module) -> bool, got {type(predicate).__name__}")
    check_backend(backend, func)
    sibling_sets = _sibling_sets(fuse, func)
    count = 0
    made = set()

    def swap(path, module):
        nonlocal count
        if isinstance(module, nn.Linear) and (predicate is None or predicate(path, module)):
            try:
                layer = (W8A8Linear.from_linear(module, backend=backend) if weights else
                         W8A8Linear(module.weight.shape[1], module.weight.shape[0], bias="bias" in module, backend=backend))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{func}: layer '{path}': {exc}") from exc
            count += 1
            made.add(id(layer))
            return layer
        return module

    leaves = model.leaf_modules()
    replaced = tree_map_with_path(
        lambda path, m: swap(path, m), leaves, is_leaf=lambda m: isinstance(m, nn.Module)
    )
    model.update_modules(replaced)
    if sibling_sets:
        group_siblings(model, sibling_sets, made)
        take_over_swiglu_mlps(model)
    return count


def kernel_calls(model: nn.Module) -> dict:
    """{backend name or None: [(op, n, k, bias dtype or None), ...]}: the W8A8 calls `model`'s
    layers make, as their backends see them: a sibling group's one fused call, a lone layer's own,
    and a SwiGLU MLP's one-step call where the backend takes it (Backend.warm_up's `layers`)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"kernel_calls: 'model' must be an mlx.nn.Module, got {type(model).__name__}")
    calls: dict = {}
    groups = set()
    for _, module in model.named_modules():
        if isinstance(module, SwiGLUMLPCall):
            fits = module.one_step()
            if fits is not None:
                group, down = fits
                bias = down.get("bias")
                calls.setdefault(down._backend, []).append(("swiglu_w8a8_linear", down.output_dims, down.input_dims,
                                                            None if bias is None else bias.dtype))
        if type(module) is not W8A8Linear:
            continue
        group = module._group
        if group is not None and group.shared:
            if id(group) not in groups:
                groups.add(id(group))
                n = sum(m.output_dims for m in group.members)
                calls.setdefault(group.backend, []).append(
                    ("w8a8_linear", n, module.input_dims, mx.float32 if group.has_bias else None))
            continue
        bias = module.get("bias")
        calls.setdefault(module._backend, []).append(
            ("w8a8_linear", module.output_dims, module.input_dims, None if bias is None else bias.dtype))
    return {b: list(dict.fromkeys(c)) for b, c in calls.items()}


def _activation_dtype(model: nn.Module):
    """The floating dtype most of `model`'s parameters outside its W8A8 layers have (its
    activations', in the usual model), float16 where it has none."""
    counts: dict = {}
    for path, value in tree_flatten(model.parameters()):
        if isinstance(value, mx.array) and mx.issubdtype(value.dtype, mx.floating) and not path.endswith(("scales", "bias")):
            counts[value.dtype] = counts.get(value.dtype, 0) + value.size
    return max(counts, key=counts.get) if counts else mx.float16


def warm_up(model: nn.Module, max_rows: int, *, dtype=None, jobs: int | None = None, progress=None) -> int:
    """Make ready, before a first request, every kernel `model`'s W8A8 layers launch for inputs
    of 1 .. max_rows rows (tokens times batch), with activations of `dtype` (default: the dtype
    most of the model's other parameters have). On CUDA each kernel instance is compiled once per
    machine into MLX's kernel cache, in parallel (`jobs` compiles at once, default the CPUs;
    progress(done, total)), and loaded; a later process finds them there. Where a layer's backend
    builds lazy graphs (the GPU backends), the tape extension is built too, once per machine
    (int8nax.backends.tape: backends.tape.why() says where it cannot be). Returns how many
    kernels this built (0 where all were ready, or on the CPU)."""
    func = "warm_up"
    if not isinstance(model, nn.Module):
        raise TypeError(f"{func}: 'model' must be an mlx.nn.Module, got {type(model).__name__}")
    _positive_int(max_rows, "max_rows", func)
    if dtype is not None:
        check_float_dtype(dtype, "dtype", func)
    if jobs is not None:
        _positive_int(jobs, "jobs", func)
    if progress is not None and not callable(progress):
        raise TypeError(f"{func}: 'progress' must be None or callable (done, total), "
                        f"got {type(progress).__name__} {progress!r}")
    dtype = _activation_dtype(model) if dtype is None else dtype
    built = 0
    for backend, layers in kernel_calls(model).items():
        impl = backends.resolve(backend)
        built += impl.warm_up(layers, max_rows, dtype, jobs=jobs, progress=progress)
        if impl.w8a8_linear_graph is not None:
            tape.module()  # built here, not inside the first request
    return built
