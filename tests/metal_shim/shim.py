"""Compile int8nax's real .metal kernels with g++ against metal_shim.h and run them on the CPU.

Each kernel is assembled the way mx.fast.metal_kernel assembles it: the header, a template
over the template arguments, the signature MLX generates (each input followed by those of
`<name>_shape`, `<name>_strides`, `<name>_ndim` that the body mentions, in that order; outputs;
then the attributes whose names occur in the body) and the body. MLX
declares an input of fewer than 8 elements `const constant T*` (metal_kernel.cpp), a different
kernel for every such combination; so does the stand-in (as `const volatile T*`, see
metal_shim.h), and run() refuses arrays whose sizes would make MLX generate another signature
than the one built. Every
kernel variant goes into its own namespace of one translation unit (one g++ run), with a driver
that reads the inputs, runs every threadgroup of the launch as green threads and writes the
outputs. Inputs live in exactly-sized heap buffers and the binary is built with
AddressSanitizer, so a load or store outside a buffer aborts the run; outputs start poisoned,
so an element never written shows.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SHIM_DIR = Path(__file__).resolve().parent
GXX = shutil.which("g++")
# -U_FORTIFY_SOURCE: the green threads switch stacks with _longjmp, which a fortified glibc
# (Ubuntu's g++ defines _FORTIFY_SOURCE by default) turns into __longjmp_chk, and that aborts
# ("longjmp causes uninitialized stack frame") on every jump to another stack.
GXX_FLAGS = ("-std=c++20", "-O1", "-g0", "-U_FORTIFY_SOURCE", "-fsanitize=address", "-fno-omit-frame-pointer",
             "-Wno-attributes")
"""g++'s flags; part of the binary cache key, so that a change rebuilds."""

# mx.fast.metal_kernel (0.32.4): attributes it declares when their name occurs in the body, in
# its order (only those the int8nax kernels use), and the Metal names of the dtypes.
ATTRIBUTES = [
    ("thread_position_in_grid", "uint3", "uint3{tgpos.x * L.threads + th.tid, tgpos.y, tgpos.z, uint2{tgpos.x * L.threads + th.tid, tgpos.y}}"),
    ("simdgroup_index_in_threadgroup", "uint", "th.sg"),
    ("thread_index_in_simdgroup", "uint", "th.lane"),
    ("thread_index_in_threadgroup", "uint", "th.tid"),
    ("threadgroup_position_in_grid", "uint3", "tgpos"),
]
TYPE_NAMES = {"int8": "int8_t", "int32": "int32_t", "float32": "float", "float16": "float16_t",
              "bfloat16": "bfloat16_t"}
NUMPY_TYPES = {"int8": np.int8, "int32": np.int32, "float32": np.float32, "float16": np.float16,
               "bfloat16": np.uint16}
POISON = 0xA5
FLUSH_ENV = "INT8NAX_SHIM_FLUSH_SUBNORMALS"
"""Set for a run: the driver flushes float32 subnormals (FTZ + DAZ), as some GPUs do."""
MLX_CONSTANT_MAX_ELEMENTS = 8
"""mx.fast.metal_kernel puts an input with fewer elements than this in `constant` space."""
SHAPE_ARGS = {"shape": "const constant int* {}_shape", "strides": "const constant int64_t* {}_strides",
              "ndim": "const constant int& {}_ndim"}
"""What mx.fast.metal_kernel (0.32.4) declares after an input of rank >= 1 whose `<name>_<arg>`
the body mentions, in this order (the order its Metal backend binds them in): the shape, the
element strides, the rank."""


@dataclass(frozen=True)
class Variant:
    """One kernel instantiation: sources, argument names and dtypes, template arguments
    (int, bool, or a dtype name for a typename parameter)."""

    key: str
    header: str
    body: str
    inputs: tuple  # ((name, dtype), ...)
    outputs: tuple  # ((name, dtype), ...)
    template: tuple  # ((name, value), ...)
    constant_inputs: frozenset = frozenset()
    """Inputs MLX would pass in the constant address space (fewer than 8 elements)."""

    def shape_args(self, name: str) -> tuple[str, ...]:
        """The arguments mx.fast.metal_kernel adds after input `name`: those of SHAPE_ARGS whose
        name the body mentions (metal_kernel.cpp looks for `<name>_shape` etc. in the source)."""
        return tuple(arg for arg in SHAPE_ARGS if f"{name}_{arg}" in self.body)


