"""Shared fixtures: every test that takes `backend` runs once per backend, skipped with the
backend's own reason where it cannot run on this machine."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from int8nax import backends


@pytest.fixture(params=backends.NAMES)
def backend(request):
    name = request.param
    probe = backends.probe(name)
    if not probe.available:
        pytest.skip(f"backend {name} unavailable here: {probe.reason}")
    return name


@pytest.fixture
def rng(request):
    # A fresh stream per test, seeded by the test's name through a stable digest: Python's
    # hash() of a str changes from process to process (PYTHONHASHSEED), which made failures
    # impossible to reproduce.
    digest = hashlib.sha256(request.node.nodeid.encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def random_int8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)
