"""cuBLASLt's int8 GEMM called directly (ctypes), with a workspace and its algorithm heuristic.

This is the real CUDA anchor. torch._int_mm calls cublasLtMatmul with no workspace and no
algorithm search, which on Hopper rules out the sm90 kernels (it runs an Ampere kernel);
called as below, cuBLASLt picks its sm90 kernels (about 1.5x faster on the H200, geometric
mean over the seed shapes).

Problem: int32 out [M, N] = a int8 [M, K] . b int8 [N, K]^T (int8nax's weight layout).
cuBLASLt is column-major, so it computes out^T [N, M] (column-major = out row-major):
    A operand = b, stored column-major [K, N] (ld K), transposed (op T)
    B operand = a, stored column-major [K, M] (ld K), not transposed (op N)
    C = D     = out, column-major [N, M] (ld N), int32
which is the "TN" layout cuBLASLt's int8 kernels want. Compute type CUBLAS_COMPUTE_32I,
int32 alpha = 1 and beta = 0 in host memory.

The library: the libcublasLt that this process already has loaded (torch's), else the one
the CUDA wheels install (site-packages/nvidia/*/lib/libcublasLt.so.*), else the system's;
INT8NAX_CUBLASLT=/path/to/libcublasLt.so.N overrides. Buffers are torch tensors and the GEMM
is enqueued on torch's current stream, so torch's synchronize waits for it.

    lt = cublaslt.load()                 # raises Unavailable with the reason
    run = cublaslt.prepare(a_np, b_nk_np)
    out = run.call(); run.sync()         # out: torch int32 [M, N] on the GPU
    run.describe()                       # library, version, chosen algorithm
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from dataclasses import dataclass, field

import numpy as np

from . import Unavailable, import_torch

WORKSPACE_BYTES = 64 << 20
"""Workspace handed to cuBLASLt (the heuristic only offers kernels that fit in it)."""

MAX_ALGOS = 8
"""Algorithms asked of the heuristic; prepare() times each and keeps the fastest."""

TUNING_L2_BYTES = 60 << 20
"""The L2 the tuning rotates past: above the H200's 50 MB."""

TIMING_RUNS = 20
"""Launches per batch (5 batches, median) per candidate algorithm when prepare() chooses."""

# Enum values from cublasLt.h / library_types.h (stable across CUDA 11-13).
CUBLAS_COMPUTE_32I = 72
CUDA_R_8I = 3
CUDA_R_32I = 10
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
MATMUL_DESC_TRANSA = 3
MATMUL_DESC_TRANSB = 4
PREF_MAX_WORKSPACE_BYTES = 1
ALGO_CONFIG = {"id": 0, "tile": 1, "splitk": 2, "reduction": 3, "swizzle": 4, "custom": 5, "stages": 6,
               "inner_shape": 7, "cluster_shape": 8}

STATUS = {0: "SUCCESS", 1: "NOT_INITIALIZED", 3: "ALLOC_FAILED", 7: "INVALID_VALUE", 8: "ARCH_MISMATCH",
          11: "MAPPING_ERROR", 13: "EXECUTION_FAILED", 14: "INTERNAL_ERROR", 15: "NOT_SUPPORTED",
          16: "LICENSE_ERROR"}


