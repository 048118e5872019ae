"""Ratio benchmarks for the regression gate: int8nax's time over a reference's time at the same
shape, both measured in the same process and the same sample, so that whatever slows the whole
machine for a while (other jobs on a shared box, clock changes, a busy GPU host) cancels.

    GemmRatio.time_nax_gemm_ratio     int8nax.int8_matmul  / reference
    LinearRatio.time_nax_full_ratio   int8nax.w8a8_linear  / reference

The reference does not depend on int8nax's code, so the ratio moves only when int8nax does:
    cpu profile   numpy-sgemm: numpy's float32 BLAS matmul of the same (M, K, N)
    full profile  mlx-fp16: MLX's own float16 matmul on its default device (the GPU)

asv records the ratio as the benchmark's "time": 1.30 s reads "int8nax takes 1.30 times as long
as the reference" (a custom timer advances by the ratio, as the chain benchmarks' clock advances
per call). Lower is better and a slowdown of int8nax by 20 % raises the ratio by 20 %, so asv's
comparison and the gate treat it like any other time_ benchmark.

One sample is `pairs` alternating (int8nax, reference) calls, the order swapped every pair, and
its ratio is median(int8nax times) / median(reference times): a call that another process
preempted does not move it. `pairs` is chosen at the first setup so that a sample lasts about
PAIR_TARGET_S, well above the timer and a scheduler slice, from the reference's time only (it is
the same at both commits of a comparison).
"""

from __future__ import annotations

import statistics
import time

from .common import ContenderBenchmark, profile

PAIR_TARGET_S = 0.02
MAX_PAIRS = 64

REFERENCE = {"cpu": "numpy-sgemm", "full": "mlx-fp16"}
"""The reference contender of each shape profile."""

_clock = [0.0]
_pairs: dict[tuple[str, tuple[int, int, int]], int] = {}


def ratio_clock() -> float:
    """The ratio benchmarks' timer: it advances only by the ratios the benchmarks add."""
    return _clock[0]


def _part(contender: str, shape):
    """A contender prepared, checked and memoised exactly as its own benchmark class does it
    (NotImplementedError, asv's skip, when it cannot run here)."""
    part = ContenderBenchmark()
    part.contender = contender
    part.setup(shape)
    return part.prepared


class RatioBenchmark(ContenderBenchmark):
    """Base class: `contender` over this profile's reference at every declared shape."""

    def setup(self, shape):
        name = profile()[0]
        self.num = _part(self.contender, shape)
        self.den = _part(REFERENCE[name], shape)
        key = (self.contender, shape)
        if key not in _pairs:
            t0 = time.perf_counter()
            self.den.run()
            t1 = time.perf_counter()
            self.den.run()
            one = min(t1 - t0, time.perf_counter() - t1)
            _pairs[key] = max(1, min(MAX_PAIRS, round(PAIR_TARGET_S / (2 * max(one, 1e-9)))))
        self.pairs = _pairs[key]

    def measure(self):
        """One sample: add median(int8nax) / median(reference) over `pairs` pairs to the clock."""
        num, den = self.num.run, self.den.run
        t_num, t_den = [], []
        clock = time.perf_counter
        for i in range(self.pairs):
            if i % 2:
                t0 = clock(); den(); t1 = clock(); num(); t2 = clock()  # noqa: E702
                t_den.append(t1 - t0); t_num.append(t2 - t1)  # noqa: E702
            else:
                t0 = clock(); num(); t1 = clock(); den(); t2 = clock()  # noqa: E702
                t_num.append(t1 - t0); t_den.append(t2 - t1)  # noqa: E702
        _clock[0] += statistics.median(t_num) / statistics.median(t_den)


def ratio(func):
    """Mark a time_ method as a ratio benchmark: timed with ratio_clock."""
    func.timer = ratio_clock
    return func


class GemmRatio(RatioBenchmark):
    """int8nax.int8_matmul time over the reference's (numpy sgemm on a CPU box, MLX fp16 on a GPU)."""

    contender = "nax-gemm"

    @ratio
    def time_nax_gemm_ratio(self, shape):
        self.measure()


class LinearRatio(RatioBenchmark):
    """int8nax.w8a8_linear time over the reference's (numpy sgemm on a CPU box, MLX fp16 on a GPU)."""

    contender = "nax-full"

    @ratio
    def time_nax_full_ratio(self, shape):
        self.measure()
