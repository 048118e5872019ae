"""The TMA GEMMs' plans and kernel specs: pure Python, so they run on every machine."""

from __future__ import annotations

import pytest

from int8nax.backends.cuda import choice as cuda_choice, plans as cuda_plans, source as cuda_source
from int8nax.backends.cuda import kernels as cuda_kernels, pack as cuda_pack, settings as cuda_settings
from int8nax.bench import problems

SEED = list(problems.SEED_SHAPES + problems.EXTRA_SHAPES)  # (M, K, N)
ODD = [(1, 16, 1), (1, 4096, 7), (65, 160, 1025), (3, 48, 131071), (100000, 16, 64), (4097, 256, 129)]


@pytest.mark.parametrize("cfg", list(cuda_plans.COOPERATIVE_CONFIGS.values()), ids=lambda c: c.name)
def test_ws_configs_fit_the_hardware(cfg):
    assert cfg.shared_bytes <= cuda_plans.CUDA_MAX_SHARED_BYTES
    assert cfg.threads == 384 and cfg.bk == 128 and cfg.bn <= 256  # TMA box rows <= 256
    producer, consumer = cuda_plans.CUDA_WS_REGISTERS
    assert 128 * producer + 256 * consumer <= 65536 and producer % 8 == 0 and consumer % 8 == 0
    assert cfg.consumer_width in (64, 128, 256)  # wgmma wrappers exist for these (ptx/wgmma_s8.cuh)
    assert cfg.consumer_width in cuda_source.wgmma_widths()
    assert dict(cfg.template()) == {"BM": cfg.bm, "BN": cfg.bn, "STAGES": cfg.stages, "CHUNK": cuda_plans.EPILOGUE_CHUNK}


def test_epilogue_chunk_keeps_two_blocks_of_256_threads_at_128_registers():
    # one factor load per pair where an SM holds 512 threads or more of the kernel, else 8
    assert cuda_plans.epilogue_chunk(256, 2) == 1 and cuda_plans.epilogue_chunk(128, 4) == 1
    assert cuda_plans.epilogue_chunk(256, 1) == cuda_plans.epilogue_chunk(128, 2) == cuda_plans.epilogue_chunk(384, 1) == 8
    chunks = {c.name: c.epilogue_chunk for c in cuda_plans.CUDA_CONFIGS.values()}
    assert chunks == {"wg2_128x256": 8, "wg2_128x128_x2": 1, "wg1_64x64": 8, "wg2_128x192": 8, "wg2_128x144": 8,
                      "wg1_64x32": 8, "wg2_128x112": 8}
    for c in cuda_plans.CUDA_CONFIGS.values():
        assert ("CHUNK", c.epilogue_chunk) in c.template() and ("CHUNK", c.epilogue_chunk) in c.tma_template()


@pytest.mark.parametrize("cfg", list(cuda_plans.CUDA_CONFIGS.values()), ids=lambda c: c.name)
def test_tma_simple_configs_fit(cfg):
    assert cfg.tma_shared_bytes <= cuda_plans.CUDA_MAX_SHARED_BYTES
    assert cfg.tma_shared_bytes > cfg.shared_bytes  # + barriers and map scratch
    assert dict(cfg.tma_template())["STAGES"] == cfg.stages
    assert dict(cfg.tma_template())["AHEAD"] == cfg.loads_ahead


@pytest.mark.parametrize("kwargs, what", [
    (dict(bm=128, bn=256, bk=64, wm=2, wn=1), "BK must be 128"),
    (dict(bm=256, bn=128, bk=128, wm=4, wn=1), "two consumer warpgroups"),
    (dict(bm=64, bn=512, bk=128, wm=1, wn=2), "BN <= 256"),
    (dict(bm=128, bn=128, bk=128, wm=2, wn=1, stages=1), "at least 2 stages"),
])
def test_bad_ws_config_is_rejected(kwargs, what):
    with pytest.raises(ValueError, match=what):
        cuda_plans.CooperativeConfig("bad", **kwargs)


@pytest.mark.parametrize("cfg", list(cuda_plans.PINGPONG_CONFIGS.values()), ids=lambda c: c.name)
def test_pp_configs_fit_the_hardware(cfg):
    assert cfg.shared_bytes <= cuda_plans.CUDA_MAX_SHARED_BYTES
    assert cfg.threads == 384 and (cfg.bm, cfg.bk) == (128, 128) and cfg.bn <= 128
    # stages, 2 x STAGES + 2 barriers (8 bytes each) rounded to 128, map scratch, alignment slack
    barriers = cuda_plans.ceil_div(8 * (2 * cfg.stages + 2), 128) * 128
    assert cfg.shared_bytes == cfg.stages * (128 + cfg.bn) * 128 + barriers + 256 + 1024
    assert cfg.bn in cuda_source.wgmma_widths()
    assert dict(cfg.template()) == {"BN": cfg.bn, "STAGES": cfg.stages, "CHUNK": cuda_plans.EPILOGUE_CHUNK}


@pytest.mark.parametrize("kwargs, what", [
    (dict(bm=128, bn=256, bk=128, wm=1, wn=1), "BN must be 8..128"),
    (dict(bm=64, bn=128, bk=128, wm=1, wn=1), "BM=128"),
    (dict(bm=128, bn=128, bk=64, wm=1, wn=1), "BK must be 128"),
    (dict(bm=128, bn=100, bk=128, wm=1, wn=1), "multiple of 8"),
    (dict(bm=128, bn=128, bk=128, wm=1, wn=1, stages=1), "at least 2 stages"),
])
def test_bad_pp_config_is_rejected(kwargs, what):
    with pytest.raises(ValueError, match=what):
        cuda_plans.PingPongConfig("bad", **kwargs)


@pytest.mark.parametrize("m,k,n", SEED + ODD)
@pytest.mark.parametrize("w8a8", [False, True])
def test_pp_plan_is_valid(m, k, n, w8a8):
    plan = cuda_plans.pingpong_plan(m, n, k, 132, w8a8)
    assert plan.cfg in cuda_plans.PINGPONG_CONFIGS.values()
    units = cuda_plans.ws_units(m, n, plan.cfg, plan.splits)
    assert 1 <= plan.blocks <= min(132, units)
    assert plan.splits == 1 if w8a8 else plan.splits & (plan.splits - 1) == 0
    if plan.splits > 1:
        assert units <= 132 and cuda_plans.ceil_div(k, 128) // plan.splits >= cuda_plans.MIN_SPLIT_BLOCKS
    # 128 x 64 only where the 128 x 128 tiles give fewer units than SMs
    wide = cuda_plans.PINGPONG_CONFIGS["pp_128x128"]
    assert (plan.cfg.bn == 64) == (cuda_plans.ws_units(m, n, wide, 1) < 132)


@pytest.mark.parametrize("configs,specs,call", [
    (cuda_plans.COOPERATIVE_CONFIGS, (cuda_source.gemm_tma_ws_cooperative, cuda_source.gemm_tma_ws_cooperative_packed,
                                      cuda_source.gemm_w8a8_tma_ws_cooperative), "gemm_tma_ws_cooperative<BM, BN, STAGES, CHUNK, "),
    (cuda_plans.PINGPONG_CONFIGS, (cuda_source.gemm_tma_ws_pingpong, cuda_source.gemm_tma_ws_pingpong_packed,
                                   cuda_source.gemm_w8a8_tma_ws_pingpong), "gemm_tma_ws_pingpong<BN, STAGES, CHUNK>"),
], ids=["tma_ws", "tma_pp"])
def test_persistent_specs(configs, specs, call):
    for c in configs.values():
        raw, packed, fused = (spec(c) for spec in specs)
        assert raw.input_names == ("a", "b", "plan") and raw.output_names == ("out", "maps")
        # over an activation pack (backends/cuda/pack.py): no scratch output, the maps in the pack
        assert packed.input_names == ("pack", "w", "plan") and packed.output_names == ("out",)
        assert fused.input_names == ("pack", "w", "scale_w", "bias", "plan")
        assert fused.output_names == ("y",) and fused.shared_memory == packed.shared_memory == raw.shared_memory == c.shared_bytes
        for s in (raw, packed, fused):
            assert "plan_shape[0], plan_shape[1]" in s.source and call in s.source
            assert s.header.rstrip().splitlines()[-1] == "#define __global__ __location__(global) __launch_bounds__(384, 1)"
        for s in (packed, fused):
            assert "uint8_t* maps = int8nax::pack_maps(pack, pm, pk);" in s.source
            assert "(q, w, pm, w_shape[0], pk, plan_shape[0], plan_shape[1], maps, " in s.source
        assert "SplitInt32{out, a_shape[0], b_shape[0]}" in raw.source and "SplitInt32{out, pm, w_shape[0]}" in packed.source
        if configs is cuda_plans.COOPERATIVE_CONFIGS:  # the exact path per chunk: W8A8 only (epilogue/store_accumulators.cuh, CHUNK_EXACT)
            assert "CHUNK, false>" in raw.source and "CHUNK, true>" in fused.source
        assert "same_epilogue(int8nax::DequantStore<TOut, HAS_BIAS, NARROW, int8nax::pointee<decltype(bias)>>{y, scale_x, scale_w, bias" in fused.source


