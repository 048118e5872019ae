"""The Metal backend's launches, checked without Metal: a recording stand-in for
mx.fast.metal_kernel receives exactly what the real one would (sources, names, grid in threads,
threadgroup, template arguments, inputs and output shapes)."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

from int8nax import quant, tiling
from int8nax.backends.metal import (
    backend as metal, kernel_set as metal_kernel_set, launch as metal_launch,
    source as metal_source,
)

# What mx.fast.metal_kernel 0.32.4 adds to the signature when the name occurs in `source`.
MLX_ATTRIBUTES = {
    "threadgroup_position_in_grid", "simdgroup_index_in_threadgroup", "thread_index_in_simdgroup",
    "thread_index_in_threadgroup", "thread_position_in_grid", "threads_per_threadgroup",
}


class RecordingKernel:
    def __init__(self, **spec):
        self.spec = spec
        self.calls = []

    def __call__(self, **call):
        self.calls.append(call)
        return [mx.zeros(shape, dtype=dtype) for shape, dtype in zip(call["output_shapes"], call["output_dtypes"])]


class RecordingFactory:
    def __init__(self):
        self.kernels = {}

    def __call__(self, **spec):
        kernel = RecordingKernel(**spec)
        self.kernels[spec["name"]] = kernel
        return kernel


class RefusingFactory(RecordingFactory):
    """Kernels whose pipelines allow `max_threads` threads (only kernel `only`, if given): a
    launch over it returns outputs whose evaluation (`evaluate`, given to the KernelSet) raises
    MLX's message, as CustomKernel::eval_gpu does."""

    def __init__(self, max_threads, only=None):
        super().__init__()
        self.max_threads, self.only = max_threads, only
        self.refused: list = []  # (kernel name, threads) of every refused launch
        self._doomed: dict = {}  # id -> the array itself, kept alive so that its id is never reused

    def __call__(self, **spec):
        kernel = super().__call__(**spec)
        record = kernel.__call__

        def call(**launch):
            outs = record(**launch)
            threads = int(np.prod(launch["threadgroup"]))
            if self.only in (None, spec["name"]) and threads > self.max_threads:
                self.refused.append((spec["name"], threads))
                self._doomed.update((id(o), o) for o in outs)
            return outs

        return call

    def evaluate(self, outs):
        for o in outs:
            if id(o) in self._doomed:
                raise ValueError(f"Thread group size ({self.refused[-1][1]}) is greater than  the maximum allowed "
                                 f"threads per threadgroup ({self.max_threads}).")
        mx.eval(outs)

    def kernel_set(self) -> metal_kernel_set.KernelSet:
        return metal_kernel_set.KernelSet(self, evaluate=self.evaluate)


@pytest.fixture
def recorded():
    factory = RecordingFactory()
    return factory, metal_kernel_set.KernelSet(factory)


@pytest.mark.parametrize(
    "m,n,k,config,grid_groups,swizzle",
    [
        (1, 1, 1, tiling.METAL_SMALL, (1, 1), 0),
        (64, 4096, 4096, tiling.METAL_SMALL, (32, 2), 0),  # 2 tiles of 32 rows
        (65, 4096, 4096, tiling.METAL_LARGE, (32, 1), 0),
        (513, 33, 4097, tiling.METAL_LARGE, (1, 5), 0),  # 5 M tiles: swizzle 1 would idle a sixth
        (1152, 33, 4097, tiling.METAL_LARGE, (2, 5), 1),  # 9 M tiles: swizzle 1, one padding row
        (4097, 7, 33, tiling.METAL_LARGE, (4, 9), 2),  # 33 M tiles: swizzle 2, 3 of 36 idle
    ],
)
def test_gemm_dispatch(m, n, k, config, grid_groups, swizzle):
    d = tiling.metal_gemm_dispatch(m, n, k)
    assert d.config is config
    assert d.threadgroup == (config.threads, 1, 1) and config.threads == 32 * config.wm * config.wn
    # metal_kernel's grid counts threads: whole threadgroups along x, one per row along y.
    assert d.grid == (grid_groups[0] * config.threads, grid_groups[1], 1)
    assert d.launch.swizzle_log == swizzle
    assert d.params == (m, n, k, swizzle, tiling.ceil_div(m, config.bm))
    assert dict(d.template) == {
        "BM": config.bm, "BN": config.bn, "BK": config.bk, "WM": config.wm, "WN": config.wn,
        "SK": 32, "FM": 16, "FN": 32, "FK": 16, "SIMD": 32, "ROW_PIECE": 4, "RELAXED": True,
    }


