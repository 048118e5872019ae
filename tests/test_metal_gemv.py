"""The small-M kernels (M <= tiling.METAL_MV_MAX_M): the int8 GEMV (kernels/metal/gemv.metal)
and the W8A8 decode kernel (w8a8_decode.metal, x quantized in registers), the real sources
through the g++ stand-in under AddressSanitizer (exact int32, each output written once, no load
outside its buffer, the decode kernel's numbers the two-launch path's bit for bit), and their
walks in the emulator."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import quant, tiling
from int8nax.backends.metal import source as metal_source
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

DECODE_MUTANTS = {  # the decode kernel's own bugs: each must be caught
    "lane-absmax": ("row_scale<QMAX, TINY>(simd_max(amax), simd_any(bad))", "row_scale<QMAX, TINY>(amax, bad)"),
    "no-k-mask": ("(m < M && j < k_left) ? code_of", "(m < M) ? code_of"),
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
    # the W8A8 decode kernel, and the two-launch path it must equal bit for bit: the quantizer,
    # then the W8A8 GEMM (NAX small tile, MLX layout) on its codes and padded scales
    dec_header, dec_body = metal_source.kernel_source(metal_source.KERNELS["int8nax_w8a8_decode"])
    dec_template = tuple(metal_source.template_key(tiling.metal_decode_dispatch(1, 1, 1).template))
    q_header, q_body = metal_source.kernel_source(metal_source.KERNELS["int8nax_quantize_rows"])
    g_header, g_body = metal_source.kernel_source(metal_source.KERNELS["int8nax_w8a8_gemm"])
    g_template = tuple(tiling.METAL_SMALL.template()) + (("MLX_LAYOUT", True),)
    for dtype in ("float16", "bfloat16", "float32"):
        for with_bias in (True, False):
            constant = frozenset({"params"} | (set() if with_bias else {"bias"}))
            inputs = (("x", dtype), ("w", "int8"), ("s_w", "float32"), ("bias", dtype if with_bias else "float32"),
                      ("params", "int32"))
            out.append(shim.Variant(f"decode-{dtype}-{with_bias}", dec_header, dec_body, inputs, (("y", dtype),),
                                    (("OutT", dtype), ("HAS_BIAS", with_bias)) + dec_template, constant))
            g_inputs = W8A8_INPUTS[:4] + (("bias", dtype if with_bias else "float32"), ("params", "int32"))
            out.append(shim.Variant(f"staged-{dtype}-{with_bias}", g_header, g_body, g_inputs, (("y", dtype),),
                                    g_template + (("OutT", dtype), ("HAS_BIAS", with_bias)), constant))
        out.append(shim.Variant(f"quant-{dtype}", q_header, q_body, (("x", dtype),), (("q", "int8"), ("s", "float32")),
                                tuple(tiling.metal_quant_dispatch(1).template), frozenset()))
    for name, (old, new) in DECODE_MUTANTS.items():
        assert dec_header.count(old) == 1, f"mutant {name} no longer applies"
        out.append(shim.Variant(f"decode-{name}", dec_header.replace(old, new), dec_body,
                                (("x", "float32"), ("w", "int8"), ("s_w", "float32"), ("bias", "float32"),
                                 ("params", "int32")), (("y", "float32"),),
                                (("OutT", "float32"), ("HAS_BIAS", True)) + dec_template, frozenset({"params"})))
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


MX_DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}


def decode_rows(rng, m, k, dtype) -> np.ndarray:
    """float32 [m, K] activations exactly representable in `dtype`, the awkward rows first: a row
    with a NaN, a tiny row (subnormal scale; zero in float16), an all-zero row, then normal rows
    with an inf in the last when m == 4 (a row of codes 0 and a NaN scale)."""
    x32 = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    awkward = [lambda r: r.__setitem__(min(5, k - 1), np.nan), lambda r: r.__imul__(np.float32(1e-39)),
               lambda r: r.__imul__(0)]
    for i in range(min(m - 1, len(awkward))):
        awkward[i](x32[i])
    if m == 4:
        x32[3, 0] = np.inf
    return np.array(mx.array(x32).astype(MX_DTYPES[dtype]).astype(mx.float32))


def as_bits(y: np.ndarray) -> np.ndarray:
    return y.view(np.uint16) if y.dtype.itemsize == 2 else y.view(np.uint32)


def run_decode(build, x32, w, s_w, bias, dtype, key=None):
    m, k = x32.shape
    d = tiling.metal_decode_dispatch(m, w.shape[0], k)
    x = np.array(mx.array(x32).astype(MX_DTYPES[dtype]).view(mx.uint16)) if dtype == "bfloat16" else \
        x32.astype(dtype)
    b = np.zeros(1, np.float32) if bias is None else bias
    if bias is not None and dtype != "float32":
        b = np.array(mx.array(bias).astype(MX_DTYPES[dtype]).view(mx.uint16)) if dtype == "bfloat16" else \
            bias.astype(dtype)
    (y,) = build.run(key or f"decode-{dtype}-{bias is not None}", [x, w, s_w, b, np.array(d.params, np.int32)],
                     [(m, w.shape[0])], d.grid, d.threadgroup, emu.mlx_float_layout())
    return y, x, b


@needs_gxx
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("m,k", [(1, 300), (2, 37), (3, 1030), (4, 2049)])
def test_w8a8_decode_is_the_two_launch_path_bit_for_bit(build, rng, dtype, with_bias, m, k):
    """The decode kernel (x quantized in registers) against the quantizer + W8A8 GEMM it replaces,
    on the same inputs: the same bits, NaN and inf rows, tiny and zero rows included; and for
    float32 the emulator's model of it bit for bit, and within 1 ulp of float64 on finite rows."""
    n = 21
    x32 = decode_rows(rng, m, k, dtype)
    w, s_w = quant.quantize_weight_np((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    if bias is not None:
        bias = np.array(mx.array(bias).astype(MX_DTYPES[dtype]).astype(mx.float32))
    y, x, b = run_decode(build, x32, w, s_w, bias, dtype)
    # the two-launch path on the same stand-in
    qd = tiling.metal_quant_dispatch(m)
    q, s_x = build.run(f"quant-{dtype}", [x], [(m, k), (8,)], qd.grid, qd.threadgroup, emu.mlx_float_layout())
    gd = tiling.metal_gemm_dispatch(m, n, k, config=tiling.METAL_SMALL)
    (y2,) = build.run(f"staged-{dtype}-{with_bias}", [q, w, s_x, s_w, b, np.array(gd.params, np.int32)], [(m, n)],
                      gd.grid, gd.threadgroup, emu.mlx_float_layout())
    np.testing.assert_array_equal(as_bits(y), as_bits(y2))
    # the codes and scales are int8nax.quant's (the contract)
    with np.errstate(invalid="ignore"):
        q_ref, s_ref = quant.quantize_activations_np(x32)
    np.testing.assert_array_equal(q, q_ref)
    np.testing.assert_array_equal(s_x[:m].view(np.uint32), s_ref.view(np.uint32))
    if dtype == "float32":
        model, walk = emu.emulate_w8a8_decode(x32, w, s_w, bias)
        np.testing.assert_array_equal(model.view(np.uint32), y.view(np.uint32))
        assert (walk.writes == 1).all() and walk.out_of_bounds == {"a": 0, "b": 0}
    got = (y.astype(np.uint32) << 16).view(np.float32).astype(np.float64) if dtype == "bfloat16" else \
        y.astype(np.float64)
    with np.errstate(invalid="ignore"):
        ref = w8a8_linear_ref(x32, w, s_w, bias)
    finite = np.isfinite(x32).all(axis=1)
    assert np.isnan(got[~finite]).all()
    if finite.any():
        spacing = np.maximum(ulp(ref[finite], dtype), ulp(got[finite], dtype))
        assert (np.abs(got[finite] - ref[finite]) / spacing).max() <= 1.0


@needs_gxx
def test_w8a8_decode_bugs_are_caught(build, rng):
    """A lane's own absmax instead of the row's gives other codes; reading past K overflows."""
    m, k, n = 2, 300, 9
    x32 = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    w, s_w = quant.quantize_weight_np((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
    bias = np.zeros(n, np.float32)
    y, _, _ = run_decode(build, x32, w, s_w, bias, "float32")
    bad, _, _ = run_decode(build, x32, w, s_w, bias, "float32", "decode-lane-absmax")
    assert (y.view(np.uint32) != bad.view(np.uint32)).any()
    with pytest.raises(RuntimeError, match="heap-buffer-overflow"):
        run_decode(build, x32[:, :37].copy(), w[:, :37].copy(), s_w, bias, "float32", "decode-no-k-mask")


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (2, 7, 9), (4, 300, 40), (3, 4097, 17)])
def test_w8a8_decode_walk_emulated(rng, m, k, n):
    """The emulator's walk of the decode kernel: each output once, loads in bounds, each weight
    byte read once, and its numbers the model's of the two-launch path."""
    x32 = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    w, s_w = quant.quantize_weight_np((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
    y, walk = emu.emulate_w8a8_decode(x32, w, s_w)
    assert (walk.writes == 1).all() and walk.out_of_bounds == {"a": 0, "b": 0} and walk.loads["b"] == n * k
    q, s_x = quant.quantize_activations_np(x32)
    two_launch = emu.dequantize_model(int8_matmul_ref(q, w), s_x[:, None], s_w[None, :])
    np.testing.assert_array_equal(y.view(np.uint32), two_launch.view(np.uint32))
    assert dict(tiling.metal_decode_dispatch(m, n, k).template)["MV_PIECE"] == 8  # 8 bytes a lane, as cider


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