def test_tma_ok():
    assert cuda_plans.tma_ok(16) and cuda_plans.tma_ok(4096) and cuda_plans.tma_ok(18944)
    assert not cuda_plans.tma_ok(8) and not cuda_plans.tma_ok(4097) and not cuda_plans.tma_ok(0)


@pytest.mark.parametrize("m,k,n", SEED + ODD)
@pytest.mark.parametrize("sms", [132, 114, 16])
def test_ws_plan_is_valid(m, k, n, sms):
    plan = cuda_plans.cooperative_plan(m, n, k, sms)
    assert plan.cfg in cuda_plans.COOPERATIVE_CONFIGS.values()
    assert plan.splits >= 1 and plan.splits & (plan.splits - 1) == 0
    units = cuda_plans.ws_units(m, n, plan.cfg, plan.splits)
    assert 1 <= plan.blocks <= min(sms, units)
    assert 1 <= plan.group <= cuda_plans.ceil_div(m, plan.cfg.bm)
    if plan.splits > 1:
        assert units <= sms
        assert cuda_plans.ceil_div(k, plan.cfg.bk) // plan.splits >= cuda_plans.MIN_SPLIT_BLOCKS
    grid, block = plan.grid()
    assert block == (384, 1, 1) and grid == (plan.blocks * 384, 1, 1)
    assert plan.plan_shape() == (plan.splits, plan.group)


def test_ws_plan_follows_the_shape():
    assert cuda_plans.cooperative_plan(16, 4096, 4096).cfg.bm == 64
    assert cuda_plans.cooperative_plan(16, 4096, 4096).splits == 4  # 32 tiles x 4 splits = 128 units on 132 SMs
    assert cuda_plans.cooperative_plan(8192, 8192, 8192).cfg.name == "ws_128x256"
    assert cuda_plans.cooperative_plan(8192, 8192, 8192).blocks == 132
    assert cuda_plans.cooperative_plan(512, 4096, 4096).cfg.name == "ws_128x128"


@pytest.mark.parametrize("m,k,n,cfg,splits,group", [
    (1000, 1040, 1000, "ws_128x128", 1, 4), (8192, 256, 8192, "ws_128x256", 1, 16), (16, 4096, 4096, "ws_64x128", 4, 1),
    (640, 4096, 300, "ws_128x256", 2, 2), (130, 160, 257, "ws_64x128", 3, 2), (5 * 128, 128, 7 * 128, "ws_128x128", 1, 3),
])
def test_ws_units_cover_every_tile_and_k_block_once(m, k, n, cfg, splits, group):
    cfg = cuda_plans.COOPERATIVE_CONFIGS[cfg]
    seen = {}
    for u in range(cuda_plans.ws_units(m, n, cfg, splits)):
        m0, n0, z, kb0, kbs = cuda_plans.ws_unit(u, m, n, k, cfg, splits, group)
        assert 0 <= m0 < m and 0 <= n0 < n and m0 % cfg.bm == 0 and n0 % cfg.bn == 0
        for kb in range(kb0, kb0 + kbs):
            key = (m0, n0, kb)
            assert key not in seen
            seen[key] = z
    tiles = cuda_plans.ceil_div(m, cfg.bm) * cuda_plans.ceil_div(n, cfg.bn)
    assert len(seen) == tiles * cuda_plans.ceil_div(k, cfg.bk)


def test_ws_raster_keeps_a_band_of_m_tiles_on_one_n_column():
    cfg = cuda_plans.COOPERATIVE_CONFIGS["ws_128x256"]
    first = [cuda_plans.ws_unit(u, 8192, 8192, 8192, cfg, 1, 16)[:2] for u in range(32)]
    assert [mn[1] for mn in first[:16]] == [0] * 16 and [mn[1] for mn in first[16:]] == [256] * 16
    assert [mn[0] for mn in first[:16]] == [128 * i for i in range(16)]


def test_tma_specs():
    simple = [cuda_source.gemm_tma_unspecialized(c) for c in cuda_plans.CUDA_CONFIGS.values()]
    w8a8 = [cuda_source.gemm_w8a8_tma_unspecialized(c) for c in cuda_plans.CUDA_CONFIGS.values()]
    ws = [cuda_source.gemm_tma_ws_cooperative(c) for c in cuda_plans.COOPERATIVE_CONFIGS.values()]
    ws_w8a8 = [cuda_source.gemm_w8a8_tma_ws_cooperative(c) for c in cuda_plans.COOPERATIVE_CONFIGS.values()]
    pp = [f(c) for c in cuda_plans.PINGPONG_CONFIGS.values() for f in (cuda_source.gemm_tma_ws_pingpong, cuda_source.gemm_w8a8_tma_ws_pingpong)]
    packed = ([cuda_source.gemm_tma_unspecialized_packed(c) for c in cuda_plans.CUDA_CONFIGS.values()]
              + [cuda_source.gemm_tma_ws_cooperative_packed(c) for c in cuda_plans.COOPERATIVE_CONFIGS.values()]
              + [cuda_source.gemm_tma_ws_pingpong_packed(c) for c in cuda_plans.PINGPONG_CONFIGS.values()]
              + [cuda_source.gemm_int32_packed(f, c) for f in ("sm90", "simt") for c in cuda_plans.CUDA_CONFIGS.values()])
    names = [s.name for s in simple + w8a8 + ws + ws_w8a8 + pp + packed] + [cuda_source.gemm_int32("sm90", c).name
                                                                             for c in cuda_plans.CUDA_CONFIGS.values()]
    assert len(set(names)) == len(names)
    for s, c in zip(simple, cuda_plans.CUDA_CONFIGS.values()):
        assert s.output_names == ("out", "maps") and s.shared_memory == c.tma_shared_bytes
        assert "gemm_tma_unspecialized<BM, BN, BK, WM, STAGES, AHEAD, CHUNK>" in s.source and "a_shape[1]" in s.source
        assert "__launch_bounds__" not in s.header
        # The in-kernel fallback for misaligned bases runs gemm_cpasync's main loop in this kernel's shared memory.
        assert c.tma_shared_bytes >= c.shared_bytes
    for s, c in zip(w8a8, cuda_plans.CUDA_CONFIGS.values()):
        assert s.input_names == cuda_source.gemm_w8a8("sm90", c).input_names
        assert s.output_names == ("y",) and s.shared_memory == c.tma_shared_bytes
        assert "(q, w, pm, w_shape[0], pk, maps, int8nax::DequantStore<TOut, HAS_BIAS, NARROW, int8nax::pointee<decltype(bias)>>{y, scale_x, " in s.source
    for s, c in zip(ws, cuda_plans.COOPERATIVE_CONFIGS.values()):
        assert s.input_names == ("a", "b", "plan") and s.shared_memory == c.shared_bytes
        # The launch bound redefines __global__: it comes last, after every include.
        assert s.header.rstrip().splitlines()[-1] == "#define __global__ __location__(global) __launch_bounds__(384, 1)"
    for part in ("cooperative", "pingpong"):
        text = cuda_source.header_text(part)
        assert text.index("sw128_descriptor(uint32_t") < text.index("void gemm_tma_ws_")
        assert text.rstrip().endswith("__launch_bounds__(384, 1)")
    text = cuda_source.header_text("tma")
    assert text.index("void cpasync_mainloop(") < text.index("void gemm_tma_unspecialized(")


