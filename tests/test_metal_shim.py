"""The real .metal kernels, compiled by g++ against a CPU stand-in for Metal and MPP
(tests/metal_shim) and run thread by thread: this checks the source text itself (indexing,
masks, barriers, the epilogue's float arithmetic, the quantizer) where the emulator checks a
mirror of it. The stand-in's matmul2d, lane layout and float behaviour are models, not Apple's
(see metal_shim.h); nothing here says the kernels compile with Apple's Metal compiler.

AddressSanitizer aborts on any load or store outside a buffer; outputs start poisoned, so an
element never written shows; a barrier that some thread misses is reported as a deadlock.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import quant, tiling
from int8nax.backends.metal import launch as metal_launch, source as metal_source
from int8nax.reference import int8_matmul_ref, to_numpy, ulp, w8a8_linear_ref

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import shim  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
# Without g++ the stand-in cannot be built: skipped on a developer's machine, a failure in CI.
pytestmark = pytest.mark.skipif(shim.GXX is None and not IN_CI, reason="g++ is not installed: the Metal shim cannot be built")

LAYOUTS = {"mlx-float": emu.mlx_float_layout(), "shuffled": emu.shuffled_layout(np.random.default_rng(11))}
CONFIGS = {"small": tiling.METAL_SMALL, "large": tiling.METAL_LARGE, "medium": tiling.METAL_MEDIUM,
           "wide8": tiling.METAL_WIDE8}
PATHS = {"generic": metal_source.KernelVariant(metal_source.LOAD_GENERIC), "mlx": metal_source.KernelVariant(metal_source.LOAD_MLX_LAYOUT)}
# (M, K, N, output dtype, bias, load path); M = 5 puts s_x in the constant address space.
W8A8_CASES = [(33, 520, 40, "float16", True, "mlx"), (70, 300, 33, "float32", False, "generic"),
              (33, 520, 40, "bfloat16", False, "mlx"), (70, 300, 33, "bfloat16", True, "mlx"),
              (5, 64, 9, "bfloat16", True, "mlx"), (5, 300, 33, "float32", False, "generic"),
              (5, 70, 40, "float16", False, "mlx")]
QUANT_DTYPES = ["float16", "bfloat16"]
GEMM_INPUTS = (("a", "int8"), ("b", "int8"), ("params", "int32"))
W8A8_INPUTS = (("q", "int8"), ("w", "int8"), ("s_x", "float32"), ("s_w", "float32"), ("bias", "float32"),
               ("params", "int32"))


# Bugs put back into the GEMM source to show that the harness catches them: the seed kernel's
# (no M mask, no K remainder) in the generic path, and in the MLX-layout path an edge sub-tile
# taken for an interior one and a remainder read without its K mask.
MUTANTS = {
    "no-m-mask": ("generic", "(ca.ok[i] && m < M && (!MASK_K || k < K))", "(ca.ok[i] && (!MASK_K || k < K))"),
    "no-k-remainder": ("generic", "if (k_full < K) {", "if (false) {"),
    "no-edge-path": ("mlx", "interior = m0 + SM <= M && n0 + SN <= N;", "interior = true;"),
    "no-k-mask": ("mlx", "(!MASK_K || j < k_left)", "true"),
}


# The epilogue without its wide path (the usual error-free path for every finite input, as
# before the numerics spec): the awkward-scale test must fail on it.
EPILOGUE_MUTANT = ("if (fabs(sx) >= FLT_MIN", "if (true || fabs(sx) >= FLT_MIN")


def w8a8_key(m, k, n, dtype, with_bias, path) -> str:
    return f"w8a8-{m}x{k}x{n}-{dtype}-{with_bias}-{path}"


def gemm_variant(key, cfg, path, header, body, constant=("params",)) -> shim.Variant:
    template = tuple(cfg.template()) + tuple(PATHS[path].template())
    return shim.Variant(key, header, body, GEMM_INPUTS, (("c", "int32"),), template, frozenset(constant))


def variants() -> list[shim.Variant]:
    header, body = metal_source.kernel_source(metal_source.KERNELS["int8nax_int8_gemm"])
    out = []
    for name, cfg in CONFIGS.items():
        for path in PATHS:
            out.append(gemm_variant(f"gemm-{name}-{path}", cfg, path, header, body))
    for path in PATHS:  # tiny inputs arrive in the constant address space, as MLX does it
        out.append(gemm_variant(f"gemm-small-{path}", tiling.METAL_SMALL, path, header, body, ("a", "b", "params")))
        out.append(gemm_variant(f"gemm-large-{path}", tiling.METAL_LARGE, path, header, body, ("b", "params")))
    relaxed_off = replace(tiling.METAL_SMALL, relaxed_precision=False)
    out.append(gemm_variant("gemm-small-mlx-strict", relaxed_off, "mlx", header, body))
    for name, (path, old, new) in MUTANTS.items():
        assert header.count(old) == 1, f"mutant {name} no longer applies"
        out.append(gemm_variant(f"gemm-small-{path}-{name}", tiling.METAL_SMALL, path, header.replace(old, new), body))
    header, body = metal_source.kernel_source(metal_source.KERNELS["int8nax_w8a8_gemm"])
    for m, k, n, dtype, with_bias, path in W8A8_CASES:
        d = tiling.metal_gemm_dispatch(m, n, k)
        template = tuple(d.template) + tuple(PATHS[path].template()) + (("OutT", dtype), ("HAS_BIAS", with_bias))
        constant = {"params"} | ({"s_x"} if m < 8 else set()) | ({"bias"} if not with_bias or n < 8 else set())
        out.append(shim.Variant(w8a8_key(m, k, n, dtype, with_bias, path), header, body, W8A8_INPUTS,
                                (("y", dtype),), template, frozenset(constant)))
    for with_bias in (True, False):  # the epilogue on awkward scales, float32 output
        template = tuple(tiling.METAL_SMALL.template()) + tuple(PATHS["mlx"].template()) + \
            (("OutT", "float32"), ("HAS_BIAS", with_bias))
        constant = frozenset(("params",) if with_bias else ("bias", "params"))
        out.append(shim.Variant(f"w8a8-scales-{with_bias}", header, body, W8A8_INPUTS, (("y", "float32"),),
                                template, constant))
        old, new = EPILOGUE_MUTANT
        assert header.count(old) == 1, "the epilogue mutant no longer applies"
        out.append(shim.Variant(f"w8a8-scales-{with_bias}-usual-only", header.replace(old, new), body,
                                W8A8_INPUTS, (("y", "float32"),), template, constant))
    header, body = metal_source.kernel_source(metal_source.KERNELS["int8nax_quantize_rows"])
    for dtype in QUANT_DTYPES:
        for constant in ((), ("x",)):  # x with fewer than 8 elements arrives as `constant`
            out.append(shim.Variant(f"quant-{dtype}", header, body, (("x", dtype),),
                                    (("q", "int8"), ("s", "float32")),
                                    tuple(tiling.metal_quant_dispatch(1).template), frozenset(constant)))
    header, body = metal_source.kernel_source(metal_source.KERNELS["int8nax_nax_layout"])
    out.append(shim.Variant("layout", header, body, (("dummy", "int32"),), (("out", "int32"),),
                            (("FM", 16), ("FN", 32), ("FK", 16), ("SIMD", 32), ("CAP", metal_launch.LAYOUT_CAPACITY),
                             ("RELAXED", True)), frozenset({"dummy"})))
    return out


@pytest.fixture(scope="module")
def build():
    if shim.GXX is None:
        pytest.fail("g++ is required in CI to build the Metal stand-in")
    return shim.ShimBuild(variants())


def config_name(cfg) -> str:
    return next(name for name, c in CONFIGS.items() if c.name == cfg.name)


def run_gemm(build, a, b, layout, path="generic", mutant="", gpu=None, config=None):
    m, k = a.shape
    n = b.shape[0]
    d = tiling.metal_gemm_dispatch(m, n, k, gpu, config=config)
    key = f"gemm-{config_name(d.config)}-{path}" + (f"-{mutant}" if mutant else "")
    (c,) = build.run(key, [a, b, np.array(d.params, np.int32)], [(m, n)], d.grid, d.threadgroup, layout)
    return c, d


GEMM_CASES = [(1, 1, 1, "mlx-float"), (7, 33, 5, "shuffled"), (33, 513, 7, "mlx-float"), (33, 513, 7, "shuffled"),
              (64, 20, 130, "shuffled"), (65, 530, 130, "mlx-float"), (128, 512, 33, "shuffled")]


@pytest.mark.parametrize("m,k,n,layout", GEMM_CASES)
def test_generic_gemm_source_is_exact(build, rng, m, k, n, layout):
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    c, d = run_gemm(build, a, b, LAYOUTS[layout])
    np.testing.assert_array_equal(c.astype(np.int64), int8_matmul_ref(a, b))
    # every thread of every non-padding threadgroup met each K block's barrier
    threadgroups = d.launch.tiles_m * d.launch.tiles_n
    assert build.barriers() == threadgroups * d.config.threads * tiling.ceil_div(k, d.config.bk)


MLX_CASES = [(1, 1, 1, None), (3, 7, 5, None), (33, 513, 7, None), (64, 20, 130, None), (65, 530, 130, None),
             (128, 512, 128, None), (128, 1024, 256, None), (97, 45, 161, None), (200, 300, 100, "s"),
             (128, 512, 128, "d")]


@pytest.mark.parametrize("m,k,n,gpu", MLX_CASES)
def test_mlx_layout_gemm_source_is_exact(build, rng, m, k, n, gpu):
    """The fast path under AddressSanitizer, on interior tiles, edges, K remainders and the
    wide-GPU tiles: exact with MLX's layout."""
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    c, d = run_gemm(build, a, b, LAYOUTS["mlx-float"], "mlx", gpu=gpu)
    np.testing.assert_array_equal(c.astype(np.int64), int8_matmul_ref(a, b))
    threadgroups = d.launch.tiles_m * d.launch.tiles_n
    assert build.barriers() == threadgroups * d.config.threads * tiling.ceil_div(k, d.config.bk)


