"""The Metal backend's first-use selection run on the real .metal sources (the g++ stand-in,
tests/metal_shim): a layout probe that fails or disagrees never costs the fast path, because the
bit-exact first-use self-test decides; on a GPU whose int8 tensors really use another layout
the fast path fails that test and the generic path serves. The stand-in's lane layout is a
model (metal_shim.h), not Apple's; nothing here ran on an M5."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax.backends.metal import (
    backend as metal, kernel_set as metal_kernel_set, launch as metal_launch,
    selection as metal_selection, source as metal_source,
)

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import mlx_stand_in  # noqa: E402
import shim  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
pytestmark = pytest.mark.skipif(shim.GXX is None and not IN_CI, reason="g++ is not installed: the Metal shim cannot be built")

FAST = metal_source.KernelVariant(metal_source.LOAD_MLX_LAYOUT)
GENERIC = metal_source.KernelVariant(metal_source.LOAD_GENERIC)
SHUFFLED = emu.shuffled_layout(np.random.default_rng(23))


@pytest.fixture(scope="module")
def stand_in():
    """A stand-in factory built with every instantiation the self-tests of both load paths ask for."""
    if shim.GXX is None:
        pytest.fail("g++ is required in CI to build the Metal stand-in")
    factory = mlx_stand_in.StandInFactory(emu.mlx_float_layout())
    for variant in (FAST, GENERIC):
        metal_launch.VariantOps(metal_kernel_set.KernelSet(factory), variant, "s").self_test()
    metal_launch.run_layout_probe(metal_kernel_set.KernelSet(factory))
    factory.build()
    return factory


def on_the_stand_in(factory, layout_probe=None) -> metal.MetalBackend:
    return metal.MetalBackend(kernels=metal_kernel_set.KernelSet(factory), machine=lambda: (True, "applegpu_g17s", "26.4"),
                              layout_probe=layout_probe or metal_selection.probe_layout)


def failing_probe(kernels, relaxed):
    raise RuntimeError("Unable to build metal library from source: error: get_multidimensional_index")


@pytest.mark.parametrize("probe, outcome", [
    (failing_probe, metal_selection.PROBE_FAILED),
    (lambda kernels, relaxed: metal_selection.layout_result(emu.probe_dump(SHUFFLED)), metal_selection.PROBE_DIFFERS),
])
def test_fast_path_serves_when_the_probe_fails_or_disagrees(stand_in, probe, outcome):
    stand_in.layout = emu.mlx_float_layout()
    backend = on_the_stand_in(stand_in, probe)
    p = backend.probe()
    assert p.available, p.reason
    sel = backend.selection()
    assert sel.variant == FAST and sel.self_tests == {FAST.name: []}
    assert (sel.probe, sel.decided_by) == (outcome, "self-test")
    assert "built anyway" in p.reason
    a = np.random.default_rng(1).integers(-128, 128, (70, 300), dtype=np.int8)
    b = np.random.default_rng(2).integers(-128, 128, (33, 300), dtype=np.int8)
    out = np.array(backend.int8_matmul(mx.array(a), mx.array(b)))
    assert (out == a.astype(np.int64) @ b.T.astype(np.int64)).all()


def test_the_real_probe_on_the_stand_in_matches(stand_in):
    stand_in.layout = emu.mlx_float_layout()
    sel = on_the_stand_in(stand_in).selection()
    assert sel.variant == FAST and (sel.probe, sel.decided_by) == (metal_selection.PROBE_MATCHES, "probe and self-test")


def test_another_hardware_layout_falls_back_to_generic(stand_in):
    """A GPU whose int8 tensors use another layout: the probe says so, the fast path is still
    built, fails the bit-exact self-test, and the generic path serves, exactly."""
    stand_in.layout = SHUFFLED
    try:
        backend = on_the_stand_in(stand_in)
        with pytest.warns(RuntimeWarning, match="mlx_layout/relaxed_precision=true failed its self-test"):
            p = backend.probe()
        sel = backend.selection()
        assert p.available and sel.variant == GENERIC, p.reason
        assert sel.probe == metal_selection.PROBE_DIFFERS and sel.self_tests[FAST.name] and sel.self_tests[GENERIC.name] == []
    finally:
        stand_in.layout = emu.mlx_float_layout()


@pytest.fixture(scope="module")
def limited_stand_in():
    """The stand-in as a GPU whose GEMM pipelines allow 384 threads: built with what the fast
    path's self-test asks for there (the refused 512-thread tiles and their fallbacks)."""
    if shim.GXX is None:
        pytest.fail("g++ is required in CI to build the Metal stand-in")
    factory = mlx_stand_in.StandInFactory(emu.mlx_float_layout())
    limited = mlx_stand_in.ThreadLimited(factory, 384, prefix="int8nax_int8_gemm")
    ops = metal_launch.VariantOps(metal_kernel_set.KernelSet(limited, evaluate=limited.evaluate), FAST, "s")
    ops.self_test()
    ops.int8_matmul(mx.zeros((130, 300), mx.int8), mx.zeros((33, 300), mx.int8))
    factory.build()
    return factory


def test_a_threadgroup_over_the_pipeline_limit_falls_back_exactly(limited_stand_in):
    """MLX refuses the 512-thread tile (the pipeline allows 384): the first use neither raises nor
    refuses NAX; the int8 GEMM runs in the 256-thread tile of the same sub-tile, exactly."""
    limited = mlx_stand_in.ThreadLimited(limited_stand_in, 384, prefix="int8nax_int8_gemm")
    backend = metal.MetalBackend(kernels=metal_kernel_set.KernelSet(limited, evaluate=limited.evaluate),
                                 machine=lambda: (True, "applegpu_g17s", "26.4"),
                                 layout_probe=lambda kernels, relaxed: metal_selection.layout_result(
                                     emu.probe_dump(emu.mlx_float_layout())))
    p = backend.probe()
    assert p.available and backend.selection().variant == FAST, p.reason
    assert limited.refused and all(threads == 512 for _, threads in limited.refused)
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (130, 300), dtype=np.int8)
    b = rng.integers(-128, 128, (33, 300), dtype=np.int8)
    out = np.array(backend.int8_matmul(mx.array(a), mx.array(b)))
    assert (out == a.astype(np.int64) @ b.T.astype(np.int64)).all()
    limits = backend.kernels.thread_limits()
    assert limits and set(limits.values()) == {384} and all("BM=128" in label for label in limits)