def test_kernel_choice_reads_the_environment(monkeypatch):
    pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import settings as cuda_settings

    for value, want in (("", "auto"), ("auto", "auto"), ("cpasync", cuda_choice.CPASYNC), ("tma", cuda_choice.COOPERATIVE),
                        ("TMA_SIMPLE", cuda_choice.TMA), ("wgmma", cuda_choice.CPASYNC),
                        ("tma-ws-pingpong", cuda_choice.PINGPONG)):
        monkeypatch.setenv(cuda_settings.KERNEL_ENV, value)
        cuda_settings.kernel_choice.cache_clear()
        assert cuda_settings.kernel_choice() == want
    monkeypatch.setenv(cuda_settings.KERNEL_ENV, "fast")
    cuda_settings.kernel_choice.cache_clear()
    with pytest.raises(ValueError, match="INT8NAX_CUDA_KERNEL"):
        cuda_settings.kernel_choice()
    cuda_settings.kernel_choice.cache_clear()


def test_variant_per_override(gemv_default):
    seed, small, odd_k = (512, 4096, 4096), (16, 4096, 4096), (512, 4096, 4104)
    cp, tma, coop, pp = cuda_choice.CPASYNC, cuda_choice.TMA, cuda_choice.COOPERATIVE, cuda_choice.PINGPONG
    want = {  # override -> variant at (seed, small, odd K), for int8_matmul and for w8a8_linear
        # W8A8 at 512 x 4096 x 4096: 128 units of 128 x 128 in one round (cuda_choice.w8a8_cooperative)
        "": ((tma, cuda_choice.GEMV, cp), (coop, cuda_choice.GEMV, cp)),
        "wgmma": ((cp,) * 3,) * 2,
        "tma_simple": ((tma, tma, cp),) * 2,
        "tma": ((coop, coop, cp),) * 2,
        "tma_pp": ((pp, pp, cp),) * 2,
    }
    for override, (gemm, w8a8) in want.items():
        for flag, variants in ((False, gemm), (True, w8a8)):
            got = tuple(cuda_choice.choose(m, n, k, w8a8=flag, override=override).variant for m, n, k in (seed, small, odd_k))
            assert got == variants, (override, flag)
        assert cuda_choice.choose(*seed, family="simt", override=override).variant == cuda_choice.SIMT


def auto(m, n, k, w8a8=False):
    return cuda_choice.choose(m, n, k, w8a8=w8a8).variant


def test_auto_kernel_rule(gemv_default):
    # The default (auto): a TMA kernel wherever its K rule holds, decode-sized M included
    # (TMA_MIN_M); the cp.async kernel otherwise. Arguments (M, N, K).
    cp, tma, coop, pp = cuda_choice.CPASYNC, cuda_choice.TMA, cuda_choice.COOPERATIVE, cuda_choice.PINGPONG
    # int8_matmul at M <= 16 takes the GEMV (GEMV_RAW_DEFAULT); without it, the TMA kernel from TMA_MIN_M
    for m, k, n in [(1, 4096, 4096), (16, 4096, 4096), (16, 4104, 4096)]:
        assert auto(m, n, k) == cuda_choice.GEMV
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cuda_choice, "GEMV_RAW_DEFAULT", False)
        assert auto(cuda_choice.TMA_MIN_M, 4096, 4096) == tma and auto(16, 4096, 4096) == tma
    for m, k, n in [(17, 4096, 4096), (64, 4096, 4096), (1024, 4096, 4096), (512, 18944, 3584),
                    (128, 3584, 18944)]:
        assert auto(m, n, k) == tma
    # Problems of many tiles: the persistent kernels (persistent_variant).
    assert auto(2048, 4096, 4096) == coop
    assert auto(8192, 8192, 8192) == coop
    assert auto(512, 18944, 3584) == pp  # 512 x 3584 x 18944: rounds 75 % full
    assert auto(512, 3584, 18944) == tma  # 512 x 18944 x 3584: 56 tiles
    assert auto(512, 4096, 4104) == cp  # K % 16 != 0
    assert auto(512, 4096, 8) == cp
    # W8A8 takes the GEMV up to GEMV_MAX_M rows, any K.
    for m in (1, 16, cuda_plans.GEMV_MAX_M):
        assert auto(m, 4096, 4096, w8a8=True) == auto(m, 4096, 4104, w8a8=True) == cuda_choice.GEMV
    assert auto(cuda_choice.TMA_MIN_M_W8A8, 4096, 4096, w8a8=True) == tma
    assert auto(512, 4096, 4104, w8a8=True) == cp
    # W8A8 takes the persistent kernel int8_matmul takes, the cooperative one only from
    # W8A8_WS_MIN_ROUNDS rounds.
    assert auto(2048, 4096, 4096, w8a8=True) == tma
    assert auto(8192, 8192, 8192, w8a8=True) == coop
    assert auto(512, 18944, 3584, w8a8=True) == pp


@pytest.mark.parametrize("m,n,want", [
    (64, 1 << 20, None),  # M <= 64: never (the 64-row tiles)
    (1024, 4096, None),  # 128 tiles of 128 x 256 on 132 SMs: below PERSISTENT_MIN_TILES
    (1536, 4096, None),  # 192 < 1.5 x 132
    (1664, 4096, cuda_choice.PINGPONG),  # 208 tiles in 2 rounds: 79 % full
    (2048, 4096, cuda_choice.COOPERATIVE),  # 256 in 2 rounds: 97 %
    (512, 18944, cuda_choice.PINGPONG),  # 296 in 3 rounds: 75 %
    (4096, 4096, cuda_choice.COOPERATIVE),  # 512 in 4 rounds: 97 %
    (8192, 8192, cuda_choice.COOPERATIVE),  # 2048 in 16 rounds: 97 %
])
def test_persistent_variant_by_tiles_and_rounds(m, n, want):
    assert cuda_choice.persistent_variant(m, n, 4096, 132) == want
    if m >= cuda_choice.TMA_MIN_M_W8A8:
        # w8a8_linear takes the same kernel, but the cooperative one only from W8A8_WS_MIN_ROUNDS rounds
        rounds = cuda_plans.ceil_div(cuda_plans.tile_count(m, n, cuda_plans.COOPERATIVE_CONFIGS["ws_128x256"]), 132)
        w8a8 = None if want == cuda_choice.COOPERATIVE and rounds < cuda_choice.W8A8_WS_MIN_ROUNDS else want
        assert cuda_choice.persistent_variant(m, n, 4096, 132, w8a8=True) == w8a8
        assert auto(m, n, 4096, w8a8=True) == (w8a8 or cuda_choice.TMA)
    assert cuda_choice.persistent_variant(2048, 4096, 4096, 132, w8a8=True) is None
    assert cuda_choice.persistent_variant(8192, 8192, 8192, 132, w8a8=True) == cuda_choice.COOPERATIVE
    # on a GPU with twice the SMs every problem here has half the tiles per SM
    assert cuda_choice.persistent_variant(m, n, 4096, 264) in (None, want) if want else True


class RecordingKernel:
    """Stands in for mx.fast.cuda_kernel's kernel object: records each launch (with its inputs'
    dtypes, which MLX declares the kernel's arguments in, and the fill its outputs ask for), returns
    zeros."""

    def __init__(self, spec, launches):
        self.spec, self.launches = spec, launches

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template, init_value=None, **_):
        import mlx.core as mx

        self.launches.append(dict(name=self.spec.name, outputs=list(output_shapes), grid=grid, block=threadgroup,
                                  template=list(template), smem=self.spec.shared_memory, init_value=init_value,
                                  dtypes=[str(x.dtype) for x in inputs], inputs=[x.shape for x in inputs],
                                  bias=next((str(x.dtype) for name, x in zip(self.spec.input_names, inputs) if name == "bias"),
                                            None)))
        return [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]


