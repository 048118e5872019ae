"""kernels/metal/quantize_rows.metal, the real source compiled by g++ against the Metal stand-in
(tests/metal_shim), on the rows int8nax.quant treats specially: tiny rows (subnormal scales,
the tiny-row rule), near-subnormal rows, huge rows, NaN/inf and zero rows, in every input dtype.

The stand-in's float arithmetic is x86 SSE with subnormals kept; whether Apple's GPU keeps
float32 subnormals in this kernel is not verified here (see the kernel's header comment).
"""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import quant, tiling
from int8nax.backends import metal, metal_source

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import shim  # noqa: E402

pytestmark = pytest.mark.skipif(shim.GXX is None, reason="g++ is not installed: the Metal shim cannot be built")

DTYPES = ["float16", "bfloat16", "float32"]
MX = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}


@pytest.fixture(scope="module")
def build():
    header, body = metal_source.kernel_source(metal_source.KERNELS["int8nax_quantize_rows"])
    template = tuple(tiling.metal_quant_dispatch(1).template)
    variants = [shim.Variant(f"quant-{d}", header, body, (("x", d),), (("q", "int8"), ("s", "float32")), template)
                for d in DTYPES]
    return shim.ShimBuild(variants)


def kernel_input(x32: np.ndarray, dtype: str) -> np.ndarray:
    """The bytes the kernel reads, and (second) the float32 values they hold."""
    if dtype == "float16":
        with np.errstate(over="ignore"):  # the huge row is inf in float16
            return x32.astype(np.float16)
    if dtype == "bfloat16":
        return np.array(mx.array(x32).astype(mx.bfloat16).view(mx.uint16))
    return x32


def held_values(x32: np.ndarray, dtype: str) -> np.ndarray:
    return np.array(mx.array(x32).astype(MX[dtype]).astype(mx.float32))


def special_tiny_rows(rng, k: int) -> np.ndarray:
    rows = [
        np.array([1e-37, 1e-38, 0, 5e-39] * ((k + 3) // 4))[:k],  # the example row
        rng.standard_normal(k) * 1e-39,  # subnormal values throughout
        rng.standard_normal(k) * 1e-36,  # absmax just around 127 * 2^-126: scales either side
        rng.standard_normal(k) * 3e-38,  # normal values, subnormal scale
        rng.standard_normal(k) * 1e-44,  # scale underflows to 0: treated as a zero row
        rng.standard_normal(k) * 1e36,  # huge
        rng.standard_normal(k) * 2.0,  # ordinary
        np.zeros(k),
    ]
    x = np.stack(rows).astype(np.float32)
    x[2, 0] = 127 * 2.0**-126  # a scale of exactly FLT_MIN: the k = 0 branch
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [4, 301])
def test_quantize_source_follows_the_tiny_row_rule(build, rng, dtype, k):
    x32 = special_tiny_rows(rng, k)
    x32 = np.concatenate([x32, x32[:1] * np.float32(np.nan)])  # a NaN row too
    m = x32.shape[0]
    d = tiling.metal_quant_dispatch(m)
    q, s = build.run(f"quant-{dtype}", [kernel_input(x32, dtype)], [(m, k), (m,)], d.grid, d.threadgroup,
                     emu.mlx_float_layout())
    with np.errstate(invalid="ignore"):
        want_q, want_s = quant.quantize_activations_np(held_values(x32, dtype))
    np.testing.assert_array_equal(s.view(np.int32)[:-1], want_s.view(np.int32)[:-1])
    assert np.isnan(s[-1])
    np.testing.assert_array_equal(q, want_q)
    if dtype != "float16":
        # the example row really reaches the tiny-row branch, and gives the hand-computed codes
        assert want_s[0] < quant.FLT_MIN
        if k == 4 and dtype == "float32":
            assert q[0].tolist() == [127, 13, 0, 6]
