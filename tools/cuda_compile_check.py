"""Compile every int8nax CUDA kernel the way MLX's cuda_kernel does, without a GPU.

    python tools/cuda_compile_check.py [--nvcc nvcc] [--arch sm_90a] [--mlx-include DIR] [--only REGEX] [--trials]
    python tools/cuda_compile_check.py --nvrtc /path/libnvrtc.so.13    # NVRTC with MLX's options
    python tools/cuda_compile_check.py --ptx --keep B [--same-as A]    # PTX only; same code as tree A's?
    python tools/cuda_compile_check.py --prebuild [--jobs N]    # on a CUDA machine: fill its kernel cache

MLX wraps each body as `__global__ void name(inputs..., outputs...) { constexprs; body }` inside
namespace mlx::core::cu, after its header mlx/backend/cuda/device/utils.cuh (a header compiled into
libmlx, not shipped as a file). This tool writes a stand-in for that header (Shape, Strides)
unless --mlx-include points at a copy of the real one, assembles the same translation unit for
every kernel and template instance the backend uses, compiles it to a cubin with nvcc and prints
ptxas's register / shared-memory / spill report. It does not run anything.

Kernels that include MLX's own device headers by name (cuda_source.MLX_BINARY_OPS: the SwiGLU
quantization calls MLX's functors, and its bits are theirs) compile only against the real ones:
without them in --mlx-include (a folder holding MLX's JIT headers, e.g. extracted from the libmlx
of the MLX version in use) those instances are skipped, with one line saying so; no stand-in.
--same-as reports an instance with no PTX in DIR as new (not a difference).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

from int8nax.backends.cuda import binary_cache, choice as cuda_choice, plans as cuda_plans, source as cuda_source
from int8nax.bench import argtypes

STAND_IN = """#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda/std/array>
namespace mlx::core::cu {
using Shape = cuda::std::array<int32_t, 10>;
using Strides = cuda::std::array<int64_t, 10>;
}
"""

CUDA_TYPES = binary_cache.CUDA_TYPES
"""MLX's C++ type of each dtype (the instances below name their arguments' types by it)."""
_DTYPES = {ctype: name for name, ctype in CUDA_TYPES.items()}


def instance(spec, input_types, output_types, template) -> binary_cache.Instance:
    """The binary cache's Instance of a kernel object with these argument types (CUDA_TYPES' C++
    names) and template arguments."""
    return binary_cache.Instance(spec, tuple((_DTYPES[c], 1) for c in input_types),
                                 tuple(_DTYPES[c] for c in output_types), tuple(template))


def translation_unit(spec, input_types, output_types, template) -> str:
    """The source MLX would hand to NVRTC for this kernel object and these template arguments
    (binary_cache.mlx_source: MLX's text byte for byte)."""
    return binary_cache.mlx_source(instance(spec, input_types, output_types, template))


W8A8_OUTPUTS = (("float16", False, True, "float32"), ("bfloat16", False, True, "float32"),
                ("float32", False, True, "float32"), ("float16", True, True, "float32"),
                ("bfloat16", True, True, "float32"), ("float16", True, False, "float32"),
                ("bfloat16", True, True, "bfloat16"), ("float16", True, True, "float16"),
                ("float16", False, True, "float16"))
"""(output type, NARROW, HAS_BIAS, the bias's type) of every W8A8 instance: the eft epilogue for
each output type with a bias, the narrow one where it changes the code (backends/cuda/graphs.py,
epilogue_template) with a bias, and without one for float16 (the narrow path's other branch); the
bias in float32 (int8nax.nn's layers, the placeholder), and in the output's own 16-bit type on
each epilogue (the kernels read a bias in its own type)."""


def epilogue_tag(narrow: bool, has_bias: bool = True, bias_type: str = "float32") -> str:
    """The label words of a W8A8 instance's epilogue (none for eft with a float32 bias: the labels
    of earlier trees, which --same-as looks for)."""
    return ((" narrow" if narrow else "") + ("" if has_bias else " nobias")
            + ("" if bias_type == "float32" else f" bias {bias_type}"))


def w8a8_inputs(bias_type: str) -> list[str]:
    """pack, w, scale_w, bias: the inputs of every fused W8A8 GEMM (the persistent ones add `plan`)."""
    return ["int8_t", "int8_t", "float", CUDA_TYPES[bias_type]]


OLD_LABELS = {"simt": "simt", "cpasync": "sm90", "tma-unspecialized": "tma_simple", "tma-ws-cooperative": "tma_ws",
              "tma-ws-pingpong": "tma_pp"}
"""The label prefixes before the variants took their schedule names: --same-as also looks for a
kernel's PTX under its old label, so a tree from before the rename can be compared."""


def w8a8_instances(prefix: str, spec, inputs, tmpl):
    """One instance per W8A8_OUTPUTS entry of a fused W8A8 GEMM labelled `prefix`; inputs: those
    after the bias (the persistent kernels' `plan`)."""
    for out, narrow, has_bias, bias_type in W8A8_OUTPUTS:
        yield (f"{prefix} {out}{epilogue_tag(narrow, has_bias, bias_type)}", spec, w8a8_inputs(bias_type) + inputs,
               [CUDA_TYPES[out]], tmpl + [("TOut", out), ("HAS_BIAS", has_bias), ("NARROW", narrow)])


def trial_instances():
    """(label, spec, input types, output types, template) of the GEMV's trial schedules
    (cuda_plans.GEMV_TRIALS), as the plans sweep at decode meets them: the int32 GEMV and the
    quantizing W8A8 GEMV on bfloat16 with the narrow epilogue, with a float32 bias and without."""
    row = cuda_choice.VARIANTS[cuda_choice.GEMV]
    for cfg in cuda_plans.GEMV_TRIALS.values():
        tmpl = row.template(cfg)
        yield (f"{row.name} i32 {cfg.name}", row.specs(cfg).int32, ["int8_t", "int8_t"], ["int32_t"], tmpl)
        for has_bias in (True, False):
            yield (f"{row.name} w8a8_x {cfg.name} bfloat16{epilogue_tag(True, has_bias)}", row.quantizing(),
                   [CUDA_TYPES["bfloat16"], "int8_t", "float", "float"], [CUDA_TYPES["bfloat16"]],
                   [("T", "bfloat16")] + tmpl + [("HAS_BIAS", has_bias), ("NARROW", True)])


def instances(arch: str, trials: bool = False):
    """(label, spec, input types, output types, template) for every kernel the backend builds:
    every tile of every cuda_choice.VARIANTS row (the sm90 ones on sm_90*, the sm80 ones from
    sm_80), with its atomic int32 kernel and its quantizing W8A8 kernel where it has them, then the quantization (plain and
    SwiGLU), reduction and SM-count kernels; with `trials`, then trial_instances()."""
    number = int(re.sub(r"\D", "", arch) or 0)
    for row in cuda_choice.VARIANTS.values():
        if (row.family == "sm90" and not arch.startswith("sm_90")) or (row.family == "sm80" and number < 80):
            continue
        plan_input = ["int8_t"] if row.persistent else []  # the persistent kernels' `plan`
        maps = ["uint8_t"] if row.maps else []
        for cfg in row.configs:
            specs = row.specs(cfg)
            tmpl = row.template(cfg)
            yield (f"{row.name} i32 {cfg.name}", specs.int32, ["int8_t", "int8_t"] + plan_input, ["int32_t"] + maps, tmpl)
            if specs.int32_packed is not None:  # a split W8A8 plan's workspace, of an activation pack
                yield (f"{row.name} i32pack {cfg.name}", specs.int32_packed, ["int8_t", "int8_t"] + plan_input,
                       ["int32_t"], tmpl)
            if specs.int32_atomic is not None:  # int8_matmul's split plans with reduce="atomic" (one output)
                yield (f"{row.name} i32atomic {cfg.name}", specs.int32_atomic, ["int8_t", "int8_t"] + plan_input,
                       ["int32_t"], tmpl)
            yield from w8a8_instances(f"{row.name} w8a8 {cfg.name}", specs.w8a8, plan_input, tmpl)
            if row.quantizing is not None:  # x, w, scale_w, bias; T is x's and y's type
                for out, narrow, has_bias, bias_type in W8A8_OUTPUTS:
                    yield (f"{row.name} w8a8_x {cfg.name} {out}{epilogue_tag(narrow, has_bias, bias_type)}",
                           row.quantizing(), [CUDA_TYPES[out], "int8_t", "float", CUDA_TYPES[bias_type]], [CUDA_TYPES[out]],
                           [("T", out)] + tmpl + [("HAS_BIAS", has_bias), ("NARROW", narrow)])
    for launch in cuda_plans.CUDA_QUANT_LAUNCHES:
        for t in cuda_plans.ITEMSIZE:  # the activation dtypes
            yield (f"quantize {t} {launch.threads}x{launch.held}", cuda_source.quantize(), [CUDA_TYPES[t]],
                   ["int8_t"], [("T", t)] + launch.template())
    for launch in cuda_plans.SWIGLU_QUANT_LAUNCHES:
        for t, itemsize in cuda_plans.ITEMSIZE.items():
            if cuda_plans.swiglu_held_bytes(launch, itemsize) > cuda_plans.SWIGLU_HELD_BYTES:
                continue  # cannot start (too many registers), so never built: cuda_swiglu_quant_launch
            yield (f"swiglu_quantize {t} {launch.threads}x{launch.held}", cuda_source.swiglu_quantize(),
                   [CUDA_TYPES[t]], ["int8_t"], [("T", t)] + launch.template())
    for held in range(1, cuda_plans.STAGED_MAX_HELD + 1):  # the staged kernel at each `held` the rule can give
        hidden = min(held * cuda_plans.STAGED_THREADS * 8, cuda_plans.staged_max_hidden(2))
        launch = cuda_plans.CudaStagedLaunch(cuda_plans.STAGED_THREADS, held, hidden, 2, 132)
        for t in (t for t, itemsize in cuda_plans.ITEMSIZE.items() if itemsize == 2):  # cuda_swiglu_staged_launch's
            yield (f"swiglu_quantize_staged {t} {launch.threads}x{held}", cuda_source.swiglu_quantize_staged(
                launch.stage_bytes), [CUDA_TYPES[t]], ["int8_t"], [("T", t)] + launch.template())
    yield ("reduce i32", cuda_source.reduce_int32(), ["int32_t"], ["int32_t"], [])
    for narrow, bias_type in ((False, "float32"), (True, "float32"), (True, "float16")):
        yield (f"reduce w8a8{epilogue_tag(narrow, True, bias_type)}", cuda_source.reduce_w8a8(),
               ["int32_t", "int8_t", "float", CUDA_TYPES[bias_type]], ["__half"],
               [("TOut", "float16"), ("HAS_BIAS", True), ("NARROW", narrow)])
    yield ("count_sms", cuda_source.count_sms(), ["int32_t"], ["int32_t"], [("CAPACITY", 1024)])
    if trials and number >= 80:
        yield from trial_instances()


def mlx_headers(spec) -> list[str]:
    """The MLX headers a kernel's header includes by their JIT names (mlx/...)."""
    return cuda_source.mlx_headers(spec.header)


def stem(label: str) -> str:
    """The file name (without extension) of an instance's .cu, .cubin and .ptx files."""
    return re.sub(r"[^A-Za-z0-9]+", "_", label)


def normalized_ptx(path: str) -> list[str]:
    """A PTX file's lines without comments, the kernel's name (it carries the header digest; with
    its length in the mangled name),
    nvcc's per-file prefixes of internal symbols and of anonymous namespaces (those carry a digest
    of the source: an MLX header's `cuda::std::ignore`, say) and the mangled scope of
    function-local statics (the template arguments of the function that declares them: an
    epilogue type's, say)."""
    text = open(path).read()
    # the kernel's name: its digest, then MLX's suffix of template values (lower case, digits, _)
    text = re.sub(r"\d*custom_kernel_int8nax_\w+?_[0-9a-f]{8}[a-z0-9_]*(?=E)", "KERNEL", text)
    text = re.sub(r"_ZN\d+_INTERNAL_[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+", "_INTERNAL", text)
    text = re.sub(r"\d*_GLOBAL__N__[0-9a-f]+_\d+_\w+?_cu_[0-9a-f]+", "_GLOBAL__N_", text)
    text = re.sub(r"_ZZN\w*E\d+([A-Za-z_]\w*)", r"LOCAL_\1", text)
    return [line for line in text.splitlines() if not line.lstrip().startswith("//")]


def nvrtc_compile(lib_path: str, source: str, arch: str, include_dirs) -> tuple[bool, str]:
    """Compile `source` with NVRTC and MLX's options (mlx-facts section 3: only
    --device-as-default-execution-space, --gpu-architecture and include paths), plus
    --ptxas-options=-v for the register report; (ok, log)."""
    import ctypes

    lib = ctypes.CDLL(lib_path)
    prog = ctypes.c_void_p()
    src = source.encode()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"kernel.cu", 0, None, None)
    if rc != 0:
        return False, f"nvrtcCreateProgram failed ({rc})"
    opts = [b"--device-as-default-execution-space", f"--gpu-architecture={arch}".encode(), b"--ptxas-options=-v"]
    opts += [f"--include-path={d}".encode() for d in include_dirs]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    buf = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, buf)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return rc == 0, buf.value.decode(errors="replace")


