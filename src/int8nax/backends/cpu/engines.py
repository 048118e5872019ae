"""The CPU backend's GEMM engines and the once-per-process choice between them.

An engine computes the exact int8 product on numpy arrays:

    matmul(a int8 [M, K], b int8 [N, K]) -> int32 [M, N]        (a @ b.T; may be a view)
    prepare(b int8 [N, K]) -> prepared                          (for weights used again)
    matmul_prepared(a int8 [M, K], prepared) -> int32 [M, N]
    prepares: bool                                              (False: the backend never prepares)
    float16(y32 float32 [M, N]) -> float16 [M, N]               (round to nearest even)
    float32: None, or (x16 float16 [M, K]) -> float32 [M, K]    (a faster widening than MLX's)

Engines, fastest first:
- "onnx": onnxruntime's MatMulInteger on the CPU's int8 units (cpu_onnx), served only
  after it has passed the exactness check of cpu_check in this process;
- "numpy": float32 BLAS on K blocks, exact by construction and runs everywhere.

Choice: the INT8NAX_CPU_GEMM environment variable ("auto", "onnx" or "numpy"; read once,
at the first use of the CPU backend). "auto" (the default) takes the first engine that
loads and passes the check, and says why the others did not; an explicit name either runs
that engine or makes the CPU backend unavailable with the reason, and using it raises.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass

import numpy as np

from . import check as cpu_check
from .onnx import OnnxEngine

ENV_VAR = "INT8NAX_CPU_GEMM"
ENGINE_NAMES = ("onnx", "numpy")
"""Engines in the order auto mode tries them."""

K_BLOCK = 1024
"""Longest K slice whose float32 dot products of int8 values are exact (2**10 * 2**14 = 2**24)."""


class NumpyEngine:
    """Exact int8 GEMM through numpy's float32 matmul (OpenBLAS/Accelerate), everywhere.

    float32 holds every integer up to 2**24 exactly and |a*b| <= 2**14, so a dot product of
    at most K_BLOCK = 1024 terms is exact whatever the BLAS's summation order; K is cut into
    such blocks and the blocks are summed in int32 (no overflow: K <= 131071).
    """

    name = "numpy"

    def load(self) -> str:
        return "numpy float32 BLAS on K blocks of 1024 (exact by construction)"

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        m, k = a.shape
        n = b.shape[0]
        acc = None
        part = np.empty((m, n), dtype=np.float32)
        for k0 in range(0, k, K_BLOCK):
            k1 = min(k, k0 + K_BLOCK)
            # Contiguous float32 copies of each K block: BLAS runs ~15% faster on them than on
            # strided views, and the conversion happens while the block is hot in cache.
            a_blk = a[:, k0:k1].astype(np.float32, order="C")
            b_blk = b[:, k0:k1].astype(np.float32, order="C")
            np.matmul(a_blk, b_blk.T, out=part)
            if acc is None:
                acc = part.astype(np.int32)
            else:
                acc += part.astype(np.int32)
        return acc

    prepares = False
    """Nothing to gain from preparing: converting b's blocks to float32 is a small part of
    this engine's time, and a float32 copy would hold 4x the weight's bytes. The backend
    runs the stateless product for it."""

    def prepare(self, b: np.ndarray) -> np.ndarray:
        return np.array(b)  # a copy: it must not keep the caller's array alive

    def float16(self, y32: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):  # beyond float16: inf, as documented
            return y32.astype(np.float16)

    float32 = None
    """No float16 -> float32 widening of its own: MLX's is faster than numpy's."""

    def matmul_prepared(self, a: np.ndarray, prepared: np.ndarray) -> np.ndarray:
        return self.matmul(a, prepared)


def _make(name: str):
    return OnnxEngine() if name == "onnx" else NumpyEngine()


@dataclass(frozen=True)
class EngineStatus:
    """Whether an engine can serve this process, and why (or why not), in words."""

    name: str
    engine: object | None
    reason: str
    missing: bool = False
    """True when the engine's library is not installed (as opposed to failing here)."""


_status_cache: dict[str, EngineStatus] = {}
_lock = threading.Lock()


def engine_status(name: str) -> EngineStatus:
    """Load engine `name` and run the exactness check on it, once per process."""
    if name not in ENGINE_NAMES:
        raise ValueError(f"{ENV_VAR}: unknown CPU GEMM engine {name!r}; expected one of "
                         f"{('auto',) + ENGINE_NAMES}")
    with _lock:
        if name not in _status_cache:
            _status_cache[name] = _load_and_check(name)
        return _status_cache[name]


def _load_and_check(name: str) -> EngineStatus:
    engine = _make(name)
    try:
        described = engine.load()
    except ImportError as exc:
        return EngineStatus(name, None, f"{name}: not installed ({exc}; pip install 'int8nax[cpu]')", missing=True)
    except Exception as exc:  # a broken install must not take the CPU backend down
        return EngineStatus(name, None, f"{name}: failed to load ({type(exc).__name__}: {exc})")
    if name == "numpy":
        # Exact by construction; the check would spend ~0.5 s of float32 BLAS to confirm it.
        return EngineStatus(name, engine, described)
    failures = cpu_check.check_engine(engine)
    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        return EngineStatus(name, None, f"{name}: {described} failed the exactness check on this CPU: "
                                        f"{failures[0]}{more}")
    return EngineStatus(name, engine, f"{described}, passed the exactness check on this CPU")


@dataclass(frozen=True)
class Selection:
    """The engine serving the CPU backend (None if an explicit request cannot run) and why."""

    engine: object | None
    reason: str


_selection: Selection | None = None
_forced: list[str] = []


def select() -> Selection:
    """The engine for this process: the forced one (tests), else INT8NAX_CPU_GEMM, else auto."""
    global _selection
    if _forced:
        return _select(_forced[-1], "forced by int8nax.backends.cpu.engines.using")
    if _selection is None:
        requested = (os.environ.get(ENV_VAR) or "auto").strip().lower()
        _selection = _select(requested, f"{ENV_VAR}={requested}")
    return _selection


def _select(requested: str, source: str) -> Selection:
    if requested != "auto":
        status = engine_status(requested)
        if status.engine is None:
            return Selection(None, f"CPU GEMM engine {requested!r} was requested ({source}) but cannot run: "
                                   f"{status.reason}")
        return Selection(status.engine, f"CPU GEMM engine {requested!r} ({source}): {status.reason}")
    passed_over = []
    for name in ENGINE_NAMES:
        status = engine_status(name)
        if status.engine is not None:
            why = f"CPU GEMM engine {name!r} (auto): {status.reason}"
            if passed_over:
                why += "; not used: " + "; ".join(passed_over)
            return Selection(status.engine, why)
        passed_over.append(status.reason)
    raise AssertionError("the numpy engine always loads")  # pragma: no cover


@contextlib.contextmanager
def using(name: str):
    """Serve the CPU backend from engine `name` inside the block (for tests and benchmarks);
    raises RuntimeError at entry if that engine cannot run here."""
    status = engine_status(name)
    if status.engine is None:
        raise RuntimeError(f"CPU GEMM engine {name!r} cannot run here: {status.reason}")
    _forced.append(name)
    try:
        yield status.engine
    finally:
        _forced.pop()


def reset() -> None:
    """Forget the process-wide choice and the check results (tests only)."""
    global _selection
    with _lock:
        _status_cache.clear()
    _selection = None
