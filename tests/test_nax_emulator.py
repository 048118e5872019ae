"""The Metal NAX kernels' tile walk, emulated (int8nax.nax_emulator): every output element is
written exactly once, no load leaves its buffer, every simdgroup meets every barrier, and the
result equals the int64 reference; plus the epilogue's and the quantizer's float32 arithmetic."""

from __future__ import annotations

import warnings

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import quant, tiling
from int8nax.reference import int8_matmul_ref, to_numpy, ulp, w8a8_linear_ref

from conftest import random_int8

# Awkward sizes (1, 7, 33, 513, 4097) in M, K and N, chosen so that each one lands in every
# role while the whole set stays quick; plus exact tile multiples of both configurations.
AWKWARD = [
    (1, 1, 1), (1, 7, 33), (7, 1, 513), (7, 513, 1), (33, 7, 7), (33, 513, 33), (513, 33, 7),
    (513, 4097, 33), (4097, 7, 33), (1, 4097, 7), (7, 33, 4097), (33, 1, 4097), (65, 1030, 130),
]
TILE_MULTIPLES = [(128, 512, 128), (256, 1024, 256), (64, 512, 128), (32, 512, 128)]
LAYOUTS = {"mlx-float": emu.mlx_float_layout(), "shuffled": emu.shuffled_layout(np.random.default_rng(7))}


