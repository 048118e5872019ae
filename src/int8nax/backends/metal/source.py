"""Source assembly of the Metal kernels: which .metal files make each mx.fast.metal_kernel, and
the bounded catalogue of the instantiations the backend can build.

A kernel file (kernels/metal/*.metal) holds global-scope code, then optionally a line
BODY_MARKER and the kernel body. A kernel's KernelSpec (backends/kernel_spec.py, shared with
CUDA) gets as `header` the global parts of its files in order, and as `source` the body of its
last file. mx.fast.metal_kernel then builds one Metal library per distinct (template arguments,
input dtypes, inputs in the `constant` address space); `instantiations()` lists every one the
runtime (backends/metal/backend.py) can ask for, so that the set is bounded, listed by
`int8nax selftest`, and compiled one by one by the address-space check in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from importlib import resources

import mlx.core as mx

from ... import tiling
from ..kernel_spec import KernelSpec

BODY_MARKER = "// ==== kernel body ===="
"""Splits a .metal file into global-scope code (metal_kernel's `header`) and the kernel body."""

KERNEL_DIR = ("kernels", "metal")
"""Where the .metal files live inside the int8nax package."""

GEMM_CORE = "nax_gemm.metal"
"""The NAX tile walk shared by the two GEMM kernels."""

GEMV_CORE = "gemv.metal"
"""The small-M walk: the same kernel bodies with another schedule (tiling.metal_uses_gemv)."""

FLOAT_BITS = "float_bits.metal"
"""float32 fields and exact bit-level helpers shared by the quantizer and the W8A8 epilogue."""

QUANT_CORE = "quantize_core.metal"
"""A row's scale and each element's code: the quantizer's and the decode kernel's."""

DEQUANT = "dequantize.metal"
"""The W8A8 dequantizing epilogue (DequantStore), shared by the W8A8 kernels."""

MLX_CONSTANT_MAX_ELEMENTS = 8
"""mx.fast.metal_kernel declares an input with fewer elements than this `const constant T*`
(a different signature, so a different library build)."""


@dataclass(frozen=True)
class MetalKernel:
    """One mx.fast.metal_kernel: the .metal files whose global parts form its header (in order;
    the last one also holds the body) and the argument names the body uses."""

    name: str
    files: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]

    @property
    def file(self) -> str:
        """The file holding the kernel body."""
        return self.files[-1]


KERNELS = {
    k.name: k
    for k in (
        MetalKernel("int8nax_int8_gemm", (GEMM_CORE, "int8_gemm.metal"), ("a", "b", "params"), ("c",)),
        MetalKernel("int8nax_w8a8_gemm", (GEMM_CORE, FLOAT_BITS, DEQUANT, "w8a8_gemm.metal"),
                    ("q", "w", "s_x", "s_w", "bias", "params"), ("y",)),
        MetalKernel("int8nax_int8_gemv", (GEMV_CORE, "int8_gemm.metal"), ("a", "b", "params"), ("c",)),
        MetalKernel("int8nax_w8a8_decode", (FLOAT_BITS, QUANT_CORE, DEQUANT, "w8a8_decode.metal"),
                    ("x", "w", "s_w", "bias", "params"), ("y",)),
        MetalKernel("int8nax_quantize_rows", (FLOAT_BITS, QUANT_CORE, "quantize_rows.metal"), ("x",), ("q", "s")),
        MetalKernel("int8nax_nax_layout", (GEMM_CORE, "nax_layout.metal"), ("dummy",), ("out",)),
        MetalKernel("int8nax_subnormal_probe", ("subnormal_probe.metal",), ("x",), ("out",)),
    )
}


def kernel_files() -> list[str]:
    """Every .metal file of the package."""
    folder = resources.files("int8nax").joinpath(*KERNEL_DIR)
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".metal"))


def read_kernel_file(file: str) -> str:
    return resources.files("int8nax").joinpath(*KERNEL_DIR, file).read_text()


def split_source(text: str) -> tuple[str, str]:
    """(global part, body) of a kernel file; a file without the marker is all global."""
    if BODY_MARKER not in text:
        return text, ""
    head, body = text.split(BODY_MARKER, 1)
    return head, body.strip("\n") + "\n"


def kernel_source(kernel: MetalKernel) -> tuple[str, str]:
    """(header, source) for mx.fast.metal_kernel."""
    heads = []
    body = ""
    for i, file in enumerate(kernel.files):
        head, part = split_source(read_kernel_file(file))
        if part.strip() and i != len(kernel.files) - 1:
            raise RuntimeError(f"{file}: a kernel body in a file that is only a header of {kernel.name}")
        heads.append(head)
        body = part
    if not body.strip():
        raise RuntimeError(f"{kernel.file}: no '{BODY_MARKER}' section")
    return "\n".join(heads), body


def kernel_spec(name: str) -> KernelSpec:
    """The KernelSpec of kernel `name` (one of KERNELS)."""
    kernel = KERNELS[name]
    header, source = kernel_source(kernel)
    return KernelSpec(kernel.name, kernel.inputs, kernel.outputs, source, header)