@pytest.fixture
def recorded(monkeypatch):
    pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import (
        device as cuda_device, kernels as cuda_kernels, probe as cuda_probe,
        settings as cuda_settings, backend as cuda,
    )

    launches = []
    monkeypatch.setattr(cuda_kernels, "_kernel", lambda spec: RecordingKernel(spec, launches))
    monkeypatch.setattr(cuda_device, "_family", lambda: "sm90")
    monkeypatch.setattr(cuda_probe, "sm_count", lambda: 132)
    monkeypatch.setattr(cuda, "COMPILE", False)
    monkeypatch.delenv(cuda_settings.KERNEL_ENV, raising=False)
    monkeypatch.delenv(cuda_settings.EPILOGUE_ENV, raising=False)
    monkeypatch.delenv(cuda_settings.BIAS_ENV, raising=False)
    cuda.clear_caches()
    yield cuda, launches
    cuda.clear_caches()


@pytest.mark.parametrize("m,k,n", [(1, 4096, 4096), (16, 4096, 4096), (512, 4096, 4096), (1024, 4096, 4096),
                                   (128, 18944, 3584), (512, 18944, 3584)])
def test_default_dispatch_launches_the_tma_kernel(recorded, m, k, n, gemv_default):
    import mlx.core as mx

    cuda, launches = recorded
    plan = cuda_plans.tma_plan(m, n, k, 132)
    lau, (grid, block) = plan.launch(m, n), plan.grid(m, n)
    blocks = lau.grid_x * lau.grid_y * plan.splits
    a, b = mx.zeros((m, k), dtype=mx.int8), mx.zeros((n, k), dtype=mx.int8)
    mx.eval(cuda.gemm_int32(a, b))
    gemm = launches[0]
    if m <= cuda_plans.GEMV_MAX_M:  # int8_matmul's GEMV (cuda_choice.GEMV_RAW_DEFAULT): one kernel, no maps
        gemv = cuda_plans.gemv_plan(m, n, k, 132)
        assert [x["name"] for x in launches] == [cuda_source.gemv_int32().name]
        assert (gemm["outputs"], gemm["template"]) == ([(m, n)], gemv.cfg.template())
        assert (gemm["grid"], gemm["block"]) == gemv.grid(m, n)
    else:
        assert gemm["name"] == cuda_source.gemm_tma_unspecialized(plan.cfg).name
        assert gemm["outputs"] == [(m, n) if plan.splits == 1 else (plan.splits, m, n), (blocks * 256,)]
        assert (gemm["grid"], gemm["block"], gemm["template"]) == (grid, block, plan.cfg.tma_template())
        assert [x["name"] for x in launches[1:]] == ([cuda_source.reduce_int32().name] if plan.splits > 1 else [])

    launches.clear()
    x, s = mx.zeros((m, k), dtype=mx.float16), mx.ones((n,), dtype=mx.float32)
    mx.eval(cuda.w8a8(x, b, s, None))
    names = [x["name"] for x in launches]
    if m <= cuda_plans.GEMV_MAX_M:  # the GEMV: x quantized inside where it is small (8 KB at M = 1)
        gemv = cuda_plans.gemv_plan(m, n, k, 132)
        epilogue = [("HAS_BIAS", False), ("NARROW", True)]
        if cuda_plans.gemv_inside(m, k, 2):
            assert names == [cuda_source.gemv_w8a8_x().name]
            assert launches[0]["template"] == [("T", mx.float16)] + gemv.cfg.template() + epilogue
        else:
            assert names == [cuda_source.quantize().name, cuda_source.gemv_w8a8().name]
            assert launches[0]["outputs"] == [cuda_pack.pack_shape(m, k)]  # the GEMV has no scratch
            assert launches[1]["template"] == gemv.cfg.template() + [("TOut", mx.float16)] + epilogue
        assert (launches[-1]["grid"], launches[-1]["block"], launches[-1]["outputs"]) == (*gemv.grid(m, n), [(m, n)])
        return
    assert names[0] == cuda_source.quantize().name
    chosen = cuda_choice.choose(m, n, k, w8a8=True)
    if chosen.variant == cuda_choice.COOPERATIVE:  # cuda_choice.w8a8_cooperative: unsplit, the epilogue fused
        assert cuda_choice.w8a8_cooperative(m, n, k, 132) and chosen.plan.splits == 1
        assert names[1:] == [cuda_source.gemm_w8a8_tma_ws_cooperative(chosen.plan.cfg).name]
        return
    plan = cuda_plans.tma_plan(m, n, k, 132, w8a8=True)
    assert chosen == cuda_choice.Choice(cuda_choice.TMA, plan)
    lau = plan.launch(m, n)
    blocks = lau.grid_x * lau.grid_y * plan.splits
    if plan.splits == 1:
        assert names[1:] == [cuda_source.gemm_w8a8_tma_unspecialized(plan.cfg).name]
        assert launches[1]["template"] == plan.cfg.tma_template() + [("TOut", mx.float16), ("HAS_BIAS", False), ("NARROW", cuda_settings.EPILOGUE_DEFAULT == "narrow")]
        assert launches[1]["outputs"] == [(m, n)]
    else:
        assert names[1:] == [cuda_source.gemm_tma_unspecialized_packed(plan.cfg).name, cuda_source.reduce_w8a8().name]
        assert launches[1]["outputs"] == [(plan.splits, m, n)]
    # one allocation for the codes, the scales and the GEMM's tensor maps (a 256-byte slot a block)
    assert launches[0]["outputs"] == [cuda_pack.pack_shape(m, k, blocks * 256)]


@pytest.mark.parametrize("m,k,n", [(4096, 1024, 8192), (512, 3584, 18944)])
def test_default_dispatch_launches_the_persistent_kernels(recorded, m, k, n):
    # int8_matmul: tma_ws or tma_pp on its plan (persistent_kernel); w8a8_linear: the same kernel
    # with its fused epilogue (pingpong_plan's W8A8 plan on tma_pp; 4096 x 8192: 1024 tiles, 8 rounds).
    import mlx.core as mx

    cuda, launches = recorded
    kernel = cuda_choice.persistent_variant(m, n, k, 132)
    coop = kernel == cuda_choice.COOPERATIVE
    plan = cuda_plans.cooperative_plan(m, n, k, 132) if coop else cuda_plans.pingpong_plan(m, n, k, 132)
    spec = cuda_source.gemm_tma_ws_cooperative(plan.cfg) if coop else cuda_source.gemm_tma_ws_pingpong(plan.cfg)
    a, b = mx.zeros((m, k), dtype=mx.int8), mx.zeros((n, k), dtype=mx.int8)
    mx.eval(cuda.gemm_int32(a, b))
    assert [x["name"] for x in launches] == [spec.name]
    assert launches[0]["outputs"] == [(m, n), (plan.blocks * 256,)]
    assert (launches[0]["grid"], launches[0]["block"]) == ((plan.blocks * 384, 1, 1), (384, 1, 1))
    assert launches[0]["template"] == plan.cfg.template()

    launches.clear()
    x, s = mx.zeros((m, k), dtype=mx.float16), mx.ones((n,), dtype=mx.float32)
    mx.eval(cuda.w8a8(x, b, s, None))
    names = [x["name"] for x in launches]
    if not coop:
        w_plan, fused = cuda_plans.pingpong_plan(m, n, k, 132, w8a8=True), cuda_source.gemm_w8a8_tma_ws_pingpong
    else:
        w_plan, fused = plan, cuda_source.gemm_w8a8_tma_ws_cooperative
    assert w_plan.splits == 1
    assert names == [cuda_source.quantize().name, fused(w_plan.cfg).name]
    assert launches[1]["template"] == w_plan.cfg.template() + [("TOut", mx.float16), ("HAS_BIAS", False), ("NARROW", cuda_settings.EPILOGUE_DEFAULT == "narrow")]
    assert launches[1]["outputs"] == [(m, n)]
    assert launches[0]["outputs"] == [cuda_pack.pack_shape(m, k, w_plan.blocks * 256)]
    assert launches[1]["grid"] == (w_plan.blocks * 384, 1, 1)