def walk_and_check(a, b, layout, path="generic", gpu=None, config=None):
    walk = emu.emulate_gemm(a, b, layout, path=path, gpu=gpu, config=config)
    m, k = a.shape
    n = b.shape[0]
    d = tiling.metal_gemm_dispatch(m, n, k, gpu, config=config)
    assert (walk.writes == 1).all(), f"writes per element range {walk.writes.min()}..{walk.writes.max()}"
    assert walk.out_of_bounds == {"a": 0, "b": 0}
    blocks = tiling.ceil_div(k, d.config.bk)
    assert all((b_ == blocks).all() for b_ in walk.barriers), "a simdgroup skipped a barrier"
    groups = (d.grid[0] // d.threadgroup[0]) * d.grid[1]
    assert len(walk.barriers) + walk.padding_threadgroups == groups
    assert len(walk.barriers) == d.launch.tiles_m * d.launch.tiles_n
    assert walk.max_abs_acc < 2**31
    mismatch = np.argwhere(walk.out != int8_matmul_ref(a, b))
    assert mismatch.size == 0, f"{len(mismatch)} wrong, first at {mismatch[0].tolist()}"
    return walk


@pytest.mark.parametrize("m,k,n", AWKWARD + TILE_MULTIPLES)
def test_walk_is_exact_and_in_bounds(rng, m, k, n):
    walk_and_check(random_int8(rng, (m, k)), random_int8(rng, (n, k)), LAYOUTS["mlx-float"])


@pytest.mark.parametrize("m,k,n", [(1, 7, 33), (33, 513, 33), (7, 33, 4097), (65, 1030, 130), (128, 512, 128)])
def test_walk_does_not_depend_on_the_lane_layout(rng, m, k, n):
    # The kernels load and store by the coordinates each cooperative tensor reports, so any
    # bijective layout must give the same exact result.
    walk_and_check(random_int8(rng, (m, k)), random_int8(rng, (n, k)), LAYOUTS["shuffled"])


@pytest.mark.parametrize("m,k,n", AWKWARD + TILE_MULTIPLES + [(97, 45, 161), (64, 20, 130), (128, 1024, 256)])
def test_mlx_layout_walk_is_exact_and_in_bounds(rng, m, k, n):
    """The fast path's addressing (lane formula, clamped row pointers, 4-byte pieces, SK steps,
    unmasked interior and masked edge sub-tiles, the K remainder): every output written once,
    no load outside its buffer, every barrier met, exact."""
    walk_and_check(random_int8(rng, (m, k)), random_int8(rng, (n, k)), LAYOUTS["mlx-float"], "mlx_layout")


@pytest.mark.parametrize("gpu", ["s", "g"])
@pytest.mark.parametrize("m,k,n", [(1152, 33, 7), (4097, 40, 130), (513, 33, 7)])
def test_swizzled_grids_walk_exactly(rng, gpu, m, k, n):
    """Swizzle 1 and 2 with padding threadgroups (9 and 33 M tiles), and 5 M tiles without
    swizzle, on the M5 Pro and base classes, both load paths."""
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    for path in emu.PATHS:
        walk = walk_and_check(a, b, LAYOUTS["mlx-float"], path, gpu)
        d = tiling.metal_gemm_dispatch(m, n, k, gpu)
        assert walk.padding_threadgroups == (d.launch.grid_x * d.launch.grid_y - d.launch.tiles_m * d.launch.tiles_n)


@pytest.mark.parametrize("config", tiling.METAL_CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("m,k,n", [(65, 1030, 130), (200, 300, 100), (513, 33, 257), (128, 512, 128)])
def test_every_tile_candidate_walks_exactly(rng, config, m, k, n):
    """Every tile the GEMMs can launch in (the candidates of the on-device choice and the
    threadgroup-limit fallbacks), both load paths: exact, in bounds, every output once, every
    barrier met, on interior tiles, M/N edges, K remainders and swizzled grids."""
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    for path in emu.PATHS:
        walk_and_check(a, b, LAYOUTS["mlx-float"], path, "s", config)
    walk_and_check(a, b, LAYOUTS["shuffled"], "generic", "s", config)


def test_mlx_layout_walk_needs_the_mlx_layout(rng):
    """Under another hardware layout the fast path is wrong (still in bounds, each output
    written once): the reason it is built only after the layout probe."""
    a, b = random_int8(rng, (33, 64)), random_int8(rng, (40, 64))
    walk = emu.emulate_gemm(a, b, LAYOUTS["shuffled"], path="mlx_layout")
    assert (walk.writes == 1).all() and walk.out_of_bounds == {"a": 0, "b": 0}
    assert (walk.out != int8_matmul_ref(a, b)).any()


def test_mlx_layout_loads_only_inside_and_unmasked_inside():
    """Load counts of the fast path: an interior tile issues every load of its rows over K (no
    masks), an edge tile only those of rows inside the matrix, the remainder only k < K."""
    m = n = 128
    k = 1024
    walk = emu.emulate_gemm(np.ones((m, k), np.int8), np.ones((n, k), np.int8), path="mlx_layout")
    assert walk.loads == {"a": 16 * 32 * k, "b": 16 * 32 * k}
    walk = emu.emulate_gemm(np.ones((1, 40), np.int8), np.ones((n, 40), np.int8), path="mlx_layout")
    assert walk.loads["a"] == 4 * 40  # 4 active simdgroups, 1 row, 40 columns
    assert walk.loads["b"] == 4 * 32 * 40


def test_mlx_lane_formula_is_mlx_layout():
    """tiling.mlx_lane_base (what the kernel computes from the lane id) generates exactly the
    BaseNAXFrag layout the probe is compared with."""
    row, col = tiling.mlx_lane_base(np.arange(tiling.SIMD_WIDTH))
    left = emu.mlx_float_layout().left
    np.testing.assert_array_equal(left[:, 0], np.stack([row, col], -1))
    np.testing.assert_array_equal(left[:, 5], np.stack([row + 8, col + 1], -1))


def test_probe_verdict():
    mlx = emu.mlx_float_layout()
    same, problems, notes = emu.mlx_layout_verdict(emu.probe_dump(mlx))
    assert same == {"left": True, "right": True, "dest": True} and problems == [] and notes == []
    same, problems, notes = emu.mlx_layout_verdict(emu.probe_dump(LAYOUTS["shuffled"]))
    assert not any(same.values()) and problems == []
    right = mlx.right.copy()
    right[:, 8:, 0] -= 16  # a right operand whose second half repeats the first rows
    same, problems, _ = emu.mlx_layout_verdict(emu.probe_dump(emu.FragmentLayout("bad", mlx.left, right, mlx.dest)))
    assert same["right"] is False and problems and problems[0].startswith("right")
    # MLX's layout with the right operand's coordinates reported the other way round
    swapped = emu.FragmentLayout("swapped", mlx.left, mlx.right[..., ::-1].copy(), mlx.dest)
    same, problems, notes = emu.mlx_layout_verdict(emu.probe_dump(swapped))
    assert all(same.values()) and problems == [] and "transposed" in notes[0]


def test_extremes_and_padding_threadgroups():
    # 4097 rows: 33 large tiles, swizzle 2, a grid of 9 x 4 with 3 padding threadgroups.
    a = np.full((4097, 20), -128, np.int8)
    b = np.full((9, 20), -128, np.int8)
    walk = walk_and_check(a, b, LAYOUTS["mlx-float"])
    assert walk.padding_threadgroups == 3
    assert (walk.out == 20 * 16384).all()


def test_load_counts_match_the_tiling():
    # One large tile, K = 2 blocks: each of the 16 simdgroups loads its 32 rows of A and
    # 32 rows of B over all of K.
    m = n = 128
    k = 1024
    walk = emu.emulate_gemm(np.ones((m, k), np.int8), np.ones((n, k), np.int8))
    assert walk.loads == {"a": 16 * 32 * k, "b": 16 * 32 * k}
    # Past the edges nothing is loaded: M = 1 leaves 1 row of A per simdgroup row 0.
    walk = emu.emulate_gemm(np.ones((1, k), np.int8), np.ones((n, k), np.int8))
    assert walk.loads["a"] == 4 * k  # the 4 active simdgroups (tile 32 x 128, 1 x 4)


def test_a_broken_layout_is_caught(rng):
    good = LAYOUTS["mlx-float"]
    dest = good.dest.copy()
    dest[1, 0] = dest[0, 0]  # two lanes claim the same cell, one cell is orphaned
    broken = emu.FragmentLayout("broken", good.left, good.right, dest)
    assert emu.layout_problems(broken) == ["dest: 1 cells held by no lane, 1 by several"]
    a, b = random_int8(rng, (33, 40)), random_int8(rng, (7, 40))
    walk = emu.emulate_gemm(a, b, broken)
    assert (walk.writes != 1).any()


def test_layout_probe_round_trip():
    layout = LAYOUTS["shuffled"]
    cap = 16
    dump = np.full((3, tiling.SIMD_WIDTH, 1 + 3 * cap), -1, np.int32)
    for t, coords in enumerate((layout.left, layout.right, layout.dest)):
        elems = coords.shape[1]
        dump[t, :, 0] = elems
        rec = dump[t, :, 1:].reshape(tiling.SIMD_WIDTH, cap, 3)
        rec[:, :elems, 0] = 1
        rec[:, :elems, 1] = coords[..., 1]  # index[0] = column
        rec[:, :elems, 2] = coords[..., 0]  # index[1] = row
    parsed = emu.layout_from_probe(dump)
    for part in ("left", "right", "dest"):
        np.testing.assert_array_equal(getattr(parsed, part), getattr(layout, part))
    assert emu.layout_problems(parsed, capacities=dump[:, :, 0]) == []
    dump[0, 3, 0] = 16
    assert "left: capacity [8, 16]" in emu.layout_problems(parsed, capacities=dump[:, :, 0])[0]


# ---------------------------------------------------------------------------------------------
# The W8A8 epilogue's float32 arithmetic
# ---------------------------------------------------------------------------------------------


def exact_ulps(y32: np.ndarray, acc, sx, sw, bias=None) -> np.ndarray:
    """|y - exact| in float32 ulps of the exact value, exact = acc*sx*sw (+bias) in float64,
    whose error (~2**-52) is negligible at this scale."""
    exact = np.asarray(acc, np.float64) * np.float64(1) * sx.astype(np.float64) * sw.astype(np.float64)
    if bias is not None:
        exact = exact + bias.astype(np.float64)
    return np.abs(y32.astype(np.float64) - exact) / ulp(exact, "float32")


def adversarial_epilogue_inputs(rng, size=200_000):
    acc = np.concatenate([
        rng.integers(-(2**31) + 2**14, 2**31 - 2**14, size // 2),  # full int32 range
        rng.integers(-(2**25), 2**25, size // 2),  # around float32's exact-integer limit
    ])
    sx = (rng.random(size) * 0.1 + 1e-4).astype(np.float32)
    sw = (rng.random(size) * 0.01 + 1e-5).astype(np.float32)
    return acc, sx, sw


def test_dequantize_is_within_half_an_ulp_plus_a_hair(rng):
    acc, sx, sw = adversarial_epilogue_inputs(rng)
    err = exact_ulps(emu.dequantize_model(acc, sx, sw), acc, sx, sw)
    assert err.max() <= 0.5 + 2.0**-16, err.max()


def test_naive_float32_epilogue_would_break_the_bound(rng):
    # Why the error-free transformations: float(acc) * sx * sw in float32 rounds three times.
    acc, sx, sw = adversarial_epilogue_inputs(rng)
    naive = acc.astype(np.float32) * sx * sw
    assert exact_ulps(naive, acc, sx, sw).max() > 1.0


def test_dequantize_with_bias(rng):
    acc, sx, sw = adversarial_epilogue_inputs(rng, 20_000)
    bias = (rng.standard_normal(acc.size) * 1e3).astype(np.float32)
    y = emu.dequantize_model(acc, sx, sw, bias)
    exact = acc * sx.astype(np.float64) * sw.astype(np.float64) + bias
    # two-sum keeps it near one rounding even under cancellation, down to ~2**-44 |acc*s|
    tol = ulp(exact, "float32") * (0.5 + 2.0**-16) + 2.0**-44 * np.abs(exact - bias)
    assert (np.abs(y - exact) <= tol).all()


def awkward_scales(rng, size):
    """Scales the usual path cannot take: subnormal s_x (tiny activation rows), s_x near float32's
    max over 127 (bfloat16 rows near 1e36), products out of float32's range either way."""
    tiny = float(np.finfo(np.float32).tiny)
    kind = rng.integers(0, 4, size)
    sx = np.where(kind == 0, rng.random(size) * tiny,  # subnormal
                  np.where(kind == 1, rng.random(size) * 2.6e36 + 1e30, rng.random(size) * 0.1 + 1e-3))
    sw = np.where(kind == 1, rng.random(size) * 1e-3 + 1e-30,
                  np.where(kind == 2, rng.random(size) * 1e-38, rng.random(size) * 1e3 + 1e-6))
    return sx.astype(np.float32), sw.astype(np.float32)


def exact_y(acc, sx, sw, bias=None):
    y = np.asarray(acc, np.float64) * sx.astype(np.float64) * sw.astype(np.float64)
    return y if bias is None else y + bias.astype(np.float64)


def ulps_vs_exact(y32, exact):
    big = np.abs(exact) >= float(np.finfo(np.float32).max) * (1 + 2.0**-25)
    assert (np.isinf(y32) == big).all(), "inf exactly where the rounded result overflows"
    spacing = np.maximum(ulp(exact, "float32"), ulp(np.where(np.isfinite(y32), y32, 0), "float32"))
    return (np.abs(y32.astype(np.float64) - exact) / spacing)[~big]


@pytest.mark.parametrize("with_bias", [False, True])
def test_dequantize_spec_on_awkward_scales(rng, with_bias):
    """The numerics spec: within 1 ulp for every finite input, subnormal s_x and s_x near
    float32's max included, no intermediate overflow, no RuntimeWarning."""
    size = 100_000
    acc = np.concatenate([rng.integers(-(2**31) + 2**14, 2**31 - 2**14, size // 2),
                          rng.integers(-(2**12), 2**12, size // 2)])
    sx, sw = awkward_scales(rng, size)
    bias = None
    if with_bias:
        bias = (rng.standard_normal(size) * 10.0 ** rng.integers(-40, 38, size)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = emu.dequantize_model(acc, sx, sw, bias)
    assert ulps_vs_exact(y, exact_y(acc, sx, sw, bias)).max() <= 1.0


def test_dequantize_spec_examples():
    tiny = np.float32(1e-39)  # subnormal s_x
    y = emu.dequantize_model(np.array([1_000_000]), np.array([tiny]), np.array([np.float32(1.0)]))
    assert ulps_vs_exact(y, exact_y([1_000_000], np.array([tiny]), np.float32([1.0]))).max() <= 0.5
    # s_x = 1e36 / 127 (a bfloat16 row near 1e36), s_w small: no overflow of s_x * acc
    sx = np.array([np.float32(1e36 / 127)])
    y = emu.dequantize_model(np.array([127 * 127 * 1000]), sx, np.array([np.float32(1e-4)]))
    assert np.isfinite(y).all() and ulps_vs_exact(y, exact_y([127 * 127 * 1000], sx, np.float32([1e-4]))).max() <= 1
    # acc == 0 with a scale product beyond float32: 0 (+ bias), not NaN
    y = emu.dequantize_model(np.array([0, 0]), np.float32([2e36, 2e36]), np.float32([1e10, 1e10]),
                             np.float32([0, 3]))
    assert y.tolist() == [0.0, 3.0]


def test_usual_path_alone_would_break_the_spec(rng):
    # Why dequantize_wide: the usual pair arithmetic on subnormal or huge scales.
    acc = rng.integers(-(2**20), 2**20, 20_000)
    sx, sw = awkward_scales(rng, acc.size)
    with np.errstate(all="ignore"):
        s_hi = sx * sw
        naive = acc.astype(np.float32) * s_hi
    exact = exact_y(acc, sx, sw)
    fin = np.isfinite(naive)
    err = np.abs(naive[fin] - exact[fin]) / ulp(exact[fin], "float32")
    assert err.max() > 1.0 or not fin.all()


def test_dequantize_specials():
    acc = np.array([0, 5, 2**30, 0], np.int64)
    sx = np.array([np.nan, 1e30, 1e30, 1.0], np.float32)
    sw = np.array([1.0, 1e10, -1e10, 1.0], np.float32)
    y = emu.dequantize_model(acc, sx, sw, np.array([1.0, 1.0, 1.0, 2.0], np.float32))
    assert np.isnan(y[0])  # NaN row
    assert y[1] == np.inf and y[2] == -np.inf  # overflow
    assert y[3] == 2.0  # zero accumulator gives the bias


def to_dtype(y32: np.ndarray, dtype: str) -> np.ndarray:
    """The kernel's OutT(float) conversion (round to nearest even), back as float64."""
    mx_dtype = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}[dtype]
    return to_numpy(mx.array(y32).astype(mx_dtype), np.float64)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("m,k,n,with_bias", [(33, 513, 7, False), (65, 1030, 130, True), (7, 4097, 33, False)])
def test_emulated_w8a8_is_within_one_ulp(rng, dtype, m, k, n, with_bias):
    x32 = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x = to_numpy(mx.array(x32).astype({"float16": mx.float16, "bfloat16": mx.bfloat16,
                                       "float32": mx.float32}[dtype]), np.float32)
    w, s_w = quant.quantize_weight_np((rng.standard_normal((n, k)) * 0.05).astype(np.float32))
    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
    q, s_x, _ = emu.quantize_model(x)

    def epilogue(mi, ni, acc):
        return emu.dequantize_model(acc, s_x[mi], s_w[ni], None if bias is None else bias[ni])

    walk = emu.emulate_gemm(q, w, epilogue=epilogue)
    assert (walk.writes == 1).all() and walk.out_of_bounds == {"a": 0, "b": 0}
    y = to_dtype(walk.out.astype(np.float32), dtype)
    ref = w8a8_linear_ref(x, w, s_w, bias)
    spacing = np.maximum(ulp(ref, dtype), ulp(y, dtype))
    assert (np.abs(y - ref) / spacing).max() <= 1.0


# ---------------------------------------------------------------------------------------------
# The quantization kernel's arithmetic and thread partition
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 7, 255, 256, 257, 4097])
def test_quantize_model_is_int8nax_quant(rng, k):
    x = (rng.standard_normal((7, k)) * 10).astype(np.float32)
    x[6] *= np.float32(1e-38)  # a subnormal scale: the tiny-row rule
    x[1] = 0
    x[2, k // 2] = np.nan
    x[3, -1] = np.inf
    x[4, 0] = 127.0
    x[4, 1:] = rng.choice(np.array([0.5, -0.5, 2.5, -126.5], np.float32), k - 1)
    codes, scales, writes = emu.quantize_model(x)
    with np.errstate(invalid="ignore"):
        want_q, want_s = quant.quantize_activations_np(x)
    np.testing.assert_array_equal(codes, want_q)
    np.testing.assert_array_equal(scales, want_s)
    assert (writes == 1).all()


def tiny_and_edge_rows(rng, k=301):
    rows = [np.array([1e-37, 1e-38, 0, 5e-39] * (k // 4 + 1))[:k], rng.standard_normal(k) * 1e-39,
            rng.standard_normal(k) * 1e-36, rng.standard_normal(k) * 3e-38, rng.standard_normal(k) * 1e-44,
            rng.standard_normal(k) * 2.0**-64, rng.standard_normal(k) * 2.0**-100, rng.standard_normal(k) * 1e36,
            rng.standard_normal(k), np.zeros(k)]
    x = np.stack(rows).astype(np.float32)
    x[2, 0] = 127 * 2.0**-126  # a scale of exactly FLT_MIN
    x[6, 1] = 1e-39  # a subnormal value in a row with a normal scale
    x[3, 0] = np.float32(2.0**-119)  # the integer-quotient bound
    return x


@pytest.mark.parametrize("flush", [False, True])
def test_quantize_model_is_int8nax_quant_whatever_the_subnormals(rng, flush):
    """The kernel's arithmetic (on bits where subnormals could meet a float operation) gives
    int8nax.quant's codes and scales with subnormals kept and with them flushed."""
    x = tiny_and_edge_rows(rng)
    q, s, writes = emu.quantize_model(x, flush_subnormals=flush)
    want_q, want_s = quant.quantize_activations_np(x)
    np.testing.assert_array_equal(s.view(np.int32), want_s.view(np.int32))
    np.testing.assert_array_equal(q, want_q)
    assert (writes == 1).all()


def test_a_float_absmax_would_fail_on_a_flushing_gpu(rng):
    """Why the bits: the same rows with the absmax and the scaling done in float arithmetic
    that flushes lose the tiny rows."""
    x = tiny_and_edge_rows(rng)
    tiny = np.finfo(np.float32).tiny
    flushed = np.where(np.abs(x) < tiny, np.float32(0), x)
    q_naive, _ = quant.quantize_activations_np(flushed)
    want_q, _ = quant.quantize_activations_np(x)
    assert (q_naive != want_q).any()
