"""Ratio benchmarks for the regression gate: int8nax's time over a reference's time at the same
shape, both measured in the same process and the same sample, so that whatever slows the whole
machine for a while (other jobs on a shared box, clock changes, a busy GPU host) cancels.

    GemmRatio.track_int8nax_gemm_ratio     int8nax.int8_matmul  / reference
    LinearRatio.track_int8nax_full_ratio   int8nax.w8a8_linear  / reference

The reference does not depend on int8nax's code, so the ratio moves only when int8nax does:
    cpu profile   numpy-sgemm: numpy's float32 BLAS matmul of the same (M, K, N)
    full profile  mlx-fp16: MLX's own float16 matmul on its default device (the GPU)

The ratio is unitless (asv unit "ratio"): 1.30 reads "int8nax takes 1.30 times as long as the
reference". Lower is better, as asv assumes of every benchmark, and a slowdown of int8nax by
20 % raises the ratio by 20 %, so asv's comparison and the gate treat it like a time. Each
track_ call returns its samples in the form asv reads from a timing benchmark
({"samples": [...], "number": 1}), so asv keeps their median, spread and confidence interval and
the gate's significance test works as on a time. These benchmarks were time_ benchmarks whose
custom clock advanced by the ratio (the same numbers, shown as seconds); their recorded history
was renamed to the track_ names (tools/asv_rename.py), so it carries on.

One sample is `blocks` blocks of BLOCK_CALLS calls of int8nax, then BLOCK_CALLS of the reference
(the order swapped every block, so neither always runs first), and its ratio is
min(int8nax call times) / min(reference call times). Another process on the machine can only
add time to a call, so the fastest of some 40 calls is the least disturbed figure, and a change of
int8nax's code moves it as much as the median (measured on the shared 2-core box: the median
ratio of int8nax-full moved by up to 10 % between processes of one commit, the minimum by 2 %,
docs/results/gate-*.md). Calls come in blocks because the CPU backend's W8A8 ends in an MLX
evaluation on MLX's stream thread, which is slower to wake after a call of another library.
`blocks` is chosen at the first setup, from the reference's time only (the same at both
commits of a comparison), so that a sample lasts about SAMPLE_TARGET_S: well above the timer
and a scheduler slice. How many samples a call takes is asv's repeat rule,
(least, most, seconds): at least `least`, then more while under `seconds`, at most `most`;
RATIO_REPEAT_ENV overrides it (the gate sets it from its calibrated `repeat`).
"""

from __future__ import annotations

import os
import time
from functools import partial

try:
    from int8nax.commands import gate
except ImportError:
    # asv runs this checkout's suite against each commit it measures: the gate's base may be a
    # commit from before int8nax.commands, whose gate sits at the package's top level.
    from int8nax import gate
from int8nax.bench.problems import CPU_SHAPES

from .common import ContenderBenchmark, profile

SAMPLE_TARGET_S = 0.02
BLOCK_CALLS = 4
MAX_BLOCKS = 16

REFERENCE = {"cpu": "numpy-sgemm", "full": "mlx-fp16"}
"""The reference contender of each shape profile."""

RATIO_REPEAT_ENV = "INT8NAX_RATIO_REPEAT"
DEFAULT_REPEAT = (5, 20, 0.5)
"""Samples per benchmark process: (least, most, seconds), as asv's repeat attribute."""

_blocks: dict[tuple[str, tuple[int, int, int]], int] = {}


def repeat_rule() -> tuple[int, int, float]:
    """(least, most, seconds) from RATIO_REPEAT_ENV ("N" or "(least,most,seconds)"), else
    DEFAULT_REPEAT. A value that is neither raises ValueError naming the variable."""
    text = os.environ.get(RATIO_REPEAT_ENV, "").strip()
    if not text:
        return DEFAULT_REPEAT
    try:
        return gate.repeat_rule(text)  # the gate checked it by the same rule before it ran asv
    except ValueError as exc:
        raise ValueError(f"{RATIO_REPEAT_ENV}: {exc}") from None


def block_ratio(num, den, blocks: int, calls: int) -> float:
    """min(num() call times) / min(den() call times) over `blocks` blocks of `calls` calls of
    each, num's first in even blocks and den's first in odd ones (neither always runs first)."""
    t_num, t_den = [], []
    clock = time.perf_counter
    for i in range(blocks):
        for run, times in ((den, t_den), (num, t_num)) if i % 2 else ((num, t_num), (den, t_den)):
            for _ in range(calls):
                t0 = clock()
                run()
                times.append(clock() - t0)
    return min(t_num) / min(t_den)


def repeated(measure) -> dict:
    """measure() (one sample's ratio) by the repeat rule, in the form asv reads from a timing
    benchmark ({"samples": [...], "number": 1}): asv then keeps their median and spread, and the
    gate's significance test has samples to test."""
    least, most, seconds = repeat_rule()
    out = []
    t0 = time.perf_counter()
    while len(out) < least or (len(out) < most and time.perf_counter() - t0 < seconds):
        # 4 significant digits, far below the noise: asv's console prints a track_ value in full
        out.append(float(f"{measure():.4g}"))
    return {"samples": out, "number": 1}


