"""Compiled entry points of int8nax.nn's calls (Backend.w8a8_linear_marked, w8a8_mlp_marked), for
the GPU backends: one mx.compile object per x shape (and thread) holding a backend's launches on
x (both backends' kernels take it at any rank, so no reshape stands around them). MLX replays
the recorded launches at every later call of that shape and those dtypes without running the
Python body; it runs the body only at a signature's first
call and for tracer inputs, and the body marks that run (BODY), which is how a call tells the API
that it may be traced (the API then asks itself, int8nax.api.tracing). One replay a call is the
host work left: no Python reshape, choice or launch building."""

from __future__ import annotations

from ..per_thread import PerThreadCompiled, SlotTable, compile_per_thread
from .base import BodyRan, swiglu_of

BODY = BodyRan()
"""Set by an entry's body when it runs (per thread); marked() clears it before each call."""


def rows_of(shape: tuple[int, ...]) -> tuple[int, int]:
    """(M, K) of x `shape` [..., K]: M the product of the leading dims."""
    m = 1
    for d in shape[:-1]:
        m *= d
    return m, shape[-1]


def linear_body(shape: tuple[int, ...], n: int, launch, any_rank: bool = False):
    """The graph of a linear for x `shape` [..., K]: (x, w, scale_w, bias) -> y [..., N], where
    launch(rows [M, K], w, scale_w, bias) -> [M, N] builds the backend's launches (bias: whatever
    array the backend passes; a placeholder where the layer has none). any_rank: launch takes x
    [..., K] as it comes and gives y [..., N] itself (kernels that read M from x's shape), so the
    graph has no reshape around it. Built directly, it is what a tape records
    (Backend.w8a8_linear_graph); compiled, linear()'s entry point."""
    m, k = rows_of(shape)
    out_shape = shape[:-1] + (n,)
    flat = any_rank or len(shape) == 2

    def body(x, w, s, bias):
        BODY.ran = True
        y = launch(x if flat else x.reshape(m, k), w, s, bias)
        return y if flat else y.reshape(out_shape)

    return body


def linear(shape: tuple[int, ...], n: int, launch, any_rank: bool = False) -> PerThreadCompiled:
    """The compiled entry point of linear_body(shape, n, launch, any_rank)."""
    return compile_per_thread(linear_body(shape, n, launch, any_rank))


def mlp(shape: tuple[int, ...], n: int, gate_up, down, any_rank: bool = False) -> PerThreadCompiled:
    """The entry point of a SwiGLU MLP for x `shape` [..., K]: (x, w1, s1, b1, w2, s2, b2) -> y [..., N]
    = down(swiglu_of(gate_up(rows, w1, s1, b1)), w2, s2, b2), each launch as linear()'s (any_rank
    too): the same launches, in the same order, as the MLP's own three steps (the same bits)."""
    m, k = rows_of(shape)
    out_shape = shape[:-1] + (n,)
    flat = any_rank or len(shape) == 2

    def body(x, w1, s1, b1, w2, s2, b2):
        BODY.ran = True
        y = down(swiglu_of(gate_up(x if flat else x.reshape(m, k), w1, s1, b1)), w2, s2, b2)
        return y if flat else y.reshape(out_shape)

    return compile_per_thread(body)


def table(make, limit: int) -> SlotTable:
    """Per thread, key -> the compiled callable of make(*key) (at most `limit` keys a thread)."""
    return SlotTable(lambda key: make(*key), limit)


def marked(entry, *args):
    """(entry(*args), whether its body ran): Backend.w8a8_linear_marked's answer."""
    body = BODY
    body.ran = False
    y = entry(*args)
    return y, body.ran
