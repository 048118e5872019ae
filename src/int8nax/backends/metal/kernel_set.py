"""The Metal kernel objects: KernelSet builds each catalogue entry (source.py) once and serves
launches in a smaller tile where the pipeline's threadgroup limit refuses the planned one."""

from __future__ import annotations

import re
import time

import mlx.core as mx
import numpy as np

from . import source as metal_source
from ..base import refused_by_trace


# ---------------------------------------------------------------------------------------------
# Kernel objects (the sources: source.py)
# ---------------------------------------------------------------------------------------------


THREADGROUP_LIMIT = re.compile(
    r"Thread group size \((\d+)\) is greater than\s+the maximum allowed threads per threadgroup \((\d+)\)")
"""MLX's refusal of a launch whose threadgroup exceeds the pipeline's maxTotalThreadsPerThreadgroup
(a ValueError from CustomKernel::eval_gpu, mlx/backend/metal/custom_kernel.cpp, raised when the
graph is evaluated; MLX writes two spaces after "than")."""


def threadgroup_limit(exc: BaseException) -> int | None:
    """The pipeline's maxTotalThreadsPerThreadgroup named by MLX's refusal, or None for any other error."""
    match = THREADGROUP_LIMIT.search(str(exc)) if isinstance(exc, ValueError) else None
    return int(match.group(2)) if match else None


class ThreadgroupLimitError(RuntimeError):
    """A kernel whose pipeline allows fewer threads than every form int8nax can launch it in."""


class KernelSet:
    """The backend's compiled-on-demand kernels. `factory` is mx.fast.metal_kernel; tests pass
    a recorder (or the g++ stand-in) to check the launches without Metal.

    Every launch goes through launch(), which records each distinct instantiation it asks for:
    MLX builds one Metal library per (kernel, template arguments, input dtypes, inputs in the
    `constant` address space), so builds() is this process's list of library builds.

    The first launch of each build is evaluated at once (with time_builds set, as int8nax
    selftest does, timed: the build and one run, in seconds). That is where MLX checks the
    threadgroup against the pipeline's maxTotalThreadsPerThreadgroup, which depends on the
    compiled kernel's register use: a refusal is caught there, the limit remembered for that
    build, and the call relaunched in the smaller form `refit(limit)` gives (a 256-thread tile
    of the same sub-tile for a GEMM), so that no call raises for it. Later launches of a refused
    build go straight to the smaller form."""

    def __init__(self, factory=None, evaluate=None):
        self._factory = factory
        self._evaluate = evaluate or mx.eval
        """mx.eval; tests pass one that raises for some outputs, as MLX's eval_gpu does."""
        self._built = {}
        self._builds: dict = {}
        self._checked: set = set()
        self._limits: dict = {}
        self.time_builds = False
        self.deferred_checks = 0
        """Launches of an unchecked build made inside a trace (mx.compile, mx.vmap), where nothing can
        be evaluated: their check waits for a later launch outside one. A caller that records
        launches for replay (a compiled entry point) compares it before and after an eager call to
        learn whether every build that call launched has been checked."""

    def __getitem__(self, name: str):
        if name not in self._built:
            spec = metal_source.kernel_spec(name)
            factory = self._factory or mx.fast.metal_kernel
            self._built[name] = factory(
                name=spec.name,
                input_names=list(spec.input_names),
                output_names=list(spec.output_names),
                source=spec.source,
                header=spec.header,
                ensure_row_contiguous=True,
                # safe: the dequantization's error-free transformations and the quantization's
                # isfinite() must not be reassociated or assumed away.
                compile_options={"math_mode": "safe"},
            )
        return self._built[name]

    @staticmethod
    def instantiation(name: str, call: dict) -> metal_source.Instantiation:
        """The build a launch of kernel `name` with `call` (metal_kernel's arguments) asks for."""
        spec = metal_source.KERNELS[name]
        return metal_source.Instantiation(
            name, metal_source.template_key(call.get("template", ())),
            tuple((n, metal_source.dtype_name(a.dtype)) for n, a in zip(spec.inputs, call["inputs"])),
            tuple((n, metal_source.dtype_name(d)) for n, d in zip(spec.outputs, call["output_dtypes"])),
            metal_source.constant_inputs((n, a.size) for n, a in zip(spec.inputs, call["inputs"])))

    def launch(self, name: str, refit=None, **call) -> list:
        """kernels[name](**call), its first launch per build evaluated (see the class).
        `refit(max_threads)` gives the call in a form of at most max_threads threads per
        threadgroup, or None when there is none."""
        inst = self.instantiation(name, call)
        key = inst.key
        threads = int(np.prod(call["threadgroup"]))
        limit = self._limits.get(key)
        if limit is not None and threads > limit:
            return self._refit(name, refit, inst, limit)
        if key not in self._builds:
            self._builds[key] = [inst, None]
        if key in self._checked:
            return self[name](**call)
        start = time.perf_counter()
        try:
            # MLX 0.32 checks the threadgroup when the graph is evaluated; the call is inside
            # the try too, for an MLX that checks it at once.
            outs = self[name](**call)
            self._evaluate(outs)
        except ValueError as exc:
            limit = threadgroup_limit(exc)
            if limit is None:
                if refused_by_trace(exc):  # inside mx.compile / mx.vmap: checked at a later launch
                    self.deferred_checks += 1
                    return outs
                raise
            self._limits[key] = limit
            return self._refit(name, refit, inst, limit)
        if self.time_builds and self._builds[key][1] is None:
            self._builds[key][1] = time.perf_counter() - start
        self._checked.add(key)
        return outs

    def _refit(self, name: str, refit, inst, limit: int) -> list:
        smaller = refit(limit) if refit else None
        if smaller is None:
            raise ThreadgroupLimitError(
                f"{inst.label()}: the Metal pipeline allows {limit} threads per threadgroup, fewer than any "
                "form int8nax can launch this kernel in")
        return self.launch(name, refit, **smaller)

    def builds(self) -> list[tuple]:
        """[(Instantiation, seconds of its first launch or None when untimed)], in build order."""
        return [tuple(entry) for entry in self._builds.values()]

    def thread_limits(self) -> dict[str, int]:
        """{build label: the pipeline's maxTotalThreadsPerThreadgroup} for every build whose
        launch MLX refused for its threadgroup size (each served in a smaller form since)."""
        return {self._builds[key][0].label(): limit for key, limit in self._limits.items()}
