"""Who is timed, on which problems, and the proof that each computes that problem.

The asv suite (benchmarks/) and the command line share this module, so both time
the same contenders on the same data and check them the same way.

Problems. Every contender of a kind gets identical data for an (M, K, N):
    raw    a int8 [M, K], b int8 [N, K] (weights as rows)     -> int32 [M, N] = a @ b.T
    full   x float16 [M, K], w float32 [N, K] ~ N(0, 1/K)      -> float16 [M, N] ~ x @ w.T
           (W8A8 contenders quantize w per output channel, int8nax.quantize_weight_int8,
           and x per token inside the timed call; baselines use w in their own format)

Contenders.
    nax-gemm     int8nax.int8_matmul                             raw
    cider-raw    cider's int8_matmul_int32                       raw
    torch-int8   cuBLASLt through torch._int_mm, B column-major  raw
    nax-full     int8nax.w8a8_linear                             full
    cider-full   cider's per-channel W8A8 linear                 full
    mlx-fp16     mx.matmul in float16 (what W8A8 must beat)      full
    mlx-q8       mx.quantized_matmul, 8-bit affine, group 64     full
                 (weight-only W8A16: the baseline cider reports against)

Like-for-like. Before a contender is timed its output is checked once:
    raw         bit-exact against the int64 product (int8nax.reference)
    W8A8 full   within 1 ulp (float16) of the float64 model of the quantization
    baselines   against float64 x @ w.T, with w the weights exactly as the baseline
                holds them (float16, or the dequantized 8-bit codes), normwise:
                    ||y - ref||_F <= 2**-4 * ||ref||_F
                Baselines may legitimately accumulate in float16 (MLX's CPU
                quantized_matmul does: ~0.3% at K = 512, growing like sqrt(K)); a
                wrong problem (transposed weights, another shape) is off by ~140%.
A mismatch raises MismatchError, never a timing. A contender that cannot run here
raises Unavailable with the reason.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import mlx.core as mx
import numpy as np

from . import api, backends
from .bench.peers import Unavailable
from .bench.peers import cider as cider_peer
from .bench.peers import torch_int
from .reference import int8_matmul_ref, max_ulp_error, to_numpy, w8a8_linear_ref

__all__ = ["Unavailable", "MismatchError", "CONTENDERS", "get", "SEED_SHAPES", "CPU_SHAPES",
           "ALL_SHAPES", "choose_profile", "profile_shapes", "median_seconds", "tops"]

Shape = tuple[int, int, int]

# --- shapes and profiles ---------------------------------------------------------------

SEED_SHAPES: tuple[Shape, ...] = (
    (16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096), (256, 4096, 4096),
    (512, 4096, 4096), (1024, 4096, 4096), (2048, 4096, 4096),
    (128, 3584, 18944), (512, 3584, 18944),  # Qwen2.5-7B MLP up/gate projection
    (128, 18944, 3584), (512, 18944, 3584),  # ... and its down projection
)
"""cider's published shapes (M, K, N): square K = N = 4096 over M, and the 7B MLP pair."""

CPU_SHAPES: tuple[Shape, ...] = ((16, 512, 512), (16, 256, 1344), (16, 1344, 256))
"""The three seed families (square, MLP up, MLP down) shrunk for machines without a GPU,
K a multiple of 64 as mlx-q8 needs. MLX's CPU quantized_matmul runs at ~0.05 GFLOP/s
on 2 cores, so a seed shape would take seconds to minutes per call."""

PROFILES: dict[str, tuple[Shape, ...]] = {"full": SEED_SHAPES, "cpu": CPU_SHAPES}
PROFILE_ENV = "INT8NAX_BENCH_PROFILE"

ALL_SHAPES: tuple[Shape, ...] = SEED_SHAPES + CPU_SHAPES
"""Every shape of every profile. The asv suite declares all of them on every machine, so
that results of a CPU box and a GPU box publish into one site (asv keeps only the
results whose parameters the suite declares); a run measures its profile's shapes."""


