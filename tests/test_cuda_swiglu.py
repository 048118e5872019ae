"""The SwiGLU quantization kernel (kernels/cuda/quant/swiglu_quantize.cuh) against the unfused graph, bit
for bit: for y [M, 2H], cuda_graphs._swiglu_quantize_graph(y) must give the codes and scales that the
quantization kernel (cuda_graphs._quantize_graph) gives for h = silu(y[:, :H]) * y[:, H:] as mlx-lm
computes it (nn.silu(gate) * up under mx.compile, shapeless). Every launch the kernel may take is
forced, on the held, streamed (row longer than the registers) and one-value-at-a-time (H % 8 != 0,
misaligned base) paths, with rows of NaN, inf, zeros, tiny values and products that overflow.
Skipped where MLX has no CUDA device."""

from __future__ import annotations

from functools import lru_cache

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from int8nax import backends
from int8nax.backends.cuda import plans as cuda_plans

CUDA = backends.probe("cuda")
pytestmark = pytest.mark.skipif(not CUDA.available, reason=f"backend cuda unavailable here: {CUDA.reason}")

if CUDA.available:
    from int8nax.backends.cuda import probe as cuda_probe, graphs as cuda_graphs


SWIGLU = mx.compile(lambda g, u: nn.silu(g) * u, shapeless=True)
"""mlx-lm's swiglu(gate, x) = nn.silu(gate) * x, compiled shapeless as mlx-lm does."""

DTYPES = [mx.float16, mx.bfloat16, mx.float32]
LONGEST = max(x.capacity for x in cuda_plans.CUDA_QUANT_LAUNCHES)
H_VALUES = [8, 24, 4864, 12288, 18944, LONGEST + 8, 4867]
"""One group, three groups, Qwen2.5-0.5B's, Qwen3-8B's and Qwen2.5-7B's intermediate sizes, a row
longer than every launch holds in registers (read twice), and H % 8 != 0 (one value at a time)."""
M_VALUES = [1, 7, 300]


def _itemsize(dtype) -> int:
    return 4 if dtype == mx.float32 else 2


def _launches(dtype):
    """None (the dispatch's own launch), then every launch the kernel can start for `dtype`: float32
    at a launch holding more than cuda_plans.SWIGLU_HELD_BYTES a thread needs more registers than
    an SM has (cuda_plans.cuda_swiglu_quant_launch), so it is never taken."""
    fits = [x for x in cuda_plans.SWIGLU_QUANT_LAUNCHES
            if cuda_plans.swiglu_held_bytes(x, _itemsize(dtype)) <= cuda_plans.SWIGLU_HELD_BYTES]
    return [None] + fits


CASES = [(d, x) for d in DTYPES for x in _launches(d)]


def _case_id(v):
    if isinstance(v, cuda_plans.CudaQuantLaunch):
        return f"{v.threads}x{v.held}"
    return "dispatch" if v is None else str(v).split(".")[-1]


