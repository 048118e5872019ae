"""The real .metal kernels, compiled by g++ against a CPU stand-in for Metal and MPP
(tests/metal_shim) and run thread by thread: this checks the source text itself (indexing,
masks, barriers, the epilogue's float arithmetic, the quantizer) where the emulator checks a
mirror of it. The stand-in's matmul2d, lane layout and float behaviour are models, not Apple's
(see metal_shim.h); nothing here says the kernels compile with Apple's Metal compiler.

AddressSanitizer aborts on any load or store outside a buffer; outputs start poisoned, so an
element never written shows; a barrier that some thread misses is reported as a deadlock.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import quant, tiling
from int8nax.backends import metal
from int8nax.reference import int8_matmul_ref, to_numpy, ulp, w8a8_linear_ref

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import shim  # noqa: E402

pytestmark = pytest.mark.skipif(shim.GXX is None, reason="g++ is not installed: the Metal shim cannot be built")

LAYOUTS = {"mlx-float": emu.mlx_float_layout(), "shuffled": emu.shuffled_layout(np.random.default_rng(11))}
CONFIGS = {"small": tiling.METAL_SMALL, "large": tiling.METAL_LARGE}
W8A8_VARIANTS = [("small", "float16", True), ("large", "float32", False), ("small", "bfloat16", False)]
QUANT_DTYPES = ["float16", "bfloat16"]


# The seed kernel's bugs, put back into the GEMM source to show that the harness catches them.
MUTANTS = {
    "no-m-mask": ("(ca.ok[i] && m < M && (!MASK_K || k < K))", "(ca.ok[i] && (!MASK_K || k < K))"),
    "no-k-remainder": ("if (k_full < K) {", "if (false) {"),
}


def gemm_variant(key: str, cfg, header: str, body: str) -> shim.Variant:
    return shim.Variant(key, header, body, (("a", "int8"), ("b", "int8"), ("params", "int32")),
                        (("c", "int32"),), tuple(cfg.template()))


def variants() -> list[shim.Variant]:
    header, body = metal.kernel_source(metal.KERNELS["int8nax_int8_gemm"])
    out = [gemm_variant(f"gemm-{name}", cfg, header, body) for name, cfg in CONFIGS.items()]
    for name, (old, new) in MUTANTS.items():
        assert header.count(old) == 1, f"mutant {name} no longer applies"
        out.append(gemm_variant(f"gemm-small-{name}", tiling.METAL_SMALL, header.replace(old, new), body))
    w8a8 = metal.KERNELS["int8nax_w8a8_gemm"]
    header, body = metal.kernel_source(w8a8)
    for cfg_name, dtype, with_bias in W8A8_VARIANTS:
        template = tuple(CONFIGS[cfg_name].template()) + (("OutT", dtype), ("HAS_BIAS", with_bias))
        out.append(shim.Variant(
            f"w8a8-{cfg_name}-{dtype}-{with_bias}", header, body,
            (("q", "int8"), ("w", "int8"), ("s_x", "float32"), ("s_w", "float32"), ("bias", "float32"),
             ("params", "int32")), (("y", dtype),), template))
    quantize = metal.KERNELS["int8nax_quantize_rows"]
    header, body = metal.kernel_source(quantize)
    for dtype in QUANT_DTYPES:
        out.append(shim.Variant(f"quant-{dtype}", header, body, (("x", dtype),),
                                (("q", "int8"), ("s", "float32")),
                                tuple(tiling.metal_quant_dispatch(1).template)))
    probe = metal.KERNELS["int8nax_nax_layout"]
    header, body = metal.kernel_source(probe)
    out.append(shim.Variant("layout", header, body, (("dummy", "int32"),), (("out", "int32"),),
                            (("FM", 16), ("FN", 32), ("FK", 16), ("SIMD", 32), ("CAP", metal.LAYOUT_CAPACITY))))
    return out


@pytest.fixture(scope="module")
def build():
    return shim.ShimBuild(variants())


def run_gemm(build, a, b, layout, mutant=""):
    m, k = a.shape
    n = b.shape[0]
    d = tiling.metal_gemm_dispatch(m, n, k)
    key = ("gemm-small" if d.config is tiling.METAL_SMALL else "gemm-large") + mutant
    (c,) = build.run(key, [a, b, np.array(d.params, np.int32)], [(m, n)], d.grid, d.threadgroup, layout)
    return c, d


@pytest.mark.parametrize(
    "m,k,n,layout",
    [(1, 1, 1, "mlx-float"), (7, 33, 5, "shuffled"), (33, 513, 7, "mlx-float"), (33, 513, 7, "shuffled"),
     (64, 20, 130, "shuffled"), (65, 530, 130, "mlx-float"), (128, 512, 33, "shuffled")],
)
def test_gemm_source_is_exact(build, rng, m, k, n, layout):
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    c, d = run_gemm(build, a, b, LAYOUTS[layout])
    np.testing.assert_array_equal(c.astype(np.int64), int8_matmul_ref(a, b))
    # every thread of every non-padding threadgroup met each K block's barrier
    threadgroups = d.launch.tiles_m * d.launch.tiles_n
    assert build.barriers() == threadgroups * d.config.threads * tiling.ceil_div(k, d.config.bk)


def test_gemm_padding_threadgroups_leave_cleanly(build):
    # 5 M tiles, swizzle 1: a 2 x 3 grid with one padding threadgroup.
    a = np.full((513, 3), -128, np.int8)
    b = np.full((2, 3), -128, np.int8)
    c, d = run_gemm(build, a, b, LAYOUTS["mlx-float"])
    assert d.launch.swizzle_log == 1 and d.launch.grid_y * d.launch.grid_x == 6
    assert (c == 3 * 16384).all()


def test_seed_bugs_are_caught(build, rng):
    """The harness can fail: with the seed kernel's missing M mask, AddressSanitizer stops the
    run; with its missing K remainder, the numbers are wrong."""
    a = rng.integers(-128, 128, size=(33, 40), dtype=np.int8)
    b = rng.integers(-128, 128, size=(7, 40), dtype=np.int8)
    with pytest.raises(RuntimeError, match="heap-buffer-overflow"):
        run_gemm(build, a, b, LAYOUTS["mlx-float"], "-no-m-mask")
    c, _ = run_gemm(build, a, b, LAYOUTS["mlx-float"], "-no-k-remainder")
    assert (c.astype(np.int64) != int8_matmul_ref(a, b)).any()


def bf16_bits(x32: np.ndarray) -> np.ndarray:
    return np.array(mx.array(x32).astype(mx.bfloat16).view(mx.uint16))


def from_bits(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64)


@pytest.mark.parametrize("dtype", QUANT_DTYPES)
@pytest.mark.parametrize("k", [1, 300, 513])
def test_quantize_source_is_int8nax_quant(build, rng, dtype, k):
    x32 = (rng.standard_normal((6, k)) * 5).astype(np.float32)
    x32[1] = 0
    x32[2, k // 2] = np.nan
    x32[3, -1] = -np.inf
    x32[4, 0] = 127.0
    x32[4, 1:] = rng.choice(np.array([0.5, -2.5, 126.5], np.float32), k - 1)
    x = x32.astype(np.float16) if dtype == "float16" else bf16_bits(x32)
    d = tiling.metal_quant_dispatch(6)
    q, s = build.run(f"quant-{dtype}", [x], [(6, k), (6,)], d.grid, d.threadgroup, LAYOUTS["mlx-float"])
    with np.errstate(invalid="ignore"):
        want_q, want_s = quant.quantize_activations_np(from_bits(x, dtype).astype(np.float32))
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(s, want_s)


@pytest.mark.parametrize("cfg_name,dtype,with_bias", W8A8_VARIANTS)
def test_w8a8_source_is_within_one_ulp(build, rng, cfg_name, dtype, with_bias):
    m, k, n = (33, 520, 40) if cfg_name == "small" else (70, 300, 33)
    x32 = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x32[0] = 0
    x32[1, 3] = np.nan
    x = to_numpy(mx.array(x32).astype({"float16": mx.float16, "bfloat16": mx.bfloat16,
                                       "float32": mx.float32}[dtype]), np.float32)
    w, s_w = quant.quantize_weight_np((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    with np.errstate(invalid="ignore"):
        q, s_x = quant.quantize_activations_np(x)
    d = tiling.metal_gemm_dispatch(m, n, k)
    assert d.config is CONFIGS[cfg_name]
    args = [q, w, s_x, s_w, bias if with_bias else np.zeros(1, np.float32), np.array(d.params, np.int32)]
    (y,) = build.run(f"w8a8-{cfg_name}-{dtype}-{with_bias}", args, [(m, n)], d.grid, d.threadgroup,
                     LAYOUTS["shuffled"])
    got = from_bits(y, dtype)
    ref = w8a8_linear_ref(x, w, s_w, bias)
    assert np.isnan(got[1]).all() and np.isfinite(got[2:]).all()
    spacing = np.maximum(ulp(ref, dtype), ulp(got, dtype))
    assert (np.abs(got - ref)[[0] + list(range(2, m))] / spacing[[0] + list(range(2, m))]).max() <= 1.0


def test_layout_probe_source(build):
    simd = tiling.SIMD_WIDTH
    shape = (3, simd, 1 + 3 * metal.LAYOUT_CAPACITY)
    for layout in LAYOUTS.values():
        (dump,) = build.run("layout", [np.zeros(1, np.int32)], [shape], (simd, 1, 1), (simd, 1, 1), layout)
        parsed = emu.layout_from_probe(dump)
        for part in ("left", "right", "dest"):
            np.testing.assert_array_equal(getattr(parsed, part), getattr(layout, part))
        assert emu.layout_problems(parsed, capacities=dump[:, :, 0]) == []
