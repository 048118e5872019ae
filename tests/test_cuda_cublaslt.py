"""The direct cuBLASLt contender (int8nax.bench.peers.cublaslt): on the CPU with a fake library
(error paths, the TN layout handed to cuBLASLt, the workspace and the algorithm choice); on a
CUDA machine with torch, the real library checked exactly against int8nax.reference."""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

from int8nax.bench.peers import Unavailable, cublaslt
from int8nax.reference import int8_matmul_ref

from conftest import random_int8


@pytest.fixture
def fresh(monkeypatch):
    """No cached load() between tests."""
    monkeypatch.setattr(cublaslt, "_LOADED", [])


def test_no_torch_says_not_installed(monkeypatch, fresh):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(Unavailable, match="torch is not installed"):
        cublaslt.load()


def test_torch_without_gpu_says_so(monkeypatch, fresh):
    import types

    torch = types.ModuleType("torch")
    torch.__version__ = "2.99.0+cpu"
    torch.cuda = types.SimpleNamespace(is_available=lambda: False)
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.raises(Unavailable, match="2.99.0.*sees no CUDA GPU"):
        cublaslt.load()


def test_no_library_lists_what_was_tried(tmp_path):
    missing = str(tmp_path / "libcublasLt.so.99")
    with pytest.raises(Unavailable, match="no loadable libcublasLt.*libcublasLt.so.99"):
        cublaslt.open_library([missing])


def test_a_library_without_cublaslt_is_refused():
    # libc loads but has no cublasLtGetVersion: not a cuBLASLt.
    import ctypes.util

    libc = ctypes.util.find_library("c")
    if libc is None:
        pytest.skip("no libc found by ctypes.util on this machine")
    with pytest.raises(Unavailable, match="cublasLtGetVersion"):
        cublaslt.open_library([libc])


def test_env_var_overrides_the_search(monkeypatch):
    monkeypatch.setenv("INT8NAX_CUBLASLT", "/opt/x/libcublasLt.so.13")
    assert cublaslt.candidates() == ["/opt/x/libcublasLt.so.13"]
    monkeypatch.delenv("INT8NAX_CUBLASLT")
    assert cublaslt.candidates()[-1] == "libcublasLt.so"


def test_status_errors_name_the_function():
    cublaslt.check(0, "cublasLtMatmul")
    with pytest.raises(cublaslt.CublasError, match="cublasLtMatmul failed: CUBLAS_STATUS_NOT_SUPPORTED"):
        cublaslt.check(15, "cublasLtMatmul")


def test_heuristic_result_has_the_c_layout():
    # cublasLtMatmulHeuristicResult_t: algo (64 B), workspaceSize, state, wavesCount, reserved[4].
    assert ctypes.sizeof(cublaslt.HeuristicResult) == 96
    assert cublaslt.HeuristicResult.workspaceSize.offset == 64


def test_tn_layout_maps_row_major_to_column_major():
    plan = cublaslt.tn_layouts(m=5, n=7, k=32)
    assert plan["transa"] == cublaslt.CUBLAS_OP_T and plan["transb"] == cublaslt.CUBLAS_OP_N
    # A operand = the weights [N, K] row-major = column-major K x N; B = activations K x M.
    assert plan["A"] == cublaslt.Layout(cublaslt.CUDA_R_8I, 32, 7, 32)
    assert plan["B"] == cublaslt.Layout(cublaslt.CUDA_R_8I, 32, 5, 32)
    assert plan["C"] == cublaslt.Layout(cublaslt.CUDA_R_32I, 7, 5, 7)


class FakeLt:
    """Records what the contender hands to cuBLASLt; the heuristic returns `algos` results."""

    def __init__(self, algos=3, fail=None):
        self.calls = []
        self.algos = algos
        self.fail = fail or {}
        self.next_handle = 100

    def __getattr__(self, name):
        if not name.startswith("cublasLt"):
            raise AttributeError(name)

        def fn(*args):
            self.calls.append((name, args))
            if name in self.fail:
                return self.fail[name]
            if name.endswith("Create"):
                args[0]._obj.value = self.next_handle
                self.next_handle += 1
            if name == "cublasLtMatmulAlgoGetHeuristic":
                results, returned = args[8], args[9]._obj
                for i in range(self.algos):
                    results[i].algo.data[0] = 10 + i
                    results[i].workspaceSize = 1 << 20
                returned.value = self.algos
            if name == "cublasLtMatmulAlgoConfigGetAttribute":
                args[2]._obj.value = args[0]._obj.data[0] * 100 + args[1]
            return 0

        self.__dict__[name] = fn
        return fn

    def named(self, name):
        return [args for n, args in self.calls if n == name]


