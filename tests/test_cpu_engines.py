"""The CPU backend's GEMM engines: the first-use exactness check (against fake kernels that
fail the way real ones do), the once-per-process choice, explicit requests, prepared weights."""

from __future__ import annotations

import gc
import importlib.util
import os

import mlx.core as mx
import numpy as np
import pytest

import int8nax
from int8nax import backends
from int8nax.backends.cpu import backend as cpu, check as cpu_check, engines as cpu_engines
from int8nax.reference import exact_int_product

HAVE_ORT = importlib.util.find_spec("onnxruntime") is not None
if not HAVE_ORT and os.environ.get("CI", "").lower() == "true":
    # The `cpu` extra brings onnxruntime; CI installs it, so its absence there is a failure.
    raise RuntimeError("onnxruntime is missing (pip install -e '.[cpu,test]'), and CI=true requires it")


class ExactFake:
    """An engine computing the exact product in int64 (numpy), for the selection logic."""

    name = "fake"

    def load(self):
        return "fake exact engine"

    def matmul(self, a, b):
        return exact_int_product(a, b).astype(np.int32)

    def prepare(self, b):
        return np.array(b)

    def matmul_prepared(self, a, prepared):
        return self.matmul(a, prepared)


class SaturatingFake(ExactFake):
    """What a uint8 x int8 kernel without VNNI/AMX computes (x86 vpmaddubsw + vpmaddwd):
    a_u8 = a + 128; adjacent pairs a_u8[2i] * b[2i] + a_u8[2i+1] * b[2i+1] saturate to
    int16; the pair sums add up in int32; the zero-point correction 128 * colsum(b) follows."""

    def matmul(self, a, b):
        k = a.shape[1]
        if k % 2:
            a = np.pad(a, ((0, 0), (0, 1)))
            b = np.pad(b, ((0, 0), (0, 1)))
        a_u8 = a.astype(np.int64) + 128
        b64 = b.astype(np.int64)
        out = np.zeros((a.shape[0], b.shape[0]), np.int64)
        for j in range(b.shape[0]):
            pairs = (a_u8 * b64[j]).reshape(a.shape[0], -1, 2).sum(axis=2)
            out[:, j] = np.clip(pairs, -32768, 32767).sum(axis=1)
        out -= 128 * b64.sum(axis=1)[None, :]
        return out.astype(np.int32)


class ReducedRangeFake(ExactFake):
    """A 7-bit kernel: operands clipped to [-64, 63] (onnxruntime's "reduce_range" idea)."""

    def matmul(self, a, b):
        return exact_int_product(np.clip(a, -64, 63), np.clip(b, -64, 63)).astype(np.int32)


class WrappingWithoutCorrectionFake(ExactFake):
    """Exact on the shifted operands but forgets the -128 * colsum(b) correction."""

    def matmul(self, a, b):
        return exact_int_product(a.astype(np.int64) + 128, b).astype(np.int32)


class PreparedPathBrokenFake(ExactFake):
    """Stateless product exact, prepared product saturating: both paths must be checked."""

    def matmul_prepared(self, a, prepared):
        return SaturatingFake().matmul(a, prepared)


def test_saturating_fake_is_exact_on_small_values():
    # The fake is a faithful model, not a broken stub: exact while no pair sum leaves int16.
    rng = np.random.default_rng(1)
    a = rng.integers(-128, -100, (5, 64), dtype=np.int8)  # a + 128 in [0, 28]
    b = rng.integers(-128, 128, (7, 64), dtype=np.int8)
    assert (SaturatingFake().matmul(a, b) == exact_int_product(a, b)).all()
    a = np.full((1, 2), 127, np.int8)
    b = np.full((1, 2), 127, np.int8)
    assert SaturatingFake().matmul(a, b)[0, 0] != 2 * 127 * 127


def test_check_passes_exact_engines():
    assert cpu_check.check_engine(ExactFake()) == []
    assert cpu_check.check_engine(cpu_engines.NumpyEngine()) == []


