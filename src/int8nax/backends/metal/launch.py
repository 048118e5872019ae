"""The launches (pure Python around the kernel objects): the int8 GEMM, the row quantization, W8A8
with fused dequantization, the layout and subnormal probes, and VariantOps (one variant's ops)."""

from __future__ import annotations

import functools
from dataclasses import replace

import mlx.core as mx
import numpy as np

from ... import exactness, quant, tiling
from ..entries import rows_of
from . import source as metal_source
from .source import KernelVariant
from . import kernel_set


# ---------------------------------------------------------------------------------------------
# Launches (pure Python around the kernel objects)
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _params_array(params: tuple) -> mx.array:
    return mx.array(params, dtype=mx.int32)


def _params(dispatch) -> mx.array:
    """The `params` input, made once per shape (an inference loop repeats its shapes)."""
    return _params_array(dispatch.params)


@functools.lru_cache(maxsize=1)
def _no_bias() -> mx.array:
    """The [1] placeholder passed for `bias` when there is none (never read), made once."""
    return mx.zeros((1,), dtype=mx.float32)


def gemm_dispatch(m: int, n: int, k: int, variant: KernelVariant, gpu: str | None = None,
                  large: tiling.NaxTileConfig | None = None):
    """(kernel suffix, dispatch, template arguments) of one GEMM launch of `variant` on GPU class
    `gpu`: "gemv" (the small-M kernel, the same for every variant) for M <= METAL_MV_MAX_M, else
    "gemm" (the NAX tile walk of tiling.metal_gemm_dispatch; `large`, the tile chosen on the
    device, replaces METAL_LARGE for M > METAL_SMALL_MAX_M)."""
    if tiling.metal_uses_gemv(m):
        d = tiling.metal_gemv_dispatch(m, n, k)
        return "gemv", d, list(d.template)
    config = large if large is not None and m > tiling.METAL_SMALL_MAX_M else None
    if config is not None and config.relaxed_precision != variant.relaxed_precision:
        config = replace(config, relaxed_precision=variant.relaxed_precision)
    d = tiling.metal_gemm_dispatch(m, n, k, gpu, variant.relaxed_precision, config)
    return "gemm", d, d.template + variant.template()


def _gemm_launch(kernels: kernel_set.KernelSet, kernel: str, m: int, n: int, k: int, variant: KernelVariant, gpu,
                 large, inputs, out_dtype, extra_template=(), lead: tuple[int, ...] | None = None) -> mx.array:
    """One GEMM launch (int8 or W8A8) whose tile falls back to a smaller one of the same sub-tile
    (tiling.metal_fallback_config) when MLX refuses the threadgroup for the pipeline's limit; out
    [M, N], or lead + (N,) (lead: leading dims whose product is M; the kernels read M, N, K from
    `params` and write y row-major, so only the output's declared shape changes)."""
    schedule, d, template = gemm_dispatch(m, n, k, variant, gpu, large)
    out_shape = (m, n) if lead is None else tuple(lead) + (n,)

    def call_for(dispatch, tmpl) -> dict:
        return dict(inputs=inputs[:-1] + [_params(dispatch)], output_shapes=[out_shape], output_dtypes=[out_dtype],
                    grid=dispatch.grid, threadgroup=dispatch.threadgroup, template=tmpl + list(extra_template),
                    stream=mx.gpu)

    def refit(max_threads: int):
        if schedule != "gemm":
            return None
        smaller = tiling.metal_fallback_config(d.config, max_threads)
        if smaller is None:
            return None
        fit = tiling.metal_gemm_dispatch(m, n, k, gpu, variant.relaxed_precision, smaller)
        return call_for(fit, fit.template + variant.template())

    (out,) = kernels.launch(f"{kernel}_{schedule}", refit, **call_for(d, template))
    return out


def run_int8_gemm(kernels: kernel_set.KernelSet, a: mx.array, b: mx.array, variant: KernelVariant = KernelVariant(),
                  gpu: str | None = None, large: tiling.NaxTileConfig | None = None) -> mx.array:
    """int32 [M, N] = a [M, K] @ b [N, K]^T on NAX (or the small-M kernel)."""
    m, k = a.shape
    return _gemm_launch(kernels, "int8nax_int8", m, b.shape[0], k, variant, gpu, large, [a, b, None], mx.int32)