def choose_profile() -> tuple[str, str]:
    """(profile name, why): INT8NAX_BENCH_PROFILE if set, else "cpu" when int8nax and MLX
    both run on the CPU, else "full"."""
    requested = os.environ.get(PROFILE_ENV, "").strip().lower()
    if requested:
        if requested not in PROFILES:
            raise ValueError(f"{PROFILE_ENV}: expected one of {', '.join(PROFILES)}, got {requested!r}")
        return requested, f"{PROFILE_ENV}={requested}"
    try:
        backend, _ = backends.choose(None)
    except (RuntimeError, ValueError):
        # INT8NAX_BACKEND names a backend that cannot run: the int8nax contenders will say so
        # when prepared; the shapes follow MLX's device.
        backend = "cpu"
    if backend == "cpu" and mx.default_device() != mx.gpu:
        return "cpu", "int8nax and MLX run on the CPU"
    return "full", f"int8nax runs on the {backend} backend, MLX's default device is {mx.default_device()}"


def profile_shapes(profile: str | None = None) -> tuple[Shape, ...]:
    return PROFILES[profile or choose_profile()[0]]


# --- problem data (numpy, deterministic, shared by every contender of a kind) ------------

SEED = 20261129


def _rng(kind: str, shape: Shape) -> np.random.Generator:
    return np.random.default_rng([SEED, ord(kind[0]), *shape])


