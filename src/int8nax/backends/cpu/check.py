"""First-use exactness check of a CPU GEMM engine: products built to catch the ways
library int8 kernels go wrong on full-range int8.

- int16 saturation: x86 kernels without VNNI/AMX multiply uint8 x int8 pairs and add
  each pair into int16 with saturation (vpmaddubsw): 255 * 127 * 2 = 64770 > 32767. With
  a shifted by 128, a = 127 (255 as uint8) against b = 127 or b = -128 saturates.
- 7-bit "reduce range" kernels: any value beyond +-64 is wrong; the extremes catch it.
- int32 wrap-around: K = 131071 with -128 * -128 reaches 2**31 - 16384, and the shifted
  product (a + 128) @ b passes 2**31 and must wrap back through the zero-point correction.
- edges of the kernels' tiles: odd M, N and K remainders, full-range random values and
  mixed signs.

Every product is run through each path of an engine: the stateless `matmul` with b as
[N, K] rows and with b as the transpose of a [K, N] array (b_layout="kn"), and `prepare` +
`matmul_prepared`, since a library may use different kernels for each layout and for a
constant (pre-packed) operand. The check takes ~0.1 s and about 1 MB.
"""

from __future__ import annotations

import numpy as np

from ...reference import exact_int_product

MAX_K = 131071


def check_problems() -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(description, a int8 [M, K], b int8 [N, K]) of every product of the check."""
    rng = np.random.default_rng(20261201)
    problems = []
    for fa, fb in ((127, 127), (127, -128), (-128, -128), (-128, 127), (-1, -128)):
        problems.append((f"a = {fa}, b = {fb}, (M, K, N) = (3, 96, 5)",
                         np.full((3, 96), fa, np.int8), np.full((5, 96), fb, np.int8)))
    extremes = np.array([-128, -127, -1, 0, 1, 126, 127], np.int8)
    problems.append(("extremes and mixed signs, (M, K, N) = (7, 777, 33)",
                     rng.choice(extremes, size=(7, 777)), rng.choice(extremes, size=(33, 777))))
    # Each row of a against each column of b: one all -128, one all 127, one alternating sign,
    # one random; K at its limit so that sums reach +-2**31 - 2**14 and the shifted product wraps.
    k = MAX_K
    alternating = np.where(np.arange(k) % 2 == 0, 127, -128).astype(np.int8)
    rows = [np.full(k, -128, np.int8), np.full(k, 127, np.int8), alternating,
            rng.integers(-128, 128, k, dtype=np.int8)]
    opposite = np.where(np.arange(k) % 2 == 0, -128, 127).astype(np.int8)
    cols = [np.full(k, -128, np.int8), np.full(k, 127, np.int8), opposite,
            rng.integers(-128, 128, k, dtype=np.int8)]
    problems.append((f"long K: extreme rows and columns, (M, K, N) = (4, {k}, 4)", np.stack(rows), np.stack(cols)))
    for m, kk, n in ((1, 1, 1), (33, 1025, 65), (17, 4099, 3)):
        problems.append((f"random full range, (M, K, N) = ({m}, {kk}, {n})",
                         rng.integers(-128, 128, (m, kk), dtype=np.int8),
                         rng.integers(-128, 128, (n, kk), dtype=np.int8)))
    return problems


def _mismatch(got: np.ndarray, want: np.ndarray) -> str | None:
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    bad = got.astype(np.int64) != want
    if not bad.any():
        return None
    i = tuple(int(v) for v in np.argwhere(bad)[0])
    return f"{int(bad.sum())} of {bad.size} wrong, first at {list(i)}: got {int(got[i])}, expected {int(want[i])}"


def check_engine(engine) -> list[str]:
    """Run every product of the check through the engine's two paths; the failures, each
    as "path, problem: mismatch" (empty when exact). An exception in the engine counts as
    a failure, not a crash: the caller falls back to another engine."""
    failures = []
    for what, a, b in check_problems():
        want = exact_int_product(a, b)
        for path in ("matmul", "matmul-kn", "prepared"):
            try:
                if path == "matmul":
                    got = np.asarray(engine.matmul(a, b))
                elif path == "matmul-kn":  # b as the transpose of a [K, N] array (b_layout="kn")
                    got = np.asarray(engine.matmul(a, np.ascontiguousarray(b.T).T))
                else:
                    got = np.asarray(engine.matmul_prepared(a, engine.prepare(b)))
            except Exception as exc:  # a library error is a failed check, reported in words
                failures.append(f"{path}, {what}: raised {type(exc).__name__}: {exc}")
                continue
            problem = _mismatch(got, want)
            if problem:
                failures.append(f"{path}, {what}: {problem}")
    return failures
