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


# --- issue 13, class 6: messages name the function, the argument, what it takes, what came ---

W, SW = int8nax.quantize_weight_int8(np.arange(24, dtype=np.float32).reshape(3, 8) - 12)


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: int8nax.int8_matmul(A, B, backend=123), TypeError, ["int8_matmul", "'backend'", "str", "int", "123"]),
        (lambda: int8nax.int8_matmul(A, B, backend=mx.cpu), TypeError, ["int8_matmul", "'backend'", "Device", "backend='cpu'"]),
        (lambda: int8nax.w8a8_linear(X, W, SW, backend=1.5), TypeError, ["w8a8_linear", "'backend'", "float"]),
        (lambda: int8nax.quantize_activations(X, backend=["cpu"]), TypeError, ["quantize_activations", "'backend'", "list"]),
        (lambda: int8nax.w8a8_linear(X, W, SW, backend="gpu"), ValueError, ["w8a8_linear", "'backend'", "'gpu'", "'auto'", "'cpu'"]),
        (lambda: int8nax.int8_matmul(A.astype(np.float64), B), TypeError, ["int8_matmul", "'a'", "int8", "numpy dtype float64"]),
        (lambda: int8nax.w8a8_linear(X, W, SW.astype(np.int32)), TypeError,
         ["w8a8_linear", "'scale_w'", "must have dtype float32", "int32"]),
        (lambda: int8nax.w8a8_linear(X, W, SW, np.ones(3, np.int64)), TypeError,
         ["w8a8_linear", "'bias'", "float16 or bfloat16 or float32", "int64"]),
        (lambda: int8nax.w8a8_linear(X, W, SW, np.array([1e39, 0, 0])), ValueError,
         ["w8a8_linear", "'bias'", "beyond float32 range", "1e+39"]),
        (lambda: int8nax.w8a8_linear(X.astype(np.float64), W, SW), TypeError,
         ["w8a8_linear", "'x'", "float16 or bfloat16 or float32", "float64"]),
        (lambda: int8nax.quantize_activations(np.zeros(3, np.complex64)), TypeError, ["quantize_activations", "'x'", "complex64"]),
        (lambda: int8nax.quantize_activations(mx.array(1.0)), ValueError, ["quantize_activations", "'x'", "scalar"]),
        (lambda: int8nax.quantize_weight_int8(np.array([[1.0, 1e39]])), ValueError,
         ["quantize_weight_int8", "'w'", "beyond float32 range", "1e+39"]),
        (lambda: int8nax.quantize_weight_int8(np.array([[1.0, 2.0], [np.inf, 0]])), ValueError,
         ["quantize_weight_int8", "'w'", "finite", "row 1", "inf"]),
        (lambda: int8nax.quantize_weight_int8(mx.zeros((2, 2), mx.int32)), TypeError, ["quantize_weight_int8", "'w'", "int32"]),
        (lambda: int8nax.int8_matmul(A, B, b_layout=None), ValueError, ["int8_matmul", "'b_layout'", "None"]),
        (lambda: int8nax.w8a8_linear(X, W, SW, [1.0, 2.0, 3.0]), TypeError, ["w8a8_linear", "'bias'", "list"]),
    ],
)
def test_bad_input_names_function_argument_and_choices(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


def test_float64_bias_is_rounded_to_float32_once(rng):
    x = rng.standard_normal((4, 8)).astype(np.float32)
    b64 = rng.standard_normal(3)  # numpy's default float64, values not representable in float32
    y = int8nax.w8a8_linear(x, W, SW, b64)
    np.testing.assert_array_equal(np.array(y), np.array(int8nax.w8a8_linear(x, W, SW, b64.astype(np.float32))))
    np.testing.assert_array_equal(np.array(int8nax.w8a8_linear(x, W, SW, np.zeros(3))),
                                  np.array(int8nax.w8a8_linear(x, W, SW)))


def test_float64_weights_beyond_float32_are_not_called_nan():
    with pytest.raises(ValueError) as info:
        int8nax.quantize_weight_int8(np.array([[3.5e38, 1.0]]))
    assert "NaN" not in str(info.value) and "beyond float32 range" in str(info.value)


# --- issue 13, class 4: numpy views with negative strides, for every array argument ---------


def views(arr):
    """(name, view) pairs of arr with negative strides, each holding arr's values in some order."""
    out = [("flip-last", np.flip(arr, -1)), ("reversed", arr[::-1])]
    if arr.ndim == 2:
        out.append(("both", arr[::-1, ::-1]))
    return out


def test_int8_matmul_takes_negative_stride_views(backend, rng):
    a = rng.integers(-128, 128, (5, 7), dtype=np.int8)
    b = rng.integers(-128, 128, (4, 7), dtype=np.int8)
    for name, v in views(a):
        want = v.astype(np.int64) @ b.astype(np.int64).T
        np.testing.assert_array_equal(np.array(int8nax.int8_matmul(v, b, backend=backend)), want, err_msg=name)
    for name, v in views(b):
        want = a.astype(np.int64) @ v.astype(np.int64).T
        np.testing.assert_array_equal(np.array(int8nax.int8_matmul(a, v, backend=backend)), want, err_msg=name)
        want_kn = a.astype(np.int64) @ np.ascontiguousarray(v.T).astype(np.int64)
        np.testing.assert_array_equal(np.array(int8nax.int8_matmul(a, v.T[:, :], b_layout="kn", backend=backend)),
                                      a.astype(np.int64) @ v.T.astype(np.int64), err_msg=name)
        assert want_kn.shape == (5, 4)


def test_w8a8_and_quantize_take_negative_stride_views(backend, rng):
    from int8nax.reference import max_ulp_error, w8a8_linear_ref

    x = rng.standard_normal((6, 8)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    for name, v in views(x):
        q, s = int8nax.quantize_activations(v, backend=backend)
        q2, s2 = int8nax.quantize_activations(np.ascontiguousarray(v), backend=backend)
        np.testing.assert_array_equal(np.array(q), np.array(q2), err_msg=name)
        np.testing.assert_array_equal(np.array(s), np.array(s2), err_msg=name)
        y = int8nax.w8a8_linear(v, W, SW, b, backend=backend)
        assert max_ulp_error(y, w8a8_linear_ref(np.ascontiguousarray(v), W, SW, b), "float32") <= 1.0, name
    for name, v in views(W) + [("scale", None), ("bias", None)]:
        w_arg, s_arg, b_arg = W, SW, b
        if name == "scale":
            w_arg, s_arg = W[::-1], SW[::-1]
        elif name == "bias":
            b_arg = b[::-1]
        else:
            w_arg = v
        y = int8nax.w8a8_linear(x, w_arg, s_arg, b_arg, backend=backend)
        want = w8a8_linear_ref(x, np.ascontiguousarray(w_arg), np.ascontiguousarray(s_arg), np.ascontiguousarray(b_arg))
        assert max_ulp_error(y, want, "float32") <= 1.0, name


def test_quantize_weight_takes_negative_stride_views(rng):
    w = rng.standard_normal((4, 6)).astype(np.float32)
    for name, v in views(w):
        q, s = int8nax.quantize_weight_int8(v)
        q2, s2 = int8nax.quantize_weight_int8(np.ascontiguousarray(v))
        np.testing.assert_array_equal(q, q2, err_msg=name)
        np.testing.assert_array_equal(s, s2, err_msg=name)


def test_other_numpy_layouts(backend, rng):
    a = rng.integers(-128, 128, (5, 7), dtype=np.int8)
    b = rng.integers(-128, 128, (4, 7), dtype=np.int8)
    want = a.astype(np.int64) @ b.astype(np.int64).T
    for v in (np.asfortranarray(a), np.broadcast_to(a[:1], (5, 7)), a.astype(a.dtype.newbyteorder(">"))):
        ref = np.asarray(v).astype(np.int64) @ b.astype(np.int64).T
        np.testing.assert_array_equal(np.array(int8nax.int8_matmul(v, b, backend=backend)), ref)
    x = rng.standard_normal((5, 7)).astype(">f4")  # big-endian float32: same values
    y = int8nax.quantize_activations(x, backend=backend)[0]
    np.testing.assert_array_equal(np.array(y), np.array(int8nax.quantize_activations(x.astype(np.float32), backend=backend)[0]))
    assert want.shape == (5, 4)


def test_bad_environment_backend_is_named(monkeypatch):
    monkeypatch.setenv("INT8NAX_BACKEND", "bogus")
    with pytest.raises(ValueError, match=r"w8a8_linear: unknown backend 'bogus' in the environment variable INT8NAX_BACKEND.*'cpu'"):
        int8nax.w8a8_linear(X, W, SW)
    # an explicit backend= wins over the environment
    assert int8nax.w8a8_linear(X, W, SW, backend="cpu").shape == (4, 3)


def test_float64_activations_are_refused_with_the_choices():
    with pytest.raises(TypeError, match="quantize_activations: 'x' must have dtype float16 or bfloat16 or float32, got numpy dtype float64"):
        int8nax.quantize_activations(X.astype(np.float64))


def test_mx_float64_weights_and_bias():
    # float64 mx arrays exist only on the CPU (MLX's GPUs refuse the dtype): made there
    w64 = np.linspace(-1, 1, 24).reshape(3, 8)
    b64 = np.array([0.1, 0.2, 0.3])
    with mx.stream(mx.cpu):
        w_mx, b_mx = mx.array(w64).astype(mx.float64), mx.array(b64).astype(mx.float64)
    q, s = int8nax.quantize_weight_int8(w_mx)
    q_np, s_np = int8nax.quantize_weight_int8(w64)
    assert q.dtype == mx.int8 and s.dtype == mx.float32
    np.testing.assert_array_equal(np.array(q), q_np)
    np.testing.assert_array_equal(np.array(s), s_np)
    y = int8nax.w8a8_linear(X + 1, q, s, b_mx)
    np.testing.assert_array_equal(np.array(y), np.array(int8nax.w8a8_linear(X + 1, q, s, b64.astype(np.float32))))


# --- the same contract for mx.array arguments: the common call's inline checks let every bad
# input through to the checked path, which names it (int8nax.api) ---------------------------

MA, MB, MX, MS = mx.array(A), mx.array(B), mx.array(X), mx.array(S)


@pytest.mark.parametrize(
    "call, exc, words",
    [
        (lambda: int8nax.int8_matmul(MA.astype(mx.float32), MB), TypeError, ["int8_matmul", "'a'", "int8", "float32"]),
        (lambda: int8nax.int8_matmul(MA, MB.astype(mx.uint8)), TypeError, ["'b'", "int8", "uint8"]),
        (lambda: int8nax.int8_matmul(MA[None], MB), ValueError, ["'a'", "2-D", "3-D", "(1, 4, 8)"]),
        (lambda: int8nax.int8_matmul(MA, MB[0]), ValueError, ["'b'", "2-D", "1-D"]),
        (lambda: int8nax.int8_matmul(MA, mx.zeros((3, 9), mx.int8)), ValueError, ["K mismatch", "8", "9"]),
        (lambda: int8nax.int8_matmul(MA, MB, b_layout="nt"), ValueError, ["b_layout", "'nt'"]),
        (lambda: int8nax.int8_matmul(MA, MB, backend="tpu"), ValueError, ["unknown backend", "'tpu'"]),
        (lambda: int8nax.int8_matmul(mx.zeros((1, 131072), mx.int8), mx.zeros((1, 131072), mx.int8)),
         ValueError, ["131072", "131071", "overflow"]),
        (lambda: int8nax.w8a8_linear(MX.astype(mx.int8), MB, MS), TypeError, ["w8a8_linear", "'x'", "float16", "int8"]),
        (lambda: int8nax.w8a8_linear(MX.astype(mx.int32), MB, MS), TypeError, ["'x'", "int32"]),
        (lambda: int8nax.w8a8_linear(MX, MB.astype(mx.float32), MS), TypeError, ["'w_int8'", "int8", "float32"]),
        (lambda: int8nax.w8a8_linear(MX, MB, MS.astype(mx.float16)), TypeError, ["'scale_w'", "float32", "float16"]),
        (lambda: int8nax.w8a8_linear(MX, MB, mx.ones((4,))), ValueError, ["'scale_w'", "(3,)", "(4,)"]),
        (lambda: int8nax.w8a8_linear(MX, MB, mx.ones((3, 1))), ValueError, ["'scale_w'", "(3,)", "(3, 1)"]),
        (lambda: int8nax.w8a8_linear(MX, MB, MS, mx.ones((2,))), ValueError, ["'bias'", "(3,)", "(2,)"]),
        (lambda: int8nax.w8a8_linear(MX, MB, MS, mx.ones((1, 3))), ValueError, ["'bias'", "(3,)", "(1, 3)"]),
        (lambda: int8nax.w8a8_linear(MX, MB, MS, mx.ones((3,), mx.int32)), TypeError, ["'bias'", "int32"]),
        (lambda: int8nax.w8a8_linear(MX[:, :7], MB, MS), ValueError, ["K mismatch", "7", "8"]),
        (lambda: int8nax.w8a8_linear(MX, MB[None], MS), ValueError, ["'w_int8'", "2-D", "3-D"]),
        (lambda: int8nax.w8a8_linear(MX, MB[0], MS), ValueError, ["'w_int8'", "2-D", "1-D"]),
        (lambda: int8nax.w8a8_linear(mx.array(1.0), MB, MS), ValueError, ["'x'", "scalar"]),
        (lambda: int8nax.w8a8_linear(mx.zeros((2, 131072)), mx.zeros((1, 131072), mx.int8), mx.ones((1,))),
         ValueError, ["w8a8_linear", "131072", "131071", "overflow"]),
        (lambda: int8nax.w8a8_linear(MX, MB, MS, backend="gpu"), ValueError, ["w8a8_linear", "'gpu'"]),
        (lambda: int8nax.quantize_activations(MX.astype(mx.int32)), TypeError,
         ["quantize_activations", "'x'", "int32"]),
    ],
)
def test_bad_mx_input_is_named(call, exc, words):
    with pytest.raises(exc) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {str(info.value)!r}"


def test_bad_environment_backend_is_named_for_mx_arrays(monkeypatch):
    monkeypatch.setenv("INT8NAX_BACKEND", "bogus")
    for call, func in ((lambda: int8nax.int8_matmul(MA, MB), "int8_matmul"),
                       (lambda: int8nax.w8a8_linear(MX, mx.array(W), mx.array(SW)), "w8a8_linear")):
        with pytest.raises(ValueError, match=rf"{func}: unknown backend 'bogus' in the environment variable "
                                             "INT8NAX_BACKEND"):
            call()


@pytest.mark.parametrize("call", ["int8_matmul", "quantize_activations", "w8a8_linear"])
def test_a_backend_that_cannot_run_is_refused_in_the_functions_name(call, monkeypatch):
    # Every other usage error leads with the public function's name; so does this one, whether the
    # backend came as the argument or from INT8NAX_BACKEND.
    import mlx.core as mx

    import int8nax
    from int8nax import backends

    unavailable = next((n for n in ("metal", "cuda") if not backends.probe(n).available), None)
    if unavailable is None:
        pytest.skip("every backend can run here")
    args = {"int8_matmul": (mx.zeros((2, 4), dtype=mx.int8), mx.zeros((3, 4), dtype=mx.int8)),
            "quantize_activations": (mx.zeros((2, 4)),),
            "w8a8_linear": (mx.zeros((2, 4)), mx.zeros((3, 4), dtype=mx.int8), mx.ones((3,)))}[call]
    with pytest.raises(RuntimeError, match=rf"^{call}: backend '{unavailable}' was requested \(argument\)"):
        getattr(int8nax, call)(*args, backend=unavailable)
    monkeypatch.setenv("INT8NAX_BACKEND", unavailable)
    with pytest.raises(RuntimeError, match=rf"^{call}: backend '{unavailable}' was requested \(INT8NAX_BACKEND={unavailable}\)"):
        getattr(int8nax, call)(*args)