@pytest.mark.parametrize("fake", [SaturatingFake, ReducedRangeFake, WrappingWithoutCorrectionFake])
def test_check_catches_broken_kernels(fake):
    failures = cpu_check.check_engine(fake())
    assert failures and any(f.startswith("matmul,") for f in failures)
    assert any(f.startswith("prepared,") for f in failures)


def test_check_covers_the_prepared_path():
    failures = cpu_check.check_engine(PreparedPathBrokenFake())
    assert failures and all(f.startswith("prepared,") for f in failures)


def test_check_problems_reach_the_limits():
    problems = cpu_check.check_problems()
    ks = [a.shape[1] for _, a, _ in problems]
    assert max(ks) == 131071
    extremes = [exact_int_product(a, b) for _, a, b in problems]
    assert max(int(np.abs(e).max()) for e in extremes) == 131071 * 16384  # 2**31 - 2**14
    assert any((e < 0).any() for e in extremes) and any((e > 0).any() for e in extremes)


def test_check_reports_an_exception_as_a_failure():
    class Raising(ExactFake):
        def matmul(self, a, b):
            raise RuntimeError("kernel exploded")

    failures = cpu_check.check_engine(Raising())
    assert any("kernel exploded" in f for f in failures)


@pytest.fixture
def fresh_selection(monkeypatch):
    """A clean process-wide choice before and after the test."""
    cpu_engines.reset()
    backends.probe.cache_clear()
    yield monkeypatch
    cpu_engines.reset()
    backends.probe.cache_clear()


def test_failed_check_falls_back_to_numpy(fresh_selection):
    fresh_selection.setattr(cpu_engines, "OnnxEngine", SaturatingFake)
    fresh_selection.delenv(cpu_engines.ENV_VAR, raising=False)
    sel = cpu_engines.select()
    assert sel.engine.name == "numpy"
    assert "failed the exactness check" in sel.reason and "'numpy' (auto)" in sel.reason
    probe = cpu.BACKEND.probe()
    assert probe.available and "failed the exactness check" in probe.reason
    a = np.full((2, 300), 127, np.int8)
    out = np.array(int8nax.int8_matmul(a, a, backend="cpu"))
    assert (out == 300 * 127 * 127).all()


def test_missing_library_falls_back_to_numpy(fresh_selection):
    class Missing(ExactFake):
        def load(self):
            raise ModuleNotFoundError("No module named 'onnxruntime'")

    fresh_selection.setattr(cpu_engines, "OnnxEngine", Missing)
    fresh_selection.delenv(cpu_engines.ENV_VAR, raising=False)
    sel = cpu_engines.select()
    assert sel.engine.name == "numpy" and "not installed" in sel.reason
    assert cpu_engines.engine_status("onnx").missing


def test_explicit_request_that_cannot_run_raises(fresh_selection):
    fresh_selection.setattr(cpu_engines, "OnnxEngine", SaturatingFake)
    fresh_selection.setenv(cpu_engines.ENV_VAR, "onnx")
    probe = cpu.BACKEND.probe()
    assert not probe.available and "INT8NAX_CPU_GEMM=onnx" in probe.reason
    with pytest.raises(RuntimeError, match="failed the exactness check"):
        cpu.BACKEND.int8_matmul(mx.zeros((1, 1), mx.int8), mx.zeros((1, 1), mx.int8))
    with pytest.raises(RuntimeError, match="cannot run here"):
        with cpu_engines.using("onnx"):
            pass


def test_explicit_numpy_request(fresh_selection):
    fresh_selection.setenv(cpu_engines.ENV_VAR, "numpy")
    sel = cpu_engines.select()
    assert sel.engine.name == "numpy" and "INT8NAX_CPU_GEMM=numpy" in sel.reason


