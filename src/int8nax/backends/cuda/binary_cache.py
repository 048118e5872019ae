"""Compiled CUDA kernels kept on disk, so that a process launches what an earlier one built.

MLX compiles every `mx.fast.cuda_kernel` instance with NVRTC in every process (seconds each, one at
a time under one lock) and never writes the result to its disk cache, although it looks there
first: its JIT module reads `<cache>/<module>.ptx` (and `.txt`, the kernel's lowered name) before
it compiles, whatever the kernel (mlx/backend/cuda/jit_module.cpp; custom kernels only skip the
write). This module writes the entry MLX would have written:

- the source: MLX's generated text for the instance (`mlx_source`: MLX's default header, our
  `header`, the `__global__` signature MLX declares from the inputs' dtypes, shapes named in the
  body, outputs and template constants, then the body), byte for byte;
- the name: `<kernel name>_<std::hash of that source, hex>` (`module_name`), the key MLX computes
  on every evaluation (libstdc++'s std::hash of a string, `std_hash`);
- the binary: a cubin from the NVRTC library MLX itself loads, with MLX's options and in-memory
  headers (read out of MLX's own libmlx.so, `mlx_jit_headers`), so the bytes are those MLX would
  have built;
- the folder: MLX's (`cache_dir`: MLX_PTX_CACHE_DIR, else <temp>/mlx/<version>/ptx).

A miss costs what it cost before (NVRTC, in this process or in `prebuild`'s parallel threads), a
hit a file read; where anything here cannot work (no NVRTC, no libmlx symbols, a read-only folder),
MLX compiles as it always did, and the counts say why (kernels.py, binary_cache_status). Entries are written whole (a temporary file
renamed into place, the `.txt` before the `.ptx` MLX tests for), so processes filling the folder at
once never expose half an entry; each carries a sidecar (`.int8nax`: the cubin's SHA-256 and
architecture) by which a corrupt or foreign entry is found and rebuilt.

No GPU is needed to build: NVRTC compiles for a named architecture (`arch_of`: MLX's sm_XY, with
the 'a' suffix from compute capability 9.0). Nothing here launches anything.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import struct
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..kernel_spec import KernelSpec

CACHE_ENV = "MLX_PTX_CACHE_DIR"
"""MLX's own setting for its kernel cache folder (read once, at MLX's first JIT build)."""

DISABLE_ENV = "INT8NAX_CUDA_BINARY_CACHE"
"""'off' leaves every build to MLX (NVRTC in each process), as without this module."""

SIDECAR = ".int8nax"
"""The suffix of the file beside each entry this module wrote: {"sha256", "arch", "nvrtc"}."""

MAX_FILE_NAME = 245
"""MLX splits module names longer than this into nested folders (jit_module.cpp, get_ptx_path)."""

MLX_DEFAULT_HEADER = '\n#include "mlx/backend/cuda/device/utils.cuh"\n\n#include <cooperative_groups.h>\n\n'
"""The text MLX puts before every custom kernel's `header` (custom_kernel.cpp, default_header)."""

CUDA_TYPES = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
              "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
              "float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
              "complex64": "mlx::core::cu::complex64_t"}
"""MLX's dtype_to_cuda_type: the C++ type of an argument or a Dtype template constant."""

TYPE_STRINGS = {"bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
                "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
                "float16": "float16_t", "bfloat16": "bfloat16_t", "float32": "float", "float64": "double",
                "complex64": "complex64_t"}
"""MLX's get_type_string: how a Dtype template argument enters the kernel's name."""


# ---- what MLX computes for an instance ----

@dataclass(frozen=True)
class Instance:
    """One compiled kernel as MLX keys it: a spec, the inputs' (dtype name, ndim), the outputs'
    dtype names and the template arguments ((name, int | bool | dtype name), in call order)."""

    spec: KernelSpec
    inputs: tuple[tuple[str, int], ...]
    outputs: tuple[str, ...]
    template: tuple[tuple[str, object], ...]

    @staticmethod
    def of(spec: KernelSpec, inputs, output_dtypes, template) -> "Instance":
        """The instance a call `kernel(inputs=..., output_dtypes=..., template=...)` of the
        kernel object built from `spec` compiles (inputs: mx arrays; dtypes: mx.Dtype)."""
        return Instance(spec, tuple((dtype_name(x.dtype), x.ndim) for x in inputs),
                        tuple(dtype_name(d) for d in output_dtypes),
                        tuple((name, _template_value(v)) for name, v in (template or ())))


