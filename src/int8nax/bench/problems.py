"""The problems every measurement times: shapes, shape profiles, and the data of each shape.

Every contender of a kind gets identical data for an (M, K, N):
    raw    a int8 [M, K], b int8 [N, K] (weights as rows)     -> int32 [M, N] = a @ b.T
    full   x float16 [M, K], w float32 [N, K] ~ N(0, 1/K)      -> float16 [M, N] ~ x @ w.T
           (W8A8 contenders quantize w per output channel, int8nax.quantize_weight_int8,
           and x per token inside the timed call; baselines use w in their own format)

A profile is the set of shapes a machine measures: "full" (cider's seed shapes) wherever
int8nax or MLX runs on a GPU, "cpu" (the seed families shrunk) on a machine without one.
Choosing it asks the backends whether they can run, so it happens at a benchmark's first
setup, never at import.
"""

from __future__ import annotations

import os
from functools import lru_cache

import mlx.core as mx
import numpy as np

from .. import api, backends
from ..reference import int8_matmul_ref, w8a8_linear_ref

Shape = tuple[int, int, int]

SEED_SHAPES: tuple[Shape, ...] = (
    (16, 4096, 4096), (64, 4096, 4096), (128, 4096, 4096), (256, 4096, 4096),
    (512, 4096, 4096), (1024, 4096, 4096), (2048, 4096, 4096),
    (128, 3584, 18944), (512, 3584, 18944),  # Qwen2.5-7B MLP up/gate projection
    (128, 18944, 3584), (512, 18944, 3584),  # ... and its down projection
)
"""cider's published shapes (M, K, N): square K = N = 4096 over M, and the 7B MLP pair."""

CPU_SHAPES: tuple[Shape, ...] = ((16, 512, 512), (16, 256, 1344), (16, 1344, 256))
"""The three seed families (square, MLP up, MLP down) shrunk, K a multiple of 64 as mlx-q8
needs: what MLX's own CPU kernels can afford (its quantized_matmul runs at ~0.05 GFLOP/s on
2 cores, its float matmul at ~4.5 GFLOP/s, so a seed shape would take seconds to minutes)."""

EXTRA_SHAPES: tuple[Shape, ...] = ((8192, 8192, 8192),)
"""Shapes `int8nax compare` offers beyond the seed (the compute-bound corner); not in asv."""

CPU_SEED_SHAPES: tuple[Shape, ...] = ((16, 4096, 4096), (512, 4096, 4096), (128, 3584, 18944), (128, 18944, 3584))
"""The seed shapes a CPU box measures: each family at its small and large M. int8nax's CPU
engines run a seed shape in 5-110 ms, but each benchmark process also builds the problem and
its exact reference (1-3 s at the largest, on 2 cores): all 11 make `asv run` take 9 min there,
these 4 keep it near the 5-minute budget. INT8NAX_BENCH_PROFILE=full runs all."""

PROFILES: dict[str, tuple[Shape, ...]] = {"full": SEED_SHAPES, "cpu": CPU_SHAPES + CPU_SEED_SHAPES}
"""Contenders too slow on MLX's CPU device measure only CPU_SHAPES there (contenders.skip_reason)."""
PROFILE_ENV = "INT8NAX_BENCH_PROFILE"

CHAIN_CALLS: dict[str, int] = {"full": 100, "cpu": 4}
"""Calls per dependent chain in each profile: on a GPU, long enough that MLX's per-evaluation
cost (~25 µs on CUDA, ~150-190 µs on an M5 Pro) is spread thin, as in a model's forward
pass; on a CPU every call is computed eagerly anyway, so a few keep one sample short."""

ALL_SHAPES: tuple[Shape, ...] = SEED_SHAPES + CPU_SHAPES
"""Every shape of every profile. The asv suite declares all of them on every machine, so
that results of a CPU box and a GPU box publish into one site (asv keeps only the
results whose parameters the suite declares); a run measures its profile's shapes."""


class ProfileError(ValueError):
    """INT8NAX_BENCH_PROFILE names no profile; str(exc) says what it takes."""


def choose_profile() -> tuple[str, str]:
    """(profile name, why): INT8NAX_BENCH_PROFILE if set, else "cpu" when int8nax and MLX
    both run on the CPU, else "full". Raises ProfileError for an unknown profile name."""
    requested = os.environ.get(PROFILE_ENV, "").strip().lower()
    if requested:
        if requested not in PROFILES:
            raise ProfileError(f"{PROFILE_ENV}: expected one of {', '.join(PROFILES)}, got {requested!r}")
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


def parse_shapes(text: str, option: str = "--shapes") -> list[Shape]:
    """'16x4096x4096,128x3584x18944' -> [(16, 4096, 4096), (128, 3584, 18944)]; ValueError
    naming `option` for anything else, a K above int8nax's limit included."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"{option}: expected MxKxN with positive integers, comma-separated, "
                             f"got {item.strip()!r}")
        shape = tuple(int(p) for p in parts)
        # refused here, not at the shape's turn: int8nax's contenders would fail there after the
        # others had been measured (or be skipped as too slow, the limit never named)
        if shape[1] > api.MAX_K:
            raise ValueError(f"{option}: expected K (the middle of MxKxN) at most {api.MAX_K}, got {shape[1]} "
                             f"in {item.strip()!r} (a longer sum could overflow int8nax's int32 accumulation)")
        shapes.append(shape)
    return shapes


# --- problem data (numpy, deterministic, shared by every contender of a kind) ------------

SEED = 20261129


def _rng(kind: str, shape: Shape) -> np.random.Generator:
    return np.random.default_rng([SEED, ord(kind[0]), *shape])


@lru_cache(maxsize=len(ALL_SHAPES))
def raw_problem(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(a int8 [M, K], b int8 [N, K]), uniform over all 256 int8 values."""
    rng = _rng("raw", (m, k, n))
    return (rng.integers(-128, 128, (m, k), dtype=np.int8),
            rng.integers(-128, 128, (n, k), dtype=np.int8))


@lru_cache(maxsize=len(ALL_SHAPES))
def linear_problem(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(x float16 [M, K] ~ N(0, 1), w float32 [N, K] ~ N(0, 1/K)): outputs of order 1."""
    rng = _rng("full", (m, k, n))
    x = rng.standard_normal((m, k), dtype=np.float32).astype(np.float16)
    w = rng.standard_normal((n, k), dtype=np.float32) * np.float32(1 / np.sqrt(k))
    return x, w


@lru_cache(maxsize=len(ALL_SHAPES))
def w8a8_weights(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The full problem's weights quantized per output channel: (int8 [N, K], float32 [N])."""
    return api.quantize_weight_int8(linear_problem(m, k, n)[1])


@lru_cache(maxsize=len(ALL_SHAPES))
def raw_expected(m: int, k: int, n: int) -> np.ndarray:
    """int64 [M, N], the exact product of raw_problem."""
    return int8_matmul_ref(*raw_problem(m, k, n))


@lru_cache(maxsize=len(ALL_SHAPES))
def w8a8_expected(m: int, k: int, n: int) -> np.ndarray:
    """float64 [M, N], the W8A8 model of linear_problem with w8a8_weights."""
    return w8a8_linear_ref(linear_problem(m, k, n)[0], *w8a8_weights(m, k, n))


def ops(shape: Shape) -> float:
    """Operations of one product: 2*M*K*N (a multiply-add counts as 2)."""
    m, k, n = shape
    return 2.0 * m * k * n
