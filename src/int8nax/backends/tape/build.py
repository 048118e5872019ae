"""Build tape.cpp into the _tape extension, once per machine, and load it.

The extension is compiled with the machine's C++ compiler (CXX, else c++) against MLX's own
headers and library (the wheel ships both) and nanobind's sources, in nanobind's domain "mlx":
that is how its functions take and give MLX's own mx.array objects (MLX's Python module is a
nanobind module of that domain). The result is kept under backends.cache.cache_dir()/tape, in a
folder named by a digest of what the binary depends on: the source, MLX's and nanobind's versions,
Python's extension suffix and the compiler. A file is written whole (a temporary file renamed into
place), so processes building at once never load half of one.

Nothing here raises for a machine that cannot build: load() gives (None, why).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import mlx.core as mx

from ..cache import cache_dir
from ..mlx_install import mlx_package_dir

SOURCE = Path(__file__).with_name("tape.cpp")
MODULE = "_tape"
BUILD_TIMEOUT_S = 600
"""An extension build takes ~6 s on the CPU box (nanobind's sources are most of it)."""


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def _nanobind():
    try:
        import nanobind
    except ImportError:
        return None
    return nanobind


def nanobind_version() -> str | None:
    nanobind = _nanobind()
    return None if nanobind is None else nanobind.__version__


def _suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or importlib.machinery.EXTENSION_SUFFIXES[0]


def target(compiler: str, nanobind) -> Path:
    """Where the extension for this MLX installation (its folder: the binary links its libmlx there),
    nanobind, Python and compiler lives."""
    key = "|".join([SOURCE.read_text(), mx.__version__, str(mlx_package_dir()), nanobind.__version__, _suffix(),
                    compiler, sys.platform])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache_dir() / "tape" / digest / (MODULE + _suffix())


def command(compiler: str, nanobind, out: Path) -> list[str]:
    """The compiler's command line for the extension at `out`."""
    root = mlx_package_dir()
    nb_src = Path(nanobind.source_dir())
    cmd = [compiler, "-std=c++20", "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-DNDEBUG", "-DNB_DOMAIN=mlx",
           f"-I{nanobind.include_dir()}", f"-I{nb_src.parent / 'ext' / 'robin_map' / 'include'}",
           f"-I{sysconfig.get_paths()['include']}", f"-I{root / 'include'}",
           str(SOURCE), str(nb_src / "nb_combined.cpp"),
           f"-L{root / 'lib'}", "-lmlx", f"-Wl,-rpath,{root / 'lib'}", "-o", str(out)]
    if sys.platform == "darwin":
        cmd.insert(1, "-undefined")
        cmd.insert(2, "dynamic_lookup")
    return cmd


def build(compiler: str, nanobind, out: Path) -> str | None:
    """Compile the extension into `out` (whole, or not at all); None, or why it failed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=out.name + ".", suffix=".tmp", dir=out.parent)
    os.close(fd)
    try:
        done = subprocess.run(command(compiler, nanobind, Path(tmp)), capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return f"{compiler} failed (exit {done.returncode}): " + " | ".join(tail)
        os.replace(tmp, out)
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{compiler} could not build it: {exc}"
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


_LOADED: dict = {}
"""Extension path -> its module: nanobind registers a module's types once per process."""


def load():
    """(the _tape module, None), built here first if this machine has none yet; or (None, why)."""
    compiler, nanobind = _compiler(), _nanobind()
    if compiler is None:
        return None, "no C++ compiler (set CXX, or install c++)"
    if nanobind is None:
        return None, "nanobind is not installed"
    if mlx_package_dir() is None:
        return None, "no MLX package folder with mlx.core on sys.path"
    try:
        out = target(compiler, nanobind)
        if out in _LOADED:
            return _LOADED[out], None
        if not out.exists():
            why = build(compiler, nanobind, out)
            if why is not None:
                return None, why
        spec = importlib.util.spec_from_file_location(MODULE, out)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (OSError, ImportError) as exc:
        return None, f"the extension did not load: {exc}"
    _LOADED[out] = module
    return module, None