def prebuild(arch: str, only: str | None, jobs: int | None, trials: bool = False) -> int:
    """Build every instance (matching `only`) into this CUDA machine's kernel cache
    (backends/cuda/binary_cache.py, `jobs` NVRTC compiles at once), so that no later call or test
    compiles one in its process; 1 where there is no cache here or a build failed."""
    from int8nax.backends.cuda import kernels

    cache = kernels.binary_cache()
    if cache is None:
        print(f"prebuild: no kernel cache here ({kernels.binary_cache_status()})")
        return 1
    found = [instance(spec, ins, outs, tmpl)
             for label, spec, ins, outs, tmpl in instances(arch, trials) if not only or re.search(only, label)]
    built = cache.prebuild(found, jobs, binary_cache.terminal_progress("building CUDA kernels"))
    print(f"prebuild: {len(found)} instances, {built} built; {kernels.binary_cache_status()}")
    return 1 if cache.counts.failed else 0


def arch(text: str) -> str:
    """An SM architecture as nvcc's -arch and NVRTC's --gpu-architecture take it (sm_90a, sm_80)."""
    if not re.fullmatch(r"sm_\d{2,3}[af]?", text):
        raise argparse.ArgumentTypeError(f"expected an SM architecture like sm_90a or sm_80, got {text!r}")
    return text


