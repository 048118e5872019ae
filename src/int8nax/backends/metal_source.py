"""Source assembly of the Metal kernels: which .metal files make each mx.fast.metal_kernel, and
the bounded catalogue of the instantiations the backend can build.

A kernel file (kernels/metal/*.metal) holds global-scope code, then optionally a line
BODY_MARKER and the kernel body. A kernel's KernelSpec (backends/kernel_spec.py, shared with
CUDA) gets as `header` the global parts of its files in order, and as `source` the body of its
last file. mx.fast.metal_kernel then builds one Metal library per distinct (template arguments,
input dtypes, inputs in the `constant` address space); `instantiations()` lists every one the
runtime (backends/metal.py) can ask for, so that the set is bounded, listed by
`int8nax selftest`, and compiled one by one by the address-space check in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from .. import tiling
from .kernel_spec import KernelSpec

BODY_MARKER = "// ==== kernel body ===="
"""Splits a .metal file into global-scope code (metal_kernel's `header`) and the kernel body."""

KERNEL_DIR = ("kernels", "metal")
"""Where the .metal files live inside the int8nax package."""

GEMM_CORE = "nax_gemm.metal"
"""The NAX tile walk shared by the two GEMM kernels."""

FLOAT_BITS = "float_bits.metal"
"""float32 fields and exact bit-level helpers shared by the quantizer and the W8A8 epilogue."""

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
        MetalKernel("int8nax_w8a8_gemm", (GEMM_CORE, FLOAT_BITS, "w8a8_gemm.metal"),
                    ("q", "w", "s_x", "s_w", "bias", "params"), ("y",)),
        MetalKernel("int8nax_quantize_rows", (FLOAT_BITS, "quantize_rows.metal"), ("x",), ("q", "s")),
        MetalKernel("int8nax_nax_layout", (GEMM_CORE, "nax_layout.metal"), ("dummy",), ("out",)),
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