@pytest.mark.parametrize("config", tiling.METAL_LARGE_CANDIDATES, ids=lambda c: c.name)
@pytest.mark.parametrize("m,k,n", [(65, 1030, 130), (200, 300, 100), (513, 530, 257)])
def test_every_tile_candidate_source_is_exact(build, rng, config, m, k, n):
    """The on-device tile choice's candidates (and the 256-thread fallback) compiled from the
    real source under AddressSanitizer, both load paths (the generic one also under another
    layout): exact, every thread at every barrier."""
    a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
    b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    for path, layout in (("mlx", "mlx-float"), ("generic", "mlx-float"), ("generic", "shuffled")):
        c, d = run_gemm(build, a, b, LAYOUTS[layout], path, gpu="s", config=config)
        assert d.config == config
        np.testing.assert_array_equal(c.astype(np.int64), int8_matmul_ref(a, b))
        threadgroups = d.launch.tiles_m * d.launch.tiles_n
        assert build.barriers() == threadgroups * d.config.threads * tiling.ceil_div(k, d.config.bk)


def test_mlx_layout_gemm_is_wrong_under_another_layout(build, rng):
    """Why the self-test guards the fast path: under a layout that is not MLX's, it returns wrong
    numbers (and the generic path, on the same hardware model, does not)."""
    a = rng.integers(-128, 128, size=(33, 64), dtype=np.int8)
    b = rng.integers(-128, 128, size=(40, 64), dtype=np.int8)
    c, _ = run_gemm(build, a, b, LAYOUTS["shuffled"], "mlx")
    assert (c.astype(np.int64) != int8_matmul_ref(a, b)).any()
    c, _ = run_gemm(build, a, b, LAYOUTS["shuffled"], "generic")
    np.testing.assert_array_equal(c.astype(np.int64), int8_matmul_ref(a, b))


