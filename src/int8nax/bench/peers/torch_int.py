"""cuBLASLt's int8 GEMM through PyTorch (torch._int_mm), the CUDA baseline for the raw GEMM.

torch._int_mm(a, b) computes int8 a [M, K] @ int8 b [K, N] -> int32 [M, N] with
cuBLASLt. cuBLASLt's fast int8 kernels want B column-major, i.e. the weights stored
as [N, K] rows, which is int8nax's own layout: pass `b_nk.t()`, a view, never a copy.
Its checks: M > 16, and K and N multiples of 8.

MLX and torch share the GPU but not memory: inputs cross once, through numpy, when
the problem is prepared; nothing is converted inside the timed call.
"""

from __future__ import annotations

import numpy as np

from . import Unavailable, import_torch


def load():
    """The torch module, if it can run _int_mm on a CUDA GPU; raises Unavailable otherwise."""
    torch = import_torch("cuBLASLt int8 runs through torch._int_mm")
    version = getattr(torch, "__version__", "?")
    if not hasattr(torch, "_int_mm"):
        raise Unavailable(f"torch {version} has no torch._int_mm (needs torch >= 2.1)")
    if not torch.cuda.is_available():
        build = getattr(getattr(torch, "version", None), "cuda", None)
        why = "a CPU-only build" if build is None else f"built for CUDA {build}"
        raise Unavailable(f"torch {version} ({why}) sees no CUDA GPU")
    return torch


def check_shape(m: int, k: int, n: int) -> None:
    """Raise Unavailable if torch._int_mm rejects this problem size."""
    if m <= 16:
        raise Unavailable(f"torch._int_mm needs M > 16 (cuBLASLt int8 path), got M = {m}")
    if k % 8 or n % 8:
        raise Unavailable(f"torch._int_mm needs K and N to be multiples of 8, got K = {k}, N = {n}")


def prepare_int_mm(a: np.ndarray, b_nk: np.ndarray):
    """(call, sync, detail) for int32 [M, N] = a @ b_nk.T on the GPU.

    a: int8 [M, K]; b_nk: int8 [N, K]. call() enqueues one product on torch's current
    stream and returns the int32 tensor; sync() waits for the stream. Calls on one stream run
    in order, so consecutive calls already form a dependent chain.
    """
    torch = load()
    m, k = a.shape
    n = b_nk.shape[0]
    check_shape(m, k, n)
    device = torch.device("cuda")
    a_dev = torch.from_numpy(np.ascontiguousarray(a)).to(device)
    b_dev = torch.from_numpy(np.ascontiguousarray(b_nk)).to(device)
    b_col_major = b_dev.t()  # [K, N] view with column-major strides: cuBLASLt's fast layout
    torch.cuda.synchronize()

    def call():
        return torch._int_mm(a_dev, b_col_major)

    detail = (f"torch {torch.__version__}, torch._int_mm (cuBLASLt without workspace: torch's path) "
              f"on {torch.cuda.get_device_name()}")
    return call, torch.cuda.synchronize, detail
