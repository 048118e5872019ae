"""The small-M kernel (kernels/metal/gemv.metal, M <= tiling.METAL_MV_MAX_M): the real source
through the g++ stand-in under AddressSanitizer (exact int32, each output written once, no load
outside its buffer, the W8A8 epilogue within 1 ulp), and its walk in the emulator."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import quant, tiling
from int8nax.backends import metal_source
from int8nax.reference import int8_matmul_ref, ulp, w8a8_linear_ref

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import shim  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
needs_gxx = pytest.mark.skipif(shim.GXX is None and not IN_CI, reason="g++ is not installed: the Metal shim cannot be built")

GEMM_INPUTS = (("a", "int8"), ("b", "int8"), ("params", "int32"))
W8A8_INPUTS = (("q", "int8"), ("w", "int8"), ("s_x", "float32"), ("s_w", "float32"), ("bias", "float32"),
               ("params", "int32"))
# (M, K, N): K below one lane's piece, K % 4 != 0, K past one simdgroup step (128) and not a
# multiple of it, N not a multiple of the 8 columns a threadgroup owns, tiny inputs (constant).
GEMV_CASES = [(1, 1, 1), (1, 3, 5), (2, 7, 9), (3, 129, 17), (4, 300, 40), (4, 1030, 8), (1, 4096, 3)]
MUTANTS = {  # bugs put back into the source: the harness must catch them
    "no-k-mask": ("(m < M && j < k_left) ? int(row[j]) : 0", "(m < M) ? int(row[j]) : 0"),
    "no-n-edge": ("const bool row_ok = n0 + r < N;\n      const PtrB row = b + (ulong(min(n0 + r, N - 1))",
                  "const bool row_ok = true;\n      const PtrB row = b + (ulong(n0 + r)"),
    "no-store-mask": ("m < M && n0 + r < N) {", "m < M) {"),
}



@pytest.fixture(scope="module")
def build():
    if shim.GXX is None:
        pytest.fail("g++ is required in CI to build the Metal stand-in")
    header, body = metal_source.kernel_source(metal_source.KERNELS["int8nax_int8_gemv"])
    template = tuple(tiling.metal_gemv_dispatch(1, 1, 1).template)
    out = []
    for constant in (("params",), ("a", "params"), ("a", "b", "params"), ("b", "params")):
        out.append(shim.Variant("gemv", header, body, GEMM_INPUTS, (("c", "int32"),), template, frozenset(constant)))
    for name, (old, new) in MUTANTS.items():
        assert header.count(old) == 1, f"mutant {name} no longer applies"
        out.append(shim.Variant(f"gemv-{name}", header.replace(old, new), body, GEMM_INPUTS, (("c", "int32"),),
                                template, frozenset(("params",))))
    header, body = metal_source.kernel_source(metal_source.KERNELS["int8nax_w8a8_gemv"])
    for dtype in ("float16", "bfloat16", "float32"):
        for with_bias in (True, False):
            constant = frozenset({"params"} | (set() if with_bias else {"bias"}))
            out.append(shim.Variant(f"w8a8-gemv-{dtype}-{with_bias}", header, body, W8A8_INPUTS, (("y", dtype),),
                                    template + (("OutT", dtype), ("HAS_BIAS", with_bias)), constant))
    return shim.ShimBuild(out)


def run_gemv(build, a, b, key="gemv"):
    m, k = a.shape
    n = b.shape[0]
    d = tiling.metal_gemv_dispatch(m, n, k)
    (c,) = build.run(key, [a, b, np.array(d.params, np.int32)], [(m, n)], d.grid, d.threadgroup,
                     emu.mlx_float_layout())
    return c


@needs_gxx
@pytest.mark.parametrize("m,k,n", GEMV_CASES)
def test_gemv_source_is_exact(build, rng, m, k, n):
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    np.testing.assert_array_equal(run_gemv(build, a, b).astype(np.int64), int8_matmul_ref(a, b))


@needs_gxx
def test_gemv_extremes_are_exact(build):
    # -128 * -128 summed over K = 4096: 2^26 per output, far inside int32.
    a = np.full((4, 4096), -128, np.int8)
    b = np.full((9, 4096), -128, np.int8)
    assert (run_gemv(build, a, b) == 4096 * 16384).all()


@needs_gxx
def test_gemv_bugs_are_caught(build, rng):
    a = rng.integers(-128, 128, size=(2, 37), dtype=np.int8)
    b = rng.integers(-128, 128, size=(11, 37), dtype=np.int8)
    for mutant in MUTANTS:
        with pytest.raises(RuntimeError, match="heap-buffer-overflow"):
            run_gemv(build, a, b, f"gemv-{mutant}")


@needs_gxx
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("with_bias", [True, False])
def test_w8a8_gemv_source_is_within_one_ulp(build, rng, dtype, with_bias):
    m, k, n = 3, 301, 21
    x32 = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x32[1, 5] = np.nan
    x = np.array(mx.array(x32).astype({"float16": mx.float16, "bfloat16": mx.bfloat16,
                                       "float32": mx.float32}[dtype]).astype(mx.float32))
    w, s_w = quant.quantize_weight_np((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    with np.errstate(invalid="ignore"):
        q, s_x = quant.quantize_activations_np(x)
    s_x = np.concatenate([s_x, np.zeros(8 - m, np.float32)])  # padded, as the runtime passes it
    d = tiling.metal_gemv_dispatch(m, n, k)
    args = [q, w, s_x, s_w, bias if with_bias else np.zeros(1, np.float32), np.array(d.params, np.int32)]
    (y,) = build.run(f"w8a8-gemv-{dtype}-{with_bias}", args, [(m, n)], d.grid, d.threadgroup, emu.mlx_float_layout())
    got = (y.astype(np.uint32) << 16).view(np.float32).astype(np.float64) if dtype == "bfloat16" else y.astype(np.float64)
    ref = w8a8_linear_ref(x, w, s_w, bias)
    assert np.isnan(got[1]).all() and np.isfinite(got[[0, 2]]).all()
    keep = [0, 2]
    spacing = np.maximum(ulp(ref[keep], dtype), ulp(got[keep], dtype))
    assert (np.abs(got[keep] - ref[keep]) / spacing).max() <= 1.0


@pytest.mark.parametrize("m,k,n", GEMV_CASES + [(4, 4097, 33)])
def test_gemv_walk_emulated(rng, m, k, n):
    """The emulator's walk of the same kernel: exact, each output once, loads in bounds."""
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    walk = emu.emulate_gemv(a, b)
    assert (walk.writes == 1).all() and walk.out_of_bounds == {"a": 0, "b": 0}
    np.testing.assert_array_equal(walk.out, int8_matmul_ref(a, b))
    # every byte of B is read exactly once (the point of the kernel), A once per simdgroup
    assert walk.loads["b"] == n * k
    groups = tiling.ceil_div(n, tiling.METAL_MV_ROWS)
    assert walk.loads["a"] == m * k * groups


def test_small_m_takes_the_gemv():
    assert tiling.metal_uses_gemv(tiling.METAL_MV_MAX_M) and not tiling.metal_uses_gemv(tiling.METAL_MV_MAX_M + 1)
    with pytest.raises(ValueError, match="M must be"):
        tiling.metal_gemv_dispatch(tiling.METAL_MV_MAX_M + 1, 8, 8)
