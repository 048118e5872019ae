"""CUDA kernel sources for mx.fast.cuda_kernel: the headers (kernels/*.cuh), the kernel bodies,
and the generated wgmma wrappers.

No MLX or GPU here, so the CPU tests can check what is sent to NVRTC. MLX builds each kernel as
    <MLX's default header> + header + namespace mlx::core::cu { __global__ void name(inputs...,
    outputs...) { constexpr int <template args>; ... body } }
so every helper lives in the headers (namespace int8nax) and the bodies are one call each.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from .. import tiling

FAMILIES = ("sm90", "simt")
"""sm90: wgmma tensor cores (compute capability 9.0, NVRTC's sm_90a); simt: __dp4a anywhere."""

_HEADERS = {
    "sm90": ("cuda_common.cuh", "gemm_sm90.cuh"),
    "simt": ("cuda_common.cuh", "gemm_simt.cuh"),
    "quantize": ("cuda_common.cuh", "quantize.cuh"),
}


@lru_cache(maxsize=None)
def _read(filename: str) -> str:
    return resources.files("int8nax").joinpath("kernels", filename).read_text()


def wgmma_wrappers(widths) -> str:
    """C++ for `wgmma_s8<N>(int (&acc)[N/2], desc_a, desc_b)`: one wgmma m64nNk32 s32.s8.s8
    (accumulate into acc) per N in `widths`. PTX names every accumulator register in the
    instruction, so each width needs its own operand list; they are written out here."""
    parts = ["namespace int8nax {"]
    for n in sorted(set(widths)):
        regs = n // 2
        d_list = ", ".join(f"%{i}" for i in range(regs))
        operands = ", ".join(f'"+r"(d[{i}])' for i in range(regs))
        parts.append(
            f"__device__ __forceinline__ void wgmma_s8_n{n}(int (&d)[{regs}], uint64_t desc_a, uint64_t desc_b) {{\n"
            f'  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"\n'
            f'               "wgmma.mma_async.sync.aligned.m64n{n}k32.s32.s8.s8 {{{d_list}}}, %{regs}, %{regs + 1}, p;\\n}}\\n"\n'
            f"               : {operands}\n"
            f'               : "l"(desc_a), "l"(desc_b), "r"(1));\n'
            "}"
        )
    branches = "\n  else ".join(
        f"if constexpr (N == {n}) {{ wgmma_s8_n{n}(d, desc_a, desc_b); }}" for n in sorted(set(widths))
    )
    parts.append(
        "template <int N>\n"
        "__device__ __forceinline__ void wgmma_s8(int (&d)[N / 2], uint64_t desc_a, uint64_t desc_b) {\n"
        f"  {branches}\n"
        '  else { static_assert(N < 0, "no wgmma wrapper was generated for this N"); }\n'
        "}"
    )
    parts.append("}  // namespace int8nax")
    return "\n".join(parts) + "\n"


@lru_cache(maxsize=None)
def header(part: str) -> str:
    """The `header` string for kernels of one part: "sm90", "simt" or "quantize"."""
    files = [_read(f) for f in _HEADERS[part]]
    if part == "sm90":
        # The generated wrappers go between the common helpers and the GEMM that calls them.
        widths = [cfg.bn for cfg in tiling.CUDA_CONFIGS.values()]
        files.insert(1, wgmma_wrappers(widths))
    return "\n".join(files)


@dataclass(frozen=True)
class KernelSpec:
    """Everything mx.fast.cuda_kernel needs to build one kernel object."""

    name: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    source: str
    header: str
    shared_memory: int


def _gemm_call(family: str, a: str, b: str, epilogue: str) -> str:
    """Body calling the family's GEMM template with the tile constants MLX declares."""
    if family == "sm90":
        fn = "int8nax::gemm_sm90<BM, BN, BK, WM, STAGES, AHEAD>"
    else:
        fn = "int8nax::gemm_simt<BM, BN, BK, WM, WN>"
    return f"{fn}({a}, {b}, {a}_shape[0], {b}_shape[0], {a}_shape[1], {epilogue});"


@lru_cache(maxsize=None)
def gemm_int32(family: str, cfg: tiling.TileConfig) -> KernelSpec:
    """int32 out [M, N] = a [M, K] . b [N, K]^T; with split-K, out is the [splits, M, N] workspace."""
    body = _gemm_call(family, "a", "b", "int8nax::StoreInt32{out, a_shape[0], b_shape[0]}")
    return KernelSpec(
        f"int8nax_{family}_i32_{cfg.name}", ("a", "b"), ("out",), body, header(family), _smem(family, cfg)
    )


@lru_cache(maxsize=None)
def gemm_w8a8(family: str, cfg: tiling.TileConfig) -> KernelSpec:
    """y [M, N] (TOut) = dequant(q [M, K] . w [N, K]^T); template TOut, HAS_BIAS."""
    epilogue = "int8nax::DequantStore<TOut, HAS_BIAS>{y, scale_x, scale_w, bias, q_shape[0], w_shape[0]}"
    body = _gemm_call(family, "q", "w", epilogue)
    return KernelSpec(
        f"int8nax_{family}_w8a8_{cfg.name}",
        ("q", "w", "scale_x", "scale_w", "bias"),
        ("y",),
        body,
        header(family),
        _smem(family, cfg),
    )


@lru_cache(maxsize=None)
def reduce_int32() -> KernelSpec:
    """out int32 [M, N] = the sum over splits of a split-K workspace ws int32 [splits, M, N]."""
    body = "int8nax::reduce_splits(ws, ws_shape[0], ws_shape[1], ws_shape[2], int8nax::StoreInt32{out, ws_shape[1], ws_shape[2]});"
    return KernelSpec("int8nax_reduce_i32", ("ws",), ("out",), body, header("quantize"), 0)


@lru_cache(maxsize=None)
def reduce_w8a8() -> KernelSpec:
    """y [M, N] (TOut) = dequant(sum over splits of ws int32 [splits, M, N]); template TOut, HAS_BIAS."""
    epilogue = "int8nax::DequantStore<TOut, HAS_BIAS>{y, scale_x, scale_w, bias, ws_shape[1], ws_shape[2]}"
    body = f"int8nax::reduce_splits(ws, ws_shape[0], ws_shape[1], ws_shape[2], {epilogue});"
    return KernelSpec("int8nax_reduce_w8a8", ("ws", "scale_x", "scale_w", "bias"), ("y",), body, header("quantize"), 0)


@lru_cache(maxsize=None)
def quantize() -> KernelSpec:
    """(q int8 [M, K], scale float32 [M]) from x [M, K]; template T, THREADS; one block per row."""
    body = "int8nax::quantize_rows<T, THREADS>(x, x_shape[1], q, scale);"
    return KernelSpec("int8nax_quantize", ("x",), ("q", "scale"), body, header("quantize"), 0)


@lru_cache(maxsize=None)
def count_sms() -> KernelSpec:
    """flags [CAPACITY] int32: 1 at the id of every SM that ran a block of the launch."""
    body = "int8nax::mark_sm(flags, CAPACITY);"
    return KernelSpec("int8nax_count_sms", ("dummy",), ("flags",), body, header("quantize"), 0)


def _smem(family: str, cfg: tiling.TileConfig) -> int:
    # The SIMT kernel's tiles are static __shared__ arrays.
    return cfg.shared_bytes if family == "sm90" else 0
