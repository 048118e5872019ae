"""NAX detection (with injected machine reports) and the first-use self-test's verdicts, from the
backend up to the registry: auto mode falls back, an explicit request says why, info() tells."""

from __future__ import annotations

import types

import mlx.core as mx
import numpy as np
import pytest

import int8nax
from int8nax import backends
from int8nax import nax_emulator as emu
from int8nax.backends.cpu import backend as cpu
from int8nax.backends.metal import (
    backend as metal, device as metal_device, kernel_set as metal_kernel_set,
    launch as metal_launch, selection as metal_selection, source as metal_source,
)


@pytest.mark.parametrize(
    "report, available, words",
    [
        ((True, "applegpu_g17s", "26.4"), True, ["applegpu_g17s", "26.4"]),
        ((True, "applegpu_g17g", "26.5.1"), True, ["applegpu_g17g"]),
        ((True, "applegpu_g18p", "26.4"), True, ["applegpu_g18p"]),
        ((True, "applegpu_g18s", "27.0"), True, ["27.0"]),
        ((False, None, "26.4"), False, ["Metal is not available"]),
        ((True, "applegpu_g16s", "26.4"), False, ["generation 16", ">= 17", "M5"]),
        ((True, "applegpu_g13g", "15.2"), False, ["generation 13"]),
        ((True, "applegpu_g17p", "26.4"), False, ["generation 17", ">= 18"]),
        ((True, "applegpu_g17s", "26.3.1"), False, ["26.3.1", ">= 26.4", "int8"]),
        ((True, "applegpu_g17s", "15.7"), False, ["15.7"]),
        ((True, "applegpu_g17s", ""), False, ["unknown", "26.4"]),
        ((True, "sm_90", "26.4"), False, ["'sm_90'", "not an Apple GPU"]),
        ((True, None, "26.4"), False, ["None"]),
    ],
)
def test_nax_support(report, available, words):
    probe = metal_device.nax_support(*report)
    assert probe.available is available
    for word in words:
        assert word in probe.reason, probe.reason


def test_this_machine_says_why():
    # CI has no Apple GPU: the probe must say so in words, and the API must refuse "nax".
    probe = backends.probe("metal")
    if probe.available:
        pytest.skip(f"NAX is available here: {probe.reason}")
    assert probe.reason
    with pytest.raises(RuntimeError, match="cannot run here"):
        int8nax.int8_matmul(np.zeros((1, 1), np.int8), np.zeros((1, 1), np.int8), backend="nax")


def cpu_ops():
    b = cpu.BACKEND
    return b.int8_matmul, b.quantize_activations, b.w8a8_linear


class FakeOps:
    """Stands in for metal_launch.VariantOps: CPU code (optionally broken) for every variant, or per
    load path; records which variants were built."""

    built: list = []

    def __init__(self, kernels, variant, gpu, gemm=None, quantize=None, w8a8=None):
        FakeOps.built.append(variant.name)
        ok_gemm, ok_quant, ok_w8a8 = cpu_ops()
        self.variant = variant
        self.int8_matmul = gemm or ok_gemm
        self.quantize_activations = quantize or ok_quant
        self.w8a8_linear = w8a8 or ok_w8a8

    def self_test(self):
        return metal_launch.VariantOps.self_test(self)

    def compile_report(self):
        return {}


def fake_probe(layout):
    """A layout probe that reports `layout` (through the real dump format and verdict)."""
    return lambda kernels, relaxed: metal_selection.layout_result(emu.probe_dump(layout))


def fake_m5(monkeypatch=None, gemm=None, quantize=None, w8a8=None, failing=None, layout=None, broken_paths=None,
            arch="applegpu_g17s") -> metal.MetalBackend:
    """A MetalBackend on a pretend M5 whose kernels are CPU code (optionally broken, for every
    load path or only those in broken_paths) and whose layout probe reports `layout`."""
    FakeOps.built = []

    def factory(kernels, variant, gpu):
        if broken_paths is None or variant.load in broken_paths:
            return FakeOps(kernels, variant, gpu, gemm or failing, quantize, w8a8)
        return FakeOps(kernels, variant, gpu)

    return metal.MetalBackend(machine=lambda: (True, arch, "26.4"), ops_factory=factory,
                              layout_probe=fake_probe(layout or emu.mlx_float_layout()))