def run_quantize_rows(kernels: kernel_set.KernelSet, x: mx.array) -> tuple[mx.array, mx.array]:
    """(int8 of x's shape, float32 [max(M, 8)]) per-token quantization of float x [..., K] of any
    rank >= 1 (M rows: the product of the leading dims; the kernel reads K from x's last dim):
    scales past row M are not written. Padded so that the W8A8 GEMM always receives s_x in the
    device address space: an M < 8 would otherwise make MLX build another GEMM library."""
    rows, _ = rows_of(x.shape)

    def call_for(threads: int) -> dict:
        d = tiling.metal_quant_dispatch(rows, threads)
        return dict(inputs=[x], output_shapes=[x.shape, (max(rows, metal_source.MLX_CONSTANT_MAX_ELEMENTS),)],
                    output_dtypes=[mx.int8, mx.float32], grid=d.grid, threadgroup=d.threadgroup,
                    template=d.template, stream=mx.gpu)

    def refit(max_threads: int):
        fallback = tiling.METAL_QUANT_FALLBACK_THREADS
        return call_for(fallback) if fallback <= max_threads else None

    q, s = kernels.launch("int8nax_quantize_rows", refit, **call_for(tiling.METAL_QUANT_THREADS))
    return q, s


def run_w8a8(kernels: kernel_set.KernelSet, x: mx.array, w: mx.array, scale_w: mx.array, bias,
             variant: KernelVariant = KernelVariant(), gpu: str | None = None,
             large: tiling.NaxTileConfig | None = None) -> mx.array:
    """y [..., N] in x's dtype for x [..., K] of any rank >= 1 (M rows: the product of the leading
    dims): quantize x per token, then the GEMM with the dequantizing epilogue; for M <=
    METAL_MV_MAX_M one launch (w8a8_decode.metal) that quantizes x in registers, with the same
    numbers bit for bit. The kernels take x as it comes and write y in its leading dims (they read
    M, N, K from `params`, the quantizer K from x's last dim), so a layer's x [B, L, K] needs no
    reshape before or after them."""
    m, k = rows_of(x.shape)
    lead = x.shape[:-1]
    has_bias = bias is not None
    if tiling.metal_uses_gemv(m):
        d = tiling.metal_decode_dispatch(m, w.shape[0], k)
        (y,) = kernels.launch(
            "int8nax_w8a8_decode",
            inputs=[x, w, scale_w, bias if has_bias else _no_bias(), _params(d)],
            output_shapes=[lead + (w.shape[0],)],
            output_dtypes=[x.dtype],
            grid=d.grid,
            threadgroup=d.threadgroup,
            template=[("OutT", x.dtype), ("HAS_BIAS", has_bias)] + d.template,
            stream=mx.gpu,
        )
        return y
    q, s_x = run_quantize_rows(kernels, x)
    # The bias in its own dtype (the kernel widens it to float32, exactly): no extra cast kernel.
    return _gemm_launch(kernels, "int8nax_w8a8", m, w.shape[0], k, variant, gpu, large,
                        [q, w, s_x, scale_w, bias if has_bias else _no_bias(), None], x.dtype,
                        [("OutT", x.dtype), ("HAS_BIAS", has_bias)], lead)


LAYOUT_CAPACITY = metal_source.LAYOUT_CAPACITY


def run_layout_probe(kernels: kernel_set.KernelSet, relaxed_precision: bool = True) -> mx.array:
    """int32 [3, SIMD, 1 + 3 * CAP]: the cooperative tensors' layout (see nax_layout.metal)."""
    simd = tiling.SIMD_WIDTH
    (out,) = kernels.launch(
        "int8nax_nax_layout",
        inputs=[mx.zeros((1,), dtype=mx.int32)],
        output_shapes=[(3, simd, 1 + 3 * LAYOUT_CAPACITY)],
        output_dtypes=[mx.int32],
        grid=(simd, 1, 1),
        threadgroup=(simd, 1, 1),
        template=list(metal_source.layout_template(relaxed_precision)),
        stream=mx.gpu,
    )
    return out


SUBNORMAL_PROBE_OPS = ("s * 1", "s + 0", "fma(s, 1, 0)", "FLT_MIN * 0.5", "max(s, 0)", "precise::divide(s, 1)")
"""What subnormal_probe.metal computes, in its output order (s a float32 subnormal)."""
SUBNORMAL = np.float32(1e-39)


def run_subnormal_probe(kernels: kernel_set.KernelSet) -> mx.array:
    """float32 [6]: the subnormal probe's results (see subnormal_probe.metal)."""
    tiny = np.finfo(np.float32).tiny
    x = mx.array(np.array([SUBNORMAL, tiny, 0.5, 1, 0, 0, 0, 0], np.float32))
    (out,) = kernels.launch("int8nax_subnormal_probe", inputs=[x], output_shapes=[(len(SUBNORMAL_PROBE_OPS),)],
                            output_dtypes=[mx.float32], grid=(tiling.SIMD_WIDTH, 1, 1),
                            threadgroup=(tiling.SIMD_WIDTH, 1, 1), stream=mx.gpu)
    return out