def dtype_name(dtype) -> str:
    """'float16' for mx.float16 (MLX's Dtype prints as 'mlx.core.float16')."""
    return str(dtype).rsplit(".", 1)[-1]


def _template_value(v):
    if isinstance(v, (bool, int)):
        return v
    return dtype_name(v)


def kernel_name(inst: Instance) -> str:
    """"custom_kernel_<name>" plus one suffix a template argument: _<int>, _t / _f, _<type string>."""
    parts = []
    for _, v in inst.template:
        if isinstance(v, bool):
            parts.append("_t" if v else "_f")
        elif isinstance(v, int):
            parts.append(f"_{v}")
        else:
            parts.append("_" + TYPE_STRINGS[v])
    return f"custom_kernel_{inst.spec.name}" + "".join(parts)


def mlx_source(inst: Instance) -> str:
    """The text MLX hands NVRTC for `inst` (custom_kernel.cpp, build_kernel): an input's shape,
    strides and ndim are declared only where the body names them, and only for inputs of rank >= 1."""
    spec = inst.spec
    lines = [MLX_DEFAULT_HEADER, spec.header, "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n",
             f"__global__ void {kernel_name(inst)}(\n"]
    for name, (dtype, ndim) in zip(spec.input_names, inst.inputs):
        lines.append(f"    const {CUDA_TYPES[dtype]}* {name},\n")
        if ndim > 0:
            if f"{name}_shape" in spec.source:
                lines.append(f"    const __grid_constant__ Shape {name}_shape,\n")
            if f"{name}_strides" in spec.source:
                lines.append(f"    const __grid_constant__ Strides {name}_strides,\n")
            if f"{name}_ndim" in spec.source:
                lines.append(f"    const __grid_constant__ int {name}_ndim,\n")
    outs = [f"    {CUDA_TYPES[dtype]}* {name}" for name, dtype in zip(spec.output_names, inst.outputs)]
    lines.append(",\n".join(outs) + ") {\n")
    if inst.template:
        for name, v in inst.template:
            if isinstance(v, bool):
                lines.append(f"  constexpr bool {name} = {'true' if v else 'false'};\n")
            elif isinstance(v, int):
                lines.append(f"  constexpr int {name} = {v};\n")
            else:
                lines.append(f"  using {name} = {CUDA_TYPES[v]};\n")
        lines.append("\n")
    lines.append(spec.source)
    lines.append("\n}\n\n} // namespace mlx::core::cu\n")
    return "".join(lines)


_MASK = (1 << 64) - 1
_MUL = (0xC6A4A793 << 32) + 0x5BD1E995
_SEED = 0xC70F6907


def _shift_mix(v: int) -> int:
    return v ^ (v >> 47)


def std_hash(data: bytes) -> int:
    """libstdc++'s std::hash<std::string> on 64-bit Linux (std::_Hash_bytes, seed 0xc70f6907):
    what MLX appends to a custom kernel's name to key its modules."""
    n = len(data)
    h = (_SEED ^ (n * _MUL)) & _MASK
    whole = n & ~7
    for (word,) in struct.iter_unpack("<Q", data[:whole]):
        h ^= (_shift_mix((word * _MUL) & _MASK) * _MUL) & _MASK
        h = (h * _MUL) & _MASK
    if n & 7:
        h ^= int.from_bytes(data[whole:], "little")
        h = (h * _MUL) & _MASK
    h = (_shift_mix(h) * _MUL) & _MASK
    return _shift_mix(h)


def module_name(inst: Instance, source: str | None = None) -> str:
    """MLX's key for the instance's module: "<kernel name>_<std::hash of its source, hex>"."""
    source = mlx_source(inst) if source is None else source
    return f"{kernel_name(inst)}_{std_hash(source.encode()):x}"


def arch_of(cc: tuple[int, int]) -> str:
    """NVRTC's --gpu-architecture for a compute capability, as MLX passes it: sm_90a on 9.0."""
    return f"sm_{cc[0]}{cc[1]}{'a' if cc[0] >= 9 else ''}"


# ---- where MLX looks ----

def _temp_directory() -> Path:
    """std::filesystem::temp_directory_path() on POSIX: TMPDIR, TMP, TEMP, TEMPDIR, else /tmp."""
    for var in ("TMPDIR", "TMP", "TEMP", "TEMPDIR"):
        if os.environ.get(var):
            return Path(os.environ[var])
    return Path("/tmp")


