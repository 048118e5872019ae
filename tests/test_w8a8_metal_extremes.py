"""kernels/w8a8_gemm.metal's epilogue on the extremes of the
numerics spec, through the g++ Metal stand-in: tiny rows (subnormal s_x, where the exact
scale product s_x * s_w underflows float32), tiny weight scales, and huge bfloat16 rows."""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import quant, tiling
from int8nax.backends.metal import source as metal_source
from int8nax.reference import ulp, w8a8_linear_ref

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import shim  # noqa: E402

pytestmark = pytest.mark.skipif(shim.GXX is None, reason="g++ is not installed: the Metal shim cannot be built")
MX = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}


@pytest.fixture(scope="module")
def build():
    header, body = metal_source.kernel_source(metal_source.KERNELS["int8nax_w8a8_gemm"])
    out = []
    for dtype, with_bias in (("float32", False), ("float32", True), ("bfloat16", False)):
        template = (tuple(tiling.METAL_SMALL.template()) + tuple(metal_source.variants()[0].template())
                    + (("OutT", dtype), ("HAS_BIAS", with_bias)))
        # Every test has M, N >= 8, so MLX passes only params (5 values) and the 1-element
        # placeholder bias in the constant address space.
        constant = frozenset({"params"} | (set() if with_bias else {"bias"}))
        out.append(shim.Variant(
            f"w8a8-{dtype}-{with_bias}", header, body,
            (("q", "int8"), ("w", "int8"), ("s_x", "float32"), ("s_w", "float32"), ("bias", "float32"),
             ("params", "int32")), (("y", dtype),), template, constant))
    return shim.ShimBuild(out)


def run(build, x32, dtype, w, s_w, bias=None):
    x = np.array(mx.array(x32).astype(MX[dtype]).astype(mx.float32))
    q, s_x = quant.quantize_activations_np(x)
    m, k = x.shape
    n = w.shape[0]
    d = tiling.metal_gemm_dispatch(m, n, k)
    assert d.config is tiling.METAL_SMALL
    args = [q, w, s_x, s_w, np.zeros(1, np.float32) if bias is None else bias, np.array(d.params, np.int32)]
    (y,) = build.run(f"w8a8-{dtype}-{bias is not None}", args, [(m, n)], d.grid, d.threadgroup, emu.mlx_float_layout())
    got = (y.astype(np.uint32) << 16).view(np.float32).astype(np.float64) if dtype == "bfloat16" else y.astype(np.float64)
    ref = w8a8_linear_ref(x, w, s_w, bias)
    with np.errstate(invalid="ignore", over="ignore"):
        spacing = np.maximum(ulp(ref, dtype), ulp(np.where(np.isfinite(got), got, 0), dtype))
        return np.abs(got - ref) / spacing, ref


@pytest.mark.parametrize("with_bias", [False, True])
def test_tiny_rows_within_one_ulp(build, rng, with_bias):
    k, n = 64, 40
    x32 = (rng.standard_normal((8, k)) * np.logspace(-44, -36, 8)[:, None]).astype(np.float32)
    w, s_w = quant.quantize_weight_np((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
    bias = (rng.standard_normal(n) * 1e-37).astype(np.float32) if with_bias else None
    err, ref = run(build, x32, "float32", w, s_w, bias)
    assert (np.abs(ref) > 2.0**-126).mean() > 0.15  # normal results, and subnormal ones too:
    assert ((np.abs(ref) < 2.0**-126) & (np.abs(ref) > 2.0**-140)).any()
    assert err.max() <= 1.0


def test_tiny_weight_scales_within_one_ulp(build, rng):
    # weights of absmax ~1e-38 (subnormal s_w), ordinary activations
    k, n = 64, 24
    x32 = (rng.standard_normal((8, k)) * 3).astype(np.float32)
    w, s_w = quant.quantize_weight_np((rng.standard_normal((n, k)) * 1e-38).astype(np.float32))
    assert (s_w < 2.0**-126).all()
    err, ref = run(build, x32, "float32", w, s_w)
    assert err.max() <= 1.0


def test_huge_bfloat16_rows_within_one_ulp(build, rng):
    k, n = 256, 16
    x32 = (rng.standard_normal((8, k)) * 1e36).astype(np.float32)
    w, s_w = quant.quantize_weight_np((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
    err, ref = run(build, x32, "bfloat16", w, s_w)
    assert np.abs(ref).max() > 1e34 and err.max() <= 1.0