def test_unknown_engine_name(fresh_selection):
    fresh_selection.setenv(cpu_engines.ENV_VAR, "mkl")
    with pytest.raises(ValueError, match="INT8NAX_CPU_GEMM: unknown CPU GEMM engine 'mkl'"):
        cpu_engines.select()
    # info() reports it rather than raising; using the backend raises it.
    assert "unknown CPU GEMM engine 'mkl'" in int8nax.info()["backends"]["cpu"]["reason"]
    with pytest.raises(ValueError, match="'mkl'"):
        cpu.BACKEND.int8_matmul(mx.zeros((1, 1), mx.int8), mx.zeros((1, 1), mx.int8))


def test_choice_is_made_once(fresh_selection):
    calls = []

    class Counting(ExactFake):
        def load(self):
            calls.append(1)
            return "counting"

    fresh_selection.setattr(cpu_engines, "OnnxEngine", Counting)
    fresh_selection.delenv(cpu_engines.ENV_VAR, raising=False)
    first = cpu_engines.select()
    fresh_selection.setenv(cpu_engines.ENV_VAR, "numpy")  # read once: no effect now
    assert cpu_engines.select() is first and len(calls) == 1


@pytest.mark.skipif(not HAVE_ORT, reason="onnxruntime is not installed (pip install -e '.[cpu]')")
def test_onnx_engine_passes_the_check_here():
    status = cpu_engines.engine_status("onnx")
    assert status.engine is not None, status.reason
    assert cpu_check.check_engine(status.engine) == []


def test_info_says_which_engine_serves():
    reason = int8nax.info()["backends"]["cpu"]["reason"]
    assert "CPU GEMM engine" in reason and ("'onnx'" in reason or "'numpy'" in reason)


# --- prepared weights -------------------------------------------------------------------


@pytest.mark.skipif(not HAVE_ORT, reason="onnxruntime is not installed (pip install -e '.[cpu]')")
def test_prepared_weight_is_reused_and_freed():
    engine = "onnx"
    rng = np.random.default_rng(3)
    w, s_w = int8nax.quantize_weight_int8(mx.array(rng.standard_normal((9, 40)).astype(np.float32)))
    x = mx.array(rng.standard_normal((4, 40)).astype(np.float32))
    cpu.forget_prepared()
    with cpu_engines.using(engine):
        y1 = np.array(int8nax.w8a8_linear(x, w, s_w, backend="cpu"))
        assert cpu.PREPARED.prepared_count() == 0  # seen once: stateless
        y2 = np.array(int8nax.w8a8_linear(x, w, s_w, backend="cpu"))
        y3 = np.array(int8nax.w8a8_linear(x, w, s_w, backend="cpu"))
        assert cpu.PREPARED.prepared_count() == 1
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(y1, y3)
        # A new weight array of the same shape is a new entry, with its own values.
        w2 = -w
        for _ in range(2):
            y4 = np.array(int8nax.w8a8_linear(x, w2, s_w, backend="cpu"))
        np.testing.assert_array_equal(y4, -y1)
        assert cpu.PREPARED.prepared_count() == 2
        del w2
        gc.collect()
        assert cpu.PREPARED.prepared_count() == 1  # freed with its array
        # A numpy weight becomes a new mx.array on every call: never prepared.
        w_np = np.array(w)
        for _ in range(3):
            int8nax.w8a8_linear(x, w_np, s_w, backend="cpu")
        assert cpu.PREPARED.prepared_count() == 1


@pytest.mark.parametrize("engine", cpu_engines.ENGINE_NAMES)
def test_numpy_engine_prepares_nothing(engine):
    status = cpu_engines.engine_status(engine)
    if status.engine is None:
        pytest.skip(status.reason)
    assert status.engine.prepares == (engine == "onnx")
    if engine == "numpy":
        cpu.forget_prepared()
        with cpu_engines.using("numpy"):
            w = mx.ones((3, 8), mx.int8)
            for _ in range(2):
                int8nax.w8a8_linear(mx.ones((2, 8)), w, mx.ones((3,)), backend="cpu")
        assert cpu.PREPARED.prepared_count() == 0


