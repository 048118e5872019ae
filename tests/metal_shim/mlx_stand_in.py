"""mx.fast.metal_kernel on the g++ stand-in: a factory for backends.metal.KernelSet, so that the
backend's own launch code (dispatch, template arguments, inputs, the first-use self-test and the
selection) runs the real .metal sources on the CPU.

Building is two-pass, because one g++ build holds every instantiation: `collect()` runs the
code once against kernels that only record what they are asked for (and return zeros), then
`build()` compiles those instantiations, and the same code runs again for real.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

import shim

from int8nax.backends.metal.source import DTYPE_NAMES, template_key


def _to_numpy(a: mx.array) -> np.ndarray:
    if a.dtype == mx.bfloat16:
        return np.array(a.view(mx.uint16))
    return np.array(a)


def _to_mx(a: np.ndarray, dtype) -> mx.array:
    return mx.array(a).view(mx.bfloat16) if dtype == mx.bfloat16 else mx.array(a)


class StandInFactory:
    """Pass as KernelSet(factory=...). flush_subnormals: run as a GPU that flushes float32
    subnormals (metal_shim.h)."""

    def __init__(self, layout, flush_subnormals: bool = False):
        self.layout = layout
        self.flush = flush_subnormals
        self.wanted: dict = {}
        self.binary: shim.ShimBuild | None = None

    def build(self) -> None:
        self.binary = shim.ShimBuild(list(self.wanted.values()))

    def __call__(self, *, name, input_names, output_names, source, header, **_):
        factory = self

        def kernel(*, inputs, output_shapes, output_dtypes, grid, threadgroup, template=None, **__):
            arrays = [_to_numpy(mx.array(a)) for a in inputs]
            in_types = tuple((n, DTYPE_NAMES[mx.array(a).dtype]) for n, a in zip(input_names, inputs))
            out_types = tuple((n, DTYPE_NAMES[d]) for n, d in zip(output_names, output_dtypes))
            tmpl = template_key(template or ())
            constant = frozenset(n for n, a in zip(input_names, arrays) if a.size < shim.MLX_CONSTANT_MAX_ELEMENTS)
            key = f"{name}|{tmpl}|{in_types}|{out_types}"
            if factory.binary is None:
                factory.wanted.setdefault((key, constant), shim.Variant(key, header, source, in_types, out_types,
                                                                         tmpl, constant))
                return [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]
            outs = factory.binary.run(key, arrays, [tuple(s) for s in output_shapes], grid, threadgroup,
                                      factory.layout, flush_subnormals=factory.flush)
            return [_to_mx(o, d) for o, d in zip(outs, output_dtypes)]

        return kernel


class ThreadLimited:
    """Wraps a factory as a GPU whose pipelines allow `max_threads` threads per threadgroup (for
    kernels whose names start with `prefix`): a launch over it returns outputs whose evaluation
    raises MLX's ValueError, as CustomKernel::eval_gpu does. Pass `evaluate` to the KernelSet."""

    MESSAGE = "Thread group size ({}) is greater than  the maximum allowed threads per threadgroup ({})."

    def __init__(self, factory, max_threads: int, prefix: str = ""):
        self.factory, self.max_threads, self.prefix = factory, max_threads, prefix
        self.refused: list = []
        self._doomed: dict = {}

    def __call__(self, **spec):
        kernel = self.factory(**spec)
        name = spec["name"]

        def limited(**call):
            outs = kernel(**call)
            threads = int(np.prod(call["threadgroup"]))
            if name.startswith(self.prefix) and threads > self.max_threads:
                self.refused.append((name, threads))
                # the arrays are kept alive, so that their ids are never reused by other outputs
                self._doomed.update({id(o): (o, threads) for o in outs})
            return outs

        return limited

    def evaluate(self, outs) -> None:
        for o in outs:
            if id(o) in self._doomed:
                raise ValueError(self.MESSAGE.format(self._doomed[id(o)][1], self.max_threads))
        mx.eval(outs)