def test_relaxed_precision_false_builds(build, rng):
    a = rng.integers(-128, 128, size=(33, 70), dtype=np.int8)
    b = rng.integers(-128, 128, size=(9, 70), dtype=np.int8)
    (c,) = build.run("gemm-small-mlx-strict", [a, b, np.array(tiling.metal_gemm_dispatch(33, 9, 70).params, np.int32)],
                     [(33, 9)], tiling.metal_gemm_dispatch(33, 9, 70).grid, (128, 1, 1), LAYOUTS["mlx-float"])
    np.testing.assert_array_equal(c.astype(np.int64), int8_matmul_ref(a, b))


def test_gemm_padding_threadgroups_leave_cleanly(build):
    # 9 M tiles, swizzle 1: a 2 x 5 grid with one padding threadgroup.
    a = np.full((9 * tiling.METAL_LARGE.bm, 3), -128, np.int8)
    b = np.full((2, 3), -128, np.int8)
    for path in PATHS:
        c, d = run_gemm(build, a, b, LAYOUTS["mlx-float"], path)
        assert d.launch.swizzle_log == 1 and d.launch.grid_y * d.launch.grid_x == 10
        assert (c == 3 * 16384).all()


def test_constant_inputs_are_modelled(build, rng):
    """MLX passes inputs of fewer than 8 elements as `constant`: the stand-in builds that
    signature and refuses to run arrays that would need another one."""
    a = rng.integers(-128, 128, size=(1, 1), dtype=np.int8)
    assert "const volatile int8_t* a" in shim.build_source([v for v in variants() if v.key == "gemm-small-mlx"])
    with pytest.raises(KeyError, match="constant"):
        build.run("gemm-large-mlx", [a, a, np.zeros(5, np.int32)], [(1, 1)], (512, 1, 1), (512, 1, 1),
                  LAYOUTS["mlx-float"])