@pytest.mark.parametrize(
    "arch,m,n,k,config,swizzle",
    [
        ("applegpu_g17g", 4096, 4096, 4096, tiling.METAL_LARGE, 2),  # base M5: MLX's default tile
        ("applegpu_g17s", 4096, 4096, 4096, tiling.METAL_LARGE, 2),  # M5 Pro: cider's measured tile
        ("applegpu_g17c", 256, 256, 8192, tiling.METAL_LARGE, 0),  # 2 M tiles: no swizzle
        ("applegpu_g17s", 65, 7, 33, tiling.METAL_LARGE, 0),  # one M tile: no idle threadgroups
        ("applegpu_g17s", 64, 4096, 4096, tiling.METAL_SMALL, 0),  # small M: 2 tiles, no swizzle
        (None, 65, 7, 33, tiling.METAL_LARGE, 0),
    ],
)
def test_gpu_class_rule(arch, m, n, k, config, swizzle):
    """Every class takes cider's measured 128 x 128 x 512 tile (small M: 32 x 128), and the
    swizzle never idles more than an eighth of the grid."""
    gpu = tiling.gpu_class(arch)
    d = tiling.metal_gemm_dispatch(m, n, k, gpu)
    assert d.config == config and d.launch.swizzle_log == swizzle
    assert d.threadgroup == (config.threads, 1, 1)
    assert d.launch.grid_x == d.launch.tiles_n << swizzle
    assert d.launch.grid_y == tiling.ceil_div(d.launch.tiles_m, 1 << swizzle)


@pytest.mark.parametrize("tiles_m", range(1, 200))
def test_swizzle_idles_at_most_an_eighth(tiles_m):
    s = tiling.metal_swizzle_log(tiles_m)
    t = 1 << s
    idle = t * tiling.ceil_div(tiles_m, t) - tiles_m
    assert idle * tiling.METAL_MAX_IDLE_FRACTION <= tiles_m
    assert s <= tiling.swizzle_log(tiles_m) and (tiles_m > 3 or s == 0)


def test_gpu_class_parsing():
    assert tiling.gpu_class("applegpu_g17s") == "s" and tiling.gpu_class("applegpu_g17g") == "g"
    assert tiling.gpu_class(None) is None and tiling.gpu_class("sm_90") is None


def test_relaxed_precision_is_a_tile_parameter():
    assert tiling.METAL_LARGE.relaxed_precision is True  # the proven form is the default
    d = tiling.metal_gemm_dispatch(70, 33, 300, relaxed_precision=False)
    assert dict(d.template)["RELAXED"] is False and d.config.bm == tiling.METAL_LARGE.bm


def test_configs_are_whole_fragments():
    for cfg in tiling.METAL_CONFIGS:
        assert cfg.sm % tiling.NAX_FRAG_M == 0 and cfg.sn % tiling.NAX_FRAG_N == 0
        assert cfg.bk % tiling.NAX_FRAG_K == 0 and cfg.bk % cfg.sk == 0 and cfg.threads <= 1024
    with pytest.raises(ValueError, match="multiples of the fragment"):
        tiling.NaxTileConfig("bad", bm=32, bn=48, bk=512, wm=1, wn=1)
    with pytest.raises(ValueError, match="SK"):
        tiling.NaxTileConfig("bad", bm=32, bn=32, bk=48, wm=1, wn=1)


