"""Which kernel int8nax runs at each shape, recorded per commit, so that a change of kernel
between two commits shows: as a step in these series on the asv site, and as "changed" in the
kernel column of the comparison page (`int8nax site`).

asv's results hold numbers only, so each benchmark records contenders.kernel_id of the
backend's description of the call (Backend.describe, e.g. "cuda tma-ws-cooperative 128x256
splits=1"): the number itself means nothing, only whether it changed. The words are what
`int8nax compare` prints and stores in its JSON, and what the comparison page shows where it can
match the number.

These are records, not speeds: nothing is timed, no data is made, and the regression gate
(benchmarks/gate.json) does not read them.

KernelTime, on CUDA only, is the speed beside them: the kernel time of one call in µs (what the
GPU spends in the call's kernels, operands cold in L2), measured exactly as `int8nax compare
--mode kernel` measures it (int8nax.bench.kernel.cases.measure: CUPTI through torch.profiler,
median of kernel.worker.LAUNCHES launches, the output checked after), for int8nax's GEMM, for
cuBLASLt's int8 GEMM beside it (the README's headline is their ratio), and for W8A8 on float16
x. Elsewhere (no MLX CUDA backend, no torch with CUDA) it is skipped with the reason.

DecodeTime, on CUDA only, is the same kernel time at one token, where a linear streams its weight:
each fused layer of the GPU models (bench.kernel.plans.model_shapes at M = 1) for W8A8, MLX's
8-bit quantized matmul and its bfloat16 matmul (bench.kernel.cases.FLOAT_PEERS), all on bfloat16
x. These are the weight streams that set a generated token's pace.
"""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

from int8nax.bench import checks, contenders, problems
from int8nax.bench.kernel.plans import model_shapes

from .common import require_profile_shape


def _kernel_id(contender: str, shape) -> int:
    try:
        return contenders.kernel_id(contenders.describe(contender, shape))
    except contenders.Unavailable as exc:
        raise NotImplementedError(str(exc)) from None


def _record(func):
    func.unit = "kernel id"
    func.rounds = 1
    return func


class Kernel:
    """What int8_matmul (int8nax-gemm) and w8a8_linear (int8nax-full) run at each shape of the profile."""

    params = [list(problems.ALL_SHAPES)]
    param_names = ["(M, K, N)"]
    timeout = 120
    version = "1"

    def setup(self, shape):
        require_profile_shape(shape)

    @_record
    def track_int8nax_gemm_kernel(self, shape):
        return _kernel_id("int8nax-gemm", shape)

    @_record
    def track_int8nax_full_kernel(self, shape):
        return _kernel_id("int8nax-full", shape)


@lru_cache(maxsize=None)
def _kernel_context() -> dict:
    """What kernel.cases.measure needs, made once per benchmark process (the worker's own set-up:
    torch's CUDA context and CUPTI before MLX's first kernel)."""
    import mlx.core as mx
    import torch

    from int8nax.bench.kernel.cupti import Profiler
    from int8nax.bench.kernel.worker import LAUNCHES, l2_bytes

    torch.zeros(1, device="cuda")
    mx.eval(mx.zeros(1))
    tmp = Path(tempfile.mkdtemp(prefix="int8nax-kernel-time-"))
    return {"torch": torch, "profiler": Profiler(torch, tmp), "launches": LAUNCHES, "l2_bytes": l2_bytes(torch)}


def _kernel_us(subject: str, shape) -> float:
    """Kernel µs of one call of `subject` (a kernel mode subject, bench.kernel.mode) at `shape`; MismatchError (the
    benchmark fails with the reason) when its output is wrong, RuntimeError when it cannot run."""
    from int8nax.bench.kernel.cases import measure
    from int8nax.bench.kernel.worker import Item

    rec = measure(Item(subject, tuple(shape)), _kernel_context())
    if "mismatch" in rec:
        raise checks.MismatchError(f"{subject} at (M, K, N) = {tuple(shape)}: {rec['mismatch']} ({rec['check']})")
    return float(rec["us"])


def _require_kernel_time() -> None:
    """Skip (asv's NotImplementedError) with the reason where kernel time cannot be measured."""
    from int8nax.bench.kernel.cupti import skip_reason

    why = skip_reason()
    if why:
        raise NotImplementedError(f"kernel time {why}")


def _kernel_time(func):
    func.unit = "µs"
    func.rounds = 1  # a median of LAUNCHES launches inside
    return func


class KernelTime:
    """Kernel time (µs) of one call, operands cold in L2 (CUDA only): int8nax's GEMM
    (int8_matmul), cuBLASLt's int8 GEMM beside it, and W8A8 (w8a8_linear, float16 x, no bias)."""

    params = [list(problems.ALL_SHAPES)]
    param_names = ["(M, K, N)"]
    timeout = 300
    version = "1"

    def setup(self, shape):
        require_profile_shape(shape)
        _require_kernel_time()

    @_kernel_time
    def track_int8nax_gemm_kernel_us(self, shape):
        return _kernel_us("int8_matmul", shape)

    @_kernel_time
    def track_cublaslt_int8_kernel_us(self, shape):
        return _kernel_us("cublaslt", shape)

    @_kernel_time
    def track_int8nax_full_kernel_us(self, shape):
        return _kernel_us("w8a8:float16", shape)


DECODE_SHAPES = sorted(model_shapes(tokens=(1,)))
"""(1, K, N) of each fused layer of the GPU models (Qwen2.5-7B, Qwen3-8B) at one token."""


class DecodeTime:
    """Kernel time (µs) of one call at one token, operands cold in L2 (CUDA only), at each fused
    layer of the GPU models: W8A8 (w8a8_linear, bfloat16 x, no bias), MLX's 8-bit quantized matmul
    (group 64) and MLX's bfloat16 matmul. The weight's bytes over the time is its stream's rate."""

    params = [DECODE_SHAPES]
    param_names = ["(M, K, N)"]
    timeout = 300
    version = "1"

    def setup(self, shape):
        _require_kernel_time()

    @_kernel_time
    def track_w8a8_decode_kernel_us(self, shape):
        return _kernel_us("w8a8:bfloat16", shape)

    @_kernel_time
    def track_mlx_q8_decode_kernel_us(self, shape):
        return _kernel_us("mlx-q8", shape)

    @_kernel_time
    def track_bf16_decode_kernel_us(self, shape):
        return _kernel_us("bf16", shape)
