"""kernels/metal/quantize_rows.metal, the real source compiled by g++ against the Metal stand-in
(tests/metal_shim), on the rows int8nax.quant treats specially: tiny rows (subnormal scales,
the tiny-row rule), near-subnormal rows, huge rows, NaN/inf and zero rows, in every input dtype.

Every case runs twice: on the stand-in's x86 SSE arithmetic with subnormals kept, and as a GPU
that flushes float32 subnormals (FTZ + DAZ, metal_shim.h). Metal documents neither behaviour for
Apple GPUs; the kernel must give int8nax.quant's codes and scales on both, so that the first-use
check cannot refuse NAX over the GPU's subnormal handling.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import quant, tiling
from int8nax.backends.metal import source as metal_source

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
    old, new = FLOAT_SCALING_MUTANT
    assert header.count(old) == 1, "the float-scaling mutant no longer applies"
    variants.append(shim.Variant("quant-float32-float-scaling", header.replace(old, new), body,
                                 (("x", "float32"),), (("q", "int8"), ("s", "float32")), template))
    variants.append(shim.Variant("half-bits", header, HALF_BITS_BODY, (("x", "float16"),), (("out", "int32"),), ()))
    return shim.ShimBuild(variants)


# float_bits.metal's float16 -> float32 conversion on the bits, over every half.
HALF_BITS_BODY = """if (thread_position_in_grid.x == 0) {
  for (int i = 0; i < x_shape[0]; ++i) {
    out[i] = int(int8nax::f32_bits(x[i]));
  }
}
"""


# The tiny rows scaled by a float multiply instead of from their bits: exact while subnormals are
# kept, wrong on a flushing GPU (which is why the kernel works on the bits).
FLOAT_SCALING_MUTANT = ("const float v = rs.shift != 0 ? scaled_up(bits, rs.shift) : as_type<float>(bits);",
                        "const float v = as_type<float>(bits) * (rs.shift != 0 ? pow2(rs.shift) : 1.0f);")


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
        rng.standard_normal(k) * 2.0**-64,  # around the 2^-TINY bound: scaled or not, normal scale
        rng.standard_normal(k) * 2.0**-100,  # scaled, normal scale, a subnormal value in it
    ]
    x = np.stack(rows).astype(np.float32)
    x[2, 0] = 127 * 2.0**-126  # a scale of exactly FLT_MIN: the k = 0 branch
    x[3, 0] = 2.0**-119  # the bound of the integer-quotient scale
    x[8, 0] = 2.0**-64
    x[8, 1] = -(2.0**-64) * (1 - 2.0**-24)
    x[9, 1] = 1e-39
    return x


@pytest.mark.parametrize("flush", [False, True], ids=["subnormals-kept", "subnormals-flushed"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [4, 301])
def test_quantize_source_follows_the_tiny_row_rule(build, rng, dtype, k, flush):
    x32 = special_tiny_rows(rng, k)
    x32 = np.concatenate([x32, x32[:1] * np.float32(np.nan)])  # a NaN row too
    m = x32.shape[0]
    d = tiling.metal_quant_dispatch(m)
    q, s = build.run(f"quant-{dtype}", [kernel_input(x32, dtype)], [(m, k), (m,)], d.grid, d.threadgroup,
                     emu.mlx_float_layout(), flush_subnormals=flush)
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


def test_the_flushing_gpu_is_emulated(build, rng):
    """The flush mode is real: the same source with the tiny rows scaled by a float multiply
    passes while subnormals are kept and fails once they are flushed."""
    x32 = special_tiny_rows(rng, 301)
    m = x32.shape[0]
    d = tiling.metal_quant_dispatch(m)
    want_q, want_s = quant.quantize_activations_np(x32)
    for flush, exact in ((False, True), (True, False)):
        q, s = build.run("quant-float32-float-scaling", [x32], [(m, 301), (m,)], d.grid, d.threadgroup,
                         emu.mlx_float_layout(), flush_subnormals=flush)
        assert np.array_equal(s.view(np.int32), want_s.view(np.int32))  # the scales come from bits
        assert np.array_equal(q, want_q) == exact


def test_half_conversion_on_the_bits_is_exact_for_every_half(build):
    """The quantizer reads float16 through integer operations only (so that a GPU flushing
    subnormal halves cannot change a code): the float32 bits of all 65536 halves, NaN payloads
    included, against numpy's conversion."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    (bits,) = build.run("half-bits", [halves], [(halves.size,)], (32, 1, 1), (32, 1, 1), emu.mlx_float_layout())
    with np.errstate(invalid="ignore"):
        want = halves.astype(np.float32).view(np.int32)
    finite = np.isfinite(halves)
    np.testing.assert_array_equal(bits[finite], want[finite])
    # inf and NaN: the exponent all ones, the sign and the payload shifted up (numpy may quiet NaNs)
    got_nan = bits[~finite].view(np.float32)
    assert (np.isnan(got_nan) == np.isnan(halves[~finite])).all()
    assert (np.signbit(got_nan) == np.signbit(halves[~finite])).all()


@pytest.mark.parametrize("flush", [False, True], ids=["subnormals-kept", "subnormals-flushed"])
def test_float16_rows_with_subnormal_halves(build, rng, flush):
    """float16 rows whose values (and absmax) are half subnormals: exact codes either way."""
    x16 = (rng.standard_normal((3, 301)) * np.array([[3e-5], [1e-6], [2e-7]])).astype(np.float16)
    d = tiling.metal_quant_dispatch(3)
    q, s = build.run("quant-float16", [x16], [(3, 301), (3,)], d.grid, d.threadgroup, emu.mlx_float_layout(),
                     flush_subnormals=flush)
    want_q, want_s = quant.quantize_activations_np(x16.astype(np.float32))
    np.testing.assert_array_equal(s.view(np.int32), want_s.view(np.int32))
    np.testing.assert_array_equal(q, want_q)
    assert (np.abs(want_q) > 0).sum() > 100  # the codes are not all zero