def test_seed_and_fast_path_bugs_are_caught(build, rng):
    """The harness can fail: with the seed kernel's missing M mask, or the fast path's edge
    sub-tiles taken as interior, or its remainder read without the K mask, AddressSanitizer
    stops the run; with the missing K remainder, the numbers are wrong."""
    a = rng.integers(-128, 128, size=(33, 40), dtype=np.int8)
    b = rng.integers(-128, 128, size=(7, 40), dtype=np.int8)
    with pytest.raises(RuntimeError, match="heap-buffer-overflow"):
        run_gemm(build, a, b, LAYOUTS["mlx-float"], "generic", "no-m-mask")
    with pytest.raises(RuntimeError, match="heap-buffer-overflow"):
        run_gemm(build, a, b, LAYOUTS["mlx-float"], "mlx", "no-edge-path")
    with pytest.raises(RuntimeError, match="heap-buffer-overflow"):
        run_gemm(build, a, b, LAYOUTS["mlx-float"], "mlx", "no-k-mask")
    c, _ = run_gemm(build, a, b, LAYOUTS["mlx-float"], "generic", "no-k-remainder")
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


@pytest.mark.parametrize("m,k,n,dtype,with_bias,path", W8A8_CASES)
def test_w8a8_source_is_within_one_ulp(build, rng, m, k, n, dtype, with_bias, path):
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
    args = [q, w, s_x, s_w, bias if with_bias else np.zeros(1, np.float32), np.array(d.params, np.int32)]
    layout = LAYOUTS["mlx-float" if path == "mlx" else "shuffled"]
    (y,) = build.run(w8a8_key(m, k, n, dtype, with_bias, path), args, [(m, n)], d.grid, d.threadgroup, layout)
    got = from_bits(y, dtype)
    ref = w8a8_linear_ref(x, w, s_w, bias)
    assert np.isnan(got[1]).all() and np.isfinite(got[2:]).all()
    spacing = np.maximum(ulp(ref, dtype), ulp(got, dtype))
    assert (np.abs(got - ref)[[0] + list(range(2, m))] / spacing[[0] + list(range(2, m))]).max() <= 1.0