def test_int8_gemm_launch(recorded):
    factory, kernels = recorded
    a = mx.zeros((33, 513), dtype=mx.int8)
    b = mx.zeros((7, 513), dtype=mx.int8)
    c = metal_launch.run_int8_gemm(kernels, a, b)
    assert c.shape == (33, 7) and c.dtype == mx.int32
    kernel = factory.kernels["int8nax_int8_gemm"]
    assert kernel.spec["input_names"] == ["a", "b", "params"] and kernel.spec["output_names"] == ["c"]
    assert kernel.spec["compile_options"] == {"math_mode": "safe"}
    (call,) = kernel.calls
    d = tiling.metal_gemm_dispatch(33, 7, 513)
    assert call["inputs"][0] is a and call["inputs"][1] is b
    params = call["inputs"][2]
    assert params.dtype == mx.int32 and np.array(params).tolist() == list(d.params)
    assert call["output_shapes"] == [(33, 7)] and call["output_dtypes"] == [mx.int32]
    assert call["grid"] == d.grid and call["threadgroup"] == d.threadgroup
    assert call["template"] == d.template + [("MLX_LAYOUT", True)] and call["stream"] == mx.gpu
    # the generic variant, relaxed_precision off, on an M5 Pro class GPU
    variant = metal_source.KernelVariant(metal_source.LOAD_GENERIC, relaxed_precision=False)
    metal_launch.run_int8_gemm(kernels, mx.zeros((100, 513), dtype=mx.int8), b, variant, gpu="s")
    d = tiling.metal_gemm_dispatch(100, 7, 513, "s", relaxed_precision=False)
    call = kernel.calls[-1]
    assert call["template"] == d.template + [("MLX_LAYOUT", False)] and dict(call["template"])["BM"] == 128
    assert call["grid"] == d.grid and call["threadgroup"] == (512, 1, 1)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float32])
@pytest.mark.parametrize("with_bias", [False, True])
def test_w8a8_launches(recorded, dtype, with_bias):
    factory, kernels = recorded
    x = mx.zeros((70, 300), dtype=dtype)
    w = mx.zeros((33, 300), dtype=mx.int8)
    s_w = mx.ones((33,), dtype=mx.float32)
    bias = mx.ones((33,), dtype=mx.float16) if with_bias else None
    y = metal_launch.run_w8a8(kernels, x, w, s_w, bias)
    assert y.shape == (70, 33) and y.dtype == dtype

    (qcall,) = factory.kernels["int8nax_quantize_rows"].calls
    assert qcall["inputs"][0] is x
    assert qcall["output_shapes"] == [(70, 300), (70,)]
    assert qcall["output_dtypes"] == [mx.int8, mx.float32]
    assert qcall["grid"] == (256, 70, 1) and qcall["threadgroup"] == (256, 1, 1)
    assert dict(qcall["template"]) == {"QT": 256, "SIMD": 32, "QMAX": 127, "TINY": quant.TINY_SHIFT}

    (gcall,) = factory.kernels["int8nax_w8a8_gemm"].calls
    q, w_in, s_x, s_w_in, bias_in, params = gcall["inputs"]
    assert q.shape == (70, 300) and q.dtype == mx.int8 and w_in is w and s_w_in is s_w
    assert s_x.shape == (70,) and s_x.dtype == mx.float32
    # the caller's bias as it is (no cast kernel), or the one [1] placeholder of the process
    assert bias_in is bias if with_bias else (bias_in is metal_launch._no_bias() and bias_in.shape == (1,))
    d = tiling.metal_gemm_dispatch(70, 33, 300)
    assert np.array(params).tolist() == list(d.params)
    assert gcall["output_dtypes"] == [dtype] and gcall["output_shapes"] == [(70, 33)]
    assert gcall["template"] == d.template + [("MLX_LAYOUT", True), ("OutT", dtype), ("HAS_BIAS", with_bias)]
    assert gcall["grid"] == d.grid and gcall["threadgroup"] == d.threadgroup


