"""The CPU backend inside mx.compile and mx.vmap (backends/cpu/graph.py): the numerics of its
eager path as MLX operations. Codes, scales and int32 products must be bit-identical to
int8nax.quant / the exact product; W8A8 within 1 ulp of the float64 model, float32 outputs
bit-identical to eager, float16 / bfloat16 ones too except where a double rounding through
float32 lands on a tie."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import int8nax
from int8nax.backends.cpu import graph as cpu_graph
from int8nax.quant import quantize_activations_np, quantize_weight_np
from int8nax.reference import int8_matmul_ref, quantize_activations_ref, to_numpy, w8a8_linear_ref

from conftest import within_one_ulp

DTYPES = ["float32", "float16", "bfloat16"]


def special_rows(k: int) -> np.ndarray:
    """float32 rows with every case the quantizer treats apart."""
    rows = np.zeros((9, k), np.float32)
    rows[0, :4] = [1e-37, 1e-38, 0, 5e-39]  # a subnormal scale (the tiny-row rule): codes 127, 13, 0, 6
    rows[1, :3] = [127, 2.5, -2.5]  # scale 1: ties go away from zero, 3 and -3
    rows[2, :3] = [127, 0.49999997, -126.5]  # just below a tie, and -126.5 -> -127
    rows[3, :2] = [1.0, np.nan]  # a NaN row: scale NaN, codes 0
    rows[4, :2] = [np.inf, 1.0]
    rows[5, :2] = [-np.inf, -np.inf]
    # row 6: all zeros (scale 1)
    rows[7, :2] = [3e-45, -1e-45]  # subnormal values, the smallest scale
    rows[8, :3] = [3.4e38, -3.4e38, 1.0]  # the largest finite values
    return rows


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_quantization_is_int8nax_quant_bit_for_bit(rng, dtype, compiled):
    k = 37
    x = np.concatenate([special_rows(k), rng.standard_normal((20, k)).astype(np.float32) * 3,
                        (rng.standard_normal((4, k)) * 1e-38).astype(np.float32)])
    xm = mx.array(x).astype(getattr(mx, dtype))
    fn = mx.compile(cpu_graph.quantize_rows) if compiled else cpu_graph.quantize_rows
    q, s = fn(xm)
    want_q, want_s = quantize_activations_np(np.array(xm.astype(mx.float32)))
    assert np.array_equal(np.array(q), want_q)
    assert np.array_equal(np.array(s), want_s, equal_nan=True)
    if dtype == "float32":
        assert np.array(q)[0, :4].tolist() == [127, 13, 0, 6] and np.array(q)[1, 1:3].tolist() == [3, -3]


@pytest.mark.parametrize("k", [1, 1023, 1024, 1025, 3000])
def test_the_product_is_exact_across_k_blocks(rng, k):
    a = rng.integers(-127, 128, (5, k), dtype=np.int8)
    b = rng.integers(-127, 128, (7, k), dtype=np.int8)
    a[0], b[0] = 127, 127  # the largest sums: k * 16129
    a[1], b[1] = -127, 127
    got = mx.compile(cpu_graph.gemm_int32)(mx.array(a), mx.array(b))
    assert got.dtype == mx.int32 and np.array_equal(np.array(got).astype(np.int64), int8_matmul_ref(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_w8a8_under_compile_and_vmap_matches_eager(rng, dtype, with_bias):
    n, k = 40, 1500
    w, s = quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32))
    w, s = mx.array(w), mx.array(s)
    bias = mx.array(rng.standard_normal(n).astype(np.float32)) if with_bias else None
    x = mx.array(rng.standard_normal((3, 6, k)).astype(np.float32) * 2).astype(getattr(mx, dtype))

    def f(x):
        return int8nax.w8a8_linear(x, w, s, bias, backend="cpu")

    eager = f(x)
    ref = w8a8_linear_ref(x.reshape(-1, k), w, s, bias).reshape(3, 6, n)
    for got in (mx.compile(f)(x), mx.vmap(f)(x)):
        assert got.dtype == eager.dtype and got.shape == eager.shape
        assert within_one_ulp(got, ref, dtype).all()
        same = to_numpy(got, np.float64) == to_numpy(eager, np.float64)
        if dtype == "float32":
            assert same.all()
        else:
            assert same.mean() > 0.99  # ties of the output type after float32 are rare


def test_int8_matmul_and_quantize_activations_under_compile(rng):
    a = mx.array(rng.integers(-127, 128, (4, 2100), dtype=np.int8))
    b = mx.array(rng.integers(-127, 128, (9, 2100), dtype=np.int8))
    got = mx.compile(lambda a, b: int8nax.int8_matmul(a, b, backend="cpu"))(a, b)
    assert np.array_equal(np.array(got), int8_matmul_ref(np.array(a), np.array(b)))
    x = mx.array(special_rows(16))
    q, s = mx.compile(lambda x: int8nax.quantize_activations(x, backend="cpu"))(x)
    want_q, want_s = quantize_activations_ref(x)
    assert np.array_equal(np.array(q), want_q) and np.array_equal(np.array(s), want_s, equal_nan=True)


def test_gradients_compile_through_the_graph_path(rng):
    n, k = 12, 64
    w, s = quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32))
    w, s = mx.array(w), mx.array(s)
    bias = mx.array(rng.standard_normal(n).astype(np.float32))
    x = mx.array(rng.standard_normal((5, k)).astype(np.float32))
    loss = lambda x, b: mx.tanh(int8nax.w8a8_linear(x, w, s, b, backend="cpu")).sum()  # noqa: E731
    eager = mx.grad(loss, argnums=(0, 1))(x, bias)
    compiled = mx.compile(mx.grad(loss, argnums=(0, 1)))(x, bias)
    for e, c in zip(eager, compiled):
        np.testing.assert_allclose(np.array(c), np.array(e), rtol=1e-5, atol=1e-6)


def test_a_model_of_w8a8_layers_compiles_on_the_cpu(rng):
    # int8nax.nn's layers (sibling groups, the SwiGLU call) inside one mx.compile of the model
    nn = pytest.importorskip("mlx.nn")
    from int8nax.nn import quantize_linears

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.k_proj, self.v_proj = nn.Linear(64, 32), nn.Linear(64, 16), nn.Linear(64, 16)
            self.o_proj = nn.Linear(64, 64, bias=False)

        def __call__(self, x):
            return self.o_proj(mx.concatenate([self.q_proj(x), self.k_proj(x), self.v_proj(x)], axis=-1))

    model = Block()
    assert quantize_linears(model, backend="cpu") == 4
    x = mx.array(rng.standard_normal((2, 3, 64)).astype(np.float32))
    eager, compiled = model(x), mx.compile(model)(x)
    assert np.array_equal(np.array(compiled), np.array(eager))
