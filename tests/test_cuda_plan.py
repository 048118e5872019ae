"""CUDA dispatch and kernel-source assembly: pure Python, so they run on every machine."""

from __future__ import annotations

import re

import numpy as np
import pytest

from int8nax import backends, quant
from int8nax.backends.cuda import plans as cuda_plans, source as cuda_source
from int8nax.bench import problems

SEED = list(problems.SEED_SHAPES + problems.EXTRA_SHAPES)  # (M, K, N)
ODD = [(1, 1, 1), (1, 7, 4096), (65, 1025, 129), (3, 131071, 2), (100000, 64, 3)]


@pytest.mark.parametrize("cfg", list(cuda_plans.CUDA_CONFIGS.values()), ids=lambda c: c.name)
def test_configs_fit_the_hardware(cfg):
    assert cfg.shared_bytes <= cuda_plans.CUDA_MAX_SHARED_BYTES
    # No __launch_bounds__ in MLX's generated kernels: 256 threads x up to 255 registers fit in 64K.
    assert cfg.threads <= 256
    assert cfg.bm == 64 * cfg.wm and cfg.bk == 128
    assert ("STAGES", cfg.stages) in cfg.template()


@pytest.mark.parametrize("kwargs, what", [
    (dict(bm=128, bn=128, bk=128, wm=1, wn=1), "BM = 64\\*WM"),
    (dict(bm=64, bn=128, bk=64, wm=1, wn=1), "BK must be 128"),
    (dict(bm=64, bn=264, bk=128, wm=1, wn=1), "BN in 8..256"),
    (dict(bm=64, bn=128, bk=128, wm=1, wn=1, stages=2), "at least 3 stages"),
])
def test_bad_cuda_config_is_rejected(kwargs, what):
    with pytest.raises(ValueError, match=what):
        cuda_plans.CudaTileConfig("bad", **kwargs)


@pytest.mark.parametrize("m,k,n", SEED + ODD)
@pytest.mark.parametrize("sms", [132, 114, 16])
def test_plan_is_valid(m, k, n, sms):
    plan = cuda_plans.cpasync_plan(m, n, k, sms)
    assert plan.cfg in cuda_plans.CUDA_CONFIGS.values()
    assert plan.splits >= 1 and plan.splits & (plan.splits - 1) == 0
    k_blocks = cuda_plans.ceil_div(k, plan.cfg.bk)
    tiles = cuda_plans.ceil_div(m, plan.cfg.bm) * cuda_plans.ceil_div(n, plan.cfg.bn)
    if plan.splits > 1:
        # Splits only while all blocks fit on the SMs at once, and never into slivers of K.
        assert tiles * plan.splits <= sms * cuda_plans.blocks_per_sm(plan.cfg)
        assert k_blocks // plan.splits >= cuda_plans.MIN_SPLIT_BLOCKS
    lau, (grid, block) = plan.launch(m, n), plan.grid(m, n)
    assert block == (plan.cfg.threads, 1, 1)
    assert grid == (lau.grid_x * plan.cfg.threads, lau.grid_y, plan.splits)


def test_plan_follows_the_shape():
    assert cuda_plans.cpasync_plan(16, 4096, 4096).cfg.bm == 64  # decode-like M: one warpgroup
    assert cuda_plans.cpasync_plan(16, 4096, 4096).splits > 1  # ... and K split to fill the SMs
    assert cuda_plans.cpasync_plan(8192, 8192, 8192) == cuda_plans.CudaPlan(cuda_plans.CUDA_CONFIGS["wg2_128x256"], 1)


@pytest.mark.parametrize("k,bk,splits", [(1, 128, 1), (4096, 128, 4), (4097, 128, 4), (640, 128, 4), (300, 32, 16), (1, 128, 3)])
def test_split_ranges_cover_k_once(k, bk, splits):
    ranges = cuda_plans.split_ranges(k, bk, splits)
    covered = [kb for lo, hi in ranges for kb in range(lo, hi)]
    assert covered == list(range(cuda_plans.ceil_div(k, bk)))
    sizes = [hi - lo for lo, hi in ranges]
    assert max(sizes) - min(sizes) <= 1  # balanced; empty only when splits > K blocks


