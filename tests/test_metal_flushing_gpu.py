"""The Metal backend's first use on a GPU that flushes float32 subnormals, emulated: the
backend's own launches and first-use self-test (exactness.first_use_check, tiny rows included)
run the real .metal sources through the g++ stand-in with the SSE flush-to-zero and
denormals-are-zero bits set (tests/metal_shim). NAX must stay served, with exact results.

Whether Apple's M5 flushes float32 subnormals is not documented; `int8nax selftest` reports
what the GPU did. This checks that the answer cannot cost NAX.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import exactness, quant
from int8nax import nax_emulator as emu
from int8nax.backends.cpu import backend as cpu
from int8nax.backends.metal import (
    backend as metal, kernel_set as metal_kernel_set, launch as metal_launch,
    selection as metal_selection, source as metal_source,
)

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import mlx_stand_in  # noqa: E402
import shim  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
pytestmark = pytest.mark.skipif(shim.GXX is None and not IN_CI, reason="g++ is not installed: the Metal shim cannot be built")

SERVED = metal_source.KernelVariant(metal_source.LOAD_MLX_LAYOUT)
EXAMPLE_ROW = np.array([[1e-37, 1e-38, 0, 5e-39]], np.float32)
"""int8nax.quant's documented tiny row: a subnormal scale and codes [127, 13, 0, 6]."""


_rng = np.random.default_rng(41)
DECODE_X = exactness.tiny_rows(_rng, 37)
"""[4, 37] tiny rows (subnormal scales): the W8A8 decode kernel quantizes them in registers."""
DECODE_W, DECODE_SW = quant.quantize_weight_np((_rng.standard_normal((9, 37)) * 0.05).astype(np.float32))
DECODE_BIAS = (_rng.standard_normal(9) * 1e-37).astype(np.float32)


def m5_on_the_stand_in(factory) -> metal.MetalBackend:
    return metal.MetalBackend(kernels=metal_kernel_set.KernelSet(factory), machine=lambda: (True, "applegpu_g17s", "26.4"),
                              layout_probe=lambda kernels, relaxed: metal_selection.layout_result(
                                  emu.probe_dump(emu.mlx_float_layout())))


@pytest.fixture(scope="module")
def flushing_gpu():
    """A stand-in factory built with every instantiation the first use of SERVED asks for."""
    if shim.GXX is None:
        pytest.fail("g++ is required in CI to build the Metal stand-in")
    factory = mlx_stand_in.StandInFactory(emu.mlx_float_layout(), flush_subnormals=True)
    ops = metal_launch.VariantOps(metal_kernel_set.KernelSet(factory), SERVED, "s")
    ops.self_test()  # records what it launches (the kernels return zeros for now)
    ops.quantize_activations(mx.array(EXAMPLE_ROW))
    ops.w8a8_linear(mx.array(DECODE_X), mx.array(DECODE_W), mx.array(DECODE_SW), mx.array(DECODE_BIAS))
    metal_launch.run_subnormal_probe(ops.kernels)
    factory.build()
    return factory


def test_nax_stays_served_on_a_flushing_gpu(flushing_gpu, monkeypatch):
    monkeypatch.setenv(metal_selection.VARIANT_ENV, SERVED.name)
    backend = m5_on_the_stand_in(flushing_gpu)
    probe = backend.probe()
    assert probe.available, probe.reason
    assert backend.selection().self_tests == {SERVED.name: []}


def test_tiny_rows_exact_on_a_flushing_gpu(flushing_gpu):
    """The first-use check's tiny rows by themselves, compared with int8nax.quant bit for bit:
    the documented example row gives [127, 13, 0, 6] with its subnormal scale."""
    ops = metal_launch.VariantOps(metal_kernel_set.KernelSet(flushing_gpu), SERVED, "s")
    rng = np.random.default_rng(3)
    for dtype in exactness.FIRST_USE_TINY_DTYPES:
        x = exactness.tiny_rows(rng, 37)
        xm = mx.array(x).astype(exactness.DTYPES[dtype])
        assert exactness.check_quantize(ops.quantize_activations, xm) is None
    q, s = ops.quantize_activations(mx.array(EXAMPLE_ROW))
    assert np.array(q).tolist() == [[127, 13, 0, 6]] and 0 < float(np.array(s)[0]) < float(np.finfo(np.float32).tiny)


def test_the_check_would_refuse_kernels_that_flush(monkeypatch):
    """The test can fail: quantization that loses subnormals (as a flushing GPU would make a
    float-arithmetic absmax do) fails the first-use check, and NAX is refused."""

    def flushing_quantize(x):
        x32 = np.array(x.astype(mx.float32))
        tiny = np.finfo(np.float32).tiny
        q, s = cpu.BACKEND.quantize_activations(mx.array(np.where(np.abs(x32) < tiny, 0, x32)).astype(x.dtype))
        return q, s

    failures = exactness.first_use_check(cpu.BACKEND.int8_matmul, flushing_quantize, cpu.BACKEND.w8a8_linear)
    assert any("tiny rows" in f for f in failures)


def test_subnormal_probe_tells_the_two_gpus_apart(flushing_gpu):
    """What `int8nax selftest` reports: the probe kernel, on the stand-in kept and flushed."""
    keeping = mlx_stand_in.StandInFactory(emu.mlx_float_layout(), flush_subnormals=False)
    keeping.binary = flushing_gpu.binary
    kept = metal_launch.subnormal_verdict(np.array(metal_launch.run_subnormal_probe(metal_kernel_set.KernelSet(keeping))))
    flushed = metal_launch.subnormal_verdict(np.array(metal_launch.run_subnormal_probe(metal_kernel_set.KernelSet(flushing_gpu))))
    assert kept["summary"] == "keeps float32 subnormals", kept
    assert flushed["summary"] == "flushes float32 subnormals", flushed


def test_decode_quantizes_tiny_rows_exactly_on_a_flushing_gpu(flushing_gpu):
    """The W8A8 decode kernel (M <= 4) quantizes in registers with the quantizer's bit-level
    arithmetic: on tiny rows, on a flushing GPU, its output is the two-launch path's (int8nax.quant's
    codes and scales, then the epilogue's model) bit for bit, except outputs that are themselves
    float32 subnormals, which the flushing GPU writes as 0 (docs/metal.md)."""
    ops = metal_launch.VariantOps(metal_kernel_set.KernelSet(flushing_gpu), SERVED, "s")
    y = np.array(ops.w8a8_linear(mx.array(DECODE_X), mx.array(DECODE_W), mx.array(DECODE_SW), mx.array(DECODE_BIAS)))
    q, s_x = quant.quantize_activations_np(DECODE_X)
    assert (s_x < np.finfo(np.float32).tiny).any()  # subnormal scales are in play
    acc = q.astype(np.int64) @ DECODE_W.T.astype(np.int64)
    model = emu.dequantize_model(acc, s_x[:, None], DECODE_SW[None, :], DECODE_BIAS[None, :])
    normal = np.abs(model) >= np.finfo(np.float32).tiny
    assert normal.sum() > model.size // 2
    np.testing.assert_array_equal(y[normal].view(np.uint32), model[normal].view(np.uint32))
    assert (y[~normal] == 0).all() or np.array_equal(y[~normal], model[~normal])
