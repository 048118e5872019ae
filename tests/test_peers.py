"""The peer adapters: cider (both API generations, the PyPI impostor, no M5) and torch cuBLASLt.

Neither library exists on the CI machine, so the adapters meet fakes (tests/fakes.py)
injected through sys.modules, plus the real absence where it is real.
"""

from __future__ import annotations

import importlib.util
import sys

import mlx.core as mx
import numpy as np
import pytest
from fakes import fake_cider, fake_torch, pypi_cider

from int8nax.bench import checks, contenders, problems
from int8nax.bench.peers import Unavailable, torch_int
from int8nax.bench.peers import cider as cider_peer

SHAPE = (5, 64, 24)  # non-square: a layout mix-up changes the output's shape, not just its values
SQUARE = (6, 64, 64)  # square: a transposed weight goes unnoticed by shape, only values catch it


@pytest.fixture
def install(monkeypatch):
    """install(name=module, ...) puts modules into sys.modules for one test."""
    def put(**modules):
        for name, module in modules.items():
            monkeypatch.setitem(sys.modules, name.replace("__", "."), module)
    return put


# --- cider ------------------------------------------------------------------------------

def test_cider_absent_says_not_installed_and_how(install):
    install(cider=None)  # import cider -> ModuleNotFoundError, as on a machine without it
    with pytest.raises(Unavailable, match="cider is not installed.*no-build-isolation.*Mininglamp-AI/cider@"):
        cider_peer.load()


@pytest.mark.skipif(importlib.util.find_spec("cider") is not None, reason="a cider package is installed here")
def test_cider_really_absent_here():
    with pytest.raises(Unavailable, match="not installed"):
        cider_peer.load()


def test_pypi_impostor_is_detected(install):
    install(cider=pypi_cider())
    with pytest.raises(Unavailable) as err:
        cider_peer.load()
    message = str(err.value)
    assert "not Mininglamp-AI/cider" in message and "PyPI" in message and "pip uninstall cider" in message


def test_real_cider_off_m5_says_it_needs_an_m5(install):
    pkg, ops = fake_cider(available=False)
    install(cider=pkg, cider__ops=ops)
    with pytest.raises(Unavailable, match="needs an Apple M5"):
        cider_peer.load()


@pytest.mark.parametrize("layout,linear_name,checks_k", [
    ("nk", "perchannel_linear", True),   # HEAD: perchannel_linear, weights [N, K]
    ("nk", "w8a8_linear", False),        # interim: old name, new layout, unchecked K
    ("kn", "w8a8_linear", True),         # older: w8a8_linear, weights [K, N]
    ("kn", "w8a8_linear", False),
])
def test_both_api_generations_are_detected_and_fed_their_layout(install, layout, linear_name, checks_k):
    pkg, ops = fake_cider(layout=layout, linear_name=linear_name, checks_k=checks_k)
    install(cider=pkg, cider__ops=ops)
    cider = cider_peer.load()
    assert (cider.linear_name, cider.linear_layout, cider.matmul_layout) == (linear_name, layout, layout)
    assert layout.upper() in cider.describe()
    # Through the contenders: same problem, cider's layout, checked against the exact references.
    for name in ("cider-raw", "cider-full"):
        prepared = contenders.get(name).ready(*SHAPE)
        out = prepared.run()
        assert tuple(out.shape) == (SHAPE[0], SHAPE[2])


def test_cider_weights_are_copied_into_its_layout(install):
    pkg, ops = fake_cider(layout="kn", linear_name="w8a8_linear")
    install(cider=pkg, cider__ops=ops)
    cider = cider_peer.load()
    w = np.arange(12, dtype=np.int8).reshape(3, 4)  # [N=3, K=4]
    native = cider.linear_weights(w)
    assert native.shape == (4, 3) and np.array_equal(np.array(native), w.T)


@pytest.mark.parametrize("name", ["cider-raw", "cider-full"])
def test_check_catches_cider_computing_the_transposed_problem(install, name):
    # cider's own script times x @ w instead of x @ w.T when it mixes layouts up; on a square
    # shape nothing but the values shows it.
    pkg, ops = fake_cider(wrong="transposed")
    install(cider=pkg, cider__ops=ops)
    with pytest.raises(checks.MismatchError, match=name):
        contenders.get(name).ready(*SQUARE)


def test_check_catches_a_wrong_output_shape():
    # A layout mix-up on a non-square shape computes an [M, K] (or other) output.
    wrong = mx.zeros((SHAPE[0], SHAPE[1]), dtype=mx.int32)
    with pytest.raises(checks.MismatchError, match="output shape"):
        checks.check_exact("cider-raw", SHAPE, wrong, problems.raw_expected(*SHAPE))


# --- torch / cuBLASLt ----------------------------------------------------------------------

def test_torch_absent_says_not_installed(install):
    install(torch=None)
    with pytest.raises(Unavailable, match="torch is not installed"):
        torch_int.load()


def test_torch_without_cuda_says_so(install):
    install(torch=fake_torch(cuda=False))
    with pytest.raises(Unavailable, match="CPU-only build.*sees no CUDA GPU"):
        torch_int.load()


@pytest.mark.parametrize("m,k,n,why", [(16, 64, 64, "M > 16"), (32, 60, 64, "multiples of 8"),
                                         (32, 64, 20, "multiples of 8")])
def test_torch_int_mm_shape_rules_are_skips(install, m, k, n, why):
    install(torch=fake_torch())
    with pytest.raises(Unavailable, match=why):
        contenders.get("torch-int8").prepare(m, k, n)


def test_torch_int8_runs_column_major_and_synchronizes(install):
    torch = fake_torch()
    install(torch=torch)
    prepared = contenders.get("torch-int8").ready(24, 64, 40)  # the fake rejects a row-major B
    before = torch.syncs
    out = prepared.run()
    assert torch.syncs == before + 1 and out.array.shape == (24, 40)
    assert "Fake GPU" in prepared.detail


def test_check_catches_torch_computing_the_transposed_problem(install):
    install(torch=fake_torch(wrong="transposed"))
    with pytest.raises(checks.MismatchError, match="torch-int8"):
        contenders.get("torch-int8").ready(24, 64, 64)
