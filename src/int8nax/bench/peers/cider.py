"""cider (Mininglamp-AI/cider), the W8A8 library for Apple M5 that int8nax is measured against.

cider is not on PyPI: the PyPI package named "cider" is an unrelated Homebrew
bootstrapping tool. Install the real one from git on an Apple M5 Mac, built against
the mlx already installed (its extension links MLX's C++ library, which has no
stable ABI):

    pip install --no-build-isolation "git+https://github.com/Mininglamp-AI/cider@<sha>"

Two API generations exist, and cider's version string (0.7.0) did not change
between them, so they are told apart by what the module exports and how it lays
out weights:

    older  w8a8_linear(x, w[K, N], scale_w[N]);  int8_matmul_int32(a[M, K], b[K, N])
    newer  perchannel_linear(x, w[N, K], scale_w[N], bias=None);
           int8_matmul_int32(a[M, K], b[N, K])

(an interim release kept the name w8a8_linear with [N, K] weights). The layout is
read off the shape of a lazily built, never evaluated output: cider's wrappers
size their output from the weight's shape without running a kernel.

`load()` returns a Cider object that takes int8nax's layout (weights as [N, K]
rows) and hands cider its own, or raises Unavailable with the reason.
"""

from __future__ import annotations

import importlib
import platform
from dataclasses import dataclass
from types import ModuleType

import mlx.core as mx
import numpy as np

from . import Unavailable, import_optional

GIT_URL = "https://github.com/Mininglamp-AI/cider"
PINNED_SHA = "139abe5eb3e44d0c9ce7d6d71577299d2b3e8492"
"""The cider commit the notes and benchmarks were checked against (perchannel_linear, [N, K])."""

INSTALL_HINT = f'pip install --no-build-isolation "git+{GIT_URL}@{PINNED_SHA}"'

# Probe shapes for the layout test: x/a [2, 64] against a weight of shape (32, 64) or (64, 32).
_PROBE_M, _PROBE_K, _PROBE_N = 2, 64, 32


@dataclass(frozen=True)
class Cider:
    """The real cider, ready to run. Layouts are "nk" (weights [N, K]) or "kn" ([K, N])."""

    module: ModuleType
    version: str
    linear_name: str
    linear_layout: str
    matmul_layout: str

    def describe(self) -> str:
        return (f"cider {self.version}: {self.linear_name} with {self.linear_layout.upper()} weights, "
                f"int8_matmul_int32 with {self.matmul_layout.upper()} weights")

    def linear_weights(self, w_nk: np.ndarray) -> mx.array:
        """int8 weights [N, K] in the layout cider's linear function takes, evaluated."""
        return _native(w_nk, self.linear_layout)

    def matmul_weights(self, b_nk: np.ndarray) -> mx.array:
        """int8 [N, K] in the layout cider's int8_matmul_int32 takes, evaluated."""
        return _native(b_nk, self.matmul_layout)

    def linear(self, x: mx.array, w_native: mx.array, scale_w: mx.array) -> mx.array:
        """cider's per-channel W8A8 linear (lazy): fp16 [M, K] -> fp16 [M, N]."""
        return getattr(self.module, self.linear_name)(x, w_native, scale_w)

    def int8_matmul(self, a: mx.array, b_native: mx.array) -> mx.array:
        """cider's int8 x int8 -> int32 GEMM (lazy): [M, K] -> [M, N]."""
        return _matmul_function(self.module)(a, b_native)


def _native(w_nk: np.ndarray, layout: str) -> mx.array:
    # A [K, N] layout gets a real transposed copy: cider reads raw memory and ignores strides.
    host = np.ascontiguousarray(w_nk if layout == "nk" else w_nk.T)
    arr = mx.array(host)
    mx.eval(arr)
    return arr


def _matmul_function(module: ModuleType):
    func = getattr(module, "int8_matmul_int32", None)
    if func is None:
        ops = getattr(module, "ops", None)
        func = getattr(ops, "int8_matmul_int32", None)
    return func