def test_wgmma_wrapper_names_every_accumulator():
    text = cuda_source.wgmma_wrappers([256, 64])
    for n in (256, 64):
        (asm,) = re.findall(rf"wgmma\.mma_async\.sync\.aligned\.m64n{n}k32\.s32\.s8\.s8 \{{([^}}]*)\}}", text)
        assert asm.split(", ") == [f"%{i}" for i in range(n // 2)]
        assert f'"+r"(d[{n // 2 - 1}])' in text and f"int (&d)[{n // 2}]" in text
    assert "m64n128k32" not in text


def test_sm90_header_has_a_wrapper_for_every_tile_width():
    text = cuda_source.header_text("cpasync")
    for cfg in cuda_plans.CUDA_CONFIGS.values():
        assert f"m64n{cfg.bn}k32" in text
    # The wrappers are declared before the GEMM template that calls them.
    assert text.index("void wgmma_s8(") < text.index("void gemm_cpasync(")
    assert "wgmma.mma_async" not in cuda_source.header_text("simt")


def test_committed_wgmma_header_is_current():
    path = cuda_source.kernels_dir() / cuda_source.WGMMA_HEADER
    assert path.read_text() == cuda_source.wgmma_header_text(), (
        "kernels/cuda/ptx/wgmma_s8.cuh is stale: run cuda_source.write_wgmma_header()")


@pytest.mark.parametrize("part", sorted(cuda_source._HEADERS))
def test_header_is_its_kernels_absolute_include_then_its_launch_bound(part):
    text = cuda_source.header(part)
    lines = text.splitlines()
    tops = cuda_source._HEADERS[part]
    # one line for the kind's own header (about 100 bytes), shorter than the text it reaches (1.5-60 KB)
    assert len(text) < min(1600, len(cuda_source.header_text(part)))
    assert lines[:len(tops)] == [f'#include "{(cuda_source.kernels_dir() / f).as_posix()}"' for f in tops]
    assert all((cuda_source.kernels_dir() / f).is_file() for f in tops)
    # the launch bound, where the kind has one, after every include: nothing it includes can follow it
    assert lines[len(tops):] == cuda_source.launch_bound_lines(part).splitlines()
    assert (part in cuda_source.LAUNCH_BOUNDS) == bool(lines[len(tops):])


@pytest.mark.parametrize("part", sorted(cuda_source._HEADERS))
def test_header_text_is_every_file_the_includes_reach_each_once_after_its_own(part):
    order = cuda_source.walk(part)
    assert order[0] == "common.cuh" and order[-1] == cuda_source._HEADERS[part][-1] and len(set(order)) == len(order)
    for i, f in enumerate(order):
        if not cuda_source.is_mlx_header(f):
            assert set(cuda_source.includes(f)) <= set(order[:i]), f  # what a file includes comes before it
    text = cuda_source.header_text(part)
    ours = [f for f in order if not cuda_source.is_mlx_header(f)]
    assert all('#include "' + f + '"' not in text for f in ours)  # inlined, not included
    assert all(text.count(f'#include "{f}"') == 1 for f in order if cuda_source.is_mlx_header(f))


@pytest.mark.parametrize("edited", ["gemm/cpasync.cuh", "tile/smem.cuh"])
def test_kernel_names_change_with_the_text_of_every_header_they_reach(monkeypatch, edited):
    # tile/smem.cuh reaches the cp.async GEMM only through gemm/cpasync.cuh's includes; the SIMT
    # GEMM includes neither
    cfg = cuda_plans.CUDA_CONFIGS["wg1_64x64"]
    spec, simt = cuda_source.gemm_int32("sm90", cfg), cuda_source.gemm_int32("simt", cuda_plans.CUDA_SIMT_CONFIG)
    assert spec.name.endswith("_" + cuda_source.digest("cpasync"))
    cached = (cuda_source.header_text, cuda_source.digest, cuda_source.gemm_int32)
    for fn in cached:
        fn.cache_clear()
    real = cuda_source._read
    monkeypatch.setattr(cuda_source, "_read", lambda f: real(f) + ("// edited\n" if f == edited else ""))
    try:
        assert cuda_source.gemm_int32("sm90", cfg).name != spec.name
        assert cuda_source.gemm_int32("simt", cuda_plans.CUDA_SIMT_CONFIG).name == simt.name
    finally:
        for fn in cached:
            fn.cache_clear()


def test_every_cuda_header_is_reached_has_an_include_guard_and_redefines_nothing_global():
    folder = cuda_source.kernels_dir()
    reached = {f for part in cuda_source._HEADERS for f in cuda_source.walk(part) if not cuda_source.is_mlx_header(f)}
    assert reached == {p.relative_to(folder).as_posix() for p in folder.rglob("*.cuh")}
    for f in reached:
        text = cuda_source._read(f)
        assert "#pragma once" in text and "__global__" not in text.replace("__launch_bounds__", ""), f
        assert all(cuda_source.is_mlx_header(i) or (folder / i).is_file() for i in cuda_source.includes(f)), f
    # the warp-specialised GEMMs (and their atomic forms) and the staged SwiGLU quantization carry
    # their launch bounds
    bound = {"cooperative", "pingpong", "swiglu_quantize_staged"}
    assert set(cuda_source.LAUNCH_BOUNDS) == bound | {cuda_source.atomic_part(k) for k in ("cooperative", "pingpong")}


HEADERS = sorted(p.relative_to(cuda_source.kernels_dir()).as_posix() for p in cuda_source.kernels_dir().rglob("*.cuh"))


@pytest.mark.parametrize("header", HEADERS)
def test_each_header_compiles_on_its_own(header, tmp_path):
    # Each header includes what it needs: one alone in a translation unit compiles (PTX, sm_90a).
    # Those reaching MLX's own headers need them (INT8NAX_MLX_JIT_HEADERS, as test_swiglu_quantize).
    import os
    import shutil
    import subprocess

    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found: the per-header compile needs the CUDA toolkit")
    mlx = cuda_source.mlx_headers(f'#include "{(cuda_source.kernels_dir() / header).as_posix()}"')
    jit = os.environ.get("INT8NAX_MLX_JIT_HEADERS")
    if mlx and not jit:
        pytest.skip(f"{header} includes MLX's {mlx[0]}: set INT8NAX_MLX_JIT_HEADERS to a folder holding it")
    unit = tmp_path / "alone.cu"
    unit.write_text(f'#include "{(cuda_source.kernels_dir() / header).as_posix()}"\n')
    cmd = [nvcc, "-std=c++17", "-arch=sm_90a", "-ptx", "-o", str(tmp_path / "alone.ptx"), str(unit)]
    proc = subprocess.run(cmd + (["-I", jit] if mlx else []), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_header_falls_back_to_the_text_without_a_kernels_folder(monkeypatch):
    cuda_source.header.cache_clear()
    monkeypatch.setattr(cuda_source, "kernels_dir", lambda: None)
    try:
        assert cuda_source.header("quantize") == cuda_source.header_text("quantize")
    finally:
        cuda_source.header.cache_clear()


def test_kernel_specs_are_distinct_and_use_mlx_shape_arguments():
    specs = [cuda_source.gemm_int32(f, c) for f in cuda_source.FAMILIES for c in cuda_plans.CUDA_CONFIGS.values()]
    specs += [cuda_source.gemm_w8a8("sm90", c) for c in cuda_plans.CUDA_CONFIGS.values()]
    specs += [cuda_source.quantize(), cuda_source.reduce_int32(), cuda_source.reduce_w8a8(), cuda_source.count_sms()]
    names = [s.name for s in specs]
    assert len(set(names)) == len(names)  # MLX caches compiled modules by name
    i32 = cuda_source.gemm_int32("sm90", cuda_plans.CUDA_CONFIGS["wg2_128x256"])
    # MLX passes a `<input>_shape` argument only when the body mentions it.
    assert "a_shape[0]" in i32.source and "b_shape[0]" in i32.source and "a_shape[1]" in i32.source
    assert i32.shared_memory == cuda_plans.CUDA_CONFIGS["wg2_128x256"].shared_bytes
    assert cuda_source.gemm_int32("simt", cuda_plans.CUDA_SIMT_CONFIG).shared_memory == 0


def test_cuda_probe_explains_itself():
    probe = backends.probe("cuda")
    assert probe.reason
    if not probe.available:
        assert "CUDA" in probe.reason


def test_row_chunks_respect_the_grid_limit():
    from int8nax.backends.cuda import graphs as cuda_graphs

    cfg = cuda_plans.CUDA_CONFIGS["wg1_64x64"]
    chunks = cuda_graphs._row_chunks(10_000_000, cfg)
    assert chunks[0] == (0, cuda_graphs.MAX_GRID_Y * cfg.bm) and chunks[-1][1] == 10_000_000
    assert all(hi - lo <= cuda_graphs.MAX_GRID_Y * cfg.bm for lo, hi in chunks)
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    assert cuda_graphs._row_chunks(5, cfg) == [(0, 5)]


# ---- the quantization kernel's launch (cuda_plans.cuda_quant_launch) ----

# Row lengths of common layers (hidden and FFN sizes), K % 8 != 0, and rows past every launch.
QUANT_K = [1, 7, 8, 64, 896, 1000, 1536, 2048, 3072, 3584, 4095, 4096, 4104, 5120, 8192, 8200, 11008, 13824,
           14336, 18944, 27648, 28672, 29568, 32768, 32776, 53248]
QUANT_M = [1, 2, 16, 64, 100, 113, 114, 115, 128, 131, 132, 133, 256, 264, 265, 512, 2048, 8192, 100000]
REGISTERS_PER_SM = 65536
FLOAT32_OVERHEAD_REGISTERS = 24
"""Registers of the quantization kernel besides the float32 row slice (ptxas, CUDA 13.0: 52 at
held 4 = 32 + 20, 80 at held 8 = 64 + 16), with a margin."""


@pytest.mark.parametrize("sms", [132, 114, 16])
def test_quant_launch_holds_every_row_that_fits(sms):
    longest = max(launch.capacity for launch in cuda_plans.CUDA_QUANT_LAUNCHES)
    for m in QUANT_M:
        for k in QUANT_K:
            launch = cuda_plans.cuda_quant_launch(m, k, sms)
            assert launch in cuda_plans.CUDA_QUANT_LAUNCHES
            if k <= longest:  # else the two-pass loop, at any launch
                assert launch.capacity >= k, (m, k, launch)
            if m > sms and k <= 8192:  # many rows: more than one row per SM resident
                assert launch.threads <= 256, (m, k, launch)


@pytest.mark.parametrize("launch", cuda_plans.CUDA_QUANT_LAUNCHES, ids=lambda v: f"{v.threads}x{v.held}")
def test_quant_launches_fit_a_block(launch):
    assert launch.threads % 32 == 0 and 128 <= launch.threads <= 1024  # at least a warp per scheduler
    # No __launch_bounds__ in MLX's kernels: the float32 row slice (8 registers a group) and the
    # rest must fit the per-thread share of one SM's registers for the block to launch at all.
    assert launch.held * 8 + FLOAT32_OVERHEAD_REGISTERS <= min(255, REGISTERS_PER_SM // launch.threads)
    assert launch.grid(3) == ((3 * launch.threads, 1, 1), (launch.threads, 1, 1))
    assert launch.template() == [("THREADS", launch.threads), ("HELD", launch.held)]


def test_quant_launches_are_few():
    # Every launch is an NVRTC compile per dtype (~8 s a process): three in all, and a model whose
    # layers have one K up to 8192 and one longer K (decode and prefill M) builds two of them.
    seen = {cuda_plans.cuda_quant_launch(m, k, sms) for m in QUANT_M for k in QUANT_K for sms in (132, 114, 16)}
    assert seen == set(cuda_plans.CUDA_QUANT_LAUNCHES) and len(seen) <= 3
    for short in (896, 1536, 2048, 3584, 4096, 5120, 8192):
        for long in (11008, 14336, 18944, 28672):
            assert len({cuda_plans.cuda_quant_launch(m, k) for m in QUANT_M for k in (short, long)}) <= 2


@pytest.mark.parametrize("kwargs", [dict(threads=100, held=4), dict(threads=2048, held=1), dict(threads=256, held=0)])
def test_bad_quant_launch_is_rejected(kwargs):
    with pytest.raises(ValueError):
        cuda_plans.CudaQuantLaunch(**kwargs)


# (M, K) -> (threads, held) on 132 SMs, by hand: few rows take the 16-warp launch; many rows the
# fewest threads that hold the row.
QUANT_SEED = {
    (16, 4096): (512, 8), (64, 4096): (512, 8), (128, 4096): (512, 8), (256, 4096): (128, 4),
    (512, 4096): (128, 4), (1024, 4096): (128, 4), (2048, 4096): (128, 4), (128, 3584): (512, 8),
    (512, 3584): (128, 4), (128, 18944): (512, 8), (512, 18944): (512, 8), (8192, 8192): (256, 4),
    (132, 4096): (512, 8), (133, 4096): (128, 4), (4096, 4104): (256, 4), (4096, 14336): (512, 8),
    (4096, 65536): (512, 8),
}


@pytest.mark.parametrize("m,k", list(QUANT_SEED))
def test_quant_launch_of_the_seed_shapes(m, k):
    launch = cuda_plans.cuda_quant_launch(m, k, 132)
    assert (launch.threads, launch.held) == QUANT_SEED[(m, k)]


# ---- the quantization kernel's arithmetic (kernels/cuda/quant/quantize.cuh, code_of), in numpy ----

def test_normal_scale_codes_need_no_clamp():
    # code_of skips the clamp when the scale is normal: |fl(x * fl(1 / fl(amax / 127)))| < 127.5 for
    # |x| <= amax. Every float32 mantissa of amax, in binades where s is normal (the bound is
    # scale-invariant there), at x = amax (the largest product).
    mant = (np.arange(1 << 23, dtype=np.uint32) | np.uint32(0x3F800000)).view(np.float32)
    worst = 0.0
    for e in (-119, -60, 0, 60, 127):
        amax = mant * np.float32(2.0**e)
        with np.errstate(over="ignore"):
            amax = amax[np.isfinite(amax)]
        s = amax / np.float32(127)
        amax, s = amax[s >= np.float32(2.0**-126)], s[s >= np.float32(2.0**-126)]
        v = amax * (np.float32(1) / s)
        assert v.dtype == np.float32
        worst = max(worst, float(v.max()))
    assert 127 <= worst < 127.5


def _add_toward_zero(v: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 v + c rounded toward zero (__fadd_rz): the exact sum in float64, then the float32
    nearest it, stepped toward zero where that one is farther out."""
    exact = v.astype(np.float64) + c.astype(np.float64)
    r = exact.astype(np.float32)
    out = np.abs(r.astype(np.float64)) > np.abs(exact)
    r[out] = np.nextafter(r[out], np.float32(0))
    return r


def test_round_half_away_by_a_truncating_add():
    # code_of's rounding, trunc(fl_rz(v + copysign(0.5, v))), is int8nax.quant's round_half_away
    # for every float32 within 4096 ulps of each integer and half-integer up to 191 (TINY rows
    # reach ~190 before their clamp), and at random.
    centres = np.arange(-382, 383, dtype=np.float32) / np.float32(2)
    bits = centres.view(np.int32)[:, None] + np.arange(-4096, 4097, dtype=np.int32)[None, :]
    v = np.concatenate([bits.ravel().view(np.float32), np.float32(0.49999997) * np.array([1, -1], np.float32),
                        np.random.default_rng(0).uniform(-191, 191, 1 << 20).astype(np.float32)])
    v = v[np.isfinite(v) & (np.abs(v) <= 191)]
    got = np.trunc(_add_toward_zero(v, np.copysign(np.float32(0.5), v).astype(np.float32)))
    assert np.array_equal(got, quant.round_half_away(v))


def test_the_include_walk_reads_an_include_as_the_preprocessor_does():
    # a trailing comment or indentation must not hide an include from the walk (the digest and
    # the MLX headers a kernel needs come from it)
    text = ('#include "a.cuh"  // why\n  #  include "b/c.cuh" /* note */\n#include <cuda/std/array>\n'
            '// #include "commented.cuh" is not an include\n')
    assert cuda_source._INCLUDE.findall(text) == ["a.cuh", "b/c.cuh"]