@pytest.mark.skipif(not HAVE_ORT, reason="onnxruntime is not installed (pip install -e '.[cpu]')")
def test_forget_after_in_place_update():
    rng = np.random.default_rng(4)
    w = mx.array(rng.integers(-127, 128, (5, 16), dtype=np.int8))
    s_w = mx.ones((5,), mx.float32)
    x = mx.array(rng.standard_normal((3, 16)).astype(np.float32))
    with cpu_engines.using("onnx"):
        for _ in range(2):
            before = np.array(int8nax.w8a8_linear(x, w, s_w, backend="cpu"))
        assert cpu.PREPARED.prepared_count() >= 1
        w[0] = mx.zeros((16,), mx.int8)  # same identity, new contents
        cpu.forget_prepared(w)
        after = np.array(int8nax.w8a8_linear(x, w, s_w, backend="cpu"))
    assert (after[:, 0] == 0).all() and (after[:, 1:] == before[:, 1:]).all()


def test_stateless_path_when_preparing_is_off(monkeypatch):
    monkeypatch.setenv(cpu.PREPARE_ENV_VAR, "0")
    cpu.forget_prepared()
    rng = np.random.default_rng(5)
    w, s_w = int8nax.quantize_weight_int8(mx.array(rng.standard_normal((6, 30)).astype(np.float32)))
    for _ in range(2):
        y = int8nax.w8a8_linear(mx.array(rng.standard_normal((2, 30)).astype(np.float32)), w, s_w, backend="cpu")
    assert y.shape == (2, 6) and cpu.PREPARED.prepared_count() == 0


def test_gemm_exact_is_the_stateless_entry_point(monkeypatch):
    # tests/test_asv.py plants its slowdown by rebinding cpu.gemm_exact: int8_matmul must use it.
    calls = []
    original = cpu.gemm_exact

    def spy(a, b):
        calls.append(a.shape)
        return original(a, b)

    monkeypatch.setattr(cpu, "gemm_exact", spy)
    int8nax.int8_matmul(np.ones((2, 3), np.int8), np.ones((4, 3), np.int8), backend="cpu")
    assert calls == [(2, 3)]


# --- the engines' float16 conversions (used by W8A8) ---------------------------------------


def _engines_here():
    return [pytest.param(n, id=n) for n in cpu_engines.ENGINE_NAMES]


@pytest.mark.parametrize("engine", _engines_here())
def test_float16_conversions_match_numpy(engine):
    status = cpu_engines.engine_status(engine)
    if status.engine is None:
        pytest.skip(status.reason)
    eng = status.engine
    # Every float16 bit pattern widens exactly.
    x16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)
    if eng.float32 is not None:
        got = eng.float32(x16)
        want = x16.astype(np.float32)
        assert got.dtype == np.float32
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all()
    # Narrowing rounds to nearest even, subnormals, overflow and NaN included.
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    y32 = bits.view(np.float32)
    exp_bits = rng.integers(0x33000000, 0x47800000 + 2**23, 200_000, dtype=np.uint64).astype(np.uint32)
    y32 = np.concatenate([y32, exp_bits.view(np.float32), -exp_bits.view(np.float32)]).reshape(-1, 1000)
    with np.errstate(over="ignore"):
        want = y32.astype(np.float16)
    got = eng.float16(np.ascontiguousarray(y32))
    assert got.dtype == np.float16
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), int((~same).sum())


@pytest.mark.skipif(not HAVE_ORT, reason="onnxruntime is not installed (pip install -e '.[cpu]')")
def test_thread_count_setting(fresh_selection):
    fresh_selection.setenv("INT8NAX_CPU_THREADS", "1")
    status = cpu_engines.engine_status("onnx")
    assert status.engine is not None and "threads: 1" in status.reason
    cpu_engines.reset()
    fresh_selection.setenv("INT8NAX_CPU_THREADS", "many")
    status = cpu_engines.engine_status("onnx")
    assert status.engine is None and "INT8NAX_CPU_THREADS must be a positive integer, got 'many'" in status.reason
