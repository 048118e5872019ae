"""The references themselves: the fast exact product must equal int64 arithmetic."""

from __future__ import annotations

import numpy as np

from int8nax.reference import exact_int_product, int8_matmul_ref, max_ulp_error


def test_exact_int_product_matches_int64_at_the_extremes(rng):
    # All -128: every product is +2**14, the largest magnitude int8 can make.
    a = np.full((3, 4096), -128, dtype=np.int8)
    b = np.full((5, 4096), -128, dtype=np.int8)
    b[1] = 127
    got = int8_matmul_ref(a, b)
    assert got.dtype == np.int64
    want = a.astype(np.int64) @ b.astype(np.int64).T
    assert np.array_equal(got, want)
    assert got[0, 0] == 4096 * 2**14 and got[0, 1] == -4096 * 128 * 127

    a = rng.integers(-128, 128, (33, 1000), dtype=np.int8)
    b = rng.integers(-128, 128, (17, 1000), dtype=np.int8)
    assert np.array_equal(int8_matmul_ref(a, b), a.astype(np.int64) @ b.astype(np.int64).T)


def test_exact_int_product_falls_back_to_int64_beyond_float64():
    # Products near 2**54 are beyond float64's exact integers and must take the int64 path.
    a = np.array([[2**27 + 1, 2**27 + 1]], dtype=np.int64)
    b = np.array([[2**27 + 1, 1]], dtype=np.int64)
    want = (2**27 + 1) ** 2 + (2**27 + 1)
    assert exact_int_product(a, b)[0, 0] == want
    assert float(want) != want  # the float64 path would have been wrong here


def test_max_ulp_error_counts_ulps():
    ref = np.array([1.0, 2.0, 0.0])
    assert max_ulp_error(np.array([1.0, 2.0, 0.0], np.float16), ref, "float16") == 0.0
    # float16 spacing at 1.0 is 2**-10; one step off is one ulp.
    assert max_ulp_error(np.array([1.0 + 2**-10, 2.0, 0.0], np.float16), ref, "float16") == 1.0
    assert max_ulp_error(np.zeros(0, np.float16), np.zeros(0), "float16") == 0.0


def test_w8a8_model_by_hand():
    # x = [[2, -1]] -> absmax 2, s_x = 2/127, codes [127, -63.5 -> -64]; w = [[1, 1], [0, 3]]
    # with s_w = [1/127, 3/127] -> codes [[127, 127], [0, 127]]. acc = [127*127 - 64*127,
    # -64*127] = [8001, -8128]; y = acc * s_x * s_w (+ bias), all in float64 of the float32 scales.
    import int8nax
    from int8nax.reference import w8a8_linear_ref

    x = np.array([[2.0, -1.0]], np.float32)
    w, s_w = int8nax.quantize_weight_int8(np.array([[1.0, 1.0], [0.0, 3.0]], np.float32))
    assert w.tolist() == [[127, 127], [0, 127]]
    s_x = np.float64(np.float32(2) / np.float32(127))
    want = np.array([8001, -8128]) * s_x * s_w.astype(np.float64)
    np.testing.assert_array_equal(w8a8_linear_ref(x, w, s_w), want[None, :])
    b64 = np.array([0.1, -0.2])  # float64: rounded to float32 once, as the API does
    np.testing.assert_array_equal(w8a8_linear_ref(x, w, s_w, b64),
                                  (want + b64.astype(np.float32).astype(np.float64))[None, :])