@pytest.mark.parametrize("kernel", ["tma-ws-cooperative", "tma_pp"])
def test_persistent_w8a8_splits_through_the_workspace(recorded, kernel):
    # A split plan runs the int32 kernel into the [splits, M, N] workspace and the dequantizing
    # reduction; an unsplit one the fused epilogue.
    import mlx.core as mx

    cuda, launches = recorded
    m, k, n = 16, 4096, 4096
    coop = kernel == "tma-ws-cooperative"  # one new name, one alias
    configs = cuda_plans.COOPERATIVE_CONFIGS if coop else cuda_plans.PINGPONG_CONFIGS
    cfg = next(iter(configs.values()))
    raw = (cuda_source.gemm_tma_ws_cooperative_packed if coop else cuda_source.gemm_tma_ws_pingpong_packed)(cfg)
    fused = (cuda_source.gemm_w8a8_tma_ws_cooperative if coop else cuda_source.gemm_w8a8_tma_ws_pingpong)(cfg)
    q, w = mx.zeros((m, k), dtype=mx.int8), mx.zeros((n, k), dtype=mx.int8)
    sx, sw, bias = mx.ones((m,), dtype=mx.float32), mx.ones((n,), dtype=mx.float32), mx.zeros((n,), dtype=mx.float32)
    for splits, want in ((3, [raw.name, cuda_source.reduce_w8a8().name]), (1, [fused.name])):
        launches.clear()
        plan = cuda_plans.PersistentPlan(cfg, splits, 1, 7)
        mx.eval(cuda.dequant_gemm(q, sx, w, sw, bias, mx.bfloat16, kernel, plan))
        assert [x["name"] for x in launches] == want
        assert launches[0]["outputs"][0] == ((m, n) if splits == 1 else (splits, m, n))
        assert launches[-1]["template"][-3:] == [("TOut", mx.bfloat16), ("HAS_BIAS", True), ("NARROW", cuda_settings.EPILOGUE_DEFAULT == "narrow")]


@pytest.mark.parametrize("m,k,n", [(16, 4096, 4096), (512, 4096, 4096), (128, 18944, 3584), (512, 3584, 18944)])
def test_the_narrow_epilogue_reaches_every_w8a8_launch(recorded, monkeypatch, m, k, n):
    # INT8NAX_CUDA_EPILOGUE=narrow (or epilogue="narrow") sets NARROW on the launch that
    # dequantizes (fused GEMM or reduction) for float16 / bfloat16 outputs, never for float32;
    # it is the default (cuda_settings.EPILOGUE_DEFAULT), and INT8NAX_CUDA_EPILOGUE=eft turns it off.
    import mlx.core as mx

    cuda, launches = recorded
    w, s = mx.zeros((n, k), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)

    def narrow_flags(dtype):
        launches.clear()
        mx.eval(cuda.w8a8(mx.zeros((m, k), dtype=dtype), w, s, None))
        return [dict(x["template"]).get("NARROW") for x in launches if "NARROW" in dict(x["template"])]

    assert narrow_flags(mx.float16) == [True] and narrow_flags(mx.bfloat16) == [True]
    assert narrow_flags(mx.float32) == [False]
    monkeypatch.setenv(cuda_settings.EPILOGUE_ENV, "eft")
    cuda.clear_caches()
    assert narrow_flags(mx.float16) == [False] and narrow_flags(mx.bfloat16) == [False]
    monkeypatch.setenv(cuda_settings.EPILOGUE_ENV, "narrow")
    cuda.clear_caches()
    assert narrow_flags(mx.float16) == [True]
    q, sx = mx.zeros((m, k), dtype=mx.int8), mx.ones((m,), dtype=mx.float32)
    for epilogue, want in (("eft", False), ("narrow", True)):
        launches.clear()
        mx.eval(cuda.dequant_gemm(q, sx, w, s, None, mx.bfloat16, epilogue=epilogue))
        assert dict(launches[-1]["template"])["NARROW"] is want


@pytest.mark.parametrize("m,k,n", [(1, 4096, 4096), (16, 4096, 4096), (512, 4096, 4096), (128, 18944, 3584),
                                   (512, 3584, 18944), (4096, 4096, 4096)])
@pytest.mark.parametrize("gemv", [False, True])
@pytest.mark.parametrize("mode", ["own", "cast", None])
def test_the_bias_reaches_every_w8a8_launch_in_its_own_dtype(recorded, monkeypatch, m, k, n, gemv, mode):
    # INT8NAX_CUDA_BIAS=own: a float16 / bfloat16 bias goes to the launch that dequantizes (fused
    # GEMM, reduction, GEMV) as it is, with no cast to float32 before the call (one MLX node and
    # copy kernel less a call); the kernels read it exactly (epilogue/epilogue.cuh, load_pair / to_float).
    # cast: the launch gets it in float32 (unset: BIAS_DEFAULT, own). A float32 bias goes as it
    # is either way; no bias: the float32 placeholder.
    import mlx.core as mx

    cuda, launches = recorded
    monkeypatch.setattr(cuda_choice, "GEMV_DEFAULT", gemv)
    if mode is None:
        monkeypatch.delenv(cuda_settings.BIAS_ENV, raising=False)
    else:
        monkeypatch.setenv(cuda_settings.BIAS_ENV, mode)
    cuda.clear_caches()
    own = (mode or cuda_settings.BIAS_DEFAULT) == "own"
    w, s = mx.zeros((n, k), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)
    for x_dtype, bias_dtype in ((mx.bfloat16, mx.bfloat16), (mx.float16, mx.float16), (mx.bfloat16, mx.float32),
                                (mx.float32, mx.bfloat16), (mx.float16, None)):
        launches.clear()
        bias = None if bias_dtype is None else mx.zeros((n,), dtype=bias_dtype)
        mx.eval(cuda.w8a8(mx.zeros((m, k), dtype=x_dtype), w, s, bias))
        dequantizing = [x for x in launches if "HAS_BIAS" in dict(x["template"])]
        assert len(dequantizing) == 1 and dict(dequantizing[0]["template"])["HAS_BIAS"] is (bias is not None)
        assert dequantizing[0]["bias"] == str(bias_dtype if bias_dtype is not None and own else mx.float32)
    q, sx = mx.zeros((m, k), dtype=mx.int8), mx.ones((m,), dtype=mx.float32)
    launches.clear()
    mx.eval(cuda.dequant_gemm(q, sx, w, s, mx.zeros((n,), dtype=mx.bfloat16), mx.bfloat16))
    assert launches[-1]["bias"] == str(mx.bfloat16 if own else mx.float32)