def nvrtc_library(text: str) -> str:
    """A libnvrtc.so this process can load (ctypes), so that a wrong path fails before any work."""
    import ctypes

    try:
        ctypes.CDLL(text)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"expected a loadable libnvrtc.so, got {text!r}: {exc}") from None
    return text


CUDA_INCLUDE = "/usr/local/cuda/include"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # checked below, only where it runs: --nvrtc and --prebuild need no nvcc
    parser.add_argument("--nvcc", default="nvcc", help="nvcc to compile with (default: the one on PATH)")
    parser.add_argument("--arch", default="sm_90a", type=arch)
    parser.add_argument("--mlx-include", type=argtypes.folder, help="folder holding mlx/backend/cuda/device/utils.cuh")
    parser.add_argument("--only", type=argtypes.regex, help="regex on the instance label")
    parser.add_argument("--keep", type=argtypes.output_folder, help="write the .cu and .cubin files into this folder")
    parser.add_argument("--nvrtc", type=nvrtc_library,
                        help="compile with this libnvrtc.so (MLX's options) instead of nvcc")
    parser.add_argument("--ptx", action="store_true",
                        help="emit PTX into --keep's folder instead of cubins (no ptxas: fast)")
    parser.add_argument("--same-as", metavar="DIR", type=argtypes.folder,
                        help="with --ptx: compare every kernel's PTX with DIR's (another tree's --ptx --keep "
                             "folder) instruction for instruction, names aside (each kernel's name carries its "
                             "header digest); exit 1 where any differs")
    parser.add_argument("--cuda-include", type=argtypes.folder,
                        help=f"CUDA headers for --nvrtc (default: {CUDA_INCLUDE})")
    parser.add_argument("--prebuild", action="store_true",
                        help="on a CUDA machine: build every instance into its kernel cache (MLX's NVRTC and "
                             "headers, --arch ignored: the GPU's), so no later process compiles one")
    parser.add_argument("--jobs", type=argtypes.count(1),
                        help="with --prebuild: NVRTC compiles at once (default: the CPUs)")
    parser.add_argument("--trials", action="store_true",
                        help="also the GEMV's trial schedules (cuda_plans.GEMV_TRIALS), which no rule builds")
    args = parser.parse_args(argv)
    if args.prebuild:
        from int8nax.backends.cuda import device
        return prebuild(binary_cache.arch_of(device.compute_capability()), args.only, args.jobs, args.trials)
    if args.ptx and not args.keep:
        parser.error("--ptx writes into --keep's folder: name one")
    if args.same_as and not args.ptx:
        parser.error("--same-as compares PTX: add --ptx")
    if not args.nvrtc:
        try:
            argtypes.program(args.nvcc)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument --nvcc: {exc}")
    elif args.cuda_include is None:
        if not os.path.isdir(CUDA_INCLUDE):
            parser.error(f"argument --cuda-include: expected an existing folder, got none and the default "
                         f"{CUDA_INCLUDE!r} does not exist: name the CUDA headers' folder")
        args.cuda_include = CUDA_INCLUDE
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        include = args.mlx_include
        if include is None:
            include = os.path.join(tmp, "inc")
            os.makedirs(os.path.join(include, "mlx/backend/cuda/device"))
            with open(os.path.join(include, "mlx/backend/cuda/device/utils.cuh"), "w") as f:
                f.write(STAND_IN)
        out_dir = args.keep or tmp
        os.makedirs(out_dir, exist_ok=True)
        skipped = []
        for label, spec, ins, outs, tmpl in instances(args.arch, args.trials):
            if args.only and not re.search(args.only, label):
                continue
            missing = [h for h in mlx_headers(spec) if not os.path.isfile(os.path.join(include, h))]
            if missing:
                skipped.append((label, missing[0]))
                continue
            cu = os.path.join(out_dir, stem(label) + ".cu")
            with open(cu, "w") as f:
                f.write(translation_unit(spec, ins, outs, tmpl))
            arch_num = args.arch[3:]
            if args.nvrtc:
                with open(cu) as f:
                    ok, stderr = nvrtc_compile(args.nvrtc, f.read(), args.arch,
                                               [include, args.cuda_include, os.path.join(args.cuda_include, "cccl")])
                returncode = 0 if ok else 1
            elif args.ptx:
                cmd = [args.nvcc, "-ptx", f"-arch={args.arch}", "-std=c++17", "-I", include, "-o", cu[:-3] + ".ptx", cu]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                returncode, stderr = proc.returncode, proc.stderr
            else:
                cmd = [args.nvcc, "-cubin", f"-gencode=arch=compute_{arch_num},code=sm_{arch_num}",
                       "-std=c++17", "-Xptxas", "-v", "-I", include, "-o", cu[:-3] + ".cubin", cu]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                returncode, stderr = proc.returncode, proc.stderr
            report = " ".join(re.findall(r"(Used \d+ registers.*|\d+ bytes stack frame.*|\(C\d{4}\).*)", stderr))
            if args.same_as and returncode == 0:
                other = os.path.join(args.same_as, os.path.basename(cu)[:-3] + ".ptx")
                first, space, rest = label.partition(" ")
                old = os.path.join(args.same_as, stem(OLD_LABELS.get(first, first) + space + rest) + ".ptx")
                if not os.path.exists(other) and os.path.exists(old):
                    other = old
                if not os.path.exists(other):
                    report = "new: no PTX in " + args.same_as
                else:
                    same = normalized_ptx(cu[:-3] + ".ptx") == normalized_ptx(other)
                    report = "same PTX as " + args.same_as if same else "PTX DIFFERS from " + args.same_as
                    returncode = 0 if same else 1
            status = "ok " if returncode == 0 else "ERR"
            print(f"{status} {label:40s} smem={spec.shared_memory:6d}  {report}")
            if returncode != 0:
                failures += 1
                if not args.same_as:
                    print(stderr[-4000:])
        if skipped:
            print(f"skipped {len(skipped)} instances ({skipped[0][0]} ...): they include MLX's own {skipped[0][1]}, "
                  f"not found under {args.mlx_include or 'the stand-in folder'}; pass --mlx-include DIR holding "
                  "MLX's JIT headers to build them")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