def _distribution_version(module: ModuleType) -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("cider")
    except (ImportError, PackageNotFoundError):
        return str(getattr(module, "__version__", "unknown version"))


def _import_cider() -> ModuleType:
    return import_optional("cider", f"on an Apple M5 Mac: {INSTALL_HINT}")


def _is_real_cider(module: ModuleType) -> bool:
    """Mininglamp-AI/cider always exports is_available() and ships cider.ops (even off M5)."""
    if not callable(getattr(module, "is_available", None)):
        return False
    try:
        ops = importlib.import_module("cider.ops")
    except Exception:
        return False
    return callable(getattr(ops, "int8_matmul_int32", None))


def _output_width(call, weight_shape) -> int | None:
    """Width of cider's lazily built output for a probe weight of `weight_shape`, or None
    if cider rejects the shape. Nothing is evaluated, so no kernel runs."""
    try:
        out = call(weight_shape)
    except Exception:
        return None
    shape = tuple(out.shape)
    return shape[1] if len(shape) == 2 and shape[0] == _PROBE_M else None


def _detect_layout(call, what: str) -> str:
    """"nk" or "kn" for a cider function, from the widths it gives two probe weights.

    (N, K) = (32, 64) is well formed only for the [N, K] layout, (64, 32) only for
    [K, N]; a cider that checks K rejects the other one, one that does not sizes its
    output from w.shape[0] ([N, K]) or w.shape[1] ([K, N]).
    """
    width = _output_width(call, (_PROBE_N, _PROBE_K))
    if width == _PROBE_N:
        return "nk"
    if width == _PROBE_K:
        return "kn"
    if _output_width(call, (_PROBE_K, _PROBE_N)) == _PROBE_N:
        return "kn"
    raise Unavailable(f"cannot tell the weight layout of cider's {what}: "
                      "neither [N, K] nor [K, N] gives an output of the right shape")


def load() -> Cider:
    """The installed Mininglamp-AI/cider, checked; raises Unavailable with the reason."""
    module = _import_cider()
    version = _distribution_version(module)
    if not _is_real_cider(module):
        where = getattr(module, "__file__", None) or "an unknown location"
        raise Unavailable(
            f"the installed 'cider' ({version}, {where}) is not Mininglamp-AI/cider: it has no "
            "is_available() or cider.ops.int8_matmul_int32. PyPI's 'cider' is an unrelated Homebrew "
            f"tool; pip uninstall cider, then {INSTALL_HINT}"
        )
    try:
        available = bool(module.is_available())
    except Exception as exc:
        raise Unavailable(f"cider.is_available() failed: {type(exc).__name__}: {exc}") from None
    if not available:
        raise Unavailable(
            "cider needs an Apple M5 GPU (Metal 4, macOS 26.2+) and its compiled extension; "
            f"cider.is_available() is False on this {platform.system()} {platform.machine()} machine"
        )
    if callable(getattr(module, "perchannel_linear", None)):
        linear_name = "perchannel_linear"
    elif callable(getattr(module, "w8a8_linear", None)):
        linear_name = "w8a8_linear"
    else:
        raise Unavailable(f"cider {version} has neither perchannel_linear nor w8a8_linear: unknown API generation")
    matmul = _matmul_function(module)
    linear = getattr(module, linear_name)
    probe_x = mx.zeros((_PROBE_M, _PROBE_K), dtype=mx.float16)
    probe_a = mx.zeros((_PROBE_M, _PROBE_K), dtype=mx.int8)

    def probe_linear(shape):
        width = shape[0] if shape[1] == _PROBE_K else shape[1]
        return linear(probe_x, mx.zeros(shape, dtype=mx.int8), mx.ones((width,), dtype=mx.float32))

    def probe_matmul(shape):
        return matmul(probe_a, mx.zeros(shape, dtype=mx.int8))

    return Cider(
        module=module,
        version=version,
        linear_name=linear_name,
        linear_layout=_detect_layout(probe_linear, linear_name),
        matmul_layout=_detect_layout(probe_matmul, "int8_matmul_int32"),
    )
