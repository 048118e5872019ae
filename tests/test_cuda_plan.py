"""CUDA dispatch and kernel-source assembly: pure Python, so they run on every machine."""

from __future__ import annotations

import re

import pytest

from int8nax import backends, tiling
from int8nax.backends import cuda_source

SEED = [(m, 4096, 4096) for m in (16, 64, 128, 256, 512, 1024, 2048)] + [
    (128, 3584, 18944), (512, 3584, 18944), (128, 18944, 3584), (512, 18944, 3584), (8192, 8192, 8192)]
ODD = [(1, 1, 1), (1, 7, 4096), (65, 1025, 129), (3, 131071, 2), (100000, 64, 3)]


@pytest.mark.parametrize("cfg", list(tiling.CUDA_CONFIGS.values()), ids=lambda c: c.name)
def test_configs_fit_the_hardware(cfg):
    assert cfg.shared_bytes <= tiling.CUDA_MAX_SHARED_BYTES
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
        tiling.CudaTileConfig("bad", **kwargs)


@pytest.mark.parametrize("m,k,n", SEED + ODD)
@pytest.mark.parametrize("sms", [132, 114, 16])
def test_plan_is_valid(m, k, n, sms):
    plan = tiling.cuda_plan(m, n, k, sms)
    assert plan.cfg in tiling.CUDA_CONFIGS.values()
    assert plan.splits >= 1 and plan.splits & (plan.splits - 1) == 0
    k_blocks = tiling.ceil_div(k, plan.cfg.bk)
    tiles = tiling.ceil_div(m, plan.cfg.bm) * tiling.ceil_div(n, plan.cfg.bn)
    if plan.splits > 1:
        # Splits only while all blocks fit on the SMs at once, and never into slivers of K.
        assert tiles * plan.splits <= sms * tiling.blocks_per_sm(plan.cfg)
        assert k_blocks // plan.splits >= tiling.MIN_SPLIT_BLOCKS
    lau, grid, block = plan.grid(m, n)
    assert block == (plan.cfg.threads, 1, 1)
    assert grid == (lau.grid_x * plan.cfg.threads, lau.grid_y, plan.splits)


def test_plan_follows_the_shape():
    assert tiling.cuda_plan(16, 4096, 4096).cfg.bm == 64  # decode-like M: one warpgroup
    assert tiling.cuda_plan(16, 4096, 4096).splits > 1  # ... and K split to fill the SMs
    assert tiling.cuda_plan(8192, 8192, 8192) == tiling.CudaPlan(tiling.CUDA_CONFIGS["wg2_128x256"], 1)


@pytest.mark.parametrize("k,bk,splits", [(1, 128, 1), (4096, 128, 4), (4097, 128, 4), (640, 128, 4), (300, 32, 16), (1, 128, 3)])
def test_split_ranges_cover_k_once(k, bk, splits):
    ranges = tiling.split_ranges(k, bk, splits)
    covered = [kb for lo, hi in ranges for kb in range(lo, hi)]
    assert covered == list(range(tiling.ceil_div(k, bk)))
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
    text = cuda_source.header_text("sm90")
    for cfg in tiling.CUDA_CONFIGS.values():
        assert f"m64n{cfg.bn}k32" in text
    # The wrappers are declared before the GEMM template that calls them.
    assert text.index("void wgmma_s8(") < text.index("void gemm_sm90(")
    assert "wgmma.mma_async" not in cuda_source.header_text("simt")


def test_committed_wgmma_header_is_current():
    path = cuda_source.kernels_dir() / cuda_source.WGMMA_HEADER
    assert path.read_text() == cuda_source.wgmma_header_text(), (
        "kernels/wgmma_s8.cuh is stale: run cuda_source.write_wgmma_header()")


@pytest.mark.parametrize("part", ["sm90", "simt", "quantize"])
def test_header_is_a_few_absolute_includes(part):
    text = cuda_source.header(part)
    lines = text.splitlines()
    assert len(text) < 400 and all(l.startswith('#include "/') and l.endswith('.cuh"') for l in lines)
    # Every included file exists and together they are the part's text.
    files = [l[len('#include "'):-1] for l in lines]
    from pathlib import Path

    assert "\n".join(Path(f).read_text() for f in files) == cuda_source.header_text(part)


def test_kernel_names_change_with_the_header_text(monkeypatch):
    spec = cuda_source.gemm_int32("sm90", tiling.CUDA_CONFIGS["wg1_64x64"])
    assert spec.name.endswith("_" + cuda_source.digest("sm90"))
    for fn in (cuda_source.header_text, cuda_source.digest, cuda_source.gemm_int32):
        fn.cache_clear()
    real = cuda_source._read
    monkeypatch.setattr(cuda_source, "_read", lambda f: real(f) + ("// edited\n" if f == "gemm_sm90.cuh" else ""))
    try:
        assert cuda_source.gemm_int32("sm90", tiling.CUDA_CONFIGS["wg1_64x64"]).name != spec.name
    finally:
        for fn in (cuda_source.header_text, cuda_source.digest, cuda_source.gemm_int32):
            fn.cache_clear()


def test_header_falls_back_to_the_text_without_a_kernels_folder(monkeypatch):
    cuda_source.header.cache_clear()
    monkeypatch.setattr(cuda_source, "kernels_dir", lambda: None)
    try:
        assert cuda_source.header("quantize") == cuda_source.header_text("quantize")
    finally:
        cuda_source.header.cache_clear()


def test_kernel_specs_are_distinct_and_use_mlx_shape_arguments():
    specs = [cuda_source.gemm_int32(f, c) for f in cuda_source.FAMILIES for c in tiling.CUDA_CONFIGS.values()]
    specs += [cuda_source.gemm_w8a8("sm90", c) for c in tiling.CUDA_CONFIGS.values()]
    specs += [cuda_source.quantize(), cuda_source.reduce_int32(), cuda_source.reduce_w8a8(), cuda_source.count_sms()]
    names = [s.name for s in specs]
    assert len(set(names)) == len(names)  # MLX caches compiled modules by name
    i32 = cuda_source.gemm_int32("sm90", tiling.CUDA_CONFIGS["wg2_128x256"])
    # MLX passes a `<input>_shape` argument only when the body mentions it.
    assert "a_shape[0]" in i32.source and "b_shape[0]" in i32.source and "a_shape[1]" in i32.source
    assert i32.shared_memory == tiling.CUDA_CONFIGS["wg2_128x256"].shared_bytes
    assert cuda_source.gemm_int32("simt", tiling.CUDA_SIMT_CONFIG).shared_memory == 0


def test_cuda_probe_explains_itself():
    probe = backends.probe("cuda")
    assert probe.reason
    if not probe.available:
        assert "CUDA" in probe.reason


def test_row_chunks_respect_the_grid_limit():
    from int8nax.backends import cuda

    cfg = tiling.CUDA_CONFIGS["wg1_64x64"]
    chunks = cuda._row_chunks(10_000_000, cfg)
    assert chunks[0] == (0, cuda.MAX_GRID_Y * cfg.bm) and chunks[-1][1] == 10_000_000
    assert all(hi - lo <= cuda.MAX_GRID_Y * cfg.bm for lo, hi in chunks)
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
    assert cuda._row_chunks(5, cfg) == [(0, 5)]