def test_small_m_and_repeated_shapes_rebuild_nothing(recorded):
    """M < 8 pads the scales to 8 values, so the W8A8 GEMM's s_x stays a device input (one
    library for every M); M <= METAL_MV_MAX_M takes the decode kernel, one launch that quantizes
    x itself (no quantize_rows launch); repeated shapes reuse their params array; builds() lists
    each distinct instantiation once."""
    factory, kernels = recorded
    w = mx.zeros((33, 300), dtype=mx.int8)
    s_w = mx.ones((33,), dtype=mx.float32)
    xs = {}
    for m in (1, 3, 7, 8, 40, 3, 7):
        xs[m] = mx.ones((m, 300), dtype=mx.float16)
        metal_launch.run_w8a8(kernels, xs[m], w, s_w, None)
    decode = factory.kernels["int8nax_w8a8_decode"].calls
    gemm = factory.kernels["int8nax_w8a8_gemm"].calls
    assert [c["output_shapes"] for c in decode] == [[(1, 33)], [(3, 33)], [(3, 33)]]
    assert [c["output_shapes"] for c in gemm] == [[(7, 33)], [(8, 33)], [(40, 33)], [(7, 33)]]
    assert all(c["inputs"][2].size >= metal_source.MLX_CONSTANT_MAX_ELEMENTS for c in gemm)
    assert decode[1]["inputs"][-1] is decode[2]["inputs"][-1] and gemm[0]["inputs"][-1] is gemm[-1]["inputs"][-1]
    d = tiling.metal_decode_dispatch(3, 33, 300)
    assert decode[1]["grid"] == d.grid == (tiling.ceil_div(33, 8) * 64, 1, 1) and decode[1]["threadgroup"] == (64, 1, 1)
    assert decode[1]["template"] == [("OutT", mx.float16), ("HAS_BIAS", False)] + d.template
    assert dict(d.template)["MV_PIECE"] == 8 and dict(d.template)["QMAX"] == quant.QMAX
    x_in, w_in, s_w_in, bias_in, params = decode[2]["inputs"]  # the last M = 3 call
    assert x_in is xs[3] and w_in is w and s_w_in is s_w and bias_in is metal_launch._no_bias()
    assert np.array(params).tolist() == [3, 33, 300, 0, 1]
    quant_calls = factory.kernels["int8nax_quantize_rows"].calls
    assert [c["output_shapes"][1] for c in quant_calls] == [(8,), (8,), (40,), (8,)]  # M > 4 only
    builds = [inst for inst, _ in kernels.builds()]
    assert sorted(i.kernel for i in builds) == ["int8nax_quantize_rows", "int8nax_w8a8_decode", "int8nax_w8a8_gemm"]
    catalogue = {i.key for i in metal_source.instantiations()}
    assert all(i.key in catalogue for i in builds)
    # the public quantization returns M scales
    q, s = metal_launch.VariantOps(kernels, metal_source.KernelVariant()).quantize_activations(mx.ones((3, 300), dtype=mx.float16))
    assert s.shape == (3,)


def test_describe_launches_nothing(recorded):
    factory, kernels = recorded
    backend = metal.MetalBackend(kernels=kernels, machine=lambda: (True, "applegpu_g17s", "26.4"))
    text = backend.describe("int8_matmul", 4096, 4096, 4096)
    assert text.startswith("metal nax mlx_layout/relaxed_precision=true metal_128x128 (128x128x512, swizzle 2)")
    assert "before first use" in text
    assert backend.describe("w8a8_linear", 1, 4096, 4096, bias=True, dtype=mx.bfloat16).startswith(
        "metal w8a8 decode (M <= 4, x quantized in registers, 8 weight bytes a lane")
    assert backend.describe("int8_matmul", 4, 4096, 4096).startswith("metal gemv")
    assert "bfloat16 out, bias" in backend.describe("w8a8_linear", 1, 4096, 4096, bias=True, dtype=mx.bfloat16)
    with pytest.raises(ValueError, match="op must be"):
        backend.describe("conv", 1, 1, 1)
    assert factory.kernels == {} and kernels.builds() == []