def test_descriptors_carry_the_tn_problem_and_the_workspace():
    fake = FakeLt()
    lt = cublaslt.Lt(fake, m=24, n=40, k=64)
    layouts = [(a[1], a[2], a[3], a[4]) for a in fake.named("cublasLtMatrixLayoutCreate")]
    assert layouts == [(cublaslt.CUDA_R_8I, 64, 40, 64), (cublaslt.CUDA_R_8I, 64, 24, 64),
                       (cublaslt.CUDA_R_32I, 40, 24, 40)]
    (desc,) = fake.named("cublasLtMatmulDescCreate")
    assert desc[1:] == (cublaslt.CUBLAS_COMPUTE_32I, cublaslt.CUDA_R_32I)
    ops = {a[1]: a[2]._obj.value for a in fake.named("cublasLtMatmulDescSetAttribute")}
    assert ops == {cublaslt.MATMUL_DESC_TRANSA: cublaslt.CUBLAS_OP_T, cublaslt.MATMUL_DESC_TRANSB: cublaslt.CUBLAS_OP_N}
    (pref,) = fake.named("cublasLtMatmulPreferenceSetAttribute")
    assert pref[1] == cublaslt.PREF_MAX_WORKSPACE_BYTES and pref[2]._obj.value == 64 << 20
    assert [r.algo.data[0] for r in lt.heuristics()] == [10, 11, 12]
    assert lt.algo_config(lt.heuristics()[1].algo)["tile"] == 1101
    lt.close()
    assert len(fake.named("cublasLtMatrixLayoutDestroy")) == 3 and fake.named("cublasLtDestroy")


def test_matmul_passes_weights_as_a_and_activations_as_b():
    fake = FakeLt()
    lt = cublaslt.Lt(fake, m=24, n=40, k=64)
    algo = lt.heuristics()[0].algo
    lt.matmul(algo, a_ptr=0xA000, b_ptr=0xB000, out_ptr=0xC000, workspace_ptr=0xD000, stream=7)
    (args,) = fake.named("cublasLtMatmul")
    assert args[3].value == 0xB000 and args[5].value == 0xA000  # cuBLASLt's A = b, B = a
    assert args[8].value == args[10].value == 0xC000  # C = D = out (beta = 0)
    assert args[2]._obj.value == 1 and args[7]._obj.value == 0  # int32 alpha, beta
    assert args[13].value == 0xD000 and args[14] == 64 << 20 and args[15].value == 7


def test_a_failing_call_raises_with_its_status():
    with pytest.raises(cublaslt.CublasError, match="cublasLtMatrixLayoutCreate failed: CUBLAS_STATUS_INVALID_VALUE"):
        cublaslt.Lt(FakeLt(fail={"cublasLtMatrixLayoutCreate": 7}), 1, 1, 1)


def test_heuristic_drops_algorithms_that_do_not_fit_the_workspace():
    fake = FakeLt(algos=2)
    lt = cublaslt.Lt(fake, 16, 16, 16, workspace_bytes=1 << 19)  # the fake's algorithms want 1 MiB
    assert lt.heuristics() == []


# ---- on a CUDA machine with torch: the real library, exact ----------------------------------

def _real():
    try:
        return cublaslt.load()
    except Unavailable as exc:
        pytest.skip(f"cuBLASLt contender unavailable here: {exc}")


@pytest.mark.parametrize("m,k,n", [(16, 4096, 4096), (24, 64, 40), (512, 3584, 1024), (130, 160, 72)])
def test_real_cublaslt_is_exact(rng, m, k, n):
    lib = _real()
    a, b = random_int8(rng, (m, k)), random_int8(rng, (n, k))
    a[0, :] = -128
    b[:, 0] = -128
    run = cublaslt.prepare(a, b, timing_runs=2)
    run.out.fill_(-7)  # poison: every element must be written
    out = run.call()
    run.sync()
    got = out.cpu().numpy()
    assert got.dtype == np.int32 and got.shape == (m, n)
    assert np.array_equal(got.astype(np.int64), int8_matmul_ref(a, b))
    assert "cuBLASLt" in run.describe() and lib.path in run.describe()
