"""A layer's W8A8 call as the backends' graph tests see it (test_cuda_layer_graph.py,
test_metal_any_rank.py): the arrays of one call on x of a given shape, and the check that the
recorded launches took x itself and gave y, with nothing between the kernels and the layer."""

from __future__ import annotations

import mlx.core as mx


def call_arrays(shape: tuple[int, ...], n: int, bias: bool):
    """(x [..., K] bfloat16 of `shape`, w int8 [n, K], scale_w float32 [n], bias bfloat16 [n] or None)."""
    x = mx.zeros(shape, dtype=mx.bfloat16)
    w, s = mx.zeros((n, shape[-1]), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)
    return x, w, s, (mx.zeros((n,), dtype=mx.bfloat16) if bias else None)


def check_takes_x_gives_y(seen, x, y) -> list[str]:
    """seen: the recorded launches, (kernel name, inputs, outputs) in order. The first took x
    itself (no copy or reshape before it) and y is the last one's output (no op after it).
    Returns the kernels' names."""
    first_name, first_inputs, _ = seen[0]
    last_name, _, last_outputs = seen[-1]
    assert first_inputs[0] is x, f"{first_name} took a copy or a reshape of x, not x"
    assert last_outputs[0] is y, f"y is not {last_name}'s output: an op stands after the kernels"
    return [name for name, _, _ in seen]