def test_every_launch_is_in_the_catalogue(recorded):
    """The builds a process can make are bounded: every launch of every variant, tile, dtype
    and bias lands on an instantiation metal_source.instantiations() lists."""
    factory, kernels = recorded
    catalogue = {i.key for i in metal_source.instantiations()}
    for variant, large in itertools.product(metal_source.variants(), tiling.METAL_LARGE_CANDIDATES):
        ops = metal_launch.VariantOps(kernels, variant, "s", large)
        for m in (1, 33, 65):  # small-M kernel, small tile, large tile (each candidate)
            a = mx.zeros((m, 64), dtype=mx.int8)
            b = mx.zeros((40, 64), dtype=mx.int8)
            ops.int8_matmul(a, b)
            for dtype in (mx.float16, mx.bfloat16, mx.float32):
                for bias in (None, mx.zeros((40,), mx.float16), mx.zeros((40,), mx.bfloat16), mx.zeros((40,), mx.float32)):
                    ops.w8a8_linear(mx.ones((m, 64), dtype=dtype), b, mx.ones((40,), mx.float32), bias)
        metal_launch.run_layout_probe(kernels, variant.relaxed_precision)
    metal_launch.run_subnormal_probe(kernels)
    made = {inst.key for inst, _ in kernels.builds()}
    # the quantizer's threadgroup-limit fallback, on a GPU that refuses its 256 threads
    refusing = RefusingFactory(128, only="int8nax_quantize_rows").kernel_set()
    for dtype in (mx.float16, mx.bfloat16, mx.float32):
        metal_launch.run_quantize_rows(refusing, mx.ones((3, 64), dtype=dtype))
    made |= {inst.key for inst, _ in refusing.builds()}
    assert made <= catalogue and len(made) == len(catalogue)


def test_layout_probe_launch(recorded):
    factory, kernels = recorded
    out = metal_launch.run_layout_probe(kernels)
    assert out.shape == (3, 32, 1 + 3 * 16)
    (call,) = factory.kernels["int8nax_nax_layout"].calls
    assert call["grid"] == (32, 1, 1) and call["threadgroup"] == (32, 1, 1)
    assert dict(call["template"]) == {"FM": 16, "FN": 32, "FK": 16, "SIMD": 32, "CAP": 16, "RELAXED": True}


def identifiers(code: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_]\w*", code))


@pytest.mark.parametrize("name", list(metal_source.KERNELS))
def test_sources_fit_metal_kernel(recorded, name):
    """The body uses only what metal_kernel will declare: its inputs and outputs (plus their
    _shape arrays), the template parameters passed, and the attributes it adds by name."""
    factory, kernels = recorded
    kernels[name]
    spec = factory.kernels[name].spec
    header, body = spec["header"], spec["source"]
    assert metal_source.BODY_MARKER not in header + body
    assert "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>" in header or \
        name in ("int8nax_quantize_rows", "int8nax_subnormal_probe", "int8nax_int8_gemv", "int8nax_w8a8_decode")
    # Template parameter names passed by the launches for this kernel.
    template_names = {
        "int8nax_int8_gemm": {n for n, _ in tiling.METAL_LARGE.template()} | {"MLX_LAYOUT"},
        "int8nax_w8a8_gemm": {n for n, _ in tiling.METAL_LARGE.template()} | {"MLX_LAYOUT", "OutT", "HAS_BIAS"},
        "int8nax_quantize_rows": {n for n, _ in tiling.metal_quant_dispatch(1).template},
        "int8nax_nax_layout": {"FM", "FN", "FK", "SIMD", "CAP", "RELAXED"},
        "int8nax_subnormal_probe": set(),
        "int8nax_int8_gemv": {n for n, _ in tiling.metal_gemv_dispatch(1, 1, 1).template},
        "int8nax_w8a8_decode": {n for n, _ in tiling.metal_decode_dispatch(1, 1, 1).template} | {"OutT", "HAS_BIAS"},
    }[name]
    used = identifiers(body)
    # Every template name is used somewhere in the kernel (else it could drift unnoticed).
    assert template_names <= identifiers(header + body)
    upper = {w for w in used if re.fullmatch(r"[A-Z][A-Z_]*", w)} - {"NAN"} - identifiers(header)
    assert upper <= template_names, f"body uses undeclared constants {upper - template_names}"
    args = set(spec["input_names"]) | set(spec["output_names"])
    # Every input and output is referenced (but the layout probe's placeholder input);
    # attributes come from MLX's list.
    assert args - {"dummy"} <= used
    attrs = {w for w in used if w.endswith(("_in_grid", "_in_threadgroup", "_in_simdgroup"))}
    assert attrs <= MLX_ATTRIBUTES


