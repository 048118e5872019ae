"""The graph a layer's W8A8 call builds on the CUDA backend (Backend.w8a8_linear_graph, what a tape
records), on the CPU box: the backend's own choice, plans and launches over stand-in kernel objects
that record each launch. The kernels take x as the model passes it and give y in its leading dims,
so nothing stands between them and the layer (no reshape node, no buffer beyond the kernels'
outputs). The kernels themselves read M from x's shape on a GPU only (test_tape.py, test_nn.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

mx = pytest.importorskip("mlx.core")
nn = pytest.importorskip("mlx.nn")

import layer_calls  # noqa: E402
from int8nax.backends.entries import rows_of  # noqa: E402
from int8nax.backends.cuda import source as cuda_source  # noqa: E402
from test_cuda_binary_cache import stand_in_cuda  # noqa: E402,F401 (the fixture: GPU family, SM count, caches)


class _Launches:
    """mx.fast.cuda_kernel's stand-in: every launch is recorded as (kernel name, inputs, outputs),
    its outputs unevaluated zeros of the shapes and dtypes asked for."""

    def __init__(self):
        self.seen = []

    def kernel(self, *, name, **_):
        def launch(*, inputs, output_shapes, output_dtypes, **__):
            outputs = [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]
            self.seen.append((name, list(inputs), outputs))
            return outputs

        return launch


@pytest.fixture
def launches(stand_in_cuda, monkeypatch):
    _, cuda = stand_in_cuda
    rec = _Launches()
    monkeypatch.setattr(cuda.mx.fast, "cuda_kernel", rec.kernel)
    monkeypatch.setattr(cuda, "COMPILE", True)  # the layers' graphs are built only where entry points are on
    cuda.clear_caches()  # no kernel object of the fixture's stand-in kept
    yield cuda, rec


@pytest.mark.parametrize("shape", [(1, 1, 256), (2, 3, 256), (1, 512, 256), (512, 256), (256,)])
@pytest.mark.parametrize("bias", [False, True])
def test_a_layers_call_launches_its_kernels_on_x_itself_and_returns_their_output(launches, shape, bias, gemv_inside):
    cuda, launches = launches
    n = 384
    x, w, s, b = layer_calls.call_arrays(shape, n, bias)
    y = cuda.BACKEND.w8a8_linear_graph(x, w, s, b)
    assert y.shape == shape[:-1] + (n,) and y.dtype == mx.bfloat16
    names = layer_calls.check_takes_x_gives_y(launches.seen, x, y)
    m, _ = rows_of(shape)
    # the quantization's pack, then the GEMM (and a split-K plan's reduction), or at decode with
    # GEMV_QUANTIZE_INSIDE one kernel (the quantizing GEMV): every array the call allocates is a
    # kernel's output
    inside = m <= 16 and gemv_inside
    quantize = cuda_source.quantize().name
    assert (quantize in names) == (not inside), names
    assert len(names) <= (1 if inside else 2 if m <= 16 else 3), names


def _layer_buffers(cuda, launches, config, rows: int) -> int:
    """The buffers one decoder layer's projections allocate on the CUDA backend at `rows` tokens:
    every output of every launch (as mlx-lm's layer calls them: q/k/v and gate/up as sibling
    groups, o_proj, then down_proj on swiglu(gate_up)), and swiglu's h (an MLX op, not a launch)
    wherever no SwiGLU quantization kernel reads gate_up itself."""
    c = config
    x = mx.zeros((1, rows, c.hidden), dtype=mx.bfloat16)
    attn = mx.zeros((1, rows, c.heads * c.head_dim), dtype=mx.bfloat16)

    def linear(inp, n):
        k = inp.shape[-1]
        return cuda.BACKEND.w8a8_linear_graph(inp, mx.zeros((n, k), dtype=mx.int8), mx.ones((n,)), None)

    before = len(launches.seen)
    linear(x, (c.heads + 2 * c.kv_heads) * c.head_dim)  # q, k, v
    linear(attn, c.hidden)  # o
    gate_up = linear(x, 2 * c.intermediate).reshape(rows, 2 * c.intermediate)
    mlp = len(launches.seen)
    cuda.BACKEND.swiglu_w8a8_linear(gate_up, mx.zeros((c.hidden, c.intermediate), dtype=mx.int8),
                                    mx.ones((c.hidden,)), None)
    outputs = sum(len(out) for _, _, out in launches.seen[before:])
    reads_gate_up = cuda_source.swiglu_quantize().name.rsplit("_", 1)[0]  # the SwiGLU quantization kernels, staged too
    h_written = not any(name.startswith(reads_gate_up) for name, _, _ in launches.seen[mlp:])
    return outputs + h_written


@pytest.mark.parametrize("config", ["qwen3-8b", "qwen2.5-7b"])
@pytest.mark.parametrize("rows", [1, 128, 512, 2047])
def test_a_decoder_layer_allocates_at_most_bf16s_buffers_plus_two(launches, monkeypatch, config, rows, gemv_inside):
    """Issue 48's buffer target: a W8A8 layer's projections allocate at most bf16's count + 2 (bf16:
    one output per nn.Linear of mlx-lm's layer, and swiglu's h). What W8A8 adds per call is its
    activation pack (codes and scales in one buffer) and, on a split-K plan, the int32 partials;
    the fused SwiGLU quantization writes no h. A scratch output per call, or scales apart from
    their codes, would break it."""
    from int8nax.backends.cuda import graphs as cuda_graphs, settings as cuda_settings
    from int8nax.bench import models

    cuda, launches = launches
    cfg = models.CONFIGS[config]
    bf16_layer = models.build(replace(cfg, depth=1, vocab=64, hidden=64, intermediate=128, heads=4, kv_heads=2,
                                      head_dim=16), 1).model.layers[0]
    bf16 = sum(isinstance(m, nn.Linear) for m in bf16_layer.modules()) + 1  # + swiglu's h
    monkeypatch.setattr(cuda_graphs, "swiglu_kernel_ok", lambda *_: True)  # the stand-in's zeros fail the probe
    got = {}
    for choice in ("split", "fused"):
        monkeypatch.setattr(cuda_settings, "swiglu_choice", lambda: choice)
        cuda.clear_caches()
        got[choice] = _layer_buffers(cuda, launches, cfg, rows)
        assert got[choice] <= bf16 + 2, f"{choice} at {rows} rows: {got[choice]} buffers a layer against bf16's {bf16}"
    # the fused SwiGLU quantization writes no h; only a decode GEMV that quantizes in registers
    # (GEMV_QUANTIZE_INSIDE) takes h from swiglu either way
    assert got["split"] - got["fused"] == (0 if rows <= 16 and gemv_inside else 1), got