def test_info_names_the_w8a8_choices(recorded, monkeypatch):
    # int8nax.info()'s CUDA reason ends with w8a8_settings(): what each INT8NAX_CUDA_* choice is now
    cuda, _ = recorded
    monkeypatch.delenv(cuda_settings.SWIGLU_ENV, raising=False)
    monkeypatch.delenv(cuda_settings.MLP_ENV, raising=False)
    assert cuda_settings.w8a8_settings() == (
        f"W8A8: {cuda_settings.EPILOGUE_DEFAULT} epilogue (INT8NAX_CUDA_EPILOGUE), SwiGLU swiglu, then the quantization "
        f"(INT8NAX_CUDA_SWIGLU), a 16-bit bias read in its own type (INT8NAX_CUDA_BIAS), SwiGLU MLPs by their own "
        f"call (INT8NAX_CUDA_MLP)")
    for env, value in ((cuda_settings.EPILOGUE_ENV, "eft"), (cuda_settings.SWIGLU_ENV, "fused"), (cuda_settings.BIAS_ENV, "cast"),
                       (cuda_settings.MLP_ENV, " Step")):
        monkeypatch.setenv(env, value)
    cuda.clear_caches()
    assert cuda_settings.w8a8_settings() == ("W8A8: eft epilogue (INT8NAX_CUDA_EPILOGUE), SwiGLU quantized in one step "
                                    "(INT8NAX_CUDA_SWIGLU), a 16-bit bias cast to float32 first (INT8NAX_CUDA_BIAS), "
                                    "SwiGLU MLPs in one compiled step (INT8NAX_CUDA_MLP)")
    monkeypatch.setenv(cuda_settings.MLP_ENV, "fast")
    cuda.clear_caches()
    with pytest.raises(ValueError, match=r"INT8NAX_CUDA_MLP: expected one of \['step', 'own'\], got 'fast'"):
        cuda_settings.w8a8_settings()


def test_a_bad_epilogue_or_bias_choice_is_refused(recorded, monkeypatch):
    import mlx.core as mx

    cuda, _ = recorded
    with pytest.raises(ValueError, match=r"epilogue: expected one of \['eft', 'narrow'\], got 'fast'"):
        cuda.dequant_gemm(mx.zeros((4, 16), dtype=mx.int8), mx.ones((4,)), mx.zeros((8, 16), dtype=mx.int8),
                          mx.ones((8,)), None, mx.float16, epilogue="fast")
    monkeypatch.setenv(cuda_settings.EPILOGUE_ENV, "fast")
    cuda.clear_caches()
    with pytest.raises(ValueError, match=r"INT8NAX_CUDA_EPILOGUE: expected one of \['eft', 'narrow'\], got 'fast'"):
        cuda_settings.epilogue_choice()
    monkeypatch.setenv(cuda_settings.BIAS_ENV, "float")
    cuda.clear_caches()
    with pytest.raises(ValueError, match=r"INT8NAX_CUDA_BIAS: expected one of \['cast', 'own'\], got 'float'"):
        cuda_settings.bias_choice()


@pytest.mark.parametrize("m,k", [(16, 4096), (2048, 4096), (300, 8192), (512, 18944), (3, 40000)])
def test_quantization_launch_is_the_tiling_rule(recorded, m, k):
    # quantize and w8a8 launch the quantization kernel with cuda_plans.cuda_quant_launch's (threads, held).
    import mlx.core as mx

    cuda, launches = recorded
    want = cuda_plans.cuda_quant_launch(m, k, 132)
    x = mx.zeros((m, k), dtype=mx.bfloat16)
    mx.eval(*cuda.quantize(x))
    mx.eval(cuda.w8a8(x, mx.zeros((64, k), dtype=mx.int8), mx.ones((64,), dtype=mx.float32), None))
    quant = [x for x in launches if x["name"] == cuda_source.quantize().name]
    assert len(quant) == 2
    for q in quant:
        assert (q["grid"], q["block"]) == want.grid(m)
        assert q["template"] == [("T", mx.bfloat16)] + want.template()
    # one pack: quantize's without scratch, w8a8's with what its GEMM's plan needs
    assert quant[0]["outputs"] == [cuda_pack.pack_shape(m, k)]
    [(rows, cols)] = quant[1]["outputs"]
    assert rows == m and cols >= cuda_pack.pack_shape(m, k)[1]


def test_odd_k_and_the_cpasync_choice_stay_on_the_cpasync_kernel(recorded, monkeypatch):
    import mlx.core as mx

    cuda, launches = recorded
    for (m, k, n), env in (((17, 4104, 4096), ""), ((512, 4104, 4096), ""), ((512, 4096, 4096), "wgmma")):
        monkeypatch.setenv(cuda_settings.KERNEL_ENV, env)
        cuda.clear_caches()
        launches.clear()
        mx.eval(cuda.gemm_int32(mx.zeros((m, k), dtype=mx.int8), mx.zeros((n, k), dtype=mx.int8)))
        plan = cuda_plans.cpasync_plan(m, n, k, 132)
        assert launches[0]["name"] == cuda_source.gemm_int32("sm90", plan.cfg).name
        assert len(launches[0]["outputs"]) == 1


def test_wave_cost_counts_partial_waves_whole():
    big, w192, w144, w128 = (cuda_plans.CUDA_CONFIGS[n] for n in ("wg2_128x256", "wg2_128x192", "wg2_128x144",
                                                                 "wg2_128x128_x2"))
    # 512 x 18944 outputs: 4 x 74 = 296 tiles of 128 x 256 = 3 waves on 132 SMs (the third a quarter
    # full), 4 x 99 = 396 of 128 x 192 = 3 full waves, 4 x 132 = 528 of 128 x 144 = 4 waves.
    assert cuda_plans.wave_cost(512, 18944, big) == 3 * 256
    assert cuda_plans.wave_cost(512, 18944, w192) == 3 * 192
    assert cuda_plans.wave_cost(512, 18944, w144) == 4 * 144
    # two 128 x 128 blocks share an SM: 592 tiles over 264 slots = 3 waves of 2 x 128 columns
    assert cuda_plans.wave_cost(512, 18944, w128) == 3 * 2 * 128
    assert cuda_plans.wave_tile(512, 18944).name == "wg2_128x192"  # 576 < 0.9 x 768; ties to the wider tile
    assert cuda_plans.wave_tile(512, 4096).name == "wg2_128x144"  # one wave each: 144 columns against 256
    # 8192 x 8192: 128 x 192 is 2 % cheaper (21 waves x 192 against 16 x 256), not enough to leave 128 x 256
    assert cuda_plans.wave_cost(8192, 8192, w192) == 21 * 192 and cuda_plans.wave_cost(8192, 8192, big) == 16 * 256
    assert cuda_plans.wave_tile(8192, 8192).name == "wg2_128x256"
    # fewer SMs change the answer: on 16 SMs 4 x 74 tiles of 128 x 256 are 19 waves, 4 x 99 of 128 x 192 25
    assert cuda_plans.wave_tile(512, 18944, sms=16).name == "wg2_128x256"


def test_w8a8_plan_differs_from_the_int32_plan_where_the_epilogue_tail_matters():
    # the measured shapes of tests/data/cuda_dispatch_evidence.json where W8A8 keeps its own plan:
    # below W8A8_COMPUTE_MIN_M, where the wave tile needs several waves, and at long K
    for m, k, n in ((128, 3584, 18944), (512, 3584, 18944), (512, 12288, 4096)):
        assert cuda_plans.tma_plan(m, n, k, 132, w8a8=True) != cuda_plans.tma_plan(m, n, k, 132)
    # and where it takes the int32 plan's one-wave wave tile
    for m, k, n in ((512, 3584, 4608), (512, 4096, 6144), (512, 4096, 4096)):
        assert cuda_plans.tma_plan(m, n, k, 132, w8a8=True) == cuda_plans.tma_plan(m, n, k, 132)


def test_one_wave_tile_fills_the_sms_once_or_is_none():
    w112 = cuda_plans.CUDA_CONFIGS["wg2_128x112"]
    # 4 x 32 = 128 tiles of 128 x 112 on 132 SMs: 97 %, one wave
    assert cuda_plans.one_wave_tile(512, 3584) == w112 and cuda_plans.one_wave_tile(385, 3584) == w112
    assert cuda_plans.one_wave_tile(384, 3584) is None  # 96 tiles: 73 %
    assert cuda_plans.one_wave_tile(513, 3584) is None  # 160 tiles: a second wave
    assert cuda_plans.one_wave_tile(512, 4096) is None  # 4 x 37 = 148 tiles
    assert cuda_plans.one_wave_tile(512, 3584, sms=128) == w112  # exactly one block an SM
    assert cuda_plans.one_wave_tile(512, 3584, sms=114) is None
    # the bound is the fill, not a shape: ONE_WAVE_FILL of the SMs or more
    assert all((cuda_plans.one_wave_tile(m, 3584) is not None)
               == (cuda_plans.ONE_WAVE_FILL * 132 <= cuda_plans.tile_count(m, 3584, w112) <= 132)
               for m in range(1, 1025))