# ---------------------------------------------------------------------------------------------
# Kernel variants: the load path and relaxed_precision (template flags of the GEMM sources)
# ---------------------------------------------------------------------------------------------

LOAD_MLX_LAYOUT = "mlx_layout"
"""The fast load path: MLX's BaseNAXFrag lane layout from the lane id, 4-byte row pieces,
unmasked interior tiles. Right only if the int8 cooperative tensors use that layout."""
LOAD_GENERIC = "generic"
"""The fallback: element-wise loads at the coordinates each cooperative tensor reports;
right under any layout, slower."""
LOAD_PATHS = (LOAD_MLX_LAYOUT, LOAD_GENERIC)


@dataclass(frozen=True)
class KernelVariant:
    """One buildable form of the two GEMM kernels (and of the layout probe's descriptor)."""

    load: str = LOAD_MLX_LAYOUT
    relaxed_precision: bool = True
    """matmul2d_descriptor's relaxed_precision; True is the proven form (tiling.NaxTileConfig)."""

    def __post_init__(self):
        if self.load not in LOAD_PATHS:
            raise ValueError(f"KernelVariant: load must be one of {LOAD_PATHS}, got {self.load!r}")

    @property
    def name(self) -> str:
        return f"{self.load}/relaxed_precision={'true' if self.relaxed_precision else 'false'}"

    def template(self) -> list[tuple[str, bool]]:
        """Template arguments the variant adds to the tile's."""
        return [("MLX_LAYOUT", self.load == LOAD_MLX_LAYOUT)]


def variants() -> list[KernelVariant]:
    """Every variant this backend can build, the proven relaxed_precision=True forms first."""
    return [KernelVariant(load, relaxed) for relaxed in (True, False) for load in LOAD_PATHS]


def variant_named(name: str) -> KernelVariant:
    """The variant whose .name is `name` (e.g. "generic/relaxed_precision=true")."""
    for v in variants():
        if v.name == name:
            return v
    raise ValueError(f"variant_named: unknown variant {name!r}; expected one of {[v.name for v in variants()]}")


# ---------------------------------------------------------------------------------------------
# The catalogue of instantiations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instantiation:
    """One library mx.fast.metal_kernel would build: a kernel with its template arguments
    (int, bool, or a dtype name for a typename parameter), the dtypes of its inputs and outputs,
    and the inputs it would pass in the `constant` address space."""

    kernel: str
    template: tuple
    inputs: tuple
    """((name, dtype), ...)"""
    outputs: tuple
    constant: frozenset = frozenset()
    why: str = ""
    """When the runtime asks for it, in words."""

    @property
    def key(self) -> tuple:
        """What tells two builds apart (MLX's cache is keyed by the generated source)."""
        return (self.kernel, self.template, tuple(d for _, d in self.inputs), tuple(sorted(self.constant)))

    def label(self) -> str:
        t = ", ".join(f"{n}={str(v).lower() if isinstance(v, bool) else v}" for n, v in self.template)
        c = f"; constant: {', '.join(sorted(self.constant))}" if self.constant else ""
        return f"{self.kernel}<{t}>({', '.join(f'{d} {n}' for n, d in self.inputs)}{c})"


def constant_inputs(names_and_sizes) -> frozenset:
    """The inputs MLX passes in the `constant` address space: those of fewer than 8 elements."""
    return frozenset(n for n, size in names_and_sizes if size < MLX_CONSTANT_MAX_ELEMENTS)


DTYPE_NAMES = {mx.int8: "int8", mx.int32: "int32", mx.float32: "float32", mx.float16: "float16",
               mx.bfloat16: "bfloat16"}
FLOAT_DTYPES = ("float16", "bfloat16", "float32")


def dtype_name(dtype) -> str:
    return DTYPE_NAMES[dtype]


def template_key(template) -> tuple:
    """A launch's template arguments with dtypes by name: ((name, int | bool | str), ...)."""
    return tuple((n, dtype_name(v) if isinstance(v, mx.Dtype) else v) for n, v in template)


GEMM_INPUTS = (("a", "int8"), ("b", "int8"), ("params", "int32"))
GEMV_INPUTS = GEMM_INPUTS
W8A8_INPUTS = (("q", "int8"), ("w", "int8"), ("s_x", "float32"), ("s_w", "float32"))
ALWAYS_CONSTANT = frozenset({"params"})
"""Inputs that always arrive in the constant address space (params has 5 values)."""
TINY_INPUTS = {"int8nax_int8_gemm": ("a", "b"), "int8nax_w8a8_gemm": ("q", "w", "s_w", "bias"),
               "int8nax_int8_gemv": ("a", "b"), "int8nax_w8a8_decode": ("x", "w", "s_w", "bias"),
               "int8nax_quantize_rows": ("x",)}
"""Inputs that arrive as `constant` only for toy shapes (fewer than 8 elements: M * K, N * K or N
below 8); each such shape is one more build of the same instantiation's source."""


def _gemm_templates():
    for variant in variants():
        for cfg in tiling.METAL_CONFIGS:
            cfg = replace(cfg, relaxed_precision=variant.relaxed_precision)
            yield f"{cfg.name}, {variant.name}", tuple(cfg.template()) + tuple(variant.template())