def _kernel_code(index: int, v: Variant) -> str:
    params, args, reads = [], [], []
    for i, (name, dtype) in enumerate(v.inputs):
        space = "volatile" if name in v.constant_inputs else "device"  # volatile models `constant`
        params.append(f"const {space} {TYPE_NAMES[dtype]}* {name}")
        args.append(f"reinterpret_cast<const {TYPE_NAMES[dtype]}*>(in{i}.data())")
        reads.append(f"  auto in{i} = read_blob();")
        for arg in v.shape_args(name):
            params.append(SHAPE_ARGS[arg].format(name))
            ctype = {"shape": "int", "strides": "int64_t", "ndim": "int"}[arg]
            star = "*" if arg == "ndim" else ""  # a reference to the one int the blob holds
            args.append(f"{star}reinterpret_cast<const {ctype}*>({arg}{i}.data())")
            reads.append(f"  auto {arg}{i} = read_blob();")
    for j, (name, dtype) in enumerate(v.outputs):
        params.append(f"device {TYPE_NAMES[dtype]}* {name}")
        args.append(f"reinterpret_cast<{TYPE_NAMES[dtype]}*>(out{j}.data())")
        reads.append(f"  auto out{j} = read_blob();")
    for attr, ctype, value in ATTRIBUTES:
        if attr in v.body:
            params.append(f"{ctype} {attr}")
            args.append(value)
    tparams, targs = [], []
    for name, value in v.template:
        if isinstance(value, bool):
            tparams.append(f"bool {name}")
            targs.append("true" if value else "false")
        elif isinstance(value, int):
            tparams.append(f"int {name}")
            targs.append(str(value))
        else:
            tparams.append(f"typename {name}")
            targs.append(TYPE_NAMES[value])
    # Threadgroup variables are declared in the body: one static per instantiation, shared by
    # the threadgroup's green threads (threadgroups run one after another).
    body = re.sub(r"(?m)^(\s*)threadgroup\s+", r"\1static ", v.body)
    writes = "\n".join(f"  write_blob(out{j});" for j in range(len(v.outputs)))
    template_line = f"template <{', '.join(tparams)}>" if tparams else ""
    call = f"custom_kernel<{', '.join(targs)}>" if tparams else "custom_kernel"
    return f"""
namespace k{index} {{  // {v.key}, constant inputs {sorted(v.constant_inputs)}
{v.header}
{template_line}
void custom_kernel({", ".join(params)}) {{
{body}
}}

void run() {{
{chr(10).join(reads)}
  const Launch L = read_launch();
  for (uint z = 0; z < L.groups[2]; ++z)
    for (uint y = 0; y < L.groups[1]; ++y)
      for (uint x = 0; x < L.groups[0]; ++x) {{
        const uint3 tgpos{{x, y, z, uint2{{x, y}}}};
        shim::run_threadgroup(L.threads, [&](const shim::GreenThread& th) {{
          {call}({", ".join(args)});
        }});
      }}
{writes}
}}
}}  // namespace k{index}
"""


DRIVER_HEAD = r"""#include "metal_shim.h"

static std::vector<char> read_blob() {
  uint64_t n = 0;
  if (std::fread(&n, 8, 1, stdin) != 1) shim::fail("short input");
  std::vector<char> v(n);
  if (n && std::fread(v.data(), 1, n, stdin) != n) shim::fail("short input");
  return v;
}

static void write_blob(const std::vector<char>& v) {
  uint64_t n = v.size();
  std::fwrite(&n, 8, 1, stdout);
  std::fwrite(v.data(), 1, n, stdout);
}

struct Launch {
  uint groups[3];
  uint threads;
};

// int32 grid[3] (threads), threadgroup[3]; then the three lane layouts, int32 [32, elems, 2].
static Launch read_launch() {
  auto launch = read_blob();
  const int32_t* g = reinterpret_cast<const int32_t*>(launch.data());
  if (g[4] != 1 || g[5] != 1) shim::fail("the driver runs 1-D threadgroups only");
  for (int op = 0; op < 3; ++op) {
    auto blob = read_blob();
    shim::g_layout_elems[op] = int(blob.size() / (32 * 2 * 4));
    const int32_t* cells = reinterpret_cast<const int32_t*>(blob.data());
    shim::g_layout[op].resize(blob.size() / 8);
    for (size_t c = 0; c < shim::g_layout[op].size(); ++c)
      shim::g_layout[op][c] = shim::Cell{cells[2 * c], cells[2 * c + 1]};
  }
  return Launch{{uint((g[0] + g[3] - 1) / g[3]), uint((g[1] + g[4] - 1) / g[4]),
                 uint((g[2] + g[5] - 1) / g[5])}, uint(g[3])};
}
"""


def build_source(variants: list[Variant]) -> str:
    cases = "\n".join(f"    case {i}: k{i}::run(); break;" for i in range(len(variants)))
    kernels = "".join(_kernel_code(i, v) for i, v in enumerate(variants))
    return DRIVER_HEAD + kernels + f"""
int main() {{
  shim::flush_subnormals_if_asked();
  int32_t which = -1;
  if (std::fread(&which, 4, 1, stdin) != 1) shim::fail("no kernel index");
  switch (which) {{
{cases}
    default: shim::fail("unknown kernel index");
  }}
  std::fprintf(stderr, "barriers %llu\\n", (unsigned long long)shim::g_barriers_met);
  return 0;
}}
"""


