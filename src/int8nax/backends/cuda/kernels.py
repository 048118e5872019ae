"""Kernel objects: one mx.fast.cuda_kernel per KernelSpec (bounded cache), whose instances MLX
loads from the binary cache on disk (binary_cache.py; INT8NAX_CUDA_BINARY_CACHE=off leaves them to
MLX's NVRTC), or, inside collect_instances(), notes instead of building."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from functools import lru_cache

import mlx.core as mx

from ..kernel_spec import KernelSpec
from ..mlx_install import mlx_package_dir, switched_off
from . import binary_cache as cuda_binary_cache
from . import device

KERNEL_CACHE_SIZE = 256
"""Kernel objects kept (cuda_source specs: variants x tile configurations + the quantization,
reduction and SM-count kernels, about 50 today)."""


_built: set[str] = set()


def kernels_built() -> int:
    """Distinct mx.fast.cuda_kernel objects this process has built (by kernel name): it grows with
    the tile configurations the shapes meet, never with M."""
    return len(_built)


@lru_cache(maxsize=KERNEL_CACHE_SIZE)
def _kernel(spec: KernelSpec):
    _built.add(spec.name)
    return _Launcher(spec, mx.fast.cuda_kernel(
        name=spec.name,
        input_names=list(spec.input_names),
        output_names=list(spec.output_names),
        source=spec.source,
        header=spec.header,
        ensure_row_contiguous=True,
        shared_memory=spec.shared_memory,
    ))


# ---- compiled kernels on disk (cuda_binary_cache; INT8NAX_CUDA_BINARY_CACHE=off leaves them to MLX) ----

class _Launcher:
    """An mx.fast.cuda_kernel object whose instances MLX loads from disk: each call (a trace, under
    mx.compile) first has the binary cache make the instance's compiled entry present, then calls
    MLX's object with the same arguments."""

    __slots__ = ("spec", "kernel")

    def __init__(self, spec: KernelSpec, kernel):
        self.spec, self.kernel = spec, kernel

    def __call__(self, *, inputs, output_dtypes, template=None, **kwargs):
        _provide(self.spec, inputs, output_dtypes, template)
        return self.kernel(inputs=inputs, output_dtypes=output_dtypes, template=template or [], **kwargs)


_collecting = threading.local()


def _provide(spec: KernelSpec, inputs, output_dtypes, template) -> None:
    """The instance a launch needs: built or found now, or (inside collect_instances) noted."""
    sink = getattr(_collecting, "instances", None)
    if sink is not None:
        sink.append(cuda_binary_cache.Instance.of(spec, inputs, output_dtypes, template))
        return
    cache = binary_cache()
    if cache is not None:
        cache.ensure(cuda_binary_cache.Instance.of(spec, inputs, output_dtypes, template))


@contextmanager
def collect_instances():
    """Within it, this thread's launches note their kernel instances in the yielded list instead of
    building them (evaluate graphs built there only after their entries are built: MLX would
    otherwise compile each itself)."""
    found: list = []
    outer = getattr(_collecting, "instances", None)
    _collecting.instances = found
    try:
        yield found
    finally:
        _collecting.instances = outer


BINARY_CACHE_ENV = cuda_binary_cache.DISABLE_ENV


@lru_cache(maxsize=1)
def binary_cache() -> cuda_binary_cache.BinaryCache | None:
    """This process's binary cache (its GPU's architecture, MLX's installation and cache folder),
    or None where INT8NAX_CUDA_BINARY_CACHE=off or MLX has no CUDA device (binary_cache_status says)."""
    if switched_off(BINARY_CACHE_ENV):
        return None
    cuda = getattr(mx, "cuda", None)
    package = mlx_package_dir()
    if cuda is None or not cuda.is_available() or package is None:
        return None
    arch = cuda_binary_cache.arch_of(device.compute_capability())
    return cuda_binary_cache.BinaryCache(arch, package, mx.__version__)


def binary_cache_status() -> str:
    """Where this process's kernels come from, for int8nax.info()."""
    cache = binary_cache()
    if cache is None:
        off = switched_off(BINARY_CACHE_ENV)
        return ("compiled by MLX (NVRTC) in every process: " +
                (f"{BINARY_CACHE_ENV}={os.environ[BINARY_CACHE_ENV]}" if off else "no CUDA device"))
    c = cache.counts
    text = (f"compiled once per machine for {cache.arch} into {cache.folder} (MLX's kernel cache; "
            f"`int8nax warm` fills it): {cache.ready()} ready there, {c.found} loaded from there and "
            f"{c.built} built by this process")
    if c.failed:
        text += f", {c.failed} left to MLX's NVRTC ({cache.reason})"
    return text
