"""The proof that a contender computes the problem it is timed on (see problems.py).

    raw         bit-exact against the int64 product (int8nax.reference)
    W8A8 full   within 1 ulp (float16) of the float64 model of the quantization
    baselines   against x @ w.T (float32 BLAS), with w the weights exactly as the baseline
                holds them (float16, or the dequantized 8-bit codes), normwise:
                    ||y - ref||_F <= 2**-4 * ||ref||_F
                Baselines may legitimately accumulate in float16 (MLX's CPU
                quantized_matmul does: ~0.3% at K = 512, growing like sqrt(K)); a
                wrong problem (transposed weights, another shape) is off by ~140%.
A mismatch raises MismatchError, so nothing wrong is ever timed.
"""

from __future__ import annotations

import numpy as np

from ..reference import max_ulp_error, to_numpy
from .problems import Shape


class MismatchError(AssertionError):
    """A contender's output is not the answer to the problem it was given."""


def host(out) -> np.ndarray:
    """numpy copy of an mx.array, a numpy array or a torch tensor."""
    if hasattr(out, "detach"):  # torch
        return out.detach().cpu().numpy()
    return to_numpy(out)


def _check_shape(name: str, shape: Shape, got: np.ndarray) -> None:
    m, _, n = shape
    if got.shape != (m, n):
        raise MismatchError(f"{name} at (M, K, N) = {shape}: output shape {got.shape}, expected {(m, n)}; "
                            "it computed a different problem (transposed weights?)")


def check_exact(name: str, shape: Shape, out, expected: np.ndarray) -> None:
    """int32 [M, N] equal to `expected` (int64) everywhere."""
    got = host(out)
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
    """float16 [M, N] within `max_ulp` of the float64 `expected`."""
    got = host(out)
    _check_shape(name, shape, got)
    err = max_ulp_error(got, expected, "float16")
    if not err <= max_ulp:  # also catches NaN
        raise MismatchError(f"{name} at (M, K, N) = {shape}: off by {err:.3g} ulp (float16) from the float64 "
                            f"model of W8A8 quantization; at most {max_ulp} allowed")


BASELINE_REL_TOL = 2.0**-4
"""Largest normwise relative error a float baseline may show (module docstring)."""


def check_float_baseline(name: str, shape: Shape, out, x: np.ndarray, w: np.ndarray) -> None:
    """Baseline check: x [M, K], w [N, K] as the baseline holds them. The reference is float32
    BLAS: its error (~1e-6 relative) is nothing next to the bound, and it costs a tenth of a
    float64 product in every benchmark process (1.1 s at (2048, 4096, 4096) on 2 cores)."""
    got = host(out).astype(np.float64)
    _check_shape(name, shape, got)
    ref = (x.astype(np.float32) @ w.astype(np.float32).T).astype(np.float64)
    rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    if not rel <= BASELINE_REL_TOL:  # also catches NaN and inf
        raise MismatchError(f"{name} at (M, K, N) = {shape}: normwise relative error {rel:.3g} against "
                            f"float64 x @ w.T, more than {BASELINE_REL_TOL}; it computed another problem")


