"""Shared fixtures: every test that takes `backend` runs once per backend, skipped with the
backend's own reason where it cannot run on this machine."""

from __future__ import annotations

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
    # A fresh, reproducible stream per test (seeded by the test's name).
    return np.random.default_rng(abs(hash(request.node.nodeid)) % (2**32))


def random_int8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)