class Algo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: opaque, 8 x uint64."""

    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t (96 bytes)."""

    _fields_ = [
        ("algo", Algo),
        ("workspaceSize", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("wavesCount", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


class CublasError(RuntimeError):
    pass


def check(status: int, what: str) -> None:
    """Raise CublasError naming the cuBLASLt function and the status when status != 0."""
    if status != 0:
        raise CublasError(f"{what} failed: CUBLAS_STATUS_{STATUS.get(status, status)} ({status})")


@dataclass(frozen=True)
class Layout:
    """One cuBLASLt matrix layout: (type, rows, cols, ld), column-major."""

    dtype: int
    rows: int
    cols: int
    ld: int


def tn_layouts(m: int, n: int, k: int) -> dict:
    """The operand layouts and ops of out [M, N] = a [M, K] . b [N, K]^T (module docstring)."""
    return {
        "transa": CUBLAS_OP_T,
        "transb": CUBLAS_OP_N,
        "A": Layout(CUDA_R_8I, k, n, k),  # b
        "B": Layout(CUDA_R_8I, k, m, k),  # a
        "C": Layout(CUDA_R_32I, n, m, n),  # out
    }


# ---- finding and loading the library ------------------------------------------------------

def _loaded_in_process() -> list[str]:
    """libcublasLt files this process has mapped already (Linux: /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libcublasLt.so" in line}
    except OSError:
        return []
    return sorted(p for p in paths if os.path.isfile(p))


def _in_site_packages() -> list[str]:
    found = []
    for entry in sys.path:
        if entry and os.path.isdir(os.path.join(entry, "nvidia")):
            found += sorted(glob.glob(os.path.join(entry, "nvidia", "**", "libcublasLt.so*"), recursive=True))
    return found


def candidates() -> list[str]:
    """Library paths to try, best first (see the module docstring)."""
    explicit = os.environ.get("INT8NAX_CUBLASLT")
    if explicit:
        return [explicit]
    out = _loaded_in_process() + _in_site_packages()
    for name in ("libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"):
        out.append(name)  # the dynamic linker's own search
    return list(dict.fromkeys(out))


def open_library(paths=None):
    """(ctypes.CDLL, path) of the first loadable cuBLASLt; raises Unavailable listing the tries."""
    tried = []
    for path in paths if paths is not None else candidates():
        try:
            lib = ctypes.CDLL(path)
            lib.cublasLtGetVersion  # noqa: B018  (a wrong library lacks it)
        except (OSError, AttributeError) as exc:
            tried.append(f"{path}: {exc}")
            continue
        return lib, path
    raise Unavailable("no loadable libcublasLt (tried: " + "; ".join(tried or ["nothing"]) + ")")


def _bind(lib) -> None:
    """Argument and result types of the functions used (pointers as c_void_p)."""
    vp, i32, u64, i64, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
    sigs = {
        "cublasLtCreate": [vp],
        "cublasLtDestroy": [vp],
        "cublasLtMatmulDescCreate": [vp, i32, i32],
        "cublasLtMatmulDescDestroy": [vp],
        "cublasLtMatmulDescSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatrixLayoutCreate": [vp, i32, u64, u64, i64],
        "cublasLtMatrixLayoutDestroy": [vp],
        "cublasLtMatmulPreferenceCreate": [vp],
        "cublasLtMatmulPreferenceDestroy": [vp],
        "cublasLtMatmulPreferenceSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, i32, vp, vp],
        "cublasLtMatmulAlgoConfigGetAttribute": [vp, i32, vp, sz, vp],
        "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, sz, vp],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name)
        fn.argtypes = args
        fn.restype = i32
    lib.cublasLtGetVersion.argtypes = []
    lib.cublasLtGetVersion.restype = sz


class Lt:
    """A cuBLASLt handle and the descriptors of one int8 TN problem (no GPU buffers)."""

    def __init__(self, lib, m: int, n: int, k: int, workspace_bytes: int = WORKSPACE_BYTES):
        self.lib = lib
        self.m, self.n, self.k = m, n, k
        self.workspace_bytes = workspace_bytes
        self._owned = []  # (destroy function name, handle)
        self.handle = self._make("cublasLtCreate", "cublasLtDestroy")
        plan = tn_layouts(m, n, k)
        self.desc = self._make("cublasLtMatmulDescCreate", "cublasLtMatmulDescDestroy", CUBLAS_COMPUTE_32I, CUDA_R_32I)
        for attr, key in ((MATMUL_DESC_TRANSA, "transa"), (MATMUL_DESC_TRANSB, "transb")):
            value = ctypes.c_int32(plan[key])
            check(lib.cublasLtMatmulDescSetAttribute(self.desc, attr, ctypes.byref(value), ctypes.sizeof(value)),
                  "cublasLtMatmulDescSetAttribute")
        self.layouts = {}
        for key in ("A", "B", "C"):
            lay = plan[key]
            self.layouts[key] = self._make("cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutDestroy",
                                           lay.dtype, lay.rows, lay.cols, lay.ld)
        self.pref = self._make("cublasLtMatmulPreferenceCreate", "cublasLtMatmulPreferenceDestroy")
        ws = ctypes.c_uint64(workspace_bytes)
        check(lib.cublasLtMatmulPreferenceSetAttribute(self.pref, PREF_MAX_WORKSPACE_BYTES, ctypes.byref(ws),
                                                       ctypes.sizeof(ws)), "cublasLtMatmulPreferenceSetAttribute")

    def _make(self, create: str, destroy: str, *args):
        obj = ctypes.c_void_p()
        check(getattr(self.lib, create)(ctypes.byref(obj), *args), create)
        self._owned.append((destroy, obj))
        return obj

    def heuristics(self, count: int = MAX_ALGOS) -> list[HeuristicResult]:
        """The heuristic's algorithms for this problem that fit the workspace, best guess first."""
        results = (HeuristicResult * count)()
        returned = ctypes.c_int(0)
        lay = self.layouts
        check(self.lib.cublasLtMatmulAlgoGetHeuristic(self.handle, self.desc, lay["A"], lay["B"], lay["C"], lay["C"],
                                                      self.pref, count, results, ctypes.byref(returned)),
              "cublasLtMatmulAlgoGetHeuristic")
        return [results[i] for i in range(returned.value)
                if results[i].state == 0 and results[i].workspaceSize <= self.workspace_bytes]

    def algo_config(self, algo: Algo) -> dict:
        """The readable configuration of an algorithm (id, tile, stages, split-K, ...)."""
        out = {}
        for name, attr in ALGO_CONFIG.items():
            value, written = ctypes.c_int32(0), ctypes.c_size_t(0)
            status = self.lib.cublasLtMatmulAlgoConfigGetAttribute(ctypes.byref(algo), attr, ctypes.byref(value),
                                                                   ctypes.sizeof(value), ctypes.byref(written))
            if status == 0:
                out[name] = value.value
        return out

    def matmul(self, algo: Algo, a_ptr: int, b_ptr: int, out_ptr: int, workspace_ptr: int, stream: int) -> None:
        """Enqueue out = a . b^T on `stream` (raw device pointers)."""
        alpha, beta = ctypes.c_int32(1), ctypes.c_int32(0)
        lay = self.layouts
        check(self.lib.cublasLtMatmul(self.handle, self.desc, ctypes.byref(alpha),
                                      ctypes.c_void_p(b_ptr), lay["A"], ctypes.c_void_p(a_ptr), lay["B"],
                                      ctypes.byref(beta), ctypes.c_void_p(out_ptr), lay["C"],
                                      ctypes.c_void_p(out_ptr), lay["C"], ctypes.byref(algo),
                                      ctypes.c_void_p(workspace_ptr), self.workspace_bytes, ctypes.c_void_p(stream)),
              "cublasLtMatmul")

    def close(self) -> None:
        while self._owned:
            destroy, obj = self._owned.pop()
            getattr(self.lib, destroy)(obj)

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---- the contender ----------------------------------------------------------------------------

@dataclass
class Library:
    """What load() found: torch (for buffers and the stream) and the bound cuBLASLt."""

    torch: object
    lib: object
    path: str
    version: int

    def describe(self) -> str:
        v = self.version
        return f"cuBLASLt {v // 10000}.{v // 100 % 100}.{v % 100} ({self.path})"


_LOADED: list = []


def _import_torch():
    torch = import_torch("the cuBLASLt contender takes its buffers and stream from torch")
    if not torch.cuda.is_available():
        raise Unavailable(f"torch {getattr(torch, '__version__', '?')} sees no CUDA GPU")
    return torch


def load() -> Library:
    """torch + cuBLASLt, loaded once per process; raises Unavailable with the reason."""
    if _LOADED:
        return _LOADED[0]
    torch = _import_torch()
    # torch loads its own libcublasLt lazily; one small matmul makes it map the library, so
    # that this contender uses the very same copy (no second CUDA library in the process).
    try:
        x = torch.ones((16, 16), device="cuda", dtype=torch.float16)
        (x @ x).sum().item()
    except Exception:
        pass
    lib, path = open_library()
    try:
        _bind(lib)
    except AttributeError as exc:
        raise Unavailable(f"{path} lacks a cuBLASLt function: {exc}") from None
    found = Library(torch, lib, path, int(lib.cublasLtGetVersion()))
    _LOADED.append(found)
    return found


@dataclass
class Prepared:
    """One problem on the GPU with its chosen algorithm; call() enqueues one GEMM."""

    library: Library
    lt: Lt
    a: object  # torch int8 [M, K]
    b: object  # torch int8 [N, K]
    out: object  # torch int32 [M, N]
    workspace: object
    algo: Algo
    config: dict
    candidates_us: list = field(default_factory=list)

    def call(self):
        """Enqueue out = a . b^T on torch's current stream and return out (not synchronized)."""
        stream = self.library.torch.cuda.current_stream().cuda_stream
        self.lt.matmul(self.algo, self.a.data_ptr(), self.b.data_ptr(), self.out.data_ptr(),
                       self.workspace.data_ptr(), stream)
        return self.out

    def sync(self) -> None:
        self.library.torch.cuda.synchronize()

    def describe(self) -> str:
        cfg = ", ".join(f"{k} {v}" for k, v in self.config.items())
        tried = ", ".join(f"{t:.1f}" for t in self.candidates_us)
        return (f"{self.library.describe()}; TN int8 -> int32, {self.lt.workspace_bytes >> 20} MiB workspace, "
                f"fastest of {len(self.candidates_us)} heuristic algorithms (µs: {tried}): {cfg}")


def _time_algo(torch, lt, algo, sets, out, ws, runs: int, repeat: int = 5) -> float:
    """Median µs per launch over `repeat` batches of `runs` back-to-back launches (CUDA events),
    rotating over the (a, b) copies in `sets` so that the operands come from HBM, not L2."""
    stream = torch.cuda.current_stream().cuda_stream
    lt.matmul(algo, sets[0][0].data_ptr(), sets[0][1].data_ptr(), out.data_ptr(), ws.data_ptr(), stream)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(runs):
            a, b = sets[i % len(sets)]
            lt.matmul(algo, a.data_ptr(), b.data_ptr(), out.data_ptr(), ws.data_ptr(), stream)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / runs)
    return sorted(times)[len(times) // 2]


def _warm_up(torch, lt, algo, a, b, out, ws, seconds: float = 0.05) -> None:
    """Run the first algorithm for a while first, so that the clocks are up before any is timed
    (the first algorithms timed from an idle H200 look 1.3-1.6x slower otherwise)."""
    stream = torch.cuda.current_stream().cuda_stream
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        lt.matmul(algo, a.data_ptr(), b.data_ptr(), out.data_ptr(), ws.data_ptr(), stream)
    stop.record()
    stop.synchronize()
    per = max(start.elapsed_time(stop) / 5e3, 1e-6)
    for _ in range(min(2000, int(seconds / per))):
        lt.matmul(algo, a.data_ptr(), b.data_ptr(), out.data_ptr(), ws.data_ptr(), stream)
    torch.cuda.synchronize()


def prepare(a_np: np.ndarray, b_nk_np: np.ndarray, *, timing_runs: int = TIMING_RUNS) -> Prepared:
    """Upload int8 a [M, K] and b [N, K], ask the heuristic, keep its fastest algorithm.

    Raises Unavailable when cuBLASLt offers no algorithm for the shape (its int8 kernels need
    alignments: leading dimensions multiples of 4 and 16-byte aligned buffers, say).
    """
    if a_np.dtype != np.int8 or b_nk_np.dtype != np.int8 or a_np.ndim != 2 or b_nk_np.ndim != 2:
        raise ValueError(f"cublaslt.prepare: a and b_nk must be 2-D int8, got {a_np.dtype} {a_np.shape} "
                         f"and {b_nk_np.dtype} {b_nk_np.shape}")
    m, k = a_np.shape
    n, k2 = b_nk_np.shape
    if k != k2:
        raise ValueError(f"cublaslt.prepare: a [M, K] and b_nk [N, K] need the same K, got {k} and {k2}")
    library = load()
    torch = library.torch
    lt = Lt(library.lib, m, n, k)
    found = lt.heuristics()
    if not found:
        raise Unavailable(f"cuBLASLt offers no int8 TN algorithm for M={m}, N={n}, K={k}")
    a = torch.from_numpy(np.ascontiguousarray(a_np)).cuda()
    b = torch.from_numpy(np.ascontiguousarray(b_nk_np)).cuda()
    out = torch.empty((m, n), dtype=torch.int32, device="cuda")
    ws = torch.empty((lt.workspace_bytes,), dtype=torch.uint8, device="cuda")
    try:
        _warm_up(torch, lt, found[0].algo, a, b, out, ws)
    except CublasError:
        pass
    # Copies of the operands covering 3x TUNING_L2_BYTES (at most 8 sets), for cold-cache timing.
    copies = max(1, min(8, -(-3 * TUNING_L2_BYTES // (a.numel() + b.numel() + 4 * out.numel()))))
    sets = [(a, b)] + [(a.clone(), b.clone()) for _ in range(copies - 1)]
    times = []
    for res in found:
        try:
            times.append(_time_algo(torch, lt, res.algo, sets, out, ws, timing_runs))
        except CublasError:
            times.append(float("inf"))
    best = min(range(len(found)), key=times.__getitem__)
    if times[best] == float("inf"):
        raise Unavailable(f"every cuBLASLt algorithm failed for M={m}, N={n}, K={k}")
    algo = found[best].algo
    del sets
    torch.cuda.synchronize()
    return Prepared(library, lt, a, b, out, ws, algo, lt.algo_config(algo), times)
