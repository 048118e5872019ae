"""int8nax.bench: shapes, profiles, the problems, contenders, timing modes, and the checks that
catch a wrong kernel."""

from __future__ import annotations

import types

import mlx.core as mx
import numpy as np
import pytest

from int8nax import api
from int8nax.bench import checks, contenders, problems, timing
from int8nax.bench.checks import MismatchError
from int8nax.bench.peers import Unavailable

TINY = (16, 512, 512)  # the smallest CPU-profile shape


def test_seed_shapes_are_ciders_eleven():
    square = [(m, 4096, 4096) for m in (16, 64, 128, 256, 512, 1024, 2048)]
    mlp = [(128, 3584, 18944), (512, 3584, 18944), (128, 18944, 3584), (512, 18944, 3584)]
    assert list(problems.SEED_SHAPES) == square + mlp


def test_every_profile_shape_is_declared_once_and_fits_q8():
    assert len(set(problems.ALL_SHAPES)) == len(problems.ALL_SHAPES)
    for shapes in problems.PROFILES.values():
        assert set(shapes) <= set(problems.ALL_SHAPES)
    for _, k, _ in problems.ALL_SHAPES:
        assert k % contenders.Q8["group_size"] == 0


def test_profile_is_cpu_on_this_machine_and_overridable(monkeypatch):
    monkeypatch.delenv(problems.PROFILE_ENV, raising=False)
    monkeypatch.delenv("INT8NAX_BACKEND", raising=False)
    if mx.default_device() == mx.gpu:
        pytest.skip("MLX runs on a GPU here: the automatic profile is 'full'")
    assert problems.choose_profile()[0] == "cpu"
    assert problems.profile_shapes() == problems.CPU_SHAPES + problems.CPU_SEED_SHAPES
    assert set(problems.CPU_SEED_SHAPES) <= set(problems.SEED_SHAPES)
    monkeypatch.setenv(problems.PROFILE_ENV, "full")
    assert problems.choose_profile() == ("full", f"{problems.PROFILE_ENV}=full")
    assert problems.profile_shapes() == problems.SEED_SHAPES
    monkeypatch.setenv(problems.PROFILE_ENV, "huge")
    with pytest.raises(ValueError, match="INT8NAX_BENCH_PROFILE: expected one of full, cpu, got 'huge'"):
        problems.choose_profile()


def test_a_backend_that_cannot_run_does_not_break_profile_choice(monkeypatch):
    # The suite picks its shapes at import; a bad INT8NAX_BACKEND must not break discovery.
    monkeypatch.delenv(problems.PROFILE_ENV, raising=False)
    monkeypatch.setenv("INT8NAX_BACKEND", "nonsense")
    assert problems.choose_profile()[0] in problems.PROFILES


def test_problems_are_deterministic_and_shared():
    a1, b1 = problems.raw_problem(*TINY)
    problems.raw_problem.cache_clear()
    a2, b2 = problems.raw_problem(*TINY)
    assert np.array_equal(a1, a2) and np.array_equal(b1, b2)
    assert a1.dtype == np.int8 and a1.shape == (16, 512) and b1.shape == (512, 512)
    assert a1.min() == -128 and a1.max() == 127  # the whole int8 range, -128 included
    x, w = problems.linear_problem(16, 256, 1344)
    assert x.dtype == np.float16 and x.shape == (16, 256) and w.shape == (1344, 256)


def test_unknown_contender_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown contender 'nax'; expected one of int8nax-gemm"):
        contenders.get("nax")


def test_the_registry_names_every_suite_contenders_benchmarks_and_format():
    # CONTENDERS is the one list: the asv classes and the site's page are made from these fields.
    suite = [contenders.CONTENDERS[n] for n in contenders.SUITE]
    assert all(c.asv_class and c.stem and c.fmt for c in suite)
    assert len({c.asv_class for c in suite}) == len({c.stem for c in suite}) == len(suite)
    floor = contenders.CONTENDERS["mlx-floor"]
    assert floor.name not in contenders.SUITE and not (floor.asv_class or floor.stem or floor.fmt)
    assert [c.name for c in suite if not c.peer] == list(contenders.OPS)
    assert [c.name for c in suite if c.m5_only] == ["cider-raw", "cider-full"]


