"""Metal's address-space rules checked by a real compiler front end, without Apple's.

Each kernel instantiation is assembled the way mx.fast.metal_kernel 0.32.4 assembles it
(metal_kernel.cpp): its header at global scope, a template over the template arguments in the
order given, the signature it generates (inputs `const device T*`, or `const constant T*` for
inputs of fewer than 8 elements, each followed by those of `<name>_shape`, `<name>_strides`,
`<name>_ndim` that the body mentions, in that order; outputs `device T*`, then the attributes
whose names occur in the body), the body, and the explicit
instantiation `template decltype(custom_kernel_X<args>) custom_kernel_X<args>;`.

The text is then compiled by clang's C++-for-OpenCL front end (Debian's clang-16) with
`device` = __global, `thread` = __private, `threadgroup` = __local: that mode enforces the Metal
4.1 rules that broke the kernels before, which g++ (tests/metal_shim) cannot see: static data
only in `constant`, a generic `this`, decltype carrying the address space, address-space
conversions of pointers. MetalPerformancePrimitives is a stub (clang/) that checks matmul2d's
shape rule, element types and operand types. One deviation: OpenCL allows __local variables only
in kernel functions, which cannot be templates there, so a `threadgroup` array the body declares
becomes a `threadgroup T*` parameter of the same name.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from shim import SHAPE_ARGS, TYPE_NAMES

CLANG = shutil.which("clang-16")
STUB_DIR = Path(__file__).resolve().parent / "clang"
CLANG_FLAGS = ("-x", "clcpp", "-cl-std=clc++2021", "--target=spir64",
               "-Xclang", "-cl-ext=-__opencl_c_program_scope_global_variables,-__opencl_c_device_enqueue,+cl_khr_fp16",
               "-fsyntax-only", "-ferror-limit=5")

# mx.fast.metal_kernel's attributes, in its order: (name, type).
ATTRIBUTES = [(n, "uint3") for n in ("thread_position_in_grid", "thread_position_in_threadgroup",
                                     "threadgroup_position_in_grid", "threads_per_threadgroup",
                                     "threadgroups_per_grid", "threads_per_grid")] + \
    [(n, "uint") for n in ("simdgroup_index_in_threadgroup", "thread_index_in_simdgroup",
                           "thread_index_in_threadgroup", "simdgroups_per_threadgroup", "threads_per_simdgroup",
                           "thread_execution_width", "quadgroup_index_in_threadgroup", "thread_index_in_quadgroup",
                           "quadgroups_per_threadgroup")]


def _template_value(value) -> tuple[str, str]:
    if isinstance(value, bool):
        return "bool", "true" if value else "false"
    if isinstance(value, int):
        return "int", str(value)
    return "typename", TYPE_NAMES[value]


def assemble(name: str, header: str, body: str, inputs, outputs, template, constant=frozenset()) -> str:
    """The source mx.fast.metal_kernel would hand to Metal for one instantiation (see above).
    inputs/outputs: ((name, dtype), ...); template: ((name, value), ...)."""
    params = []
    for arg, dtype in inputs:
        space = "constant" if arg in constant else "device"
        params.append(f"const {space} {TYPE_NAMES[dtype]}* {arg}")
        params += [decl.format(arg) for what, decl in SHAPE_ARGS.items() if f"{arg}_{what}" in body]
    params += [f"device {TYPE_NAMES[dtype]}* {arg}" for arg, dtype in outputs]
    params += [f"{ctype} {attr}" for attr, ctype in ATTRIBUTES if attr in body]
    for decl in re.finditer(r"(?m)^\s*threadgroup\s+(\w+)\s+(\w+)\s*\[[^\]]*\];", body):
        params.append(f"threadgroup {decl.group(1)}* {decl.group(2)}")
    body = re.sub(r"(?m)^\s*threadgroup\s+\w+\s+\w+\s*\[[^\]]*\];\n?", "", body)
    fn = f"custom_kernel_{name}"
    signature = f"[[kernel]] void {fn}(\n  " + ",\n  ".join(params) + f") {{\n{body}}}\n"
    text = f"#include <metal_stdlib>\nusing namespace metal;\n\n{header}\n\n"
    if not template:  # MLX writes a plain kernel
        return text + signature
    tparams = ", ".join(f"{_template_value(v)[0]} {n}" for n, v in template)
    targs = ", ".join(_template_value(v)[1] for _, v in template)
    return (text + f"template <{tparams}>\n" + signature +
            f"\ntemplate decltype({fn}<{targs}>) {fn}<{targs}>;\n")


def _compile(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CLANG, *CLANG_FLAGS, "-Wno-unknown-attributes", "-I", str(STUB_DIR), str(path)],
                          capture_output=True, text=True)


def check(sources: dict[str, str], jobs: int = 2) -> dict[str, list[str]]:
    """Compile each {label: assembled source} on its own; {label: error lines} ([] = clean)."""
    if CLANG is None:
        raise RuntimeError("clang-16 is not installed (apt-get install clang-16)")
    errors = {}
    with tempfile.TemporaryDirectory(prefix="int8nax-clang-") as tmp:
        paths = {}
        for i, (label, text) in enumerate(sources.items()):
            paths[label] = Path(tmp) / f"k{i}.metal"
            paths[label].write_text(text)
        with ThreadPoolExecutor(jobs) as pool:
            done = dict(zip(paths, pool.map(_compile, paths.values())))
    for label, result in done.items():
        found = [re.sub(r"^.*?:(\d+):\d+: (?:fatal )?error: ", r"line \1: ", line)
                 for line in result.stderr.splitlines() if " error: " in line]
        if result.returncode and not found:
            found = [result.stderr[-2000:] or f"clang exited {result.returncode}"]
        errors[label] = found
    return errors
