"""CUDA kernel sources for mx.fast.cuda_kernel: which header (kernels/cuda/<role>/*.cuh) each kernel
includes, the kernel bodies, and the generated wgmma wrappers (kernels/cuda/ptx/wgmma_s8.cuh, written
by write_wgmma_header()).

No MLX or GPU here, so the CPU tests can check what is sent to NVRTC. MLX builds each kernel as
    <MLX's default header> + header + namespace mlx::core::cu { __global__ void name(inputs...,
    outputs...) { constexpr int <template args>; ... body } }
so every helper lives in the headers (namespace int8nax) and the bodies are one call each.

The headers are in folders by role (ptx/, tile/, epilogue/, gemm/, quant/; common.cuh and
sm_count.cuh at the top); each has `#pragma once` and includes what it needs by relative path, so
a kernel names only its own header (_HEADERS) and the order of the rest follows from the includes.
The `header` is one `#include "<absolute path>/x.cuh"` line a header, not the files' text: MLX
hashes the whole source of a custom kernel on every evaluation and copies it on every call (~22
KB cost ~5 µs a call on the H200's host), and NVRTC resolves the includes itself. MLX caches
compiled modules by kernel name + hash(source) within a process, and the source no longer
changes when a header does, so every kernel name carries a digest of the text of every file its
header reaches, found by walking the includes (walk()). Where the package's kernels are not plain
files (a zip import), the walked text is inlined instead. An include under mlx/ (MLX_BINARY_OPS)
names one of MLX's own device headers, which MLX registers with NVRTC under that name for every
program, its custom kernels' included: it stays a verbatim `#include "mlx/..."` line in both forms,
and the digest covers that line (the MLX version is part of the module cache already).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ...tiling import TileConfig
from . import plans as cuda_plans
from ..kernel_spec import KernelSpec

FAMILIES = ("sm90", "simt")
"""The tiled GEMMs' families: sm90, wgmma tensor cores (compute capability 9.0, NVRTC's sm_90a);
simt: __dp4a anywhere. (The GEMV's mma.sync needs 8.0: cuda_choice.RUNS.)"""

WGMMA_HEADER = "ptx/wgmma_s8.cuh"
"""The generated wgmma wrappers (one per tile width in cuda_plans.CUDA_CONFIGS), kept as a file."""

MLX_BINARY_OPS = "mlx/backend/cuda/device/binary_ops.cuh"
"""MLX's device functors (Multiply; Sigmoid from the unary_ops.cuh it includes) by their JIT name:
the code MLX's compiled kernels run for elementwise graphs, so a kernel calling them computes
those graphs' values bit for bit (kernels/cuda/quant/swiglu_quantize.cuh)."""

_HEADERS = {
    "simt": ("gemm/simt.cuh",),
    "cpasync": ("gemm/cpasync.cuh",),
    "tma": ("gemm/tma_unspecialized.cuh",),
    "cooperative": ("gemm/tma_ws_cooperative.cuh",),
    "pingpong": ("gemm/tma_ws_pingpong.cuh",),
    "quantize": ("quant/quantize.cuh",),
    "swiglu_quantize": ("quant/swiglu_quantize.cuh",),
    "swiglu_quantize_staged": ("quant/swiglu_quantize_staged.cuh",),
    "reduce": ("epilogue/reduce_splits.cuh",),
    "count_sms": ("sm_count.cuh",),
    "gemv": ("gemm/gemv_w8a8.cuh",),
}
"""The header of each kind of kernel (a path under kernels/cuda); it includes the rest."""

ATOMIC_ADD = "epilogue/atomic_add.cuh"
"""The atomic split-K epilogue (AddInt32: int8_matmul's plans with reduce="atomic",
cuda_plans.REDUCTIONS), which only the atomic kernels reach."""

ATOMIC_PARTS = ("cpasync", "tma", "cooperative", "pingpong")
"""The GEMM kinds whose raw int32 kernel has an atomic form: every wgmma GEMM whose raw plans can
split K. Its part, atomic_part(kind), includes the kind's header and ATOMIC_ADD: the kinds' own
headers do not include it, so the workspace kernels' text, digest and compiled modules stay what
they are beside the trial."""


def atomic_part(kind: str) -> str:
    """The header part of a kind's atomic raw GEMM (ATOMIC_PARTS)."""
    return f"{kind}_atomic"


_HEADERS.update({atomic_part(kind): _HEADERS[kind] + (ATOMIC_ADD,) for kind in ATOMIC_PARTS})

LAUNCH_BOUNDS = {"cooperative": (384, 1), "pingpong": (384, 1), "swiglu_quantize_staged": (512, 1)}
"""(threads, blocks an SM) of the kinds whose kernels need a launch bound. MLX writes the kernel as
`__global__ void custom_kernel_<name>(...)` right after the user header, with no
__launch_bounds__, so the header ends (launch_bound_lines, after every include) by redefining
__global__ (crt/host_defines.h: __location__(global)) to carry the bound; nothing in the
translation unit is declared __global__ after it but the kernel. The warp-specialised TMA GEMMs
(384 threads, 1 block): setmaxnreg needs ptxas to know the register count at entry (otherwise it
is ignored, warning C7508), and 384 threads x 255 registers would not launch at all. The staged
SwiGLU quantization (512 threads, 1 block an SM): without a bound ptxas gives it up to 136
registers a thread (CUDA 13.0, sm_90a), and 512 x 136 exceed an SM's 65536; with it, 128. An
atomic part (atomic_part) takes its kind's bound."""

LAUNCH_BOUNDS.update({atomic_part(kind): LAUNCH_BOUNDS[kind] for kind in ATOMIC_PARTS if kind in LAUNCH_BOUNDS})

_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*(?://.*|/\*.*)?$', re.M)
"""A quoted #include line as the preprocessor reads it (a comment may follow): the include walk
and the kernels' digests must see every one the compiler does."""


@lru_cache(maxsize=None)
def _read(filename: str) -> str:
    return resources.files("int8nax").joinpath("kernels", "cuda", filename).read_text()


def kernels_dir() -> Path | None:
    """The package's CUDA kernels folder as a real directory, or None (e.g. imported from a zip)."""
    where = resources.files("int8nax").joinpath("kernels", "cuda")
    try:
        path = Path(str(where))
    except TypeError:
        return None
    return path if path.is_dir() and (path / "common.cuh").is_file() else None


def includes(filename: str) -> list[str]:
    """The quoted #include entries of one of our headers, as paths under kernels/cuda (relative
    ones resolved from the header's folder); MLX's headers by their JIT names."""
    here = posixpath.dirname(filename)
    return [inc if is_mlx_header(inc) else posixpath.normpath(posixpath.join(here, inc))
            for inc in _INCLUDE.findall(_read(filename))]


def walk(part: str) -> tuple[str, ...]:
    """Every file the part's header reaches (walk_files)."""
    return walk_files(_HEADERS[part])


@lru_cache(maxsize=None)
def walk_files(tops: tuple[str, ...]) -> tuple[str, ...]:
    """Every file the headers `tops` reach, each once, in the order the compiler meets it (a file
    after what it includes): paths under kernels/cuda, MLX's headers by their JIT names."""
    order: list[str] = []
    open_: list[str] = []  # the files being visited: one met again includes itself

    def visit(filename: str) -> None:
        if filename in order:
            return
        if filename in open_:
            raise ValueError(f"kernels/cuda: {' -> '.join(open_ + [filename])} is an include cycle")
        open_.append(filename)
        if not is_mlx_header(filename):
            for inc in includes(filename):
                visit(inc)
        open_.pop()
        order.append(filename)

    for top in tops:
        visit(top)
    return tuple(order)


def launch_bound_lines(part: str) -> str:
    """The lines ending a part's header that give its kernel its launch bound (LAUNCH_BOUNDS), or ""."""
    if part not in LAUNCH_BOUNDS:
        return ""
    threads, blocks = LAUNCH_BOUNDS[part]
    return f"#undef __global__\n#define __global__ __location__(global) __launch_bounds__({threads}, {blocks})\n"


def wgmma_widths() -> list[int]:
    return sorted({cfg.bn for cfg in cuda_plans.CUDA_CONFIGS.values()})


def write_wgmma_header(path: Path | None = None) -> Path:
    """(Re)write kernels/cuda/ptx/wgmma_s8.cuh from wgmma_wrappers(); run after changing a tile width:
    python -c "from int8nax.backends import cuda_source as c; c.write_wgmma_header()" """
    path = path or Path(__file__).resolve().parents[2] / "kernels" / "cuda" / WGMMA_HEADER
    path.write_text(wgmma_header_text())
    return path


def wgmma_header_text() -> str:
    return ("// Generated by int8nax.backends.cuda.source.write_wgmma_header(): do not edit.\n"
            '#pragma once\n\n#include "../common.cuh"\n\n' + wgmma_wrappers(wgmma_widths()))


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


def is_mlx_header(entry: str) -> bool:
    """Whether a _HEADERS entry is one of MLX's JIT headers (included by name), not our file."""
    return entry.startswith("mlx/")


def _include(path: str) -> str:
    return f'#include "{path}"\n'


def _without_includes(text: str) -> str:
    """A header's text with its quoted #include lines taken out (walk() places what they name)."""
    return _INCLUDE.sub("", text)


@lru_cache(maxsize=None)
def header_text(part: str) -> str:
    """The text of every file the part's header reaches (walk() order, each file without its quoted
    includes; MLX's headers as their #include lines), then its launch bound lines."""
    text = "\n".join(_include(f) if is_mlx_header(f) else _without_includes(_read(f)) for f in walk(part))
    return text + launch_bound_lines(part)


@lru_cache(maxsize=None)
def digest(part: str) -> str:
    """8 hex digits of header_text (so of every file the part's header includes, directly or not),
    for kernel names (module cache keys)."""
    return hashlib.sha1(header_text(part).encode()).hexdigest()[:8]


@lru_cache(maxsize=None)
def header(part: str) -> str:
    """The `header` string for kernels of one part: an absolute #include line for its header and
    its launch bound lines, else header_text (MLX's headers by their JIT names in both)."""
    where = kernels_dir()
    if where is None or any(c in str(where) for c in '"\n\\'):
        return header_text(part)
    return "".join(_include((where / f).as_posix()) for f in _HEADERS[part]) + launch_bound_lines(part)


def mlx_headers(header_string: str) -> list[str]:
    """MLX's headers (JIT names) that a kernel's `header` reaches, through the files it includes."""
    found: list[str] = []
    for inc in _INCLUDE.findall(header_string):
        if is_mlx_header(inc):
            found.append(inc)
            continue
        where = kernels_dir()
        if where is not None and inc.startswith(where.as_posix() + "/"):
            rel = inc[len(where.as_posix()) + 1:]
            found += [f for f in walk_files((rel,)) if is_mlx_header(f)]
    return list(dict.fromkeys(found))


def _part(family: str) -> str:
    """The header part of a family's one-block-per-tile kernel: the cp.async GEMM on sm90."""
    return "cpasync" if family == "sm90" else "simt"


def _name(base: str, part: str) -> str:
    return f"{base}_{digest(part)}"


def _dequant_store(m: str, n: str) -> str:
    """The W8A8 epilogue of a [m, n] output y (kernels/cuda/epilogue/epilogue.cuh, DequantStore); template TOut
    (the output type), HAS_BIAS and NARROW (dequantize_narrow for float16/bfloat16 outputs;
    backends/cuda/graphs.py, epilogue_template); the bias read in its array's type."""
    return (f"int8nax::DequantStore<TOut, HAS_BIAS, NARROW, int8nax::pointee<decltype(bias)>>"
            f"{{y, scale_x, scale_w, bias, {m}, {n}}}")


def _unpack(maps: bool = False) -> str:
    """Body lines naming what a GEMM reads from its `pack` input (kernels/cuda/quant/act_pack.cuh;
    backends/cuda/pack.py): pm rows and pk = K (w's width), the codes q, the scales scale_x and,
    for the TMA kernels, the tensor-map scratch `maps`."""
    lines = ("const int pm = pack_shape[0], pk = w_shape[1];\n"
             "const int8_t* q = int8nax::pack_codes(pack, pm);\n"
             "const float* scale_x = int8nax::pack_scales(pack);\n")
    return lines + ("uint8_t* maps = int8nax::pack_maps(pack, pm, pk);\n" if maps else "")


PACKED_W8A8_INPUTS = ("pack", "w", "scale_w", "bias")
"""The inputs of every W8A8 kernel that reads a pack (a persistent one adds `plan`)."""

_I32_EPILOGUE = "int8nax::StoreInt32{out, pm, w_shape[0]}"
"""The int32 store of a GEMM over a pack (the [splits, M, N] workspace of a split W8A8 plan)."""


def _gemm_call(family: str, a: str, b: str, m: str, n: str, k: str, epilogue: str) -> str:
    """Body calling the family's GEMM template with the tile constants MLX declares."""
    if family == "sm90":
        fn = "int8nax::gemm_cpasync<BM, BN, BK, WM, STAGES, AHEAD, CHUNK>"
    else:
        fn = "int8nax::gemm_simt<BM, BN, BK, WM, WN>"
    return f"{fn}({a}, {b}, {m}, {n}, {k}, {epilogue});"


@lru_cache(maxsize=None)
def gemm_int32(family: str, cfg: TileConfig) -> KernelSpec:
    """int32 out [M, N] = a [M, K] . b [N, K]^T; with split-K, out is the [splits, M, N] workspace."""
    body = _gemm_call(family, "a", "b", "a_shape[0]", "b_shape[0]", "a_shape[1]",
                      "int8nax::StoreInt32{out, a_shape[0], b_shape[0]}")
    return KernelSpec(
        _name(f"int8nax_{_part(family)}_i32_{cfg.name}", _part(family)), ("a", "b"), ("out",), body, header(_part(family)),
        _smem(family, cfg)
    )


_ADD_INT32 = "int8nax::AddInt32{out, a_shape[0], b_shape[0]}"
"""The atomic epilogue of an int8_matmul GEMM (kernels/cuda/epilogue/atomic_add.cuh): its sums are
the first M rows of its output, zero-filled by the launch."""

_MAPS_AFTER_SUMS = "uint8_t* maps = int8nax::map_slots_after_sums(out, a_shape[0], b_shape[0]);\n"
"""The body line of an atomic TMA GEMM: its one output holds the sums, then the blocks' map slots
(map_slots_after_sums; graphs.map_rows sizes the output to match)."""


@lru_cache(maxsize=None)
def gemm_int32_atomic(cfg: TileConfig) -> KernelSpec:
    """int32 out [M, N] = a [M, K] . b [N, K]^T by the cp.async kernel, every K split adding its
    partial sums into `out`, which the launch zero-fills (a plan with reduce="atomic")."""
    part = atomic_part(_part("sm90"))
    body = _gemm_call("sm90", "a", "b", "a_shape[0]", "b_shape[0]", "a_shape[1]", _ADD_INT32)
    return KernelSpec(_name(f"int8nax_cpasync_i32atomic_{cfg.name}", part), ("a", "b"), ("out",), body, header(part),
                      _smem("sm90", cfg))


@lru_cache(maxsize=None)
def gemm_int32_packed(family: str, cfg: TileConfig) -> KernelSpec:
    """gemm_int32's out (the split-K workspace of a W8A8 plan) = q . w^T of a pack's codes."""
    body = _unpack() + _gemm_call(family, "q", "w", "pm", "w_shape[0]", "pk", _I32_EPILOGUE)
    return KernelSpec(_name(f"int8nax_{_part(family)}_i32pack_{cfg.name}", _part(family)), ("pack", "w"), ("out",),
                      body, header(_part(family)), _smem(family, cfg))


@lru_cache(maxsize=None)
def gemm_w8a8(family: str, cfg: TileConfig) -> KernelSpec:
    """y [M, N] (TOut) = dequant(q [M, K] . w [N, K]^T) of a pack's codes and scales; template
    TOut, HAS_BIAS, NARROW."""
    body = _unpack() + _gemm_call(family, "q", "w", "pm", "w_shape[0]", "pk", _dequant_store("pm", "w_shape[0]"))
    return KernelSpec(_name(f"int8nax_{_part(family)}_w8a8_{cfg.name}", _part(family)), PACKED_W8A8_INPUTS, ("y",),
                      body, header(_part(family)), _smem(family, cfg))


def _tma_unspecialized_call(a: str, b: str, m: str, n: str, k: str, epilogue: str) -> str:
    return (f"int8nax::gemm_tma_unspecialized<BM, BN, BK, WM, STAGES, AHEAD, CHUNK>({a}, {b}, {m}, {n}, {k}, maps, "
            f"{epilogue});")


@lru_cache(maxsize=None)
def gemm_tma_unspecialized(cfg: cuda_plans.CudaTileConfig) -> KernelSpec:
    """int32 out [M, N] (or the [splits, M, N] workspace) = a [M, K] . b [N, K]^T by the TMA +
    mbarrier kernel on a CudaPlan's grid (cuda_plans.tma_plan); maps: uint8 [blocks * 256], the blocks' tensor maps."""
    body = _tma_unspecialized_call("a", "b", "a_shape[0]", "b_shape[0]", "a_shape[1]",
                                   "int8nax::StoreInt32{out, a_shape[0], b_shape[0]}")
    return KernelSpec(_name(f"int8nax_tma_unspecialized_i32_{cfg.name}", "tma"), ("a", "b"), ("out", "maps"), body,
                      header("tma"), cfg.tma_shared_bytes)


@lru_cache(maxsize=None)
def gemm_tma_unspecialized_atomic(cfg: cuda_plans.CudaTileConfig) -> KernelSpec:
    """gemm_tma_unspecialized's product with every K split adding its partial sums into one
    zero-filled output (a plan with reduce="atomic"): out int32 [M + R, N], the sums in its first M
    rows, the blocks' tensor maps after them (kernels/cuda/epilogue/atomic_add.cuh,
    map_slots_after_sums)."""
    part = atomic_part("tma")
    body = _MAPS_AFTER_SUMS + _tma_unspecialized_call("a", "b", "a_shape[0]", "b_shape[0]", "a_shape[1]",
                                                      _ADD_INT32)
    return KernelSpec(_name(f"int8nax_tma_unspecialized_i32atomic_{cfg.name}", part), ("a", "b"), ("out",), body,
                      header(part), cfg.tma_shared_bytes)


@lru_cache(maxsize=None)
def gemm_tma_unspecialized_packed(cfg: cuda_plans.CudaTileConfig) -> KernelSpec:
    """gemm_tma_unspecialized's out of a pack's codes, its tensor maps in the pack's scratch."""
    body = _unpack(maps=True) + _tma_unspecialized_call("q", "w", "pm", "w_shape[0]", "pk", _I32_EPILOGUE)
    return KernelSpec(_name(f"int8nax_tma_unspecialized_i32pack_{cfg.name}", "tma"), ("pack", "w"), ("out",), body,
                      header("tma"), cfg.tma_shared_bytes)


@lru_cache(maxsize=None)
def gemm_w8a8_tma_unspecialized(cfg: cuda_plans.CudaTileConfig) -> KernelSpec:
    """gemm_w8a8's product and epilogue by the TMA + mbarrier kernel: y [M, N] (TOut), its tensor
    maps in the pack's scratch; template TOut, HAS_BIAS, NARROW."""
    body = _unpack(maps=True) + _tma_unspecialized_call("q", "w", "pm", "w_shape[0]", "pk",
                                                        _dequant_store("pm", "w_shape[0]"))
    return KernelSpec(_name(f"int8nax_tma_unspecialized_w8a8_{cfg.name}", "tma"), PACKED_W8A8_INPUTS, ("y",), body,
                      header("tma"), cfg.tma_shared_bytes)


def _persistent_call(fn: str, a: str, b: str, m: str, n: str, k: str, epilogue: str) -> str:
    """Body calling a persistent kernel: (splits, group) from the `plan` input's shape."""
    return f"int8nax::{fn}({a}, {b}, {m}, {n}, {k}, plan_shape[0], plan_shape[1], maps, {epilogue});"


_COOPERATIVE = "gemm_tma_ws_cooperative<BM, BN, STAGES, CHUNK, {exact}>"
_PINGPONG = "gemm_tma_ws_pingpong<BN, STAGES, CHUNK>"


def _persistent_int32(fn: str, name: str, part: str, shared: int) -> KernelSpec:
    body = _persistent_call(fn, "a", "b", "a_shape[0]", "b_shape[0]", "a_shape[1]",
                            "int8nax::SplitInt32{out, a_shape[0], b_shape[0]}")
    return KernelSpec(_name(name, part), ("a", "b", "plan"), ("out", "maps"), body, header(part), shared)


def _persistent_int32_atomic(fn: str, name: str, kind: str, shared: int) -> KernelSpec:
    """_persistent_int32's product, every unit adding its partial sums into one zero-filled output
    laid out as gemm_tma_unspecialized_atomic's (the sums, then the map slots)."""
    part = atomic_part(kind)
    body = _MAPS_AFTER_SUMS + _persistent_call(fn, "a", "b", "a_shape[0]", "b_shape[0]", "a_shape[1]",
                                               f"int8nax::same_epilogue({_ADD_INT32})")
    return KernelSpec(_name(name, part), ("a", "b", "plan"), ("out",), body, header(part), shared)


def _persistent_int32_packed(fn: str, name: str, part: str, shared: int) -> KernelSpec:
    body = _unpack(maps=True) + _persistent_call(fn, "q", "w", "pm", "w_shape[0]", "pk",
                                                 "int8nax::SplitInt32{out, pm, w_shape[0]}")
    return KernelSpec(_name(name, part), ("pack", "w", "plan"), ("out",), body, header(part), shared)


def _persistent_w8a8(fn: str, name: str, part: str, shared: int) -> KernelSpec:
    body = _unpack(maps=True) + _persistent_call(fn, "q", "w", "pm", "w_shape[0]", "pk",
                                                 f"int8nax::same_epilogue({_dequant_store('pm', 'w_shape[0]')})")
    return KernelSpec(_name(name, part), PACKED_W8A8_INPUTS + ("plan",), ("y",), body, header(part), shared)


@lru_cache(maxsize=None)
def gemm_tma_ws_cooperative(cfg: cuda_plans.CooperativeConfig) -> KernelSpec:
    """int32 out [M, N] (or [splits, M, N]) = a . b^T by the warp-specialised persistent kernel;
    plan: an array whose shape is (splits, group), cuda_plans.PersistentPlan.plan_shape() (its data is never
    read); maps: uint8 [blocks * 256]."""
    return _persistent_int32(_COOPERATIVE.format(exact="false"), f"int8nax_tma_ws_cooperative_i32_{cfg.name}",
                             "cooperative", cfg.shared_bytes)


@lru_cache(maxsize=None)
def gemm_tma_ws_cooperative_atomic(cfg: cuda_plans.CooperativeConfig) -> KernelSpec:
    """gemm_tma_ws_cooperative's product with reduce="atomic" (_persistent_int32_atomic)."""
    return _persistent_int32_atomic(_COOPERATIVE.format(exact="false"),
                                    f"int8nax_tma_ws_cooperative_i32atomic_{cfg.name}", "cooperative", cfg.shared_bytes)


@lru_cache(maxsize=None)
def gemm_tma_ws_cooperative_packed(cfg: cuda_plans.CooperativeConfig) -> KernelSpec:
    """gemm_tma_ws_cooperative's out of a pack's codes, its tensor maps in the pack's scratch."""
    return _persistent_int32_packed(_COOPERATIVE.format(exact="false"),
                                    f"int8nax_tma_ws_cooperative_i32pack_{cfg.name}", "cooperative", cfg.shared_bytes)


@lru_cache(maxsize=None)
def gemm_w8a8_tma_ws_cooperative(cfg: cuda_plans.CooperativeConfig) -> KernelSpec:
    """gemm_w8a8's product and epilogue by the cooperative persistent kernel (unsplit plans only),
    its exact path taken per chunk of columns (CHUNK_EXACT, kernels/cuda/epilogue/store_accumulators.cuh): y [M, N] (TOut);
    plan as in gemm_tma_ws_cooperative, the tensor maps in the pack's scratch; template TOut, HAS_BIAS, NARROW."""
    return _persistent_w8a8(_COOPERATIVE.format(exact="true"), f"int8nax_tma_ws_cooperative_w8a8_{cfg.name}",
                            "cooperative", cfg.shared_bytes)


@lru_cache(maxsize=None)
def gemm_tma_ws_pingpong(cfg: cuda_plans.PingPongConfig) -> KernelSpec:
    """int32 out [M, N] (or [splits, M, N]) = a . b^T by the ping-pong persistent kernel;
    plan and maps as in gemm_tma_ws_cooperative."""
    return _persistent_int32(_PINGPONG, f"int8nax_tma_ws_pingpong_i32_{cfg.name}", "pingpong", cfg.shared_bytes)


@lru_cache(maxsize=None)
def gemm_tma_ws_pingpong_atomic(cfg: cuda_plans.PingPongConfig) -> KernelSpec:
    """gemm_tma_ws_pingpong's product with reduce="atomic" (_persistent_int32_atomic)."""
    return _persistent_int32_atomic(_PINGPONG, f"int8nax_tma_ws_pingpong_i32atomic_{cfg.name}", "pingpong",
                                    cfg.shared_bytes)


@lru_cache(maxsize=None)
def gemm_tma_ws_pingpong_packed(cfg: cuda_plans.PingPongConfig) -> KernelSpec:
    """gemm_tma_ws_pingpong's out of a pack's codes, its tensor maps in the pack's scratch."""
    return _persistent_int32_packed(_PINGPONG, f"int8nax_tma_ws_pingpong_i32pack_{cfg.name}", "pingpong",
                                    cfg.shared_bytes)


@lru_cache(maxsize=None)
def gemm_w8a8_tma_ws_pingpong(cfg: cuda_plans.PingPongConfig) -> KernelSpec:
    """gemm_w8a8's product and epilogue by the ping-pong persistent kernel (unsplit plans only):
    y [M, N] (TOut); plan as in gemm_tma_ws_cooperative, the tensor maps in the pack's scratch;
    template TOut, HAS_BIAS, NARROW."""
    return _persistent_w8a8(_PINGPONG, f"int8nax_tma_ws_pingpong_w8a8_{cfg.name}", "pingpong", cfg.shared_bytes)


@lru_cache(maxsize=None)
def reduce_int32() -> KernelSpec:
    """out int32 [M, N] = the sum over splits of a split-K workspace ws int32 [splits, M, N]."""
    body = "int8nax::reduce_splits(ws, ws_shape[0], ws_shape[1], ws_shape[2], int8nax::StoreInt32{out, ws_shape[1], ws_shape[2]});"
    return KernelSpec(_name("int8nax_reduce_i32", "reduce"), ("ws",), ("out",), body, header("reduce"), 0)


@lru_cache(maxsize=None)
def reduce_w8a8() -> KernelSpec:
    """y [M, N] (TOut) = dequant(sum over splits of ws int32 [splits, M, N]) with the scales of the
    pack the workspace was computed from; template TOut, HAS_BIAS, NARROW."""
    body = ("const float* scale_x = int8nax::pack_scales(pack);\n"
            f"int8nax::reduce_splits(ws, ws_shape[0], ws_shape[1], ws_shape[2], {_dequant_store('ws_shape[1]', 'ws_shape[2]')});")
    return KernelSpec(_name("int8nax_reduce_w8a8", "reduce"), ("ws", "pack", "scale_w", "bias"), ("y",), body,
                      header("reduce"), 0)


_X_ROWS = ("const int k = x_shape[x_ndim - 1];\n"
           "int m = 1;\n"
           "for (int d = 0; d + 1 < x_ndim; ++d) m *= x_shape[d];\n")
"""Body lines naming x's rows m and width k for x [..., K] of any rank: a layer passes its x
[B, L, K] as it comes, so its graph has no reshape node before the kernel (one node fewer a call
for MLX to build and evaluate)."""


@lru_cache(maxsize=None)
def quantize() -> KernelSpec:
    """The pack of x [..., K] (backends/cuda/pack.py: int8 [M, P], the codes and scales of its M
    rows); template T, THREADS, HELD (a cuda_plans.CudaQuantLaunch); one block per row."""
    body = _X_ROWS + "int8nax::quantize_rows<T, THREADS, HELD>(x, k, int8nax::pack_codes(pack, m), int8nax::pack_scales(pack));"
    return KernelSpec(_name("int8nax_quantize", "quantize"), ("x",), ("pack",), body, header("quantize"), 0)


@lru_cache(maxsize=None)
def swiglu_quantize() -> KernelSpec:
    """The pack of h = silu(g) * u computed in T as MLX does (quantize()'s codes and scales), from
    y [M, 2H] (T) whose columns [0, H) are g and [H, 2H) are u (kernels/cuda/
    quant/swiglu_quantize.cuh); template T, THREADS, HELD (a cuda_plans.CudaQuantLaunch, by
    cuda_plans.cuda_swiglu_quant_launch); one block per row."""
    body = ("int8nax::quantize_swiglu_rows<T, THREADS, HELD>(y, y_shape[1] / 2, int8nax::pack_codes(pack, y_shape[0]), "
            "int8nax::pack_scales(pack));")
    return KernelSpec(_name("int8nax_swiglu_quantize", "swiglu_quantize"), ("y",), ("pack",), body,
                      header("swiglu_quantize"), 0)


@lru_cache(maxsize=None)
def swiglu_quantize_staged(stage_bytes: int) -> KernelSpec:
    """swiglu_quantize()'s pack, bit for bit, by persistent blocks that stage each row of y in
    shared memory while quantizing the previous one (kernels/cuda/
    quant/swiglu_quantize_staged.cuh); template T, THREADS, HELD, STAGE_BYTES (a
    cuda_plans.CudaStagedLaunch, whose stage_bytes this is: the dynamic shared memory)."""
    body = ("int8nax::quantize_swiglu_rows_staged<T, THREADS, HELD, STAGE_BYTES>(y, y_shape[1] / 2, y_shape[0], "
            "int8nax::pack_codes(pack, y_shape[0]), int8nax::pack_scales(pack));")
    return KernelSpec(_name("int8nax_swiglu_quantize_staged", "swiglu_quantize_staged"), ("y",), ("pack",), body,
                      header("swiglu_quantize_staged"), stage_bytes)


@lru_cache(maxsize=None)
def count_sms() -> KernelSpec:
    """flags [CAPACITY] int32: 1 at the id of every SM that ran a block of the launch."""
    body = "int8nax::mark_sm(flags, CAPACITY);"
    return KernelSpec(_name("int8nax_count_sms", "count_sms"), ("dummy",), ("flags",), body, header("count_sms"), 0)


_GEMV_CALL = "int8nax::gemv_w8a8<NT, WARPS, UNROLL, AHEAD>({a}, w, {m}, w_shape[0], {k}, {epilogue});"


@lru_cache(maxsize=None)
def gemv_int32() -> KernelSpec:
    """int32 out [M, N] = a [M, K] . w [N, K]^T, M <= 16, by the GEMV (kernels/cuda/gemm/gemv_w8a8.cuh);
    template NT, WARPS, UNROLL, AHEAD (cuda_plans.GemvConfig)."""
    body = _GEMV_CALL.format(a="a", m="a_shape[0]", k="a_shape[1]",
                             epilogue="int8nax::StoreInt32{out, a_shape[0], w_shape[0]}")
    return KernelSpec(_name("int8nax_gemv_i32", "gemv"), ("a", "w"), ("out",), body, header("gemv"), 0)


@lru_cache(maxsize=None)
def gemv_w8a8() -> KernelSpec:
    """gemm_w8a8's y [M, N] (TOut) by the GEMV, M <= 16, of a pack's codes and scales; template NT,
    WARPS, UNROLL, AHEAD, TOut, HAS_BIAS, NARROW."""
    body = _unpack() + _GEMV_CALL.format(a="q", m="pm", k="pk", epilogue=_dequant_store("pm", "w_shape[0]"))
    return KernelSpec(_name("int8nax_gemv_w8a8", "gemv"), PACKED_W8A8_INPUTS, ("y",), body, header("gemv"), 0)


@lru_cache(maxsize=None)
def gemv_w8a8_x() -> KernelSpec:
    """y [..., N] in x's type = dequant(quant(x [..., K]) . w [N, K]^T) (+ bias), M <= 16 rows, in
    one kernel: every block quantizes x itself (the quantization kernel's codes and scales, bit for
    bit) on the way into gemv_w8a8's product and epilogue; template T (x's and y's type), NT, WARPS,
    UNROLL, AHEAD, HAS_BIAS, NARROW."""
    body = _X_ROWS + "int8nax::gemv_w8a8_x<T, NT, WARPS, UNROLL, AHEAD, HAS_BIAS, NARROW>(x, w, m, w_shape[0], k, scale_w, bias, y);"
    return KernelSpec(_name("int8nax_gemv_w8a8_x", "gemv"), ("x", "w", "scale_w", "bias"), ("y",), body,
                      header("gemv"), 0)


def _smem(family: str, cfg: TileConfig) -> int:
    # The SIMT kernel's tiles are static __shared__ arrays.
    return cfg.shared_bytes if family == "sm90" else 0