@pytest.mark.parametrize("name", list(contenders.CONTENDERS))
def test_every_contender_runs_checked_or_says_why_not(name):
    contender = contenders.get(name)
    try:
        prepared = contender.ready(*TINY)
    except Unavailable as exc:
        assert str(exc), "an unavailable contender must say why"
        # the others run everywhere; the floor needs a GPU custom kernel
        assert name in ("cider-raw", "cider-full", "torch-int8", "cublaslt-int8", "mlx-floor")
        return
    out = prepared.run()
    assert tuple(out.shape) == ((1, 1) if contender.kind == "floor" else (TINY[0], TINY[2]))
    assert prepared.detail


def test_nax_contenders_use_the_selected_backend_or_explain(monkeypatch):
    monkeypatch.setenv("INT8NAX_BACKEND", "cpu")
    assert "backend cpu" in contenders.get("int8nax-gemm").prepare(*TINY).detail
    monkeypatch.setenv("INT8NAX_BACKEND", "nonsense")
    with pytest.raises(Unavailable, match="unknown backend 'nonsense'"):
        contenders.get("int8nax-full").prepare(*TINY)


def test_a_wrong_int8nax_kernel_fails_the_check(monkeypatch):
    # If int8_matmul computed a @ b (b taken as [K, N]) the square benchmark shape would
    # still have the right shape; the exact check must refuse it.
    real = api.int8_matmul
    monkeypatch.setattr(api, "int8_matmul", lambda a, b, backend=None: real(a, b, b_layout="kn"))
    with pytest.raises(MismatchError, match=r"int8nax-gemm at \(M, K, N\) = \(16, 512, 512\): \d+ of 8192 outputs"):
        contenders.get("int8nax-gemm").ready(*TINY)


def test_a_w8a8_linear_off_by_rounding_fails_the_ulp_check(monkeypatch):
    real = api.w8a8_linear
    # Scaling by (1 + 2**-9) moves float16 outputs by 1-2 ulp: small, and still caught.
    monkeypatch.setattr(api, "w8a8_linear", lambda x, w, s, backend=None: real(x, w, s * (1 + 2.0**-9)))
    with pytest.raises(MismatchError, match="ulp"):
        contenders.get("int8nax-full").ready(*TINY)


def test_check_exact_reports_the_first_difference():
    expected = np.arange(6, dtype=np.int64).reshape(2, 3)
    got = expected.astype(np.int32)
    checks.check_exact("x", (2, 5, 3), mx.array(got), expected)
    got[1, 2] += 1
    with pytest.raises(MismatchError, match=r"1 of 6 outputs differ .* first at \[1, 2\]: got 6, expected 5"):
        checks.check_exact("x", (2, 5, 3), mx.array(got), expected)
    with pytest.raises(MismatchError, match="dtype int64"):
        checks.check_exact("x", (2, 5, 3), expected, expected)


def test_baseline_check_accepts_half_precision_rounding_and_refuses_another_problem():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((8, 64)).astype(np.float16)
    w = (rng.standard_normal((64, 64)) / 8).astype(np.float16)
    exact = x.astype(np.float64) @ w.astype(np.float64).T
    checks.check_float_baseline("b", (8, 64, 64), exact.astype(np.float16), x, w)
    transposed = x.astype(np.float64) @ w.astype(np.float64)
    with pytest.raises(MismatchError, match="normwise relative error"):
        checks.check_float_baseline("b", (8, 64, 64), transposed.astype(np.float16), x, w)
    nan = exact.copy()
    nan[0, 0] = np.nan
    with pytest.raises(MismatchError):
        checks.check_float_baseline("b", (8, 64, 64), nan, x, w)


def test_timing_helpers():
    calls = []
    seconds = timing.median_seconds(lambda: calls.append(1), repeat=3)
    assert len(calls) == 4 and seconds >= 0  # one warm-up call, then three timed
    assert timing.tops((1000, 1000, 500), 1e-3) == pytest.approx(1.0)


@pytest.mark.parametrize("name", ["int8nax-gemm", "int8nax-full", "mlx-fp16", "numpy-sgemm"])
def test_a_chain_feeds_each_call_from_the_previous_one_and_gives_the_same_answer(name):
    # The link adds 0 times a column of the previous output: the answer must not change.
    prepared = contenders.get(name).ready(*TINY)
    calls = []
    real_call = prepared.call
    chained = contenders.Prepared(lambda prev: calls.append(prev) or real_call(prev), prepared.sync,
                                  prepared.check, prepared.detail, prepared.lazy)
    out = chained.chain(3)
    prepared.check(out)  # the dependency changes nothing in the data
    assert calls[0] is None and all(c is not None for c in calls[1:]) and len(calls) == 3