def test_self_test_passes_on_exact_kernels(monkeypatch):
    backend = fake_m5(monkeypatch)
    probe = backend.probe()
    assert probe.available and "self-test passed" in probe.reason and "applegpu_g17s" in probe.reason
    assert "variant mlx_layout/relaxed_precision=true" in probe.reason and "MLX's BaseNAXFrag layout" in probe.reason
    assert (backend.selection().probe, backend.selection().decided_by) == (metal_selection.PROBE_MATCHES, "probe and self-test")
    assert FakeOps.built == ["mlx_layout/relaxed_precision=true"] * 2  # self-tested, then serving
    assert backend.selection().variant == metal_source.KernelVariant(metal_source.LOAD_MLX_LAYOUT, True)
    assert backend.gpu == "s"
    out = backend.int8_matmul(mx.array(np.ones((2, 3), np.int8)), mx.array(np.ones((4, 3), np.int8)))
    assert (np.array(out) == 3).all()


def drop_k_remainder(a, b):
    """The seed kernel's bug: K beyond the last whole block of 512 is ignored."""
    k = a.shape[1] // 512 * 512
    return cpu.BACKEND.int8_matmul(a[:, :k], b[:, :k]) if k else mx.zeros((a.shape[0], b.shape[0]), mx.int32)


def round_half_even(x):
    q, s = cpu.BACKEND.quantize_activations(x)
    x32 = np.array(x.astype(mx.float32))
    with np.errstate(invalid="ignore"):
        codes = np.clip(np.round(x32 / np.array(s)[:, None]), -127, 127)
    return mx.array(np.nan_to_num(codes).astype(np.int8)), s


def naive_epilogue(x, w, scale_w, bias):
    q, s_x = cpu.BACKEND.quantize_activations(x)
    acc = np.array(cpu.BACKEND.int8_matmul(q, w)).astype(np.float32)
    y = acc * np.array(s_x)[:, None] * np.array(scale_w)[None, :]
    if bias is not None:
        y = y + np.array(bias.astype(mx.float32))[None, :]
    return mx.array(y.astype(np.float32)).astype(x.dtype)


@pytest.mark.parametrize(
    "broken, words",
    [
        ({"gemm": drop_k_remainder}, ["int8_matmul (M, K, N) = (1, 1, 1)", "1 of 1 wrong", "(+3 more)"]),
        ({"quantize": round_half_even}, ["quantize_activations", "codes"]),
        ({"w8a8": naive_epilogue}, ["w8a8_linear", "1 ulp"]),
        ({"failing": lambda a, b: (_ for _ in ()).throw(RuntimeError("Unable to build metal library"))},
         ["failed to build or run", "Unable to build metal library"]),
    ],
)
def test_self_test_refuses_wrong_kernels(monkeypatch, broken, words):
    backend = fake_m5(monkeypatch, **broken)
    with pytest.warns(RuntimeWarning, match="NAX refused"):
        probe = backend.probe()
    assert not probe.available
    for word in ["NAX refused", "applegpu_g17s", *words]:
        assert word in probe.reason, probe.reason
    # Direct use is refused too, never a wrong number.
    with pytest.raises(RuntimeError, match="NAX refused"):
        backend.int8_matmul(mx.zeros((1, 1), mx.int8), mx.zeros((1, 1), mx.int8))
    assert backend.probe() is probe  # decided once per process


def test_probe_other_layout_still_builds_the_fast_path():
    """A probe that reports another layout than MLX's does not cost the fast path: the
    MLX-layout path (cider's verified layout) is built and self-tested, and serves when it is
    exact; the reason says what the probe said and that the self-test decided."""
    backend = fake_m5(layout=emu.shuffled_layout(np.random.default_rng(3)))
    probe = backend.probe()
    assert probe.available, probe.reason
    assert "variant mlx_layout/relaxed_precision=true" in probe.reason and "another layout than MLX's" in probe.reason
    assert "built anyway" in probe.reason and "self-test decided" in probe.reason
    sel = backend.selection()
    assert sel.variant == metal_source.KernelVariant(metal_source.LOAD_MLX_LAYOUT, True)
    assert (sel.probe, sel.decided_by) == (metal_selection.PROBE_DIFFERS, "self-test")
    assert list(sel.self_tests) == ["mlx_layout/relaxed_precision=true"]


@pytest.mark.parametrize("probe_fails", [
    lambda kernels, relaxed: metal_selection.probe_layout(None),  # probe_layout catches: "not run"
    lambda kernels, relaxed: (_ for _ in ()).throw(RuntimeError("Unable to build metal library: nax_layout")),
])
def test_probe_failure_still_builds_the_fast_path(probe_fails):
    backend = fake_m5()
    backend._layout_probe = probe_fails
    probe = backend.probe()
    assert probe.available and "layout probe failed" in probe.reason, probe.reason
    assert "variant mlx_layout/relaxed_precision=true" in probe.reason and "self-test decided" in probe.reason
    sel = backend.selection()
    assert (sel.probe, sel.decided_by) == (metal_selection.PROBE_FAILED, "self-test")
    assert FakeOps.built == ["mlx_layout/relaxed_precision=true"] * 2  # self-tested, then serving


