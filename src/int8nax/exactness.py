"""Exactness checks of a backend: the bit-exact / 1-ulp comparisons and the first-use check.

The library's backends run `first_use_check` before they serve a process (Metal NAX today),
so these checks live in the numerics layer, below the library: they import only quant and
reference (and mlx.core to move arrays), never the backends or the measuring layer.

- check_int8_matmul, check_quantize, check_w8a8: one call of a backend-level callable against
  the exact reference; each returns None when exact, else a one-line description.
- first_use_check: a few awkward shapes (edges in M and N, K remainders, tiny inputs, both tile
  configurations), bit-exact int8 GEMM and quantization, W8A8 within 1 ulp.

References are exact: the int8 product in float64 BLAS (every product is below 2**14 and every
sum below 2**31, both exact in a 53-bit mantissa), quantization from int8nax.quant, W8A8 the
float64 model of int8nax.reference.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from . import quant
from .reference import exact_int_product, to_numpy, ulp, w8a8_linear_ref

DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}

# --- single checks: each returns None when exact, else a one-line description ------------


def _first_mismatch(bad: np.ndarray, got: np.ndarray, want: np.ndarray) -> str:
    where = np.argwhere(bad)
    i = tuple(int(v) for v in where[0])
    return f"{len(where)} of {bad.size} wrong, first at {list(i)}: got {got[i].item()}, expected {want[i].item()}"


def check_int8_matmul(fn, a: np.ndarray, b: np.ndarray) -> str | None:
    """fn(a [M, K], b [N, K]) -> int32 [M, N] as mx.arrays; must equal the exact product."""
    out = fn(mx.array(a), mx.array(b))
    if out.dtype != mx.int32 or tuple(out.shape) != (a.shape[0], b.shape[0]):
        return f"returned {out.dtype} {tuple(out.shape)}, expected int32 {(a.shape[0], b.shape[0])}"
    got = np.array(out).astype(np.int64)
    want = exact_int_product(a, b)
    bad = got != want
    return _first_mismatch(bad, got, want) if bad.any() else None


def check_quantize(fn, x: mx.array) -> str | None:
    """fn(x [M, K]) -> (int8 [M, K], float32 [M]); must equal int8nax.quant bit for bit."""
    q, s = fn(x)
    with np.errstate(invalid="ignore"):  # NaN/inf rows are part of the test
        want_q, want_s = quant.quantize_activations_np(to_numpy(x, np.float32))
    got_s = np.array(s)
    same_s = (got_s.view(np.int32) == want_s.view(np.int32)) | (np.isnan(got_s) & np.isnan(want_s))
    if not same_s.all():
        return "scales: " + _first_mismatch(~same_s, got_s, want_s)
    got_q = np.array(q)
    bad = got_q != want_q
    return "codes: " + _first_mismatch(bad, got_q, want_q) if bad.any() else None


def check_w8a8(fn, x: mx.array, w: np.ndarray, scale_w: np.ndarray, bias) -> str | None:
    """fn(x, w, scale_w, bias) as mx.arrays -> x's dtype [M, N]; within 1 ulp of float64
    (NaN where the model is NaN)."""
    dtype = str(x.dtype).replace("mlx.core.", "")
    b = None if bias is None else mx.array(bias)
    y = fn(x, mx.array(w), mx.array(scale_w), b)
    if y.dtype != x.dtype:
        return f"returned {y.dtype}, expected {x.dtype}"
    got = to_numpy(y, np.float64)
    with np.errstate(invalid="ignore"):  # NaN/inf rows are part of the test
        want = w8a8_linear_ref(x, w, scale_w, bias)
    with np.errstate(invalid="ignore", over="ignore"):
        spacing = np.maximum(ulp(want, dtype), ulp(np.where(np.isfinite(got), got, 0), dtype))
        err = np.abs(got - want) / spacing
        nan_ok = np.isnan(got) == np.isnan(want)
        bad = ~nan_ok | (np.isfinite(want) & ~(err <= 1.0))
    return _first_mismatch(bad, got, want) + " (1 ulp allowed)" if bad.any() else None


# --- the first-use check ---------------------------------------------------------------------

FIRST_USE_GEMM_SHAPES = [
    (1, 1, 1),  # inputs small enough to arrive in the constant address space
    (3, 7, 5),
    (33, 513, 7),  # small tile; K = one block + 1; N far below one tile
    (65, 1030, 130),  # large tile; K remainder of 6; M and N edges
    (128, 512, 128),  # exactly one tile
]
FIRST_USE_W8A8 = [((33, 520, 40), "float16", True), ((70, 300, 33), "float32", False),
                  ((5, 64, 9), "bfloat16", True)]
FIRST_USE_TINY_DTYPES = ("float32", "bfloat16")
FIRST_USE_CHECKS = len(FIRST_USE_GEMM_SHAPES) + 1 + len(FIRST_USE_TINY_DTYPES) + len(FIRST_USE_W8A8)


def special_rows(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    """float32 [rows, K] activations, the awkward rows first when there are at least twice as
    many rows: zeros, a NaN, an inf, exact ties of round-half-away (absmax 127, so that the
    codes are x itself)."""
    x = rng.standard_normal((rows, k)).astype(np.float32) * 3
    awkward = [np.zeros(k, np.float32)]
    if k > 1:
        nan_row, inf_row, ties = x[0].copy(), x[0].copy(), np.full(k, 0.5, np.float32)
        nan_row[k // 2] = np.nan
        inf_row[-1] = -np.inf
        ties[0] = 127.0
        ties[1::2] = -2.5
        awkward += [nan_row, inf_row, ties]
    if rows >= 2 * len(awkward):
        x[: len(awkward)] = awkward
    return x


def tiny_rows(rng: np.random.Generator, k: int) -> np.ndarray:
    """float32 [4, K] rows whose scales are subnormal or near it (int8nax.quant's tiny-row
    rule): they show a device that flushes float32 subnormals to zero, or a kernel that takes
    the reciprocal of a subnormal scale. The first row starts with the documented example
    [1e-37, 1e-38, 0, 5e-39] -> codes [127, 13, 0, 6]."""
    x = np.stack([rng.standard_normal(k) * 1e-37, rng.standard_normal(k) * 1e-39,
                  rng.standard_normal(k) * 1e-36, rng.standard_normal(k) * 1e-35]).astype(np.float32)
    head = np.array([1e-37, 1e-38, 0, 5e-39], np.float32)[: min(k, 4)]
    x[0, : head.size] = head
    if k > 4:
        x[0, 4:] = np.clip(x[0, 4:], -1e-37, 1e-37)  # keep 1e-37 the row's absmax
    return x


def first_use_check(int8_matmul, quantize_activations, w8a8_linear, seed: int = 5) -> list[str]:
    """Run the quick exactness checks on backend-level callables (a [M, K], b [N, K] ...);
    returns the failures, each as "what (shape): mismatch"."""
    rng = np.random.default_rng(seed)
    failures = []
    for m, k, n in FIRST_USE_GEMM_SHAPES:
        a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
        b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
        problem = check_int8_matmul(int8_matmul, a, b)
        if problem:
            failures.append(f"int8_matmul (M, K, N) = {(m, k, n)}: {problem}")
    x = mx.array(special_rows(rng, 9, 301)).astype(mx.float16)
    problem = check_quantize(quantize_activations, x)
    if problem:
        failures.append(f"quantize_activations float16 (9, 301): {problem}")
    for dtype in FIRST_USE_TINY_DTYPES:
        x = mx.array(tiny_rows(rng, 37)).astype(DTYPES[dtype])
        problem = check_quantize(quantize_activations, x)
        if problem:
            failures.append(f"quantize_activations {dtype} tiny rows (4, 37): {problem}")
    for (m, k, n), dtype, with_bias in FIRST_USE_W8A8:
        x = mx.array(special_rows(rng, m, k)[::-1].copy()).astype(DTYPES[dtype])
        w, s_w = quant.quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
        bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
        problem = check_w8a8(w8a8_linear, x, w, s_w, bias)
        if problem:
            failures.append(f"w8a8_linear {dtype} (M, K, N) = {(m, k, n)}: {problem}")
    return failures