def test_split_plan_takes_the_tile_whose_splits_fill_the_most_sms():
    w144, w112 = cuda_plans.CUDA_CONFIGS["wg2_128x144"], cuda_plans.CUDA_CONFIGS["wg2_128x112"]
    # 128 x 3584: 25 tiles of 128 x 144 x 4 splits = 100 blocks; 32 of 128 x 112 x 4 = 128 (of 132)
    assert cuda_plans.split_plan(128, 3584, 18944, w144) == cuda_plans.CudaPlan(w112, 4)
    # 128 x 4096: 29 tiles x 4 = 116 blocks against 37 x 2 = 74 (x 4 would not fit): the wave tile stays
    assert cuda_plans.split_plan(128, 4096, 18944, w144) == cuda_plans.CudaPlan(w144, 4)
    # 256 x 512: 8 tiles x 16 splits = 128 blocks against 10 x 8 = 80
    assert cuda_plans.split_plan(256, 512, 18944, w144) == cuda_plans.CudaPlan(w144, 16)


@pytest.mark.parametrize("m,k,n", [(128, 18944, 3584), (256, 18944, 512), (300, 8192, 300), (512, 18944, 3584),
                                   (2048, 8192, 4096)])
def test_w8a8_takes_the_int32_plan_where_it_splits_k(m, k, n):
    # a split plan's W8A8 GEMM is the int32 kernel (the reduction dequantizes), so W8A8 takes the
    # int32 GEMM's plan; unsplit, it keeps its own (the fused epilogue's tail)
    raw, w8a8 = cuda_plans.tma_plan(m, n, k, 132), cuda_plans.tma_plan(m, n, k, 132, w8a8=True)
    if raw.splits > 1:
        assert w8a8 == raw
    elif cuda_plans.long_k(k) and cuda_plans.one_wave_tile(m, n, 132) is not None:
        assert w8a8 == raw == cuda_plans.CudaPlan(cuda_plans.one_wave_tile(m, n, 132), 1)
    else:
        long_k = cuda_plans.long_k(k)
        assert w8a8 == cuda_plans.cpasync_plan(m, n, k, 132) if long_k else w8a8.cfg.name in cuda_plans._TMA_TILES


@pytest.mark.parametrize("m,k,n", [(1, 16, 1), (3, 48, 8), (64, 16, 4096), (4097, 256, 129), (16, 4096, 18944),
                                   (300, 8192, 300), (7, 131056, 9), (8192, 8192, 8192), (512, 18944, 3584),
                                   (511, 12288, 4096)])
def test_tma_plan_is_valid(m, k, n):
    plan = cuda_plans.tma_plan(m, n, k, 132)
    assert plan.cfg.name in cuda_plans.CUDA_CONFIGS and plan.splits >= 1
    assert plan.cfg.bm == 64 or m > 64
    k_blocks = cuda_plans.ceil_div(k, cuda_plans.CUDA_SWIZZLE_BYTES)
    if k_blocks < cuda_plans.TMA_LONG_K_BLOCKS:
        assert plan.splits == 1
    elif m <= 64:
        assert plan == cuda_plans.cpasync_plan(m, n, k, 132)
    elif cuda_plans.one_wave_tile(m, n, 132) is not None:
        # long K: a tile whose blocks fill the SMs in one wave runs unsplit
        assert plan == cuda_plans.CudaPlan(cuda_plans.one_wave_tile(m, n, 132), 1)
    else:
        # long K: the wave tile, unsplit where it fills most SMs, else split until its blocks fill them once
        assert plan.cfg == cuda_plans.wave_tile(m, n, 132)
        fills = cuda_plans.tile_count(m, n, plan.cfg) >= cuda_plans.TMA_LONG_K_FILL * 132
        assert plan.splits == (1 if fills else cuda_plans.fill_splits(m, n, k, plan.cfg, 132))
        if plan.splits > 1:
            assert cuda_plans.tile_count(m, n, plan.cfg) * plan.splits <= 132 * cuda_plans.blocks_per_sm(plan.cfg)
            assert k_blocks // plan.splits >= cuda_plans.MIN_SPLIT_BLOCKS


@pytest.mark.parametrize("m,k,n", [(16, 4096, 4096), (17, 4096, 4096), (512, 3584, 18944), (128, 18944, 3584), (5, 300, 7),
                                   (2048, 4096, 4096)])
def test_w8a8_plan_is_what_w8a8_linear_launches(recorded, m, k, n):
    # the one place that says which kernel and plan w8a8_linear takes (the tools ask it too)
    import mlx.core as mx

    cuda, launches = recorded
    chosen = cuda.choice(m, n, k, w8a8=True)
    plan, kernel = chosen.plan, chosen.variant
    assert chosen == cuda_choice.choose(m, n, k, w8a8=True)
    want = {cuda_choice.GEMV: cuda_plans.gemv_plan(m, n, k, 132),
            cuda_choice.TMA: cuda_plans.tma_plan(m, n, k, 132, w8a8=True),
            cuda_choice.PINGPONG: cuda_plans.pingpong_plan(m, n, k, 132, w8a8=True),
            cuda_choice.COOPERATIVE: cuda_plans.cooperative_plan(m, n, k, 132),
            cuda_choice.CPASYNC: cuda_plans.cpasync_plan(m, n, k, 132)}[kernel]
    assert plan == want
    mx.eval(cuda.w8a8(mx.zeros((m, k), dtype=mx.float16), mx.zeros((n, k), dtype=mx.int8),
                      mx.ones((n,), dtype=mx.float32), None))
    gemms = [launch for launch in launches if "quantize" not in launch["name"] and "reduce" not in launch["name"]]
    if kernel == cuda_choice.GEMV:  # one kernel where x is small (the quantization inside), else two
        fused = cuda_plans.gemv_inside(m, k, 2)
        assert len(launches) == (1 if fused else 2) and len(gemms) == 1
        assert gemms[0]["name"] == (cuda_source.gemv_w8a8_x() if fused else cuda_source.gemv_w8a8()).name
        assert gemms[0]["grid"] == plan.grid(m, n)[0] and ("NT", plan.cfg.nt) in gemms[0]["template"]
        return
    # kernel names start with the variant's name: int8nax_tma_ws_cooperative_w8a8_ws_128x256_<digest>
    # (a split plan's GEMM is the int32 kernel: the reduction dequantizes)
    kind = "w8a8" if plan.splits == 1 else "i32pack"
    assert len(gemms) == 1 and gemms[0]["name"].startswith(f"int8nax_{kernel.replace('-', '_')}_{kind}_{plan.cfg.name}_")
    grid = plan.grid()[0] if isinstance(plan, cuda_plans.PersistentPlan) else plan.grid(m, n)[0]
    assert gemms[0]["grid"] == grid and ("BN", plan.cfg.bn) in gemms[0]["template"]


class CountingFactory:
    """Stands in for mx.fast.cuda_kernel: counts the kernel objects built, each one a
    RecordingKernel."""

    def __init__(self):
        self.built, self.launches = [], []

    def __call__(self, *, name, input_names, **_):
        self.built.append(name)
        return RecordingKernel(type("Spec", (), {"name": name, "shared_memory": 0, "input_names": input_names}),
                               self.launches)


def counting_cuda(monkeypatch, compiled: bool):
    """(mx, cuda, factory): the CUDA backend on a stand-in sm90 with 132 SMs, its kernel objects
    counted by `factory` instead of built (no GPU needed), caches cleared."""
    mx = pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import (
        device as cuda_device, probe as cuda_probe, settings as cuda_settings, backend as cuda,
    )

    factory = CountingFactory()
    monkeypatch.setattr(cuda.mx.fast, "cuda_kernel", factory)
    monkeypatch.setattr(cuda_device, "_family", lambda: "sm90")
    monkeypatch.setattr(cuda_probe, "sm_count", lambda: 132)
    monkeypatch.setattr(cuda, "COMPILE", compiled)
    monkeypatch.delenv(cuda_settings.KERNEL_ENV, raising=False)
    cuda.clear_caches()
    return mx, cuda, factory