def _special_rows(h: int, dtype):
    """(g, u) float32 [R, H] each: a row of each kind, as `dtype` rounds it: NaN in g, NaN in u,
    +inf in g (h = inf * u), -inf in g (-inf * sigmoid(-inf) = -inf * 0: NaN), inf in u, g all zero,
    g and u all zero, tiny products (a subnormal scale where the type has float32's exponent range;
    subnormal h in float16), products that overflow T while g and u are finite, large negative g
    (sigmoid underflows to 0), and a lone maximum at the first, middle and last position."""
    rng = np.random.default_rng(h)
    g = rng.standard_normal((14, h)).astype(np.float32)
    u = rng.standard_normal((14, h)).astype(np.float32)
    at = [h // 5, h // 3, h // 2, (2 * h) // 3, h - 1]
    g[0, at[0]] = np.nan
    u[1, at[1]] = np.nan
    g[2, at[2]] = np.inf
    g[3, at[3]] = -np.inf
    u[4, at[4]] = np.inf
    g[5] = 0.0
    g[6] = 0.0
    u[6] = 0.0
    tiny, huge = (1e-3, 300.0) if dtype == mx.float16 else (2e-19, 1e20)
    g[7] *= np.float32(tiny)
    u[7] *= np.float32(tiny)
    g[8] = np.abs(g[8]) + 1.0
    g[8, at[2]] = huge
    u[8, at[2]] = huge
    g[9] = -np.abs(g[9]) * np.float32(huge)
    for i, k in enumerate((0, h // 2, h - 1)):
        g[10 + i] *= np.float32(0.01)
        g[10 + i, k] = 6.0 if i % 2 else -6.0
    g[13] *= np.float32(huge / 1e3)
    return g, u


def _inputs(dtype, h: int, m: int):
    """y [M, 2H] in `dtype`: random rows of assorted magnitudes with the special ones first."""
    rng = np.random.default_rng(1000 * h + m)
    g = rng.standard_normal((m, h)).astype(np.float32) * rng.uniform(0.01, 30, (m, 1)).astype(np.float32)
    u = rng.standard_normal((m, h)).astype(np.float32)
    sg, su = _special_rows(h, dtype)
    g[:len(sg)], u[:len(su)] = sg[:m], su[:m]
    y = mx.array(np.concatenate([g, u], axis=1)).astype(dtype)
    mx.eval(y)
    return y


@lru_cache(maxsize=8)
def _case(dtype, h: int, m: int):
    """(y, the unfused graph's codes and scales) for one shape and dtype, shared by the launches."""
    y = _inputs(dtype, h, m)
    return y, _unfused(y)


def _unfused(y):
    """The codes and scales of the graph the kernel replaces: h = swiglu(g, u), then quantize."""
    h = y.shape[1] // 2
    q, s = cuda_graphs._quantize_graph(SWIGLU(y[:, :h], y[:, h:]))
    mx.eval(q, s)
    return np.array(q), np.array(s)


def _fused(y, launch):
    fn = getattr(cuda_graphs, "_swiglu_quantize_graph", None)
    assert fn is not None, "int8nax.backends.cuda.graphs._swiglu_quantize_graph(y, launch=None) is missing"
    q, s = fn(y, launch)
    mx.eval(q, s)
    assert q.dtype == mx.int8 and s.dtype == mx.float32
    assert q.shape == (y.shape[0], y.shape[1] // 2) and s.shape == (y.shape[0],)
    return np.array(q), np.array(s)


def _assert_same_bits(got, want):
    (gq, gs), (wq, ws) = got, want
    bad_s = np.flatnonzero(gs.view(np.uint32) != ws.view(np.uint32))
    assert bad_s.size == 0, f"scales differ in rows {bad_s[:10].tolist()}: {gs[bad_s[:10]]} vs {ws[bad_s[:10]]}"
    bad_q = np.argwhere(gq != wq)
    assert bad_q.size == 0, f"{len(bad_q)} codes differ, first at {bad_q[0].tolist()}: {gq[tuple(bad_q[0])]} vs {wq[tuple(bad_q[0])]}"


# (dtype, launch) varies fastest, so that each shape's inputs and reference are made once (_case).
@pytest.mark.parametrize("dtype,launch", CASES, ids=_case_id)
@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("h", H_VALUES)
def test_swiglu_quantize_is_the_unfused_graph_bit_for_bit(dtype, launch, h, m):
    y, want = _case(dtype, h, m)
    _assert_same_bits(_fused(y, launch), want)


def test_the_special_rows_are_special():
    # The inputs above hold what they claim in every type: NaN scales where h has NaN or inf (the
    # overflow row included), a scale of 1 for the zero rows, and a subnormal scale for the tiny row
    # where the type reaches that far.
    for dtype in DTYPES:
        h = 24
        y = _inputs(dtype, h, 300)
        _, s = _unfused(y)
        assert np.all(np.isnan(s[[0, 1, 2, 3, 4, 8]])), (dtype, s[:14])
        assert np.all(s[[5, 6]] == 1.0) and np.all(np.isfinite(s[9:]))
        if dtype != mx.float16:
            assert 0 < s[7] < np.float32(2.0**-126), (dtype, s[7])


# ---- views: the entry point's job (a copy where the rows are not contiguous), the kernel's
# alignment checks (a base off 16 bytes takes the one-value path, exactly)


@pytest.mark.parametrize("dtype,launch", CASES, ids=_case_id)
@pytest.mark.parametrize("view", ["offset_base", "column_slice"])
@pytest.mark.parametrize("h", [4864, 24, 4867])
def test_views_of_y(dtype, launch, h, view):
    m = 7
    y, want = _case(dtype, h, m)
    if view == "offset_base":  # row-contiguous, 3 elements into its buffer: passed as it is
        flat = mx.concatenate([mx.zeros((3,), dtype=dtype), y.reshape(-1)])
        v = flat[3:].reshape(m, 2 * h)
    else:  # columns 1 .. 2H of a wider array: rows not contiguous
        v = mx.concatenate([mx.zeros((m, 1), dtype=dtype), y, mx.zeros((m, 5), dtype=dtype)], axis=1)[:, 1:1 + 2 * h]
    mx.eval(v)
    got = _fused(v, launch)
    _assert_same_bits(got, _unfused(v))
    _assert_same_bits(got, want)


# ---- the staged kernel (kernels/cuda/quant/swiglu_quantize_staged.cuh): persistent blocks, rows copied
# into shared memory while the previous one is quantized; same bits. Few blocks make every block
# reuse both buffers; rows its buffers cannot hold (or off the vector path) it quantizes from y.
# One launch with the widest buffers serves every width (each STAGE_BYTES is an NVRTC build of
# ~8 s), and the launches the dispatch gives the models' widths are checked on their own.

WIDEST = cuda_plans.staged_max_hidden(2)
STAGED_H = H_VALUES + [WIDEST]


def _widest_launch(blocks: int) -> cuda_plans.CudaStagedLaunch:
    return cuda_plans.CudaStagedLaunch(512, cuda_plans.STAGED_MAX_HELD, WIDEST, 2, blocks)


@pytest.mark.parametrize("blocks", [3, 132])
@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=_case_id)
@pytest.mark.parametrize("m", M_VALUES)
@pytest.mark.parametrize("h", STAGED_H)
def test_staged_swiglu_quantize_is_the_unfused_graph_bit_for_bit(dtype, h, m, blocks):
    y, want = _case(dtype, h, m)
    _assert_same_bits(_fused(y, _widest_launch(blocks)), want)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=_case_id)
@pytest.mark.parametrize("h", [4864, 12288, 18944])
def test_the_dispatched_staged_launch_is_the_unfused_graph_bit_for_bit(dtype, h):
    m = 2 * cuda_probe.sm_count() + 5
    launch = cuda_plans.cuda_swiglu_staged_launch(m, h, 2, cuda_probe.sm_count())
    assert launch is not None and launch.hidden == h and launch.blocks == cuda_probe.sm_count()
    y, want = _case(dtype, h, m)
    _assert_same_bits(_fused(y, launch), want)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=_case_id)
@pytest.mark.parametrize("view", ["offset_base", "column_slice"])
@pytest.mark.parametrize("h", [4864, 24, 4867])
def test_staged_views_of_y(dtype, h, view):
    m = 7
    y, want = _case(dtype, h, m)
    if view == "offset_base":  # 3 elements into its buffer: off 16 bytes, quantized from y
        flat = mx.concatenate([mx.zeros((3,), dtype=dtype), y.reshape(-1)])
        v = flat[3:].reshape(m, 2 * h)
    else:
        v = mx.concatenate([mx.zeros((m, 1), dtype=dtype), y, mx.zeros((m, 5), dtype=dtype)], axis=1)[:, 1:1 + 2 * h]
    mx.eval(v)
    _assert_same_bits(_fused(v, _widest_launch(3)), want)


def test_the_staged_first_use_check_passes_and_probes_more_rows_than_blocks():
    launch = _widest_launch(4)
    cuda_graphs.swiglu_kernel_ok.cache_clear()
    try:
        assert cuda_graphs.swiglu_kernel_ok(mx.bfloat16, launch)
    finally:
        cuda_graphs.swiglu_kernel_ok.cache_clear()