def test_a_chain_link_is_a_real_data_edge():
    # Each call's input is computed from the previous output (not merely ordered after it):
    # a NaN planted in the previous output's first column reaches the next output. An edge
    # that a GPU could ignore (mx.depends on MLX's CUDA backend) would leave it clean.
    prepared = contenders.get("mlx-fp16").ready(*TINY)
    first = prepared.call(None)
    mx.eval(first)
    poisoned = mx.array(np.where(np.arange(TINY[2]) == 0, np.nan, np.array(first)).astype(np.float16))
    second = prepared.call(poisoned)
    assert np.isnan(np.array(second)).all()
    clean = prepared.call(first)
    assert np.array_equal(np.array(clean), np.array(first))  # same values otherwise


def test_timing_modes():
    prepared = contenders.get("int8nax-gemm").ready(*TINY)
    for mode in ("call", "chain"):
        assert timing.seconds_per_call(prepared, mode, repeat=1, warmup=0, calls=2) > 0
    fp16 = contenders.get("mlx-fp16").ready(*TINY)  # an MLX op: lazy, so its build is timed alone
    assert timing.seconds_per_call(fp16, "host", repeat=1, warmup=0, calls=2) > 0
    with pytest.raises(ValueError, match="mode: expected one of call, chain, host, got 'kernel'"):
        timing.seconds_per_call(prepared, "kernel")
    for eager in ("numpy-sgemm", "int8nax-gemm"):  # int8nax's CPU backend computes in numpy when called
        with pytest.raises(Unavailable, match="lazy"):
            contenders.get(eager).ready(*TINY, backend="cpu").build(2)


def test_measure_never_raises_for_a_contender():
    assert timing.measure((16, 520, 8), "mlx-q8").unavailable.startswith("mx.quantized_matmul with group size 64")
    cell = timing.measure(TINY, "int8nax-gemm", repeat=1)
    assert cell.seconds > 0 and "backend" in cell.detail


def test_mlx_baselines_keep_to_the_small_shapes_where_mlx_runs_on_the_cpu(monkeypatch):
    seed, small = problems.SEED_SHAPES[0], problems.CPU_SHAPES[0]
    monkeypatch.setattr(contenders, "mx", types.SimpleNamespace(default_device=lambda: "cpu", gpu="gpu"))
    assert "quantized_matmul" in contenders.skip_reason("mlx-q8", seed)
    assert "float matmul" in contenders.skip_reason("mlx-fp16", seed)
    assert contenders.skip_reason("mlx-q8", small) is None
    for fast in ("int8nax-gemm", "int8nax-full", "numpy-sgemm"):
        assert contenders.skip_reason(fast, seed) is None
    monkeypatch.setattr(contenders, "mx", types.SimpleNamespace(default_device=lambda: "gpu", gpu="gpu"))
    assert contenders.skip_reason("mlx-q8", seed) is None


def test_host_mode_builds_independent_calls_and_frees_them_after_the_clock(monkeypatch):
    seen, reads, freed_at = [], [], []

    class Out:
        def __del__(self):
            freed_at.append(len(reads))

    def call(after):
        seen.append(after)
        return Out()

    prepared = contenders.Prepared(call=call, sync=lambda out: None, check=lambda out: None, detail="fake")
    outs = prepared.build(3)
    assert len(outs) == 3 and seen == [None, None, None]  # no chain link: the call's own host cost
    del outs
    freed_at.clear()
    monkeypatch.setattr(timing.time, "perf_counter", lambda: reads.append(None) or float(len(reads)))
    assert timing.median_seconds(lambda: prepared.build(2), repeat=1, warmup=0) == 1.0
    assert freed_at == [2, 2]  # both outputs freed after the clock's second reading, not inside


def test_the_floor_says_why_it_cannot_run_without_a_gpu():
    if mx.metal.is_available() or (getattr(mx, "cuda", None) is not None and mx.cuda.is_available()):
        pytest.skip("MLX has a GPU here: the floor runs (test_every_contender_runs_checked_or_says_why_not)")
    with pytest.raises(Unavailable, match="GPU custom kernel"):
        contenders.get("mlx-floor").prepare(*TINY)