def cache_dir(mlx_version: str) -> Path:
    """MLX's kernel cache folder: MLX_PTX_CACHE_DIR, else <temp>/mlx/<MLX version>/ptx."""
    where = os.environ.get(CACHE_ENV)
    return Path(where) if where else _temp_directory() / "mlx" / mlx_version / "ptx"


def entry_path(folder: Path, module: str) -> Path:
    """`<folder>/<module>.ptx`, a long name split into folders of MAX_FILE_NAME characters as MLX does."""
    if len(module) <= MAX_FILE_NAME:
        return folder / (module + ".ptx")
    path, offset = folder, 0
    while len(module) - offset > MAX_FILE_NAME:
        path = path / module[offset:offset + MAX_FILE_NAME]
        offset += MAX_FILE_NAME
    return path / (module[offset:] + ".ptx")


# ---- MLX's NVRTC setup, read from its installation ----

def include_paths(package: Path) -> list[Path]:
    """The --include-path folders MLX gives NVRTC (jit_module.cpp, include_path_args): its bundled
    headers, their CCCL, then the CUDA headers of the nvidia wheel beside it, else CUDA_HOME,
    CUDA_PATH or /usr/local/cuda."""
    paths = []
    include = package / "include"
    if include.is_dir():
        paths.append(include)
        if (include / "cccl").is_dir():
            paths.append(include / "cccl")
    wheel = package.parent / "nvidia" / "cu13" / "include"
    if wheel.is_dir():
        paths.append(wheel)
    else:
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        paths.append(Path(home) / "include")
    return paths


_JIT_SYMBOL = re.compile(rb"_ZN3mlx4coreL\d+jit_source_(\w+?)E\x00")


