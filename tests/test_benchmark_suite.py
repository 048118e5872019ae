"""The asv suite (benchmarks/) as Python: its shape, skips, memoised and checked setup.

These run without asv; tests/test_asv.py drives the suite through asv itself.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from int8nax import api
from int8nax.bench import checks, contenders, problems

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import bench_gemm, bench_linear, common  # noqa: E402

TINY = (16, 512, 512)
CLASSES = [cls for module in (bench_gemm, bench_linear) for _, cls in inspect.getmembers(module, inspect.isclass)
           if issubclass(cls, common.ContenderBenchmark) and cls is not common.ContenderBenchmark]


def methods(cls, prefix):
    return [getattr(cls, n) for n in vars(cls) if n.startswith(prefix)]


HISTORY = {  # benchmark names with published history: renaming one would cut it
    "bench_gemm.Int8naxGemm.time_int8nax_gemm", "bench_gemm.CiderRaw.time_cider_raw", "bench_gemm.TorchInt8.time_torch_int8",
    "bench_linear.Int8naxFull.time_int8nax_full", "bench_linear.CiderFull.time_cider_full",
    "bench_linear.MlxFp16.time_mlx_fp16_matmul", "bench_linear.MlxQ8.time_mlx_q8_matmul",
}


MEASURED = contenders.SUITE  # all but the floor (contenders.SUITE's docstring)


def test_one_class_per_contender_and_the_historic_names_kept():
    assert sorted(cls.contender for cls in CLASSES) == sorted(MEASURED)
    names = {f"{cls.__module__.split('.')[-1]}.{cls.__name__}.{f.__name__}" for cls in CLASSES
             for f in methods(cls, "time_")}
    assert HISTORY <= names
    assert len(names) == 2 * len(MEASURED)  # one call, one chain


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_each_class_times_one_call_and_a_chain_and_tracks_throughput(cls):
    timed = sorted(methods(cls, "time_"), key=lambda f: f.__name__)
    (tracked,) = methods(cls, "track_")
    call, chain = timed
    assert chain.__name__ == call.__name__ + "_chain" and chain.timer is common.per_call_clock
    assert not hasattr(call, "timer")
    assert tracked.__name__.endswith("_tops") and tracked.unit == "TOPS" and tracked.rounds == 1
    assert not hasattr(call, "unit") and not hasattr(chain, "unit")  # gated ones are in seconds
    assert cls.params == [list(problems.ALL_SHAPES)] and cls.param_names == ["(M, K, N)"]
    assert cls.version and cls.timeout >= 300


def test_the_classes_come_from_the_registry_and_nowhere_else():
    # One list of contenders (bench.contenders.CONTENDERS): bench_gemm and bench_linear hold one
    # class per raw and full contender of the suite, named as the registry says, and name none.
    modules = {"raw": bench_gemm, "full": bench_linear}
    for name in contenders.SUITE:
        c = contenders.CONTENDERS[name]
        cls = getattr(modules[c.kind], c.asv_class)
        assert cls.contender == name and cls.__module__ == modules[c.kind].__name__
        assert {n for n in vars(cls) if n.startswith(("time_", "track_"))} == {
            f"time_{c.stem}", f"time_{c.stem}_chain", f"track_{c.stem}_tops"}
    for module in modules.values():
        text = Path(module.__file__).read_text()
        assert not [n for n in contenders.CONTENDERS if f'"{n}"' in text], module.__name__


def test_a_contender_added_to_the_registry_gets_its_class(monkeypatch):
    fake = contenders.Contender("fake-raw", "raw", "a new peer", lambda shape, backend: None,
                                asv_class="FakeRaw", stem="fake_raw")
    monkeypatch.setitem(contenders.CONTENDERS, "fake-raw", fake)
    monkeypatch.setattr(contenders, "SUITE", contenders.SUITE + ("fake-raw",))
    classes = common.contender_classes("raw", "benchmarks.bench_gemm")
    cls = classes["FakeRaw"]
    assert cls.contender == "fake-raw" and issubclass(cls, common.ContenderBenchmark)
    assert cls.time_fake_raw_chain.timer is common.per_call_clock and cls.track_fake_raw_tops.unit == "TOPS"
    assert "FakeRaw" not in common.contender_classes("full", "benchmarks.bench_linear")


def test_each_benchmarks_recorded_source_is_the_code_that_runs():
    # asv records a benchmark's source (benchmarks.json, the site's code view) through inspect:
    # the made classes have theirs, with the class and decorators a hand-written one would show.
    assert inspect.getsource(bench_gemm.Int8naxGemm.time_int8nax_gemm) == (
        "    def time_int8nax_gemm(self, shape):\n        self.run()\n")
    assert inspect.getsource(bench_linear.MlxFp16.time_mlx_fp16_matmul_chain) == (
        "    @chained\n    def time_mlx_fp16_matmul_chain(self, shape):\n        self.chain()\n")
    assert bench_linear.MlxFp16.track_mlx_fp16_matmul_tops.__qualname__ == "MlxFp16.track_mlx_fp16_matmul_tops"


def test_the_chain_clock_reads_seconds_per_call(monkeypatch):
    monkeypatch.setattr(common, "chain_calls", lambda: 4)
    monkeypatch.setattr(common.time, "perf_counter", lambda: 10.0)
    assert common.per_call_clock() == 2.5


def test_nothing_is_chosen_at_import():
    # Importing the suite must not probe backends (on an M5 that runs the first-use self-test).
    import subprocess

    code = ("import sys; sys.path.insert(0, '.'); from benchmarks import bench_gemm, bench_linear, common; "
            "import int8nax.backends as b; print(b.probe.cache_info().currsize, common.profile.cache_info().currsize)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split()
    assert out == ["0", "0"]


def test_a_bogus_profile_skips_with_the_reason(monkeypatch):
    common.profile.cache_clear()
    monkeypatch.setenv("INT8NAX_BENCH_PROFILE", "bogus")
    try:
        with pytest.raises(NotImplementedError, match="INT8NAX_BENCH_PROFILE: expected one of full, cpu, got 'bogus'"):
            bench_gemm.Int8naxGemm().setup(TINY)
    finally:
        common.profile.cache_clear()


def test_shapes_outside_the_profile_are_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(common, "_prepared", {})
    monkeypatch.setattr(common, "profile", lambda: ("full", frozenset(problems.SEED_SHAPES), 100))
    bench = bench_gemm.Int8naxGemm()
    name, shapes, _ = common.profile()
    outside = next(s for s in problems.ALL_SHAPES if s not in shapes)
    with pytest.raises(NotImplementedError, match=f"not in the '{name}' profile.*INT8NAX_BENCH_PROFILE"):
        bench.setup(outside)


@pytest.mark.parametrize("cls", [bench_gemm.CiderRaw, bench_linear.CiderFull], ids=lambda c: c.__name__)
def test_an_unavailable_contender_is_skipped_with_its_reason(cls, monkeypatch):
    # TINY must be in the profile, or the profile's own skip comes first (the GPU's "full"
    # profile has only the seed shapes: this failed on the H200, 2026-12-01)
    monkeypatch.setattr(common, "profile", lambda: ("cpu", frozenset(problems.PROFILES["cpu"]), 4))
    monkeypatch.setitem(sys.modules, "cider", None)
    with pytest.raises(NotImplementedError, match="cider is not installed"):
        cls().setup(TINY)


def test_setup_is_checked_once_and_memoised(monkeypatch):
    if TINY not in common.profile()[1]:
        pytest.skip("the tiny shape is not in this machine's profile")
    monkeypatch.setattr(common, "_prepared", {})
    calls = []
    real_get = contenders.get
    monkeypatch.setattr(contenders, "get", lambda name: calls.append(name) or real_get(name))
    bench = bench_gemm.Int8naxGemm()
    for _ in range(3):  # asv_runner calls setup before every timed call
        bench.setup(TINY)
        bench.time_int8nax_gemm(TINY)
        bench.time_int8nax_gemm_chain(TINY)
    assert calls == ["int8nax-gemm"]
    assert bench.track_int8nax_gemm_tops(TINY) > 0


def test_a_wrong_result_fails_the_benchmark_instead_of_skipping(monkeypatch):
    if TINY not in common.profile()[1]:
        pytest.skip("the tiny shape is not in this machine's profile")
    monkeypatch.setattr(common, "_prepared", {})
    real = api.int8_matmul
    monkeypatch.setattr(api, "int8_matmul", lambda a, b, backend=None: real(a, b, b_layout="kn"))
    with pytest.raises(checks.MismatchError):
        bench_gemm.Int8naxGemm().setup(TINY)


def test_slow_mlx_baselines_skip_seed_shapes_where_mlx_runs_on_the_cpu(monkeypatch):
    # The rule follows MLX's device, not the profile (contenders.skip_reason): pretend both.
    monkeypatch.setattr(common, "profile", lambda: ("cpu", frozenset(problems.PROFILES["cpu"]), 4))
    monkeypatch.setattr(contenders.mx, "default_device", lambda: mx.cpu)
    with pytest.raises(NotImplementedError, match=re.escape(f"{problems.SEED_SHAPES[0]}: MLX's ") +
                       "quantized_matmul on the CPU runs at ~0.05 GFLOP/s"):
        bench_linear.MlxQ8().setup(problems.SEED_SHAPES[0])
    # ... and on a GPU the same baseline measures the seed shapes
    monkeypatch.setattr(contenders.mx, "default_device", lambda: mx.gpu)
    assert contenders.skip_reason("mlx-q8", problems.SEED_SHAPES[0]) is None
    assert contenders.skip_reason("mlx-fp16", problems.SEED_SHAPES[0]) is None


def test_ratio_benchmarks_keep_to_the_gated_small_shapes_on_the_cpu_profile(monkeypatch):
    from benchmarks import bench_ratio, common

    cpu_profile = lambda: ("cpu", frozenset(problems.PROFILES["cpu"]), 4)  # noqa: E731
    # Both: the ratio's own rule and its parts' (ContenderBenchmark.setup), on a GPU box too.
    monkeypatch.setattr(bench_ratio, "profile", cpu_profile)
    monkeypatch.setattr(common, "profile", cpu_profile)
    with pytest.raises(NotImplementedError, match="ratio benchmarks measure .*the gated ones"):
        bench_ratio.GemmRatio().setup(problems.CPU_SEED_SHAPES[0])
    # the small shapes do run (numpy sgemm is the reference there)
    ratio = bench_ratio.GemmRatio()
    ratio.setup(problems.CPU_SHAPES[0])
    assert ratio.blocks >= 1
    # on a GPU box (the full profile) the seed shapes are gated: no such skip
    monkeypatch.setattr(bench_ratio, "profile", lambda: ("full", frozenset(problems.PROFILES["full"]), 100))
    monkeypatch.setattr(bench_ratio, "_part", lambda name, shape: None)
    monkeypatch.setattr(bench_ratio, "_blocks", {("int8nax-gemm", problems.SEED_SHAPES[0]): 3})
    full = bench_ratio.GemmRatio()
    full.setup(problems.SEED_SHAPES[0])
    assert full.blocks == 3


def test_the_kernel_records_name_what_int8nax_runs_at_each_profile_shape(monkeypatch):
    from benchmarks import bench_kernel

    monkeypatch.setattr(contenders, "describe", lambda name, shape, backend=None: f"cpu {name} at {shape}")
    bench = bench_kernel.Kernel()
    bench.setup(TINY)
    assert bench.track_int8nax_gemm_kernel(TINY) == contenders.kernel_id(f"cpu int8nax-gemm at {TINY}")
    assert bench.track_int8nax_full_kernel(TINY) == contenders.kernel_id(f"cpu int8nax-full at {TINY}")
    assert bench_kernel.Kernel.track_int8nax_gemm_kernel.unit == "kernel id"
    assert bench_kernel.Kernel.params == [list(problems.ALL_SHAPES)]


def test_kernel_records_skip_outside_the_profile_and_where_int8nax_cannot_run(monkeypatch):
    from benchmarks import bench_kernel

    monkeypatch.setenv(problems.PROFILE_ENV, "cpu")
    common.profile.cache_clear()
    try:
        outside = next(s for s in problems.ALL_SHAPES if s not in problems.profile_shapes("cpu"))
        with pytest.raises(NotImplementedError, match="profile"):
            bench_kernel.Kernel().setup(outside)
        monkeypatch.setenv("INT8NAX_BACKEND", "nonsense")
        with pytest.raises(NotImplementedError, match="nonsense"):
            bench_kernel.Kernel().track_int8nax_gemm_kernel(TINY)
    finally:
        common.profile.cache_clear()


def test_kernel_time_is_skipped_with_its_reason_where_it_cannot_be_measured(monkeypatch):
    from benchmarks import bench_kernel
    from int8nax.bench.kernel import cupti

    monkeypatch.setattr(cupti, "skip_reason", lambda: "needs an NVIDIA GPU with MLX's CUDA backend")
    with pytest.raises(NotImplementedError, match="kernel time needs an NVIDIA GPU"):
        bench_kernel.KernelTime().setup(TINY)
    names = [n for n in vars(bench_kernel.KernelTime) if n.startswith("track_")]
    assert names == ["track_int8nax_gemm_kernel_us", "track_cublaslt_int8_kernel_us", "track_int8nax_full_kernel_us"]
    assert all(getattr(bench_kernel.KernelTime, n).unit == "µs" for n in names)


def test_decode_time_is_each_model_layer_at_one_token_beside_mlx_own_forms(monkeypatch):
    # Every fused layer of both GPU models at M = 1, W8A8 against MLX's 8-bit and bfloat16 matmuls,
    # skipped with the reason where kernel time cannot be measured; each track is kernel.cases.measure's µs.
    from benchmarks import bench_kernel
    from int8nax.bench.kernel import cupti
    from int8nax.bench.kernel.plans import layer_shapes
    from int8nax.bench.models import CONFIGS, PROFILE_CONFIGS

    layers = {(1, k, n) for name in PROFILE_CONFIGS["full"] for _, k, n in layer_shapes(CONFIGS[name])}
    assert set(bench_kernel.DECODE_SHAPES) == layers and len(layers) == 8
    monkeypatch.setattr(cupti, "skip_reason", lambda: "needs an NVIDIA GPU with MLX's CUDA backend")
    with pytest.raises(NotImplementedError, match="kernel time needs an NVIDIA GPU"):
        bench_kernel.DecodeTime().setup((1, 3584, 4608))
    names = [n for n in vars(bench_kernel.DecodeTime) if n.startswith("track_")]
    assert names == ["track_w8a8_decode_kernel_us", "track_mlx_q8_decode_kernel_us", "track_bf16_decode_kernel_us"]
    assert all(getattr(bench_kernel.DecodeTime, n).unit == "µs" for n in names)
    seen = []
    monkeypatch.setattr(bench_kernel, "_kernel_us", lambda subject, shape: seen.append(subject) or 3.0)
    assert [getattr(bench_kernel.DecodeTime(), n)((1, 64, 48)) for n in names] == [3.0] * 3
    assert seen == ["w8a8:bfloat16", "mlx-q8", "bf16"]


def test_kernel_time_tracks_the_measuring_layers_figure_and_fails_a_wrong_output(monkeypatch):
    # The CPU backend and a stub profiler stand in for CUDA and CUPTI (as in test_kernel_time):
    # the track returns kernel.cases.measure's µs, and a wrong output fails the benchmark.
    import int8nax
    from benchmarks import bench_kernel
    from int8nax.bench import checks

    class Stub:
        def time(self, launch, launches):
            for i in range(launches):
                launch(i)
            return 7.5, [["stub", 7.5]]

    monkeypatch.setattr(bench_kernel, "_kernel_context",
                        lambda: {"profiler": Stub(), "launches": 2, "l2_bytes": 1 << 16, "backend": "cpu"})
    bench = bench_kernel.KernelTime()
    assert bench.track_int8nax_gemm_kernel_us((20, 64, 48)) == 7.5
    assert bench.track_int8nax_full_kernel_us((20, 64, 48)) == 7.5
    real = int8nax.int8_matmul
    monkeypatch.setattr(int8nax, "int8_matmul", lambda a, b, backend=None: real(a, b, backend=backend) + 1)
    with pytest.raises(checks.MismatchError, match="int8_matmul at .*differ"):
        bench.track_int8nax_gemm_kernel_us((20, 64, 48))