@pytest.mark.parametrize("layout", [None, "shuffled"])
def test_generic_path_is_the_fallback_whatever_the_probe(layout):
    """The fast path failing its self-test falls back to the generic path, after a matching
    probe and after a disagreeing one alike."""
    lay = emu.shuffled_layout(np.random.default_rng(4)) if layout else None
    with pytest.warns(RuntimeWarning, match="mlx_layout/relaxed_precision=true failed its self-test"):
        backend = fake_m5(gemm=drop_k_remainder, broken_paths={metal_source.LOAD_MLX_LAYOUT}, layout=lay)
        probe = backend.probe()
    assert probe.available and "variant generic/relaxed_precision=true" in probe.reason
    sel = backend.selection()
    assert list(sel.self_tests) == ["mlx_layout/relaxed_precision=true", "generic/relaxed_precision=true"]
    assert sel.decided_by == "self-test" and sel.probe == (metal_selection.PROBE_DIFFERS if layout else metal_selection.PROBE_MATCHES)


def test_transposed_right_report_still_builds_the_fast_path():
    """A right operand reporting (n, k) the other way round is still MLX's layout for the fast
    path (which reads no reported coordinate); the reason carries the note."""
    mlx = emu.mlx_float_layout()
    backend = fake_m5(layout=emu.FragmentLayout("swapped", mlx.left, mlx.right[..., ::-1].copy(), mlx.dest))
    probe = backend.probe()
    assert "variant mlx_layout/" in probe.reason and "transposed" in probe.reason


def test_fast_path_failing_its_self_test_falls_back_to_generic():
    with pytest.warns(RuntimeWarning, match="mlx_layout/relaxed_precision=true failed its self-test"):
        backend = fake_m5(gemm=drop_k_remainder, broken_paths={metal_source.LOAD_MLX_LAYOUT})
        probe = backend.probe()
    assert probe.available and "variant generic/relaxed_precision=true" in probe.reason
    sel = backend.selection()
    assert sel.self_tests["mlx_layout/relaxed_precision=true"] and sel.self_tests["generic/relaxed_precision=true"] == []
    out = backend.int8_matmul(mx.array(np.ones((2, 600), np.int8)), mx.array(np.ones((3, 600), np.int8)))
    assert (np.array(out) == 600).all()  # served by the generic stand-in, exactly


def test_relaxed_precision_off_is_self_tested_as_such():
    backend = fake_m5()
    backend.relaxed_precision = False
    probe = backend.probe()
    assert "variant mlx_layout/relaxed_precision=false" in probe.reason
    assert FakeOps.built[0] == "mlx_layout/relaxed_precision=false"


def test_no_selection_without_hardware():
    backend = metal.MetalBackend(machine=lambda: (True, "applegpu_g16s", "26.4"))
    assert not backend.probe().available and backend.selection() is None


def test_variant_api():
    names = [v.name for v in metal_source.variants()]
    assert names == ["mlx_layout/relaxed_precision=true", "generic/relaxed_precision=true",
                     "mlx_layout/relaxed_precision=false", "generic/relaxed_precision=false"]
    assert metal_source.variant_named("generic/relaxed_precision=false") == metal_source.KernelVariant("generic", False)
    with pytest.raises(ValueError, match="variant_named: unknown variant"):
        metal_source.variant_named("fast")
    with pytest.raises(ValueError, match="KernelVariant: load must be one of"):
        metal_source.KernelVariant("fast")
    # every variant's raw ops can be built and self-tested by a report (here CPU stand-ins)
    backend = fake_m5()
    for v in metal_source.variants():
        assert backend.variant_ops(v).self_test() == []
    assert backend.layout().matches_mlx


@pytest.fixture
def registry_on_gpu(monkeypatch):
    """The registry with MLX's default device on the GPU and a given MetalBackend installed;
    its caches cleared before and after."""

    def install(backend: metal.MetalBackend) -> None:
        monkeypatch.setattr(metal, "BACKEND", backend)
        backends.get.cache_clear()
        backends.probe.cache_clear()

    # An M5 has no CUDA: on a CUDA machine auto mode would otherwise fall back to it, not the CPU.
    from int8nax.backends.cuda import backend as cuda_backend
    from int8nax.backends.base import Probe

    monkeypatch.setattr(cuda_backend.BACKEND, "probe", lambda: Probe(False, "no CUDA device on an Apple M5"))

    monkeypatch.setattr(backends, "mx", types.SimpleNamespace(
        default_device=lambda: "gpu", gpu="gpu", __version__=mx.__version__))
    monkeypatch.delenv(backends.ENV_VAR, raising=False)
    yield install
    backends.get.cache_clear()
    backends.probe.cache_clear()