def _part(contender: str, shape):
    """A contender prepared, checked and memoised exactly as its own benchmark class does it
    (NotImplementedError, asv's skip, when it cannot run here)."""
    part = ContenderBenchmark()
    part.contender = contender
    part.setup(shape)
    return part.prepared


class RatioBenchmark(ContenderBenchmark):
    """Base class: `contender` over this profile's reference at every declared shape."""

    unit = "ratio"
    rounds = 2  # as a time_ benchmark: two processes, their samples pooled

    def setup(self, shape):
        name, shapes, _ = profile()
        if name == "cpu" and shape in shapes and shape not in CPU_SHAPES:
            # One sample there is a few 100-ms calls of each side: the two classes would cost
            # ~80 s of the CPU box's `asv run`, and the gate reads only the small shapes.
            raise NotImplementedError(
                f"{shape}: on the cpu profile the ratio benchmarks measure {', '.join(map(str, CPU_SHAPES))} "
                "(the gated ones); at the seed shapes compare Int8naxGemm/Int8naxFull with NumpySgemm")
        self.num = _part(self.contender, shape)
        self.den = _part(REFERENCE[name], shape)
        key = (self.contender, shape)
        if key not in _blocks:
            t0 = time.perf_counter()
            self.den.run()
            t1 = time.perf_counter()
            self.den.run()
            one = min(t1 - t0, time.perf_counter() - t1)
            per_block = 2 * BLOCK_CALLS * max(one, 1e-9)
            _blocks[key] = max(1, min(MAX_BLOCKS, round(SAMPLE_TARGET_S / per_block)))
        self.blocks = _blocks[key]

    def measure(self) -> float:
        """One sample: min(int8nax call times) / min(reference call times) over `blocks`
        blocks of BLOCK_CALLS calls of each (the order swapped per block)."""
        return block_ratio(self.num.run, self.den.run, self.blocks, BLOCK_CALLS)

    def samples(self) -> dict:
        """Samples by the repeat rule, in the form asv reads from a timing benchmark."""
        return repeated(self.measure)


class GemmRatio(RatioBenchmark):
    """int8nax.int8_matmul time over the reference's (numpy sgemm on a CPU box, MLX fp16 on a GPU)."""

    contender = "int8nax-gemm"

    def track_int8nax_gemm_ratio(self, shape):
        return self.samples()


class LinearRatio(RatioBenchmark):
    """int8nax.w8a8_linear time over the reference's (numpy sgemm on a CPU box, MLX fp16 on a GPU)."""

    contender = "int8nax-full"

    def track_int8nax_full_ratio(self, shape):
        return self.samples()


# --- the model ratio (benchmarks/bench_model.py's forms) ---------------------------------------

from . import bench_model  # noqa: E402

MODEL_BLOCK_CALLS = 2
MODEL_SAMPLE_TARGET_S = 0.2
"""ModelRatio's sample: about this long, and at least 2 blocks of MODEL_BLOCK_CALLS forwards."""


class ModelRatio:
    """int8nax W8A8 over bf16 at the model level: seconds per forward of mlx-lm's decoder stack
    with int8nax.nn.quantize_linears over the same model in bf16 (benchmarks/bench_model.py's
    forms, eager, built and checked as there), in the same process and sample, at each
    (configuration, tokens) of the profile. Lower is better: 1.20 reads "the W8A8 model takes
    1.2 times as long as bf16"; below 1 W8A8 pays off.

    One sample: `blocks` blocks of MODEL_BLOCK_CALLS forwards of each model (the order swapped
    every block), ratio = min(W8A8 times) / min(bf16 times), as the ratios above; samples by the
    same repeat rule, returned as they do (a single value gave asv's comparison no spread to test:
    on the 2-core box every A/A ratio past the factor was a false alarm). On the cpu
    profile it measures decode only: a 16-token bf16 prefill there is MLX's CPU bf16 GEMM
    (0.25 s per layer on the 2-core box), which the W8A8 model does not run at all.
    """

    params = bench_model.ModelTime.params
    param_names = bench_model.ModelTime.param_names
    timeout = 900
    version = "1"

    def setup(self, config, tokens):
        name, _ = bench_model.model_profile()
        if name == "cpu" and tokens != 1:
            raise NotImplementedError("on the cpu profile the model ratio measures decode (tokens 1) only")
        self.num = bench_model.prepared("w8a8", "eager", config, tokens)
        self.den = bench_model.prepared("bf16", "eager", config, tokens)
        self.tokens = tokens
        t0 = time.perf_counter()
        self.den.run(tokens)
        one = time.perf_counter() - t0
        self.blocks = max(2, min(MAX_BLOCKS, round(MODEL_SAMPLE_TARGET_S / (2 * MODEL_BLOCK_CALLS * one))))

    def track_w8a8_model_ratio(self, config, tokens):
        return repeated(partial(block_ratio, partial(self.num.run, tokens), partial(self.den.run, tokens),
                                self.blocks, MODEL_BLOCK_CALLS))

    track_w8a8_model_ratio.unit = "ratio"
