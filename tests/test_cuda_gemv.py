"""The GEMV (cuda_choice's "gemv" variant, kernels/cuda/gemm/gemv_w8a8.cuh) on a CUDA GPU: its int32
product exact, and its W8A8 outputs bit for bit those of the tiled W8A8 GEMM (the cp.async
variant) on the same codes and on the same x, for M = 1..16, every output type, with and without
a bias, on both epilogues; aligned, misaligned and K % 16 != 0 operands; both slice widths; and the
public w8a8_linear, which takes the GEMV by default at M <= 16, against the same call with
INT8NAX_CUDA_KERNEL=cpasync. Skipped without a CUDA device of compute capability 8.0 or newer
(mma.sync)."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest

from int8nax.backends.cuda import choice as cuda_choice, plans as cuda_plans
from int8nax.reference import exact_int_product, to_numpy


def _cuda_cc():
    cuda = getattr(mx, "cuda", None)
    if cuda is None or not cuda.is_available():
        return None
    info = mx.device_info(mx.gpu)
    return int(info.get("compute_capability_major", 0)), int(info.get("compute_capability_minor", 0))


CC = _cuda_cc()
pytestmark = pytest.mark.skipif(CC is None or CC < (8, 0), reason=f"needs a CUDA GPU with mma.sync (sm_80+), got {CC}")

# (N, K): a Qwen2.5-7B q|k|v decode shape (16 rows a block), a small one (8 rows a block), and
# K % 16 != 0 with N % 8 != 0 (byte-wise loads, partial tiles).
SHAPES = [(4608, 3584), (200, 1040), (37, 100)]
DTYPES = {"float16": mx.float16, "bfloat16": mx.bfloat16, "float32": mx.float32}
# The tiled reference: the cp.async kernel on sm_90a, the dp4a one elsewhere.
TILED = cuda_choice.CPASYNC if CC == (9, 0) else cuda_choice.SIMT
GEMV = cuda_choice.GEMV


def weight(rng, n, k):
    """int8 w [N, K] (numpy), and on the device: aligned, and with its base 3 bytes past its allocation."""
    w = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    shifted = mx.array(np.concatenate([np.zeros(3, np.int8), w.ravel()]))[3:].reshape(n, k)
    return w, mx.array(w) + mx.array(0, dtype=mx.int8), shifted


def codes(rng, m, k):
    q = rng.integers(-127, 128, size=(m, k), dtype=np.int8)
    return q, mx.array(q) + mx.array(0, dtype=mx.int8)


def same_bits(got, want, what):
    bits = mx.uint32 if want.dtype == mx.float32 else mx.uint16
    assert got.dtype == want.dtype and got.shape == want.shape, what
    g, w = np.array(got.view(bits)), np.array(want.view(bits))
    bad = np.argwhere(g != w)
    assert len(bad) == 0, (f"{what}: {len(bad)} outputs differ, first at {bad[0].tolist()}: "
                           f"{to_numpy(got)[tuple(bad[0])]!r} vs {to_numpy(want)[tuple(bad[0])]!r}")


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("slices", sorted(cuda_plans.GEMV_CONFIGS))
def test_int32_product_is_exact(rng, shift, slices):
    from int8nax.backends.cuda import backend as cuda

    plan = cuda_plans.GemvPlan(cuda_plans.GEMV_CONFIGS[slices])
    for n, k in SHAPES:
        w, aligned, shifted = weight(rng, n, k)
        for m in range(1, 17):
            q, q_mx = codes(rng, m, k)
            got = np.array(cuda.gemm_int32(q_mx, shifted if shift else aligned, GEMV, plan))
            np.testing.assert_array_equal(got, exact_int_product(q, w), err_msg=f"M={m} N={n} K={k} shift={shift}")


def test_int32_product_at_the_extremes():
    from int8nax.backends.cuda import backend as cuda

    k = 4096
    q = mx.full((16, k), -127, dtype=mx.int8)
    w = mx.full((24, k), -128, dtype=mx.int8)
    assert (np.array(cuda.gemm_int32(q, w, GEMV)) == 127 * 128 * k).all()


CONFIGS = [(d, b, e) for d in DTYPES for b in (False, True) for e in ("eft", "narrow")
           if not (d == "float32" and e == "narrow")]


@pytest.mark.parametrize("dtype, has_bias, epilogue", CONFIGS, ids=lambda v: str(v))
def test_w8a8_bits_equal_the_tiled_w8a8_gemm(rng, dtype, has_bias, epilogue):
    from int8nax.backends.cuda import backend as cuda

    out = DTYPES[dtype]
    for n, k in SHAPES:
        sw = mx.array(rng.uniform(1e-4, 1e-2, n).astype(np.float32))
        w, aligned, shifted = weight(rng, n, k)
        for m in range(1, 17):
            q, q_mx = codes(rng, m, k)
            w_mx = shifted if m == 5 else aligned
            sx = rng.uniform(1e-3, 1e-1, m).astype(np.float32)
            if m == 7:
                sx[0] = np.nan  # a row that held NaN or inf: its outputs are NaN
                sx[-1] = np.float32(2.0 ** -130)  # a subnormal row scale (the exact path)
            sx = mx.array(sx)
            bias = None
            if has_bias:
                b = rng.uniform(-2, 2, n).astype(np.float32)
                # a few columns whose bias cancels row 0's product: the rare path
                acc0 = exact_int_product(q[:1], w)[0].astype(np.float64)
                prod = acc0 * float(np.array(sx)[0]) * np.array(sw).astype(np.float64)
                b[: max(1, n // 8)] = -prod[: max(1, n // 8)].astype(np.float32)
                bias = mx.array(b)
            got = cuda.dequant_gemm(q_mx, sx, w_mx, sw, bias, out, GEMV, epilogue=epilogue)
            want = cuda.dequant_gemm(q_mx, sx, w_mx, sw, bias, out, TILED, epilogue=epilogue)
            same_bits(got, want, f"M={m} N={n} K={k}")


def activations(rng, m, k, special):
    """float32 [m, k] values for x; special: rows that are all zero, hold NaN or inf, or are tiny
    (a subnormal scale: the quantization's 2^64 path)."""
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    if special and m >= 4:
        x[0] = 0.0
        x[1, k // 2] = np.nan
        x[2, 0] = -np.inf
        x[3] = x[3] * np.float32(1e-40)  # subnormal values (float32 out; flushed in the 2-byte types)
    return x


@pytest.mark.parametrize("dtype, has_bias, epilogue", CONFIGS, ids=lambda v: str(v))
def test_fused_quantization_bits_equal_the_tiled_pipeline(rng, dtype, has_bias, epilogue):
    """gemv_w8a8_x (x quantized inside, forced at every size by the plan) against quantization
    kernel + tiled W8A8 GEMM."""
    from int8nax.backends.cuda import probe as cuda_probe, backend as cuda

    t = DTYPES[dtype]
    for n, k in SHAPES + [(64, 72)]:  # K % 16 == 8: the x rows' 8-value groups, byte-wise codes
        _, w_mx, _ = weight(rng, n, k)
        sw = mx.array(rng.uniform(1e-4, 1e-2, n).astype(np.float32))
        bias = mx.array(rng.uniform(-2, 2, n).astype(np.float32)) if has_bias else None
        for m in range(1, 17):
            x_np = activations(rng, m, k, special=m in (4, 16))
            if m == 6:  # x's base one element past 16-byte alignment
                x = mx.array(np.concatenate([np.zeros(1, np.float32), x_np.ravel()])).astype(t)[1:].reshape(m, k)
            else:
                x = mx.array(x_np).astype(t)
            plan = dataclasses.replace(cuda_plans.gemv_plan(m, n, k, cuda_probe.sm_count()), fused=True)
            got = cuda.w8a8(x, w_mx, sw, bias, GEMV, plan, epilogue=epilogue)
            want = cuda.w8a8(x, w_mx, sw, bias, TILED, epilogue=epilogue)
            same_bits(got, want, f"M={m} N={n} K={k}")


# Qwen2.5-7B's decode layers (N, K): q|k|v, o, gate|up, down
QWEN = [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)]


@pytest.mark.parametrize("has_bias", [False, True])
def test_w8a8_linear_takes_the_gemv_with_the_tiled_kernels_bits(rng, monkeypatch, has_bias, gemv_default):
    """The public call at M = 1..16 (the GEMV, fused where x is small) against the same call with
    INT8NAX_CUDA_KERNEL=cpasync (the previous kernels), default epilogue, bfloat16; every call
    queued on unevaluated inputs (x and w are lazy) before one mx.eval. Results are keyed by
    layer, not by N: two of the layers share N = 3584."""
    import int8nax
    from int8nax.backends.cuda import settings as cuda_settings, backend as cuda

    layers = []
    for n, k in QWEN:
        _, w, _ = weight(rng, n, k)
        sw = mx.array(rng.uniform(1e-4, 1e-2, n).astype(np.float32))
        bias = mx.array(rng.uniform(-1, 1, n).astype(np.float32)) if has_bias else None
        xs = [mx.array(rng.standard_normal((m, k)).astype(np.float32)).astype(mx.bfloat16) for m in range(1, 17)]
        layers.append((n, k, w, sw, bias, xs))
    monkeypatch.delenv(cuda_settings.KERNEL_ENV, raising=False)
    cuda.clear_caches()
    try:
        got = {}
        for i, (n, k, w, sw, bias, xs) in enumerate(layers):
            for x in xs:
                m = x.shape[0]
                assert cuda.BACKEND.describe("w8a8_linear", m, n, k, bias=has_bias, dtype=mx.bfloat16).startswith(
                    "cuda gemv ")
                got[i, m] = int8nax.w8a8_linear(x, w, sw, bias, backend="cuda")
        assert len(got) == 16 * len(layers)
        mx.eval(list(got.values()))
        monkeypatch.setenv(cuda_settings.KERNEL_ENV, "cpasync")
        cuda.clear_caches()
        for i, (n, k, w, sw, bias, xs) in enumerate(layers):
            for x in xs:
                m = x.shape[0]
                assert not cuda.BACKEND.describe("w8a8_linear", m, n, k, dtype=mx.bfloat16).startswith("cuda gemv ")
                same_bits(got[i, m], int8nax.w8a8_linear(x, w, sw, bias, backend="cuda"), f"M={m} N={n} K={k}")
    finally:
        monkeypatch.delenv(cuda_settings.KERNEL_ENV, raising=False)
        cuda.clear_caches()
