"""The small-M (decode) W8A8 GEMM on CUDA: kernels/cuda/gemv_w8a8.cuh through mx.fast.cuda_kernel.

For M <= 16 (GEMV_MAX_M) a W8A8 GEMM is a stream of the int8 weight, half the bytes of a bfloat16
one; this kernel reads it once with 16-byte loads and multiplies with mma.sync (sm_80 and newer),
exact in int32, then dequantizes each output through the same epilogue as the tiled W8A8 GEMMs
(DequantStore in kernels/cuda_common.cuh, eft or narrow), so its outputs have the same bits.

Entry points (not yet in backends/cuda.py's dispatch):
    gemv_w8a8(q, scale_x, w, scale_w, bias, out_dtype, epilogue=None) -> y [M, N]   (given codes)
    gemv_w8a8_x(x, w, scale_w, bias, epilogue=None) -> y [M, N]   (x quantized inside: one kernel)
    gemv_int32(q, w) -> int32 [M, N] (the same product, no epilogue; tests)
    w8a8_decode(x, w, scale_w, bias, epilogue=None) -> y [M, N]   (gemv_w8a8_x, or quantize + gemv_w8a8)
    gemv_ok(m, k), gemv_x_ok(m, k, itemsize), decode_path(m, k, itemsize) -> which takes the problem
Not yet run on a GPU.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path

import mlx.core as mx

from .. import tiling
from .kernel_spec import KernelSpec

GEMV_MAX_M = 16
"""Activation rows the kernel takes (one mma.m16n8k32's M)."""

GEMV_WARPS = 8
"""Warps of a block; they split K between them."""

GEMV_UNROLL = 2
"""64-byte steps whose loads a warp issues before multiplying."""

GEMV_X_MAX_BYTES = 64 << 10
"""gemv_w8a8_x (the quantization fused) takes x up to this size: every block reads x twice from the
caches, which costs less than the quantization kernel only while x is small against the weight
(M = 1 at any K of Qwen2.5-7B; M = 16 up to K = 2048 in bfloat16). A guess until the H200 bench."""

_HEADERS = (("cuda_common.cuh",), ("quantize.cuh",), ("cuda", "gemv_w8a8.cuh"))


@lru_cache(maxsize=None)
def _texts() -> tuple[str, ...]:
    root = resources.files("int8nax").joinpath("kernels")
    return tuple(root.joinpath(*parts).read_text() for parts in _HEADERS)


@lru_cache(maxsize=None)
def header() -> str:
    """#include lines of the two headers (their text where the package is not plain files)."""
    try:
        root = Path(str(resources.files("int8nax").joinpath("kernels")))
    except TypeError:
        root = None
    if root is None or not root.is_dir() or any(c in str(root) for c in '"\n\\'):
        return "\n".join(_texts())
    return "".join(f'#include "{root.joinpath(*parts).as_posix()}"\n' for parts in _HEADERS)


@lru_cache(maxsize=None)
def digest() -> str:
    return hashlib.sha1("\n".join(_texts()).encode()).hexdigest()[:8]


def tiles_per_block(n: int, sms: int) -> int:
    """NT, the 8-row tiles of w a block owns: 2 (16 rows) where that still gives every SM a
    block and a half, else 1 (N = 3584: 224 blocks of 16 rows)."""
    return 2 if tiling.ceil_div(n, 16) >= 3 * sms // 2 else 1


@lru_cache(maxsize=None)
def spec(epilogue: str) -> KernelSpec:
    """epilogue "w8a8_x": y [M, N] (template T, the type of x and y, HAS_BIAS, NARROW; inputs x,
    w, scale_w, bias); "w8a8": y [M, N] (template TOut, HAS_BIAS, NARROW; inputs q, w, scale_x, scale_w,
    bias); "int32": out [M, N] int32 (inputs q, w). Template NT (tiles_per_block), WARPS, UNROLL."""
    if epilogue == "w8a8_x":
        body = ("int8nax::gemv_w8a8_x<T, NT, WARPS, UNROLL, HAS_BIAS, NARROW>(x, w, x_shape[0], w_shape[0], "
                "x_shape[1], scale_w, bias, y);")
        return KernelSpec(f"int8nax_gemv_{epilogue}_{digest()}", ("x", "w", "scale_w", "bias"), ("y",), body,
                          header(), 0)
    if epilogue == "w8a8":
        epi = "int8nax::DequantStore<TOut, HAS_BIAS, NARROW>{y, scale_x, scale_w, bias, q_shape[0], w_shape[0]}"
        inputs, outputs = ("q", "w", "scale_x", "scale_w", "bias"), ("y",)
    else:
        epi = "int8nax::StoreInt32{y, q_shape[0], w_shape[0]}"
        inputs, outputs = ("q", "w"), ("y",)
    body = f"int8nax::gemv_w8a8<NT, WARPS, UNROLL>(q, w, q_shape[0], w_shape[0], q_shape[1], {epi});"
    return KernelSpec(f"int8nax_gemv_{epilogue}_{digest()}", inputs, outputs, body, header(), 0)


@lru_cache(maxsize=None)
def _kernel(s: KernelSpec):
    return mx.fast.cuda_kernel(name=s.name, input_names=list(s.input_names), output_names=list(s.output_names),
                               source=s.source, header=s.header, ensure_row_contiguous=True)


def gemv_ok(m: int, k: int) -> bool:
    """Whether gemv_w8a8 takes an [m, k] activation: 1 <= m <= GEMV_MAX_M and 1 <= k <= MAX_K
    (any K; 16-byte loads where K % 16 == 0 and the bases are 16-byte aligned)."""
    from .._checks import MAX_K

    return 1 <= m <= GEMV_MAX_M and 1 <= k <= MAX_K


def gemv_x_ok(m: int, k: int, itemsize: int = 2) -> bool:
    """Whether gemv_w8a8_x (the quantization fused) takes an [m, k] activation of `itemsize`-byte
    values: gemv_ok and at most GEMV_X_MAX_BYTES of x."""
    return gemv_ok(m, k) and m * k * itemsize <= GEMV_X_MAX_BYTES


def _launch(s, inputs, m, n, out_dtype, template, sms):
    if sms is None:
        from . import cuda

        sms = cuda.sm_count()
    nt = tiles_per_block(n, sms)
    blocks = tiling.ceil_div(n, 8 * nt)
    threads = 32 * GEMV_WARPS
    return _kernel(s)(
        inputs=inputs,
        output_shapes=[(m, n)],
        output_dtypes=[out_dtype],
        grid=(blocks * threads, 1, 1),
        threadgroup=(threads, 1, 1),
        template=[("NT", nt), ("WARPS", GEMV_WARPS), ("UNROLL", GEMV_UNROLL)] + list(template),
    )[0]


def _check(a, w, func: str, a_name: str = "q", a_dtypes=(mx.int8,)):
    """ValueError naming the argument unless a [M, K] (a_dtypes) and w int8 [N, K] form a problem
    this kernel takes (gemv_ok, N >= 1)."""
    if (a.ndim != 2 or w.ndim != 2 or a.dtype not in a_dtypes or w.dtype != mx.int8
            or a.shape[1] != w.shape[1]):
        kinds = " or ".join(str(d).replace("mlx.core.", "") for d in a_dtypes)
        raise ValueError(f"{func}: '{a_name}' must be {kinds} [M, K] and 'w' int8 [N, K], got {a.dtype} "
                         f"{tuple(a.shape)} and {w.dtype} {tuple(w.shape)}")
    m, k = a.shape
    if not gemv_ok(m, k) or w.shape[0] == 0:
        raise ValueError(f"{func}: takes 1 <= M <= {GEMV_MAX_M} rows and N, K >= 1 (K within int8nax's limit), got "
                         f"M={m}, N={w.shape[0]}, K={k}")


@lru_cache(maxsize=None)
def _placeholder() -> mx.array:
    """Bound to the bias argument when HAS_BIAS is false (never read)."""
    arr = mx.zeros((1,), dtype=mx.float32)
    mx.eval(arr)
    return arr


def gemv_w8a8(q: mx.array, scale_x: mx.array, w: mx.array, scale_w: mx.array, bias, out_dtype,
              epilogue: str | None = None, sms: int | None = None) -> mx.array:
    """y [M, N] (out_dtype: float16, bfloat16 or float32) = q [M, K] . w [N, K]^T * scale_x[m] *
    scale_w[n] (+ bias[n]), M <= 16, on given codes: q int8 [M, K], scale_x float32 [M] (from the
    quantization kernel), w int8 [N, K], scale_w float32 [N], bias None or float [N] (taken as
    float32, exactly). epilogue: "eft" or "narrow" (default: backends/cuda.py's
    epilogue_choice()); the same bits as cuda.dequant_gemm with that epilogue. sms: the GPU's SM
    count (cuda.sm_count() by default; it only sets the tiles per block)."""
    from . import cuda

    _check(q, w, "gemv_w8a8")
    m, n = q.shape[0], w.shape[0]
    narrow = (cuda.epilogue_choice() if epilogue is None else epilogue) == "narrow"
    has_bias = bias is not None
    bias32 = (bias if bias.dtype == mx.float32 else bias.astype(mx.float32)) if has_bias else _placeholder()
    template = cuda.epilogue_template(out_dtype, has_bias, narrow)
    return _launch(spec("w8a8"), [q, w, scale_x, scale_w, bias32], m, n, out_dtype, template, sms)


def gemv_w8a8_x(x: mx.array, w: mx.array, scale_w: mx.array, bias, epilogue: str | None = None,
                sms: int | None = None) -> mx.array:
    """y [M, N] in x's dtype = w8a8_linear(x, w, scale_w, bias) for x float16/bfloat16/float32
    [M, K], M <= 16, in one kernel: the quantization of x (the quantization kernel's codes and
    scales, bit for bit) fused into gemv_w8a8's product and epilogue, so y has the bits of
    cuda.w8a8 with that epilogue. w int8 [N, K], scale_w float32 [N], bias None or float [N];
    epilogue and sms as in gemv_w8a8. For small x (gemv_x_ok); any size is computed right."""
    from . import cuda

    _check(x, w, "gemv_w8a8_x", "x", (mx.float16, mx.bfloat16, mx.float32))
    m, n = x.shape[0], w.shape[0]
    narrow = (cuda.epilogue_choice() if epilogue is None else epilogue) == "narrow"
    has_bias = bias is not None
    bias32 = (bias if bias.dtype == mx.float32 else bias.astype(mx.float32)) if has_bias else _placeholder()
    template = [("T", x.dtype), ("HAS_BIAS", has_bias), ("NARROW", narrow and x.dtype != mx.float32)]
    return _launch(spec("w8a8_x"), [x, w, scale_w, bias32], m, n, x.dtype, template, sms)


def decode_path(m: int, k: int, itemsize: int) -> str | None:
    """What w8a8_decode runs for an [m, k] activation of `itemsize`-byte values: "gemv_x" (one
    kernel), "gemv" (the quantization kernel, then gemv_w8a8), or None (M > 16: not this kernel)."""
    if gemv_x_ok(m, k, itemsize):
        return "gemv_x"
    return "gemv" if gemv_ok(m, k) else None


def w8a8_decode(x: mx.array, w: mx.array, scale_w: mx.array, bias, epilogue: str | None = None,
                sms: int | None = None) -> mx.array:
    """w8a8_linear's y for x [M, K], M <= 16, by decode_path's kernels: the bits of cuda.w8a8 with
    the same epilogue. The dispatch's entry point for small M (backends/cuda.py may call it inside
    its mx.compile'd graphs: pass sms=cuda.sm_count() from outside them, as quant_launch is)."""
    from . import cuda

    path = decode_path(x.shape[0], x.shape[1], x.dtype.size) if x.ndim == 2 else None
    if path == "gemv_x":
        return gemv_w8a8_x(x, w, scale_w, bias, epilogue, sms)
    if path is None:
        raise ValueError(f"w8a8_decode: takes x [M, K] with 1 <= M <= {GEMV_MAX_M}, got shape {tuple(x.shape)}")
    q, scale_x = cuda.quantize(x)
    return gemv_w8a8(q, scale_x, w, scale_w, bias, x.dtype, epilogue, sms)


def gemv_int32(q: mx.array, w: mx.array, sms: int | None = None) -> mx.array:
    """int32 [M, N] = q [M, K] . w [N, K]^T, exact, M <= 16 (the kernel's product alone)."""
    _check(q, w, "gemv_int32")
    return _launch(spec("int32"), [q, w], q.shape[0], w.shape[0], mx.int32, [], sms)