def _w8a8_instantiations(kernel: str, tmpl: tuple, why: str) -> list[Instantiation]:
    """A W8A8 kernel at one tile template, for every output dtype and bias (none: a float32
    placeholder, which MLX passes in `constant`)."""
    out = []
    for dtype in FLOAT_DTYPES:
        for bias in (None,) + FLOAT_DTYPES:
            inputs = W8A8_INPUTS + (("bias", bias or "float32"), ("params", "int32"))
            out.append(Instantiation(kernel, tmpl + (("OutT", dtype), ("HAS_BIAS", bias is not None)), inputs,
                                     (("y", dtype),), ALWAYS_CONSTANT | ({"bias"} if bias is None else set()),
                                     f"w8a8_linear {dtype}, bias {bias or 'none'}, {why}"))
    return out


def instantiations() -> list[Instantiation]:
    """Every instantiation the runtime can launch for shapes of at least 8 elements per input
    (and M >= 1: the scales input is padded to 8): the bounded set of Metal library builds a
    process can make. Toy shapes add the TINY_INPUTS in `constant` (instantiations_tiny)."""
    out = []
    for why, tmpl in _gemm_templates():
        out.append(Instantiation("int8nax_int8_gemm", tmpl, GEMM_INPUTS, (("c", "int32"),), ALWAYS_CONSTANT,
                                 f"int8_matmul, {why}"))
        out += _w8a8_instantiations("int8nax_w8a8_gemm", tmpl, why)
    mv = tuple(tiling.metal_gemv_dispatch(1, 1, 1).template)
    out.append(Instantiation("int8nax_int8_gemv", mv, GEMV_INPUTS, (("c", "int32"),), ALWAYS_CONSTANT,
                             f"int8_matmul, M <= {tiling.METAL_MV_MAX_M} (every variant)"))
    decode = tuple(template_key(tiling.metal_decode_dispatch(1, 1, 1).template))
    for dtype in FLOAT_DTYPES:  # y in x's dtype
        for bias in (None,) + FLOAT_DTYPES:
            inputs = (("x", dtype), ("w", "int8"), ("s_w", "float32"), ("bias", bias or "float32"), ("params", "int32"))
            out.append(Instantiation("int8nax_w8a8_decode", (("OutT", dtype), ("HAS_BIAS", bias is not None)) + decode,
                                     inputs, (("y", dtype),), ALWAYS_CONSTANT | ({"bias"} if bias is None else set()),
                                     f"w8a8_linear {dtype}, bias {bias or 'none'}, M <= {tiling.METAL_MV_MAX_M} "
                                     "(every variant)"))
    for threads in (tiling.METAL_QUANT_THREADS, tiling.METAL_QUANT_FALLBACK_THREADS):
        quant = tiling.metal_quant_dispatch(1, threads)
        fallback = "" if threads == tiling.METAL_QUANT_THREADS else " (threadgroup-limit fallback)"
        for dtype in FLOAT_DTYPES:
            out.append(Instantiation("int8nax_quantize_rows", template_key(quant.template), (("x", dtype),),
                                     (("q", "int8"), ("s", "float32")), frozenset(), f"quantize {dtype}{fallback}"))
    for relaxed in (True, False):
        out.append(Instantiation("int8nax_nax_layout", layout_template(relaxed), (("dummy", "int32"),),
                                 (("out", "int32"),), frozenset({"dummy"}),
                                 f"layout probe, relaxed_precision={str(relaxed).lower()}"))
    out.append(Instantiation("int8nax_subnormal_probe", (), (("x", "float32"),), (("out", "float32"),), frozenset(),
                             "subnormal probe (int8nax selftest only)"))
    return out


def instantiations_tiny() -> list[Instantiation]:
    """Each kernel source once more with every input that a toy shape can put in the constant
    address space there (the first-use check's (1, 1, 1) and (3, 7, 5) GEMMs among them)."""
    out = []
    for inst in instantiations():
        tiny = TINY_INPUTS.get(inst.kernel, ())
        small_m = "metal_32x128" in inst.why or inst.kernel.endswith(("_gemv", "_decode"))
        if tiny and (small_m or inst.kernel == "int8nax_quantize_rows"):
            out.append(replace(inst, constant=inst.constant | set(tiny), why=inst.why + ", toy shape"))
    return out


LAYOUT_CAPACITY = max(
    tiling.NAX_FRAG_M * tiling.NAX_FRAG_K,
    tiling.NAX_FRAG_N * tiling.NAX_FRAG_K,
    tiling.NAX_FRAG_M * tiling.NAX_FRAG_N,
) // tiling.SIMD_WIDTH
"""Elements per lane the layout probe records: the largest fragment's share of a simdgroup."""


def layout_template(relaxed_precision: bool = True) -> tuple:
    """The layout probe's template arguments."""
    return (("FM", tiling.NAX_FRAG_M), ("FN", tiling.NAX_FRAG_N), ("FK", tiling.NAX_FRAG_K),
            ("SIMD", tiling.SIMD_WIDTH), ("CAP", LAYOUT_CAPACITY), ("RELAXED", relaxed_precision))
