"""The input contract: bad input raises TypeError/ValueError naming the argument, the expected
and the actual value; never a crash or a silently wrong result."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import int8nax

A = np.zeros((4, 8), np.int8)
B = np.zeros((3, 8), np.int8)
X = np.zeros((4, 8), np.float32)
S = np.ones(3, np.float32)


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: int8nax.int8_matmul(A.astype(np.float32), B), TypeError, ["'a'", "int8", "float32"]),
        (lambda: int8nax.int8_matmul(A, B.astype(np.int16)), TypeError, ["'b'", "int8", "int16"]),
        (lambda: int8nax.int8_matmul(A.tolist(), B), TypeError, ["'a'", "mlx.core.array", "list"]),
        (lambda: int8nax.int8_matmul(A[None], B), ValueError, ["'a'", "2-D", "3-D"]),
        (lambda: int8nax.int8_matmul(A, B[0]), ValueError, ["'b'", "2-D", "1-D"]),
        (lambda: int8nax.int8_matmul(A, np.zeros((3, 9), np.int8)), ValueError, ["K mismatch", "8", "9"]),
        (lambda: int8nax.int8_matmul(A, B, b_layout="nt"), ValueError, ["b_layout", "'nt'"]),
        (lambda: int8nax.int8_matmul(np.zeros((1, 131072), np.int8), np.zeros((1, 131072), np.int8)),
         ValueError, ["131072", "131071", "overflow"]),
        (lambda: int8nax.w8a8_linear(X.astype(np.int8), B, S), TypeError, ["'x'", "float16", "int8"]),
        (lambda: int8nax.w8a8_linear(X, B.astype(np.float32), S), TypeError, ["'w_int8'", "int8", "float32"]),
        (lambda: int8nax.w8a8_linear(X, B, S.astype(np.float16)), TypeError, ["'scale_w'", "float32", "float16"]),
        (lambda: int8nax.w8a8_linear(X, B, np.ones(4, np.float32)), ValueError, ["'scale_w'", "(3,)", "(4,)"]),
        (lambda: int8nax.w8a8_linear(X, B, S, np.ones(2, np.float32)), ValueError, ["'bias'", "(3,)", "(2,)"]),
        (lambda: int8nax.w8a8_linear(X, B, S, np.ones(3, np.int32)), TypeError, ["'bias'", "int32"]),
        (lambda: int8nax.w8a8_linear(X[:, :7], B, S), ValueError, ["K mismatch", "7", "8"]),
        (lambda: int8nax.w8a8_linear(X, B[None], S), ValueError, ["'w_int8'", "2-D", "3-D"]),
        (lambda: int8nax.w8a8_linear(X.astype(np.float64), B, S), TypeError, ["'x'", "float64"]),
        (lambda: int8nax.w8a8_linear(mx.array(1.0), B, S), ValueError, ["'x'", "scalar"]),
        (lambda: int8nax.quantize_activations(X.astype(np.int32)), TypeError, ["'x'", "int32"]),
        (lambda: int8nax.quantize_weight_int8(np.zeros((2, 2), np.int8)), TypeError, ["'w'", "int8"]),
        (lambda: int8nax.quantize_weight_int8(np.zeros(4, np.float32)), ValueError, ["'w'", "2-D", "1-D"]),
        (lambda: int8nax.quantize_weight_int8(np.array([[1.0, np.nan]])), ValueError, ["'w'", "finite", "row 0"]),
        (lambda: int8nax.quantize_weight_int8([[1.0]]), TypeError, ["'w'", "list"]),
        (lambda: int8nax.int8_matmul(A, B, backend="tpu"), ValueError, ["unknown backend", "'tpu'"]),
    ],
)
def test_bad_input_is_named(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