def subnormal_verdict(out) -> dict:
    """{op: "kept" | "flushed" | "other: <value>"} from the probe's output, and a "summary"."""
    want = np.array([SUBNORMAL] * 3 + [np.finfo(np.float32).tiny / 2] + [SUBNORMAL] * 2, np.float32)
    got = np.asarray(out, np.float32)
    verdict = {}
    for op, g, w in zip(SUBNORMAL_PROBE_OPS, got, want):
        verdict[op] = "kept" if g.view(np.int32) == w.view(np.int32) else "flushed" if g == 0 else f"other: {g!r}"
    kinds = set(verdict.values())
    verdict["summary"] = ("keeps float32 subnormals" if kinds == {"kept"} else
                          "flushes float32 subnormals" if kinds == {"flushed"} else
                          "mixed: " + ", ".join(f"{op} {v}" for op, v in verdict.items()))
    return verdict


def probe_subnormals(kernels: kernel_set.KernelSet) -> dict:
    """Run the subnormal probe on the GPU: subnormal_verdict, or {"summary": why it failed}."""
    try:
        return subnormal_verdict(np.array(run_subnormal_probe(kernels)))
    except Exception as exc:
        return {"summary": f"the subnormal probe failed ({type(exc).__name__}: {exc})"}


SMALL_M_W8A8 = [(1, 300, 37, "float16"), (tiling.METAL_MV_MAX_M, 129, 9, "bfloat16")]
"""(M, K, N, dtype) of the first-use check's extra W8A8 cases, on the small-M kernel."""


class VariantOps:
    """The three raw operations of one kernel variant (no self-test, no readiness check):
    what the first-use check runs, and what `int8nax selftest` can run for every variant."""

    def __init__(self, kernels: kernel_set.KernelSet, variant: KernelVariant, gpu: str | None = None,
                 large: tiling.NaxTileConfig | None = None):
        self.kernels, self.variant, self.gpu = kernels, variant, gpu
        self.large = large
        """The tile for M > METAL_SMALL_MAX_M (the one chosen on the device); None: METAL_LARGE."""

    def int8_matmul(self, a, b):
        return run_int8_gemm(self.kernels, a, b, self.variant, self.gpu, self.large)

    def quantize_activations(self, x):
        q, s = run_quantize_rows(self.kernels, x)
        return q, s[: x.shape[0]]

    def w8a8_linear(self, x, w, scale_w, bias):
        return run_w8a8(self.kernels, x, w, scale_w, bias, self.variant, self.gpu, self.large)

    COMPILE_SHAPES = {"small M": (2, 64, 40), "small tile": (33, 64, 40), "large tile": (65, 64, 40)}
    """(M, K, N) that build each GEMM kernel in each default tile configuration."""

    def compile_report(self) -> dict[str, str | None]:
        """Build and run every kernel of this variant once, in both default tile
        configurations: {"<kernel> (<tile>)": None if it built and ran, else the error text
        (MLX raises "Unable to build metal library from source" with the compiler's log)}."""
        report = {}

        def attempt(label, fn):
            try:
                mx.eval(fn())
                report[label] = None
            except Exception as exc:
                report[label] = f"{type(exc).__name__}: {exc}"

        for tile, (m, k, n) in self.COMPILE_SHAPES.items():
            schedule = gemm_dispatch(m, n, k, self.variant, self.gpu)[0]
            a = mx.zeros((m, k), dtype=mx.int8)
            b = mx.zeros((n, k), dtype=mx.int8)
            attempt(f"int8nax_int8_{schedule} ({tile})", lambda: self.int8_matmul(a, b))
            x = mx.ones((m, k), dtype=mx.float16)
            attempt(f"int8nax_w8a8_{'decode' if schedule == 'gemv' else schedule} ({tile})",
                    lambda: self.w8a8_linear(x, b, mx.ones((n,), dtype=mx.float32), mx.zeros((n,), dtype=mx.float16)))
        attempt("int8nax_quantize_rows", lambda: self.quantize_activations(mx.ones((3, 64), dtype=mx.float16)))
        return report

    def self_test(self) -> list[str]:
        """exactness.first_use_check on this variant: [] when exact, else the failures (a
        kernel that fails to build or run is one failure carrying the compiler's message)."""
        try:
            failures = exactness.first_use_check(self.int8_matmul, self.quantize_activations, self.w8a8_linear)
            # The small-M W8A8 kernel, which first_use_check's W8A8 shapes (M >= 5) do not reach.
            rng = np.random.default_rng(17)
            for m, k, n, dtype in SMALL_M_W8A8:
                x = mx.array(exactness.special_rows(rng, m, k)).astype(exactness.DTYPES[dtype])
                w, s_w = quant.quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
                bias = rng.standard_normal(n).astype(np.float32)
                problem = exactness.check_w8a8(self.w8a8_linear, x, w, s_w, bias)
                if problem:
                    failures.append(f"w8a8_linear {dtype} (M, K, N) = {(m, k, n)}: {problem}")
            return failures
        except Exception as exc:  # e.g. "Unable to build metal library from source"
            return [f"the kernels failed to build or run: {type(exc).__name__}: {exc}"]
