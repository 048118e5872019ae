"""The graph a layer's W8A8 call builds on the CUDA backend (Backend.w8a8_linear_graph, what a tape
records), on the CPU box: the backend's own choice, plans and launches over stand-in kernel objects
that record each launch. The kernels take x as the model passes it and give y in its leading dims,
so nothing stands between them and the layer (no reshape node, no buffer beyond the kernels'
outputs). The kernels themselves read M from x's shape on a GPU only (test_tape.py, test_nn.py)."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

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
def test_a_layers_call_launches_its_kernels_on_x_itself_and_returns_their_output(launches, shape, bias):
    cuda, launches = launches
    n = 384
    x = mx.zeros(shape, dtype=mx.bfloat16)
    w, s = mx.zeros((n, shape[-1]), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)
    b = mx.zeros((n,), dtype=mx.bfloat16) if bias else None
    y = cuda.BACKEND.w8a8_linear_graph(x, w, s, b)
    assert y.shape == shape[:-1] + (n,) and y.dtype == mx.bfloat16
    first_name, first_inputs, _ = launches.seen[0]
    last_name, _, last_outputs = launches.seen[-1]
    assert first_inputs[0] is x, f"{first_name} took a copy or a reshape of x, not x"
    assert last_outputs[0] is y, f"y is not {last_name}'s output: an op stands after the kernels"
    m = 1
    for d in shape[:-1]:
        m *= d
    # one kernel at decode (the quantizing GEMV); else the quantization's pack, then the GEMM (and a
    # split-K plan's reduction): every array the call allocates is a kernel's output
    quantize = cuda_source.quantize().name
    names = [name for name, _, _ in launches.seen]
    assert (quantize in names) == (m > 16), names
    assert len(names) <= (1 if m <= 16 else 3), names
