"""The asv suite (benchmarks/) as Python: its shape, skips, memoised and checked setup.

These run without asv; tests/test_asv.py drives the suite through asv itself.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from int8nax import api, contenders

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import bench_gemm, bench_linear, common  # noqa: E402

TINY = (16, 512, 512)
CLASSES = [cls for module in (bench_gemm, bench_linear) for _, cls in inspect.getmembers(module, inspect.isclass)
           if issubclass(cls, common.ContenderBenchmark) and cls is not common.ContenderBenchmark]


def methods(cls, prefix):
    return [getattr(cls, n) for n in vars(cls) if n.startswith(prefix)]


def test_one_class_per_contender_with_the_issue_names():
    assert sorted(cls.contender for cls in CLASSES) == sorted(contenders.CONTENDERS)
    names = {f.__name__ for cls in CLASSES for f in methods(cls, "time_")}
    assert {"time_cider_full", "time_cider_raw", "time_nax_gemm", "time_nax_full"} <= names
    assert len(names) == len(contenders.CONTENDERS)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_each_class_times_and_tracks_throughput(cls):
    (timed,), (tracked,) = methods(cls, "time_"), methods(cls, "track_")
    assert tracked.__name__.endswith("_tops") and tracked.unit == "TOPS" and tracked.rounds == 1
    assert not hasattr(timed, "unit")  # time_ benchmarks are the gated ones, in seconds
    assert cls.params == [list(contenders.ALL_SHAPES)] and cls.param_names == ["(M, K, N)"]
    assert cls.version and cls.timeout >= 300


def test_shapes_outside_the_profile_are_skipped_with_the_reason():
    bench = bench_gemm.NaxGemm()
    outside = next(s for s in contenders.ALL_SHAPES if s not in common.RUN_SHAPES)
    with pytest.raises(NotImplementedError, match=f"not in the '{common.PROFILE}' profile.*INT8NAX_BENCH_PROFILE"):
        bench.setup(outside)


@pytest.mark.parametrize("cls", [bench_gemm.CiderRaw, bench_linear.CiderFull], ids=lambda c: c.__name__)
def test_an_unavailable_contender_is_skipped_with_its_reason(cls, monkeypatch):
    monkeypatch.setitem(sys.modules, "cider", None)
    with pytest.raises(NotImplementedError, match="cider is not installed"):
        cls().setup(TINY)


def test_setup_is_checked_once_and_memoised(monkeypatch):
    if TINY not in common.RUN_SHAPES:
        pytest.skip("the tiny shape is not in this machine's profile")
    monkeypatch.setattr(common, "_prepared", {})
    calls = []
    real_get = contenders.get
    monkeypatch.setattr(contenders, "get", lambda name: calls.append(name) or real_get(name))
    bench = bench_gemm.NaxGemm()
    for _ in range(3):  # asv_runner calls setup before every timed call
        bench.setup(TINY)
        bench.time_nax_gemm(TINY)
    assert calls == ["nax-gemm"]
    assert bench.track_nax_gemm_tops(TINY) > 0


def test_a_wrong_result_fails_the_benchmark_instead_of_skipping(monkeypatch):
    if TINY not in common.RUN_SHAPES:
        pytest.skip("the tiny shape is not in this machine's profile")
    monkeypatch.setattr(common, "_prepared", {})
    real = api.int8_matmul
    monkeypatch.setattr(api, "int8_matmul", lambda a, b: real(a, b, b_layout="kn"))
    with pytest.raises(contenders.MismatchError):
        bench_gemm.NaxGemm().setup(TINY)
