"""The Metal W8A8 path on x [..., K] of any rank, with no reshape around its kernels, on the CPU box:

- the real .metal sources through the g++ stand-in (tests/metal_shim), called by the backend's own
  launch code: x [B, L, K] and x [K] give the bits of the 2-D call on x's rows, in x's leading dims;
- the signature mx.fast.metal_kernel generates for a body that reads `<name>_shape`, `_strides`
  and `_ndim` (their order and values), as the stand-in and the clang check assemble it;
- the graph a layer's call builds (the eager first call and MetalBackend.w8a8_linear_graph, what a
  tape records), over kernel objects that record each launch: x itself is the first kernel's input
  and y the last kernel's output, with no reshape node before or after them.

Nothing here ran on Apple hardware: the stand-in and the clang check are models of MLX's
metal_kernel and Metal's compiler (docs/metal.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from int8nax import nax_emulator as emu
from int8nax import quant
from int8nax.backends.entries import rows_of
from int8nax.backends.metal import (
    backend as metal, kernel_set as metal_kernel_set, launch as metal_launch, selection as metal_selection,
    source as metal_source,
)

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import clang_check  # noqa: E402
import layer_calls  # noqa: E402
import mlx_stand_in  # noqa: E402
import shim  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
needs_gxx = pytest.mark.skipif(shim.GXX is None and not IN_CI,
                               reason="g++ is not installed: the Metal shim cannot be built")

SERVED = metal_source.KernelVariant(metal_source.LOAD_MLX_LAYOUT)
K, N = 70, 40
LEADS = [(), (1, 1), (2, 2), (2, 3), (1, 40), (3, 30)]
"""x's leading dims: M = 1, 1, 4 (the decode kernel), 6, 40 (the quantizer and the small tile),
90 (the large tile)."""
FORMS = [("float16", True), ("bfloat16", False), ("float32", True)]
DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}


def _problem(lead, dtype, with_bias):
    rng = np.random.default_rng(len(lead) * 1000 + rows_of(lead + (K,))[0])
    x = mx.array(rng.standard_normal(lead + (K,)).astype(np.float32)).astype(DTYPES[dtype])
    w, s_w = quant.quantize_weight_np((rng.standard_normal((N, K)) * 0.05).astype(np.float32))
    bias = mx.array(rng.standard_normal(N).astype(np.float32)).astype(DTYPES[dtype]) if with_bias else None
    return x, mx.array(w), mx.array(s_w), bias


def _bits(y: mx.array) -> np.ndarray:
    return np.array(y.view(mx.uint16) if y.dtype in (mx.float16, mx.bfloat16) else y.view(mx.uint32))


@pytest.fixture(scope="module")
def stand_in():
    """VariantOps of SERVED over the g++ stand-in, built with every instantiation the calls below
    ask for (the first pass records them, the kernels returning zeros)."""
    if shim.GXX is None:
        pytest.fail("g++ is required in CI to build the Metal stand-in")
    factory = mlx_stand_in.StandInFactory(emu.mlx_float_layout())
    ops = metal_launch.VariantOps(metal_kernel_set.KernelSet(factory), SERVED, "s")
    for lead in LEADS:
        for dtype, with_bias in FORMS:
            x, w, s_w, bias = _problem(lead, dtype, with_bias)
            ops.w8a8_linear(x, w, s_w, bias)
            ops.w8a8_linear(x.reshape(-1, K), w, s_w, bias)
    factory.build()
    return metal_launch.VariantOps(metal_kernel_set.KernelSet(factory), SERVED, "s")


@needs_gxx
@pytest.mark.parametrize("dtype,with_bias", FORMS)
@pytest.mark.parametrize("lead", LEADS, ids=lambda lead: "x".join(map(str, lead + (K,))))
def test_w8a8_on_x_at_any_rank_is_the_rows_call_bit_for_bit(stand_in, lead, dtype, with_bias):
    x, w, s_w, bias = _problem(lead, dtype, with_bias)
    y = stand_in.w8a8_linear(x, w, s_w, bias)
    assert y.shape == lead + (N,) and y.dtype == x.dtype
    rows = stand_in.w8a8_linear(x.reshape(-1, K), w, s_w, bias)
    assert rows.shape == (rows_of(lead + (K,))[0], N)
    np.testing.assert_array_equal(_bits(y), _bits(rows).reshape(lead + (N,)))


@needs_gxx
def test_the_quantizer_reads_k_from_xs_last_dim(stand_in):
    # x [2, 3, K]: a kernel reading K from x_shape[1] would take rows of 3
    x = _problem((2, 3), "float32", False)[0] * 10
    q, s = metal_launch.run_quantize_rows(stand_in.kernels, x)
    assert q.shape == x.shape and q.dtype == mx.int8 and s.shape == (8,)
    q_ref, s_ref = quant.quantize_activations_np(np.array(x).reshape(6, K))
    np.testing.assert_array_equal(np.array(q).reshape(6, K), q_ref)
    np.testing.assert_array_equal(np.array(s)[:6].view(np.uint32), s_ref.view(np.uint32))
    # the API's contract stays 2-D in, 2-D out
    q2, s2 = stand_in.quantize_activations(x.reshape(6, K))
    assert q2.shape == (6, K) and s2.shape == (6,)


# A body that reads all three of an input's shape arguments: writes (ndim, shape..., strides...).
SHAPE_ARGS_BODY = """if (thread_position_in_grid.x == 0) {
  out[0] = x_ndim;
  for (int d = 0; d < x_ndim; ++d) {
    out[1 + d] = x_shape[d];
    out[1 + x_ndim + d] = int(x_strides[d]);
  }
}
"""


@needs_gxx
@pytest.mark.parametrize("shape", [(9,), (2, 5), (2, 3, 4), (1, 2, 1, 8)])
def test_the_stand_in_passes_shape_strides_and_ndim_as_metal_kernel_does(shape):
    v = shim.Variant("shape-args", "", SHAPE_ARGS_BODY, (("x", "float32"),), (("out", "int32"),), ())
    assert v.shape_args("x") == ("shape", "strides", "ndim")
    build = shim.ShimBuild([v])
    (out,) = build.run("shape-args", [np.zeros(shape, np.float32)], [(1 + 2 * len(shape),)], (32, 1, 1), (32, 1, 1),
                       emu.mlx_float_layout())
    strides = [int(np.prod(shape[d + 1:])) for d in range(len(shape))]
    assert out.tolist() == [len(shape), *shape, *strides]


@pytest.mark.skipif(clang_check.CLANG is None and not IN_CI, reason="clang-16 is not installed")
def test_the_clang_check_declares_them_in_metal_kernels_order():
    text = clang_check.assemble("shape_args", "", SHAPE_ARGS_BODY, (("x", "float32"),), (("out", "int32"),), ())
    order = [text.index(p) for p in ("const device float* x", "const constant int* x_shape",
                                     "const constant int64_t* x_strides", "const constant int& x_ndim",
                                     "device int32_t* out")]
    assert order == sorted(order), text
    spec = metal_source.kernel_spec("int8nax_quantize_rows")
    quantizer = clang_check.assemble(spec.name, spec.header, spec.source, (("x", "float16"),),
                                     (("q", "int8"), ("s", "float32")), (("QT", 256), ("SIMD", 32), ("QMAX", 127),
                                                                         ("TINY", 64)))
    assert "x_ndim" in spec.source and "const constant int& x_ndim" in quantizer
    assert "x_strides" not in quantizer  # declared only where the body reads it, as MLX does
    assert clang_check.check({"shape args": text, "quantizer": quantizer}) == {"shape args": [], "quantizer": []}


class _Launches:
    """mx.fast.metal_kernel's stand-in: every launch is recorded as (kernel name, inputs, outputs),
    its outputs zeros of the shapes and dtypes asked for."""

    def __init__(self):
        self.seen = []

    def __call__(self, *, name, **_):
        def launch(*, inputs, output_shapes, output_dtypes, **__):
            outputs = [mx.zeros(tuple(s), dtype=d) for s, d in zip(output_shapes, output_dtypes)]
            self.seen.append((name, list(inputs), outputs))
            return outputs

        return launch


class _PassingOps(metal_launch.VariantOps):
    def self_test(self):
        return []


@pytest.fixture
def recorded():
    rec = _Launches()
    layout = metal_selection.layout_result(emu.probe_dump(emu.mlx_float_layout()))
    backend = metal.MetalBackend(kernels=metal_kernel_set.KernelSet(rec), machine=lambda: (True, "applegpu_g17s", "26.4"),
                                 ops_factory=_PassingOps, layout_probe=lambda kernels, relaxed: layout)
    assert backend.probe().available
    rec.seen.clear()
    return backend, rec


def _check_launches(seen, x, y, m):
    names = layer_calls.check_takes_x_gives_y(seen, x, y)
    # the decode kernel for M <= 4; else the quantizer, then the W8A8 GEMM: nothing else
    assert names == (["int8nax_w8a8_decode"] if m <= 4 else ["int8nax_quantize_rows", "int8nax_w8a8_gemm"]), names


@pytest.mark.parametrize("shape", [(1, 1, 256), (2, 3, 256), (1, 100, 256), (100, 256), (256,)])
@pytest.mark.parametrize("bias", [False, True])
def test_a_layers_call_launches_its_kernels_on_x_itself_and_returns_their_output(recorded, shape, bias):
    backend, rec = recorded
    n = 384
    x, w, s, b = layer_calls.call_arrays(shape, n, bias)
    m, _ = rows_of(shape)
    y, ran = backend.w8a8_linear_marked(x, w, s, b)  # the shape's eager first call
    assert ran and y.shape == shape[:-1] + (n,) and y.dtype == mx.bfloat16
    _check_launches(rec.seen, x, y, m)
    rec.seen.clear()
    y = backend.w8a8_linear_graph(x, w, s, b)  # what a tape records, once the eager call ran
    assert y is not None and y.shape == shape[:-1] + (n,) and y.dtype == mx.bfloat16
    _check_launches(rec.seen, x, y, m)