class ShimBuild:
    """One binary holding several kernel variants; run(key, ...) executes one launch."""

    def __init__(self, variants: list[Variant], cache: Path | None = None):
        self.variants = {(v.key, v.constant_inputs): (i, v) for i, v in enumerate(variants)}
        source = build_source(variants)
        version = subprocess.run([GXX, "--version"], capture_output=True, text=True).stdout
        key = hashlib.sha256((source + (SHIM_DIR / "include" / "metal_shim.h").read_text()
                              + version + " ".join(GXX_FLAGS)).encode()).hexdigest()[:20]
        cache = cache or Path(tempfile.gettempdir()) / f"int8nax-metal-shim-{os.getuid()}"
        cache.mkdir(exist_ok=True)
        self.binary = cache / f"kernels_{key}"
        if not self.binary.exists():
            src = self.binary.with_suffix(".cpp")
            src.write_text(source)
            tmp = self.binary.with_suffix(".tmp")
            cmd = [GXX, *GXX_FLAGS, "-I", str(SHIM_DIR / "include"), str(src), "-o", str(tmp)]
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"g++ failed on {src}:\n{done.stderr[-6000:]}")
            tmp.rename(self.binary)
        self.stderr = ""

    def run(self, key: str, arrays, output_shapes, grid, threadgroup, layout,
            flush_subnormals: bool = False) -> list[np.ndarray]:
        """arrays: numpy inputs in order; output_shapes: one per output; layout: a
        nax_emulator.FragmentLayout; flush_subnormals: run as a GPU that flushes float32
        subnormals to zero (metal_shim.h). Returns the outputs (POISON bytes where never
        written)."""
        small = frozenset(name for (name, _), arr in zip(self._inputs_of(key), arrays)
                          if np.asarray(arr).size < MLX_CONSTANT_MAX_ELEMENTS)
        if (key, small) not in self.variants:
            built = sorted(sorted(c) for k, c in self.variants if k == key)
            raise KeyError(f"{key}: MLX would pass {sorted(small)} as `constant`; built: {built}")
        index, v = self.variants[(key, small)]
        parts = [np.int32(index).tobytes()]

        def blob(data: bytes) -> None:
            parts.append(np.uint64(len(data)).tobytes() + data)

        for (name, dtype), arr in zip(v.inputs, arrays):
            blob(np.ascontiguousarray(arr, dtype=NUMPY_TYPES[dtype]).tobytes())
            shape = np.shape(arr)
            if not shape and v.shape_args(name):  # MLX declares none of them for a 0-d input
                raise ValueError(f"{key}: input {name} is 0-d, its {v.shape_args(name)} would not exist")
            # the element strides of a row-contiguous array (metal_kernel's ensure_row_contiguous)
            strides = [np.prod(shape[d + 1:], dtype=np.int64) for d in range(len(shape))]
            given = {"shape": np.asarray(shape, np.int32), "strides": np.asarray(strides, np.int64),
                     "ndim": np.asarray([len(shape)], np.int32)}
            for arg in v.shape_args(name):
                blob(given[arg].tobytes())
        for (_, dtype), shape in zip(v.outputs, output_shapes):
            blob(bytes([POISON]) * (int(np.prod(shape)) * np.dtype(NUMPY_TYPES[dtype]).itemsize))
        blob(np.asarray(list(grid) + list(threadgroup), dtype=np.int32).tobytes())
        for coords in (layout.left, layout.right, layout.dest):
            blob(np.ascontiguousarray(coords, dtype=np.int32).tobytes())
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:detect_stack_use_after_return=0")
        env.pop(FLUSH_ENV, None)
        if flush_subnormals:
            env[FLUSH_ENV] = "1"
        done = subprocess.run([str(self.binary)], input=b"".join(parts), capture_output=True, env=env)
        self.stderr = done.stderr.decode(errors="replace")
        if done.returncode:
            raise RuntimeError(f"kernel {key} failed (exit {done.returncode}):\n{self.stderr[-4000:]}")
        outs, raw, pos = [], done.stdout, 0
        for (_, dtype), shape in zip(v.outputs, output_shapes):
            n = int(np.frombuffer(raw[pos:pos + 8], np.uint64)[0])
            outs.append(np.frombuffer(raw[pos + 8:pos + 8 + n], NUMPY_TYPES[dtype]).reshape(shape).copy())
            pos += 8 + n
        return outs

    def _inputs_of(self, key: str):
        for (k, _), (_, v) in self.variants.items():
            if k == key:
                return v.inputs
        raise KeyError(f"no kernel variant {key!r} was built")

    def barriers(self) -> int:
        """threadgroup_barrier calls (summed over all threads) in the last run."""
        match = re.search(r"barriers (\d+)", self.stderr)
        return int(match.group(1)) if match else -1
