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
"""

from __future__ import annotations

from int8nax.bench import contenders, problems

from .common import profile


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
        name, shapes, _ = profile()
        if shape not in shapes:
            raise NotImplementedError(f"{shape} is not in the {name!r} profile; set {problems.PROFILE_ENV} to run it")

    @_record
    def track_int8nax_gemm_kernel(self, shape):
        return _kernel_id("int8nax-gemm", shape)

    @_record
    def track_int8nax_full_kernel(self, shape):
        return _kernel_id("int8nax-full", shape)