def awkward_scales(rng, m, n):
    """Scales the usual epilogue path cannot take: subnormal s_x (tiny rows), s_x near
    float32's max (bfloat16 rows near 1e36), products out of range, and ordinary ones."""
    tiny = np.float32(np.finfo(np.float32).tiny)
    s_x = np.concatenate([
        (rng.random(m // 3) * tiny).astype(np.float32),  # subnormal
        (rng.random(m // 3) * 2.6e36 + 1e35).astype(np.float32),  # bfloat16 absmax ~1e36..3e38 / 127
        (rng.random(m - 2 * (m // 3)) * 0.1 + 1e-3).astype(np.float32),
    ])
    s_w = np.concatenate([
        (rng.random(n // 3) * 1e-3 + 1e-6).astype(np.float32),
        (rng.random(n // 3) * 1e30).astype(np.float32),  # with huge s_x: overflows (inf is right)
        (rng.random(n - 2 * (n // 3)) * 1e-38).astype(np.float32),
    ])
    return s_x, s_w


def exact_w8a8(acc, s_x, s_w, bias):
    with np.errstate(over="ignore"):
        y = acc.astype(np.float64) * s_x.astype(np.float64)[:, None] * s_w.astype(np.float64)[None, :]
        return y + (0 if bias is None else bias.astype(np.float64)[None, :])


def ulps_f32(got, exact):
    """|got - exact| in float32 ulps; inf must match a correctly rounded overflow."""
    big = np.abs(exact) >= float(np.finfo(np.float32).max) * (1 + 2.0**-25)
    assert (np.isinf(got) == big).all(), "inf exactly where the correctly rounded result overflows"
    fin = ~big
    spacing = np.maximum(ulp(exact, "float32"), ulp(np.where(np.isfinite(got), got, 0), "float32"))
    return (np.abs(got.astype(np.float64) - exact) / spacing)[fin]


@pytest.mark.parametrize("with_bias", [False, True])
def test_w8a8_epilogue_on_awkward_scales(build, rng, with_bias):
    """The numerics spec on the real source: within 1 ulp for subnormal s_x, s_x near float32's
    max and every mix, inf only where the exact result overflows; no intermediate overflow."""
    m, k, n = 30, 70, 36
    q = rng.integers(-127, 128, size=(m, k), dtype=np.int8)
    w = rng.integers(-127, 128, size=(n, k), dtype=np.int8)
    q[0] = 0  # acc == 0 rows
    s_x, s_w = awkward_scales(rng, m, n)
    bias = None
    if with_bias:
        bias = (rng.standard_normal(n) * np.array([1e-30, 1.0, 1e30, 1e-40] * (n // 4))).astype(np.float32)
    d = tiling.metal_gemm_dispatch(m, n, k)
    args = [q, w, s_x, s_w, bias if with_bias else np.zeros(1, np.float32), np.array(d.params, np.int32)]
    (y,) = build.run(f"w8a8-scales-{with_bias}", args, [(m, n)], d.grid, d.threadgroup, LAYOUTS["mlx-float"])
    exact = exact_w8a8(int8_matmul_ref(q, w), s_x, s_w, bias)
    err = ulps_f32(y, exact)
    assert err.max() <= 1.0, err.max()
    # and the model in the emulator agrees bit for bit with the source
    model = emu.dequantize_model(int8_matmul_ref(q, w), s_x[:, None], s_w[None, :], None if bias is None else bias[None, :])
    np.testing.assert_array_equal(model.view(np.int32), y.view(np.int32))
    # the test can fail: without the wide path the same inputs break the spec
    (y_old,) = build.run(f"w8a8-scales-{with_bias}-usual-only", args, [(m, n)], d.grid, d.threadgroup,
                         LAYOUTS["mlx-float"])
    with pytest.raises(AssertionError):
        assert ulps_f32(y_old, exact).max() <= 1.0


def test_layout_probe_source(build):
    simd = tiling.SIMD_WIDTH
    shape = (3, simd, 1 + 3 * metal_launch.LAYOUT_CAPACITY)
    for layout in LAYOUTS.values():
        (dump,) = build.run("layout", [np.zeros(1, np.int32)], [shape], (simd, 1, 1), (simd, 1, 1), layout)
        parsed = emu.layout_from_probe(dump)
        for part in ("left", "right", "dest"):
            np.testing.assert_array_equal(getattr(parsed, part), getattr(layout, part))
        assert emu.layout_problems(parsed, capacities=dump[:, :, 0]) == []