class _FakeFloorKernel:
    """Stands in for mx.fast.cuda_kernel's object: writes `value` (default: a[0, 0]) to [1, 1]."""

    def __init__(self, value=None):
        self.value = value

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup):
        assert output_shapes == [(1, 1)] and output_dtypes == [mx.int32]
        v = inputs[0][:1, :1].astype(mx.int32) if self.value is None else mx.full((1, 1), self.value, mx.int32)
        return [v]


def test_the_floor_checks_what_its_kernel_wrote(monkeypatch):
    # The floor computes no problem, but its one output is still checked: a kernel that wrote
    # anything but a[0, 0] is refused, so a broken launch is never timed as MLX's floor.
    monkeypatch.setattr(contenders.mx, "cuda", types.SimpleNamespace(is_available=lambda: True), raising=False)
    monkeypatch.setattr(contenders, "_floor_kernel", lambda api_name: _FakeFloorKernel())
    prepared = contenders.get("mlx-floor").ready(*TINY)
    assert "cuda_kernel" in prepared.detail
    prepared.chain(3)  # the chain's link takes the [1, 1] output
    a00 = int(problems.raw_problem(*TINY)[0][0, 0])
    monkeypatch.setattr(contenders, "_floor_kernel", lambda api_name: _FakeFloorKernel(a00 + 1))
    with pytest.raises(MismatchError, match="mlx-floor"):
        contenders.get("mlx-floor").ready(*TINY)


# --- what ran: every int8nax record names its kernel --------------------------------------

@pytest.mark.parametrize("name, op", [("int8nax-gemm", "int8_matmul"), ("int8nax-full", "w8a8_linear")])
def test_int8nax_contenders_carry_the_backends_description_of_their_shape(name, op, monkeypatch):
    from int8nax.backends.cpu import backend as cpu

    asked = []

    def describe(self, op_, m, n, k, *, bias=False, dtype=None):
        asked.append((op_, m, n, k, bias, dtype))
        return f"cpu plan-for-{m}x{n}x{k}"

    monkeypatch.setenv("INT8NAX_BACKEND", "cpu")
    monkeypatch.setattr(cpu.CPUBackend, "describe", describe)
    prepared = contenders.get(name).prepare(*TINY)
    m, k, n = TINY
    assert prepared.kernel == f"cpu plan-for-{m}x{n}x{k}" and prepared.kernel in prepared.detail
    assert asked == [(op, m, n, k, False, mx.float16)]
    cell = timing.measure(TINY, name, repeat=1)
    assert cell.kernel == prepared.kernel


def test_the_cpu_backend_names_its_engine_and_prepared_weights(monkeypatch):
    from int8nax.backends.cpu import backend as cpu, engines as cpu_engines

    with cpu_engines.using("numpy"):
        assert cpu.BACKEND.describe("int8_matmul", 3, 5, 7) == "cpu numpy float32 BLAS, K blocks of 1024"
        assert cpu.BACKEND.describe("w8a8_linear", 3, 5, 7) == "cpu numpy float32 BLAS, K blocks of 1024"
    if cpu_engines.engine_status("onnx").engine is not None:
        with cpu_engines.using("onnx"):
            assert cpu.BACKEND.describe("int8_matmul", 3, 5, 7) == "cpu onnxruntime MatMulInteger"
            assert cpu.BACKEND.describe("w8a8_linear", 3, 5, 7).endswith("weights prepared from their second use")
            monkeypatch.setenv(cpu.PREPARE_ENV_VAR, "0")
            assert cpu.BACKEND.describe("w8a8_linear", 3, 5, 7) == "cpu onnxruntime MatMulInteger"


def test_peers_name_no_int8nax_kernel_and_describe_refuses_them():
    assert contenders.get("numpy-sgemm").ready(*TINY).kernel == ""
    with pytest.raises(ValueError, match="numpy-sgemm"):
        contenders.describe("numpy-sgemm", TINY)


def test_kernel_ids_are_stable_numbers_that_tell_descriptions_apart():
    a = contenders.kernel_id("cuda tma-ws-cooperative 128x256 splits=1")
    assert a == contenders.kernel_id("cuda tma-ws-cooperative 128x256 splits=1")
    assert a != contenders.kernel_id("cuda tma-ws-cooperative 128x256 splits=2")
    assert isinstance(a, int) and 0 <= a < 2 ** 32 and float(a) == a  # exact in asv's JSON
    # the ids of committed records keep their meaning: the same function in every process and release
    assert contenders.kernel_id("cpu onnxruntime MatMulInteger") == 0xb75da481
