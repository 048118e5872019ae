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