@lru_cache(maxsize=2)
def raw_problem(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(a int8 [M, K], b int8 [N, K]), uniform over all 256 int8 values."""
    rng = _rng("raw", (m, k, n))
    return (rng.integers(-128, 128, (m, k), dtype=np.int8),
            rng.integers(-128, 128, (n, k), dtype=np.int8))


@lru_cache(maxsize=2)
def linear_problem(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(x float16 [M, K] ~ N(0, 1), w float32 [N, K] ~ N(0, 1/K)): outputs of order 1."""
    rng = _rng("full", (m, k, n))
    x = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    w = rng.standard_normal((n, k), dtype=np.float32) * np.float32(1 / np.sqrt(k))
    return x, w


@lru_cache(maxsize=2)
def w8a8_weights(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The full problem's weights quantized per output channel: (int8 [N, K], float32 [N])."""
    return api.quantize_weight_int8(linear_problem(m, k, n)[1])


@lru_cache(maxsize=2)
def raw_expected(m: int, k: int, n: int) -> np.ndarray:
    return int8_matmul_ref(*raw_problem(m, k, n))


@lru_cache(maxsize=2)
def w8a8_expected(m: int, k: int, n: int) -> np.ndarray:
    return w8a8_linear_ref(linear_problem(m, k, n)[0], *w8a8_weights(m, k, n))


# --- checks -------------------------------------------------------------------------------

class MismatchError(AssertionError):
    """A contender's output is not the answer to the problem it was given."""


def _host(out) -> np.ndarray:
    """numpy copy of an mx.array or a torch tensor."""
    if hasattr(out, "detach"):  # torch
        return out.detach().cpu().numpy()
    return to_numpy(out)


def _check_shape(name: str, shape: Shape, got: np.ndarray) -> None:
    m, _, n = shape
    if got.shape != (m, n):
        raise MismatchError(f"{name} at (M, K, N) = {shape}: output shape {got.shape}, expected {(m, n)}; "
                            "it computed a different problem (transposed weights?)")


def check_exact(name: str, shape: Shape, out, expected: np.ndarray) -> None:
    got = _host(out)
    _check_shape(name, shape, got)
    if got.dtype != np.int32:
        raise MismatchError(f"{name} at {shape}: output dtype {got.dtype}, expected int32")
    wrong = got.astype(np.int64) != expected
    if wrong.any():
        i, j = (int(v) for v in np.argwhere(wrong)[0])
        raise MismatchError(f"{name} at (M, K, N) = {shape}: {int(wrong.sum())} of {wrong.size} outputs differ "
                            f"from the exact int64 product, first at [{i}, {j}]: got {got[i, j]}, "
                            f"expected {expected[i, j]}")


def check_ulp(name: str, shape: Shape, out, expected: np.ndarray, max_ulp: float = 1.0) -> None:
    got = _host(out)
    _check_shape(name, shape, got)
    err = max_ulp_error(got, expected, "float16")
    if not err <= max_ulp:  # also catches NaN
        raise MismatchError(f"{name} at (M, K, N) = {shape}: off by {err:.3g} ulp (float16) from the float64 "
                            f"model of W8A8 quantization; at most {max_ulp} allowed")


BASELINE_REL_TOL = 2.0**-4
"""Largest normwise relative error a float baseline may show (module docstring)."""


def check_float_baseline(name: str, shape: Shape, out, x: np.ndarray, w: np.ndarray) -> None:
    """Baseline check (see the module docstring): x [M, K], w [N, K] as the baseline holds them."""
    got = _host(out).astype(np.float64)
    _check_shape(name, shape, got)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    if not rel <= BASELINE_REL_TOL:  # also catches NaN and inf
        raise MismatchError(f"{name} at (M, K, N) = {shape}: normwise relative error {rel:.3g} against "
                            f"float64 x @ w.T, more than {BASELINE_REL_TOL}; it computed another problem")


# --- contenders ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Prepared:
    """A contender ready to time: `run()` computes once, blocks until done and returns the
    output; `check(out)` raises MismatchError if out is not the problem's answer; `detail`
    says what exactly runs (backend, library version)."""

    run: Callable[[], object]
    check: Callable[[object], None]
    detail: str


@dataclass(frozen=True)
class Contender:
    name: str
    kind: str  # "raw" (int8 x int8 -> int32) or "full" (float16 in, float16 out)
    summary: str
    _prepare: Callable[[Shape], Prepared]

    def prepare(self, m: int, k: int, n: int) -> Prepared:
        """Data on the device and evaluated, nothing run yet; raises Unavailable."""
        return self._prepare((m, k, n))

    def ready(self, m: int, k: int, n: int) -> Prepared:
        """prepare(), then run once and check the output: a contender that passes is timed."""
        prepared = self.prepare(m, k, n)
        prepared.check(prepared.run())
        return prepared


def _evaluated(*arrays: mx.array) -> tuple[mx.array, ...]:
    mx.eval(*arrays)
    return arrays


def _blocking(op: Callable[[], mx.array]) -> Callable[[], mx.array]:
    """Wrap a lazy MLX op so that calling it also evaluates it (MLX computes nothing until eval)."""
    def run():
        out = op()
        mx.eval(out)
        return out
    return run


def _int8nax_backend() -> str:
    try:
        name, why = backends.choose(None)
    except (RuntimeError, ValueError) as exc:
        raise Unavailable(str(exc)) from None
    return f"int8nax backend {name} ({why})"


def _nax_gemm(shape: Shape) -> Prepared:
    detail = _int8nax_backend()
    a, b = _evaluated(*(mx.array(v) for v in raw_problem(*shape)))
    return Prepared(_blocking(lambda: api.int8_matmul(a, b)),
                    lambda out: check_exact("nax-gemm", shape, out, raw_expected(*shape)), detail)


def _nax_full(shape: Shape) -> Prepared:
    detail = _int8nax_backend()
    x, = _evaluated(mx.array(linear_problem(*shape)[0]))
    w, s_w = _evaluated(*(mx.array(v) for v in w8a8_weights(*shape)))
    return Prepared(_blocking(lambda: api.w8a8_linear(x, w, s_w)),
                    lambda out: check_ulp("nax-full", shape, out, w8a8_expected(*shape)), detail)


def _cider_raw(shape: Shape) -> Prepared:
    cider = cider_peer.load()
    a_np, b_np = raw_problem(*shape)
    a, = _evaluated(mx.array(a_np))
    b = cider.matmul_weights(b_np)
    return Prepared(_blocking(lambda: cider.int8_matmul(a, b)),
                    lambda out: check_exact("cider-raw", shape, out, raw_expected(*shape)), cider.describe())


def _cider_full(shape: Shape) -> Prepared:
    cider = cider_peer.load()
    x, = _evaluated(mx.array(linear_problem(*shape)[0]))
    w_np, s_np = w8a8_weights(*shape)
    w = cider.linear_weights(w_np)
    s_w, = _evaluated(mx.array(s_np))
    return Prepared(_blocking(lambda: cider.linear(x, w, s_w)),
                    lambda out: check_ulp("cider-full", shape, out, w8a8_expected(*shape)), cider.describe())


def _torch_int8(shape: Shape) -> Prepared:
    run = torch_int.prepare_int_mm(*raw_problem(*shape))
    torch = torch_int.load()
    return Prepared(run, lambda out: check_exact("torch-int8", shape, out, raw_expected(*shape)),
                    f"torch {torch.__version__}, torch._int_mm (cuBLASLt) on {torch.cuda.get_device_name()}")


def _mlx_fp16(shape: Shape) -> Prepared:
    x_np, w_np = linear_problem(*shape)
    w16_np = w_np.astype(np.float16)
    x, w16 = _evaluated(mx.array(x_np), mx.array(w16_np))
    w_t = w16.T  # a transposed view: MLX's GEMMs take it without a copy
    return Prepared(_blocking(lambda: mx.matmul(x, w_t)),
                    lambda out: check_float_baseline("mlx-fp16", shape, out, x_np, w16_np),
                    f"mx.matmul float16 on {mx.default_device()}")


Q8 = {"group_size": 64, "bits": 8}
"""MLX's weight-only 8-bit format as cider's README benchmarks it (affine, group 64)."""


def _mlx_q8(shape: Shape) -> Prepared:
    x_np, w_np = linear_problem(*shape)
    x, w16 = _evaluated(mx.array(x_np), mx.array(w_np.astype(np.float16)))
    wq, scales, biases = _evaluated(*mx.quantize(w16, **Q8))
    # The weights as the baseline holds them: the dequantized codes, exactly.
    w_held = to_numpy(mx.dequantize(wq, scales, biases, **Q8), np.float64)
    return Prepared(_blocking(lambda: mx.quantized_matmul(x, wq, scales, biases, transpose=True, **Q8)),
                    lambda out: check_float_baseline("mlx-q8", shape, out, x_np, w_held),
                    f"mx.quantized_matmul 8-bit affine group 64 on {mx.default_device()}")


CONTENDERS: dict[str, Contender] = {c.name: c for c in (
    Contender("nax-gemm", "raw", "int8nax.int8_matmul: int8 x int8 -> exact int32", _nax_gemm),
    Contender("cider-raw", "raw", "cider int8_matmul_int32 (Apple M5)", _cider_raw),
    Contender("torch-int8", "raw", "cuBLASLt int8 GEMM via torch._int_mm, B column-major (CUDA)", _torch_int8),
    Contender("nax-full", "full", "int8nax.w8a8_linear: per-token quantization + int8 GEMM + dequant", _nax_full),
    Contender("cider-full", "full", "cider per-channel W8A8 linear (Apple M5)", _cider_full),
    Contender("mlx-fp16", "full", "mx.matmul float16 (dense baseline)", _mlx_fp16),
    Contender("mlx-q8", "full", "mx.quantized_matmul 8-bit weight-only, group 64 (W8A16 baseline)", _mlx_q8),
)}


def get(name: str) -> Contender:
    try:
        return CONTENDERS[name]
    except KeyError:
        raise ValueError(f"unknown contender {name!r}; expected one of {', '.join(CONTENDERS)}") from None


# --- timing helpers (for displays; the asv suite times with asv itself) --------------------

def median_seconds(run: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Median wall time of `repeat` calls of a blocking callable, after `warmup` untimed calls."""
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def tops(shape: Shape, seconds: float) -> float:
    """Throughput in tera-operations per second: 2*M*K*N multiply-adds counted as 2 ops."""
    m, k, n = shape
    return 2.0 * m * k * n / seconds / 1e12