# --- threadgroups within the pipeline's limit ---------------------------------------------------


def test_mlx_threadgroup_message_is_recognised():
    # CustomKernel::eval_gpu's text (two spaces after "than"), and the one-space form too
    text = "Thread group size (512) is greater than  the maximum allowed threads per threadgroup (448)."
    assert metal_kernel_set.threadgroup_limit(ValueError(text)) == 448
    assert metal_kernel_set.threadgroup_limit(ValueError(text.replace("  ", " "))) == 448
    assert metal_kernel_set.threadgroup_limit(RuntimeError(text)) is None  # MLX raises std::invalid_argument: ValueError
    assert metal_kernel_set.threadgroup_limit(ValueError("Unable to build metal library from source")) is None


@pytest.mark.parametrize("limit, served", [(448, tiling.METAL_MEDIUM), (256, tiling.METAL_MEDIUM),
                                           (200, tiling.METAL_SMALL), (128, tiling.METAL_SMALL)])
def test_a_refused_large_tile_falls_back_without_raising(limit, served):
    """A pipeline allowing fewer than 512 threads: the 512-thread GEMM is refused when first
    evaluated, and the call is served, without an error, by the largest tile of the same 32 x 32
    sub-tile that fits; later calls go straight there."""
    factory = RefusingFactory(limit)
    kernels = factory.kernel_set()
    a, b = mx.ones((130, 64), dtype=mx.int8), mx.ones((40, 64), dtype=mx.int8)
    for _ in range(3):
        c = metal_launch.run_int8_gemm(kernels, a, b, metal_source.KernelVariant(), "s")
        assert c.shape == (130, 40)
    assert factory.refused == [("int8nax_int8_gemm", 512)]  # refused once, then remembered
    last = factory.kernels["int8nax_int8_gemm"].calls[-1]
    assert dict(last["template"])["BM"] == served.bm and last["threadgroup"] == (served.threads, 1, 1)
    d = tiling.metal_gemm_dispatch(130, 40, 64, "s", config=served)
    assert last["grid"] == d.grid and np.array(last["inputs"][-1]).tolist() == list(d.params)
    (label, got), = kernels.thread_limits().items()
    assert got == limit and "BM=128" in label and "WM=4" in label


def test_w8a8_and_quantizer_fall_back_too():
    factory = RefusingFactory(128)
    kernels = factory.kernel_set()
    x = mx.ones((70, 64), dtype=mx.bfloat16)
    y = metal_launch.run_w8a8(kernels, x, mx.ones((40, 64), mx.int8), mx.ones((40,), mx.float32), None,
                       metal_source.KernelVariant(metal_source.LOAD_GENERIC), "s", tiling.METAL_WIDE8)
    assert y.shape == (70, 40) and y.dtype == mx.bfloat16
    assert factory.refused == [("int8nax_quantize_rows", 256), ("int8nax_w8a8_gemm", 256)]
    quant = factory.kernels["int8nax_quantize_rows"].calls[-1]
    assert quant["threadgroup"] == (tiling.METAL_QUANT_FALLBACK_THREADS, 1, 1)
    assert quant["grid"] == (tiling.METAL_QUANT_FALLBACK_THREADS, 70, 1)
    gemm = factory.kernels["int8nax_w8a8_gemm"].calls[-1]
    assert dict(gemm["template"])["BM"] == tiling.METAL_SMALL.bm and dict(gemm["template"])["MLX_LAYOUT"] is False
    assert dict(gemm["template"])["OutT"] == mx.bfloat16