def test_registry_falls_back_and_explains(monkeypatch, registry_on_gpu):
    """With MLX's default device on the GPU: a refused NAX makes auto mode fall back to the CPU,
    backend="nax" raises with the reason, and int8nax.info() says what happened."""
    registry_on_gpu(fake_m5(monkeypatch, gemm=drop_k_remainder))
    with pytest.warns(RuntimeWarning, match="NAX refused"):
        name, why = backends.choose(None)
    assert name == "cpu" and "metal: NAX refused" in why
    with pytest.raises(RuntimeError, match="requested .* cannot run here: NAX refused"):
        int8nax.int8_matmul(np.ones((2, 2), np.int8), np.ones((2, 2), np.int8), backend="nax")
    report = int8nax.info()
    assert report["backend"] == "cpu"
    assert report["backends"]["metal"]["available"] is False
    assert "self-test failed" in report["backends"]["metal"]["reason"]
    out = int8nax.int8_matmul(np.ones((2, 600), np.int8), np.ones((3, 600), np.int8))
    assert (np.array(out) == 600).all()  # auto ran on the CPU, exactly


def test_registry_picks_nax_when_it_passes(monkeypatch, registry_on_gpu):
    registry_on_gpu(fake_m5(monkeypatch))
    name, why = backends.choose(None)
    assert name == "metal" and "self-test passed" in why


def test_compile_report_names_the_kernel_that_fails():
    """VariantOps.compile_report builds every kernel of a variant in every schedule; a kernel whose
    build raises is reported with the error text, the others as built (None)."""

    class Kernel:
        def __init__(self, name):
            self.name = name

        def __call__(self, **call):
            if self.name == "int8nax_w8a8_gemm" and dict(call["template"])["BM"] == 128:
                raise RuntimeError("Unable to build metal library from source: error: program scope variable")
            return [mx.zeros(s, dtype=d) for s, d in zip(call["output_shapes"], call["output_dtypes"])]

    kernels = metal_kernel_set.KernelSet(lambda **spec: Kernel(spec["name"]))
    report = metal_launch.VariantOps(kernels, metal_source.KernelVariant()).compile_report()
    assert report["int8nax_w8a8_gemm (large tile)"].startswith("RuntimeError: Unable to build metal library")
    assert {k for k, v in report.items() if v is None} == {
        "int8nax_int8_gemv (small M)", "int8nax_w8a8_decode (small M)",
        "int8nax_int8_gemm (small tile)", "int8nax_int8_gemm (large tile)", "int8nax_w8a8_gemm (small tile)",
        "int8nax_quantize_rows"}


def test_forced_variant(monkeypatch):
    monkeypatch.setenv(metal_selection.VARIANT_ENV, "generic/relaxed_precision=false")
    backend = fake_m5()
    probe = backend.probe()
    assert probe.available and "variant generic/relaxed_precision=false: forced by INT8NAX_METAL_VARIANT" in probe.reason
    assert set(FakeOps.built) == {"generic/relaxed_precision=false"}
    monkeypatch.setenv(metal_selection.VARIANT_ENV, "fastest")
    backend = fake_m5()
    probe = backend.probe()
    assert not probe.available and "INT8NAX_METAL_VARIANT='fastest'" in probe.reason and "unknown variant" in probe.reason


def test_selftest_section_reports_subnormals_and_builds(monkeypatch):
    """int8nax selftest's Metal section on a pretend M5 whose GPU kernels answer from a
    recorder: the subnormal verdict comes from the probe's output, and every kernel launch of the
    process is listed as a build, timed."""
    from int8nax.commands import selftest

    class Probe:
        def __call__(self, **call):
            flushed = np.zeros(len(metal_launch.SUBNORMAL_PROBE_OPS), np.float32)
            return [mx.array(flushed)]

    backend = fake_m5()
    backend.kernels = metal_kernel_set.KernelSet(lambda **spec: Probe())
    monkeypatch.setattr(metal, "BACKEND", backend)
    section = selftest.metal_section([1, 7])
    assert section["subnormals"]["summary"] == "flushes float32 subnormals"
    (build,) = section["builds"]
    assert build["build"].startswith("int8nax_subnormal_probe") and build["seconds"] >= 0
    assert section["build_bound"] == len(metal_source.instantiations())
    assert section["thread_limits"] == {}
    text = "\n".join(selftest.render_metal(section))
    assert "float32 subnormals: flushes float32 subnormals" in text
    assert "threadgroup limits: every build launched at its own threadgroup size" in text
    section["thread_limits"] = {"int8nax_int8_gemm<BM=128>": 384}
    assert "`int8nax_int8_gemm<BM=128>` allows 384 threads, served by a smaller tile" in \
        "\n".join(selftest.render_metal(section))