def elf_char_arrays(path: Path, pattern: re.Pattern = _JIT_SYMBOL) -> dict[str, bytes]:
    """{group(1) of the symbol name: the bytes of that symbol up to its first NUL} for every
    symbol in `path`'s ELF64 symbol table (.symtab) whose NUL-terminated name matches `pattern`
    (one match group). MLX embeds its device headers as static char arrays
    (mlx::core::jit_source_<name>), which its NVRTC programs register as in-memory headers."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not a little-endian ELF64 file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found: dict[str, bytes] = {}
    for _, kind, _, _, off, size, link, _, _, entsize in sections:
        if kind != 2 or not entsize:  # SHT_SYMTAB
            continue
        strtab = sections[link]
        strings = data[strtab[4]:strtab[4] + strtab[5]]
        wanted = {m.start(): m.group(1).decode() for m in pattern.finditer(strings)}
        for i in range(size // entsize):
            st_name, _, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", data, off + i * entsize)
            name = wanted.get(st_name)
            if name is None or name in found or not 0 < st_shndx < len(sections):
                continue
            home = sections[st_shndx]
            start = home[4] + st_value - home[3]
            found[name] = data[start:start + st_size].split(b"\x00", 1)[0]
    return found


JIT_HEADER_PREFIX = "mlx/backend/cuda/device/"


@lru_cache(maxsize=4)
def mlx_jit_headers(library: str) -> tuple[tuple[str, bytes], ...]:
    """((include name, text as bytes), ...): the device headers MLX registers with every NVRTC program,
    read out of its libmlx.so (jit_source_config is config.h, the others <name>.cuh)."""
    arrays = elf_char_arrays(Path(library))
    if "utils" not in arrays:
        raise RuntimeError(f"{library} holds no jit_source_utils symbol (a stripped or unknown MLX build)")
    return tuple((JIT_HEADER_PREFIX + (f"{n}.h" if n == "config" else f"{n}.cuh"), text)
                 for n, text in sorted(arrays.items()))


def mlx_library(package: Path) -> Path:
    return package / "lib" / "libmlx.so"


# ---- NVRTC through ctypes ----

def _nvrtc_candidates(package: Path | None) -> list[str]:
    names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"]
    found = list(names)  # already loaded (libmlx needs it) or on the loader's path
    roots = [package.parent / "nvidia" / "cu13" / "lib"] if package else []
    roots += [Path(os.environ[v]) / "lib64" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    roots.append(Path("/usr/local/cuda/lib64"))
    found += [str(r / n) for r in roots for n in names if (r / n).exists()]
    return found


@lru_cache(maxsize=1)
def nvrtc(package: str | None = None):
    """The NVRTC library (ctypes.CDLL), the one MLX loaded where it has; OSError if none loads."""
    errors = []
    for candidate in _nvrtc_candidates(Path(package) if package else None):
        try:
            lib = ctypes.CDLL(candidate)
        except OSError as e:
            errors.append(str(e))
            continue
        lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        # NVRTC opens its builtins library by name when it compiles; one found beside it is
        # loaded first, so that name resolves where no loader path leads there.
        if "/" in candidate:
            for builtins in sorted(Path(candidate).parent.glob("libnvrtc-builtins.so.*")):
                try:
                    ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
                    break
                except OSError:
                    continue
        return lib
    raise OSError("no NVRTC library could be loaded: " + "; ".join(errors[-3:]))


def nvrtc_version(lib) -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"{major.value}.{minor.value}"


def nvrtc_compile(lib, source: str, program: str, name_expression: str, arch: str, includes, headers):
    """(cubin bytes, lowered name of `name_expression`) for `source` with MLX's NVRTC options:
    --device-as-default-execution-space, --gpu-architecture=<arch>, the include paths; headers:
    ((include name, text bytes), ...) registered with the program. RuntimeError with NVRTC's log on
    failure."""
    prog = ctypes.c_void_p()
    names = (ctypes.c_char_p * len(headers))(*[n.encode() for n, _ in headers])
    texts = (ctypes.c_char_p * len(headers))(*[t for _, t in headers])

    def check(rc, what):
        if rc != 0:
            raise RuntimeError(f"{what} failed: {lib.nvrtcGetErrorString(rc).decode()}")

    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), program.encode(), len(headers), texts, names),
          "nvrtcCreateProgram")
    try:
        check(lib.nvrtcAddNameExpression(prog, name_expression.encode()), "nvrtcAddNameExpression")
        options = [b"--device-as-default-execution-space", f"--gpu-architecture={arch}".encode()]
        options += [f"--include-path={p}".encode() for p in includes]
        argv = (ctypes.c_char_p * len(options))(*options)
        rc = lib.nvrtcCompileProgram(prog, len(options), argv)
        if rc != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            lib.nvrtcGetProgramLog(prog, log)
            raise RuntimeError(f"NVRTC could not compile {program}: {log.value.decode(errors='replace')[-2000:]}")
        lowered = ctypes.c_char_p()
        check(lib.nvrtcGetLoweredName(prog, name_expression.encode(), ctypes.byref(lowered)), "nvrtcGetLoweredName")
        mangled = lowered.value.decode()
        size = ctypes.c_size_t()
        check(lib.nvrtcGetCUBINSize(prog, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetCUBIN(prog, cubin), "nvrtcGetCUBIN")
        return cubin.raw, mangled
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


# ---- entries ----

@lru_cache(maxsize=1)
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())  # as MLX's own entries: mkstemp makes them private
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_entry(ptx: Path, cubin: bytes, name_expression: str, lowered: str, arch: str, nvrtc: str) -> None:
    """The entry MLX reads (`.txt` first: MLX takes the `.ptx` as the hit) and our sidecar."""
    _atomic_write(ptx.with_suffix(".txt"), f"{name_expression}\t{lowered}\n".encode())
    _atomic_write(ptx.with_suffix(SIDECAR), json.dumps(
        {"sha256": hashlib.sha256(cubin).hexdigest(), "arch": arch, "nvrtc": nvrtc}).encode())
    _atomic_write(ptx, cubin)


def entry_ok(ptx: Path, arch: str) -> bool:
    """Whether `ptx` is an entry this module wrote for `arch`, whole: its sidecar names the arch
    and the SHA-256 of the bytes there, and the `.txt` names a kernel."""
    try:
        meta = json.loads(ptx.with_suffix(SIDECAR).read_text())
        txt = ptx.with_suffix(".txt").read_text()
        return (meta.get("arch") == arch and "\t" in txt
                and hashlib.sha256(ptx.read_bytes()).hexdigest() == meta.get("sha256"))
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class Job:
    """Everything one build needs, computed before it starts (builds run on worker threads)."""

    source: str
    kernel: str
    module: str
    ptx: str
    arch: str
    package: str
    includes: tuple[str, ...]
    headers: tuple[tuple[str, bytes], ...]


def build(job: Job) -> str:
    """Compile `job` with NVRTC and write its entry; returns the module name."""
    lib = nvrtc(job.package)
    expression = "mlx::core::cu::" + job.kernel
    cubin, lowered = nvrtc_compile(lib, job.source, job.module + ".cu", expression, job.arch, job.includes, job.headers)
    write_entry(Path(job.ptx), cubin, expression, lowered, job.arch, nvrtc_version(lib))
    return job.module


# ---- the cache of this process ----

@dataclass
class Counts:
    found: int = 0    # entries already on disk (an earlier process built them)
    built: int = 0    # compiled here and written
    failed: int = 0   # left to MLX (the reason in `reason`)


class BinaryCache:
    """The entries of one MLX installation and GPU architecture; `ensure` is what a launch asks."""

    def __init__(self, arch: str, package: Path, mlx_version: str):
        self.arch, self.package, self.mlx_version = arch, package, mlx_version
        self.folder = cache_dir(mlx_version)
        self.counts = Counts()
        self.reason = ""
        self._ready: set[Instance] = set()
        self._lock = threading.Lock()

    def entry(self, inst: Instance) -> Path:
        """Where MLX looks for `inst`'s module."""
        return entry_path(self.folder, module_name(inst))

    def _missing(self, inst: Instance) -> Job | None:
        """The build `inst` needs, None where its entry is on disk and whole (counted as found)."""
        source = mlx_source(inst)
        module = module_name(inst, source)
        ptx = entry_path(self.folder, module)
        if entry_ok(ptx, self.arch):
            self.counts.found += 1
            return None
        return Job(source, kernel_name(inst), module, str(ptx), self.arch, str(self.package),
                   tuple(str(p) for p in include_paths(self.package)),
                   mlx_jit_headers(str(mlx_library(self.package))))

    def ensure(self, inst: Instance) -> None:
        """Make `inst`'s entry present before MLX first evaluates it: nothing once done in this
        process; else found on disk, or compiled now. Never raises: a failure leaves the build to
        MLX and is counted with its reason."""
        if inst in self._ready:
            return
        with self._lock:
            if inst in self._ready:
                return
            try:
                job = self._missing(inst)
                if job is not None:
                    build(job)
                    self.counts.built += 1
            except Exception as e:  # noqa: BLE001 - MLX compiles it instead, as without the cache
                self.counts.failed += 1
                self.reason = f"{type(e).__name__}: {e}"
            self._ready.add(inst)

    def prebuild(self, instances, jobs: int | None = None, progress=None) -> int:
        """Build the entries of `instances` that are missing, `jobs` NVRTC compiles at once
        (default: the CPUs); progress(done, total) after each. Returns how many were built."""
        todo: list[tuple[Instance, Job]] = []
        with self._lock:
            for inst in dict.fromkeys(instances):
                if inst in self._ready:
                    continue
                job = self._missing(inst)
                if job is None:
                    self._ready.add(inst)
                else:
                    todo.append((inst, job))
        if not todo:
            return 0
        jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo)))
        results = []
        # Threads: ctypes lets go of the GIL for each NVRTC call, and NVRTC compiles distinct
        # programs from several threads at once; processes would re-import a user's __main__.
        # The first build runs alone: NVRTC loads its builtins library at its first compile,
        # and compiles started before that has finished can fail to find it.
        results.append((todo[0][0], _try_build(todo[0][1])))
        if progress:
            progress(1, len(todo))
        with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="int8nax-nvrtc") as pool:
            futures = {pool.submit(_try_build, job): inst for inst, job in todo[1:]}
            for future in as_completed(futures):
                results.append((futures[future], future.result()))
                if progress:
                    progress(len(results), len(todo))
        with self._lock:
            for inst, error in results:
                if error:
                    self.counts.failed += 1
                    self.reason = error
                else:
                    self.counts.built += 1
                self._ready.add(inst)
        return sum(1 for _, error in results if not error)

    def ready(self) -> int:
        """Entries on disk this module wrote for this cache's architecture (what a new process
        of this machine loads instead of compiling)."""
        count = 0
        for sidecar in self.folder.rglob("*" + SIDECAR) if self.folder.is_dir() else ():
            try:
                count += json.loads(sidecar.read_text()).get("arch") == self.arch
            except (OSError, ValueError):
                continue
        return count


def _try_build(job: Job) -> str:
    """'' after building `job`, else the error (a worker's result)."""
    try:
        build(job)
        return ""
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {e}"


def terminal_progress(what: str):
    """progress(done, total) that keeps one line on a terminal's stderr (one line at the end elsewhere)."""
    tty = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if tty:
            print(f"\rint8nax: {what} {done}/{total}", end="\n" if done == total else "", file=sys.stderr, flush=True)
        elif done == total:
            print(f"int8nax: {what} {done}/{total}", file=sys.stderr, flush=True)

    return progress