def test_no_form_fits_is_a_clear_error_not_a_crash():
    kernels = RefusingFactory(64, only="int8nax_int8_gemm").kernel_set()
    with pytest.raises(metal_kernel_set.ThreadgroupLimitError, match="allows 64 threads per threadgroup"):
        metal_launch.run_int8_gemm(kernels, mx.ones((40, 64), mx.int8), mx.ones((40, 64), mx.int8))


def test_other_errors_of_a_first_launch_propagate():
    class Broken(RecordingFactory):
        def __call__(self, **spec):
            def kernel(**call):
                raise ValueError("[metal_kernel] something else")
            return kernel

    with pytest.raises(ValueError, match="something else"):
        metal_launch.run_int8_gemm(metal_kernel_set.KernelSet(Broken()), mx.ones((40, 64), mx.int8), mx.ones((40, 64), mx.int8))


def test_fallback_config_rule():
    assert tiling.metal_fallback_config(tiling.METAL_LARGE, 1024) is None  # fits: nothing to do
    assert tiling.metal_fallback_config(tiling.METAL_LARGE, 511) == tiling.METAL_MEDIUM
    assert tiling.metal_fallback_config(tiling.METAL_WIDE8, 255) == tiling.METAL_SMALL
    assert tiling.metal_fallback_config(tiling.METAL_SMALL, 127) is None
    strict = tiling.metal_fallback_config(replace(tiling.METAL_LARGE, relaxed_precision=False), 300)
    assert strict.name == tiling.METAL_MEDIUM.name and strict.relaxed_precision is False
    for cfg in (tiling.METAL_MEDIUM, tiling.METAL_SMALL):  # the same per-simdgroup sub-tile as cider's
        assert (cfg.sm, cfg.sn) == (tiling.METAL_LARGE.sm, tiling.METAL_LARGE.sn)
    assert tiling.METAL_FALLBACK_THREADS == 256


def test_warm_builds_every_form_a_request_could_ask_for(recorded):
    """MetalBackend.warm(): every kernel the serving variant launches for the given dtypes is
    built once, up front (each a catalogue entry), and a second warm builds nothing."""
    factory, kernels = recorded
    backend = metal.MetalBackend(kernels=kernels, machine=lambda: (True, "applegpu_g17s", "26.4"))
    ops = metal_launch.VariantOps(kernels, metal_source.KernelVariant(), "s", tiling.METAL_MEDIUM)
    backend._ready = lambda: ops
    made = backend.warm((mx.bfloat16,))
    names = sorted({label.split("<")[0] for label in made})
    assert names == ["int8nax_int8_gemm", "int8nax_int8_gemv", "int8nax_quantize_rows", "int8nax_w8a8_decode",
                     "int8nax_w8a8_gemm"]
    # raw: gemv + 2 tiles; w8a8: decode + 2 tiles, each with and without a bias; one quantizer
    assert len(made) == 3 + 6 + 1
    assert any("BM=64" in label and "int8nax_w8a8_gemm" in label for label in made)  # the chosen large tile
    catalogue = {i.label() for i in metal_source.instantiations()}
    assert set(made) <= catalogue
    assert backend.warm((mx.bfloat16,)) == []
    with pytest.raises(RuntimeError, match="cannot run here"):
        metal.MetalBackend(machine=lambda: (False, None, "")).warm()
