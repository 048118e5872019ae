"""The description of one MLX custom kernel, shared by the Metal and CUDA backends."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelSpec:
    """Everything mx.fast.metal_kernel / mx.fast.cuda_kernel needs to build one kernel object.

    name: the kernel's name (MLX caches built kernels by name and source, so a content digest
    belongs in it); input_names / output_names: the argument names the source uses; source: the
    kernel body; header: text placed before it at global scope; shared_memory: dynamic shared
    memory in bytes (CUDA only; Metal kernels declare threadgroup arrays in the body).
    """

    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    source: str
    header: str = ""
    shared_memory: int = 0