@pytest.mark.parametrize("compiled", [False, True])
def test_kernel_objects_do_not_grow_with_m(monkeypatch, compiled):
    # Serving meets every token count: kernel objects are keyed by kernel source (one tile
    # configuration of one variant), never by M, and the per-shape caches are bounded.
    mx, cuda, factory = counting_cuda(monkeypatch, compiled)
    try:
        n, k = 512, 1024
        w, s = mx.zeros((n, k), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)
        expected = set()
        for m in range(1, 301):
            c = cuda.choice(m, n, k, w8a8=True)
            row = cuda_choice.VARIANTS[c.variant]
            if row.quantizing is not None and cuda_plans.gemv_inside(m, k, 2):  # the GEMV quantizing x itself
                expected.add(row.quantizing().name)
                mx.eval(cuda.w8a8(mx.zeros((m, k), dtype=mx.float16), w, s, None))
                continue
            specs = row.specs(c.plan.cfg)
            expected.add((specs.int32_packed if c.plan.splits > 1 else specs.w8a8).name)
            if c.plan.splits > 1:
                expected.add(cuda_source.reduce_w8a8().name)
            mx.eval(cuda.w8a8(mx.zeros((m, k), dtype=mx.float16), w, s, None))
        expected.add(cuda_source.quantize().name)
        assert cuda_kernels.kernels_built() == len(set(factory.built)) == len(factory.built) == len(expected)
        assert set(factory.built) == expected
        assert len(expected) <= 6  # 300 token counts, a handful of kernels
    finally:
        cuda.clear_caches()
    assert cuda_kernels.kernels_built() == 0


def test_per_shape_caches_are_bounded():
    pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import kernels as cuda_kernels, graphs as cuda_graphs, backend as cuda

    for fn in (cuda._gemm_for_shape, cuda._w8a8_for_shape, cuda._quantize_for_shape):
        assert fn.cache_parameters()["maxsize"] == cuda.SHAPE_CACHE_SIZE
    assert cuda_kernels._kernel.cache_parameters()["maxsize"] == cuda_kernels.KERNEL_CACHE_SIZE
    assert cuda_graphs._plan_array.cache_parameters()["maxsize"] == cuda_graphs.PLAN_ARRAY_CACHE_SIZE


@pytest.mark.parametrize("bias_dtype", ["float32", "bfloat16"])
def test_warm_up_builds_what_every_token_count_needs(monkeypatch, bias_dtype):
    # after warm_up(n, k, m_max) no call at M <= m_max builds a kernel object nor, on a GPU,
    # compiles a kernel instance (an object's template arguments and input dtypes: warm_up
    # launched each with the same x dtype and bias dtype)
    mx, cuda, factory = counting_cuda(monkeypatch, False)
    try:
        n, k, bias_dtype = 256, 4096, getattr(mx, bias_dtype)
        built = cuda.warm_up(n, k, 400, dtype=mx.bfloat16, bias=True, bias_dtype=bias_dtype)
        reach = cuda_choice.reachable(n, k, 400, w8a8=True, bias=True)
        assert [m for m, _ in reach][:2] == [1, cuda_choice.TMA_MIN_M_W8A8] and built == cuda_kernels.kernels_built() >= len(reach)

        def instances():
            return {(x["name"], tuple(x["template"]), tuple(x["dtypes"])) for x in factory.launches}

        warmed = instances()
        w = mx.zeros((n, k), dtype=mx.int8)
        for m in range(1, 401, 7):
            mx.eval(cuda.w8a8(mx.zeros((m, k), dtype=mx.bfloat16), w, mx.ones((n,)), mx.zeros((n,), dtype=bias_dtype)))
        assert cuda_kernels.kernels_built() == built
        assert instances() == warmed
    finally:
        cuda.clear_caches()


@pytest.mark.parametrize("m", [1, 16, 17, 300, 511, 512, 2047, 2048, 4096])
def test_a_w8a8_call_allocates_the_pack_and_y(recorded, m):
    # mlx-lm empties MLX's buffer cache after every prefill chunk, so each output a call allocates
    # costs a cudaMallocAsync: a W8A8 call allocates its activation pack and y (one buffer where
    # the GEMV quantizes x itself), and a split plan its workspace. Qwen2.5-7B's fused layer calls.
    import mlx.core as mx

    cuda, launches = recorded
    for n, k, bias in ((4608, 3584, True), (3584, 3584, False), (37888, 3584, False), (3584, 18944, False)):
        launches.clear()
        b = mx.zeros((n,), dtype=mx.float32) if bias else None
        mx.eval(cuda.w8a8(mx.zeros((m, k), dtype=mx.bfloat16), mx.zeros((n, k), dtype=mx.int8), mx.ones((n,)), b))
        chosen = cuda.choice(m, n, k, w8a8=True, bias=bias)
        inside = chosen.variant == cuda_choice.GEMV and cuda_plans.gemv_inside(m, k, 2)
        want = 1 if inside else 2 + (chosen.plan.splits > 1)
        assert sum(len(x["outputs"]) for x in launches) == want, (n, k, chosen, launches)


def test_a_tall_w8a8_problem_packs_each_row_chunk_for_its_gemm(recorded, monkeypatch):
    # Row chunks (gridDim.y's limit) on a one-block-per-tile plan: the quantization's pack has no
    # scratch, and each chunk's GEMM reads a pack of its own rows with its own tensor-map slots.
    import mlx.core as mx
    from int8nax.backends.cuda import graphs as cuda_graphs

    cuda, launches = recorded
    m, k, n = 300, 1024, 256
    plan = cuda_plans.tma_plan(m, n, k, 132, w8a8=True)
    monkeypatch.setattr(cuda_graphs, "MAX_GRID_Y", 2)
    chunks = cuda_graphs._row_chunks(m, plan.cfg)
    assert len(chunks) > 1
    y = cuda.w8a8(mx.zeros((m, k), dtype=mx.float16), mx.zeros((n, k), dtype=mx.int8), mx.ones((n,)), None,
                  cuda_choice.TMA, plan)
    assert y.shape == (m, n)
    assert launches[0]["name"] == cuda_source.quantize().name and launches[0]["outputs"] == [cuda_pack.pack_shape(m, k)]
    gemms = launches[1:]
    assert [g["name"] for g in gemms] == [cuda_source.gemm_w8a8_tma_unspecialized(plan.cfg).name] * len(chunks)
    for (r0, r1), g in zip(chunks, gemms):
        assert g["outputs"] == [(r1 - r0, n)]
        assert g["inputs"][0] == cuda_pack.pack_shape(r1 - r0, k, plan.map_bytes(r1 - r0, n))


def test_w8a8_takes_64x32_only_where_64x64_leaves_sms_idle_and_64x32_fits_one_wave():
    def tile(m, n, w8a8=True):
        return cuda_plans.tma_plan(m, n, 4096, 132, w8a8).cfg.name

    # N = 4096: 64 tiles of 64 x 64 on 132 SMs; 128 of 64 x 32 fit two an SM
    assert [tile(m, 4096) for m in (17, 32, 64)] == ["wg1_64x32"] * 3
    assert tile(65, 4096) == tile(64, 4096, w8a8=False) == "wg1_64x64"  # past W8A8_NARROW_MAX_M; the raw GEMM
    # 7168 / 64 = 112 tiles leave SMs idle, 7232 / 64 = 113 fill TMA_FILL of them: 64 x 64 before the fallback
    assert (tile(64, 7168), tile(64, 7232)) == ("wg1_64x32", "wg1_64x64")
    # 64 x 32 past one wave (N = 8512: 266 tiles over 264 slots) is never reached at the fallback
    assert cuda_plans.w8a8_small_tile(64, 8512, 132).name == "wg1_64x64"
