"""What every benchmark class shares: the shape parameter, the two timed figures, memoised and
checked setup, explicit skips; and the contenders' classes themselves (contender_classes), made
from the registry, int8nax.bench.contenders.CONTENDERS.

The contenders, their data and their checks live in the package's measuring layer
(int8nax.bench) so that `int8nax compare` and `int8nax selftest` time the same things; this
module only adapts them to asv:
- nothing is decided at import (discovery must stay cheap and must never fail): the shape
  profile, the backend probes and any first-use self-test happen at the first setup;
- asv_runner re-runs setup before every timed call, so the prepared contender is memoised
  per (contender, shape) for the life of the benchmark process;
- the first setup of a shape runs the contender once and checks its output (MismatchError
  fails the benchmark with the reason: nothing wrong is timed);
- a contender that cannot run here, a shape outside this machine's profile, or a profile name
  that does not exist raises NotImplementedError in setup: asv records n/a and carries on.

Two figures per contender, both `time_` benchmarks that the regression gate reads:
- time_<name>: one call, then block (the seed's method);
- time_<name>_chain: seconds per call in a dependent chain of calls with one block at the end
  (int8nax.bench.timing); its clock ticks once per call of the chain, so asv records seconds
  per call, comparable across machines whose chain lengths differ.
"""

from __future__ import annotations

import linecache
import sys
import time
from functools import lru_cache

from int8nax.bench import contenders, problems, timing
from int8nax.bench.checks import MismatchError

_prepared: dict[tuple[str, tuple[int, int, int]], contenders.Prepared] = {}


@lru_cache(maxsize=None)
def profile() -> tuple[str, frozenset, int]:
    """(profile name, shapes it measures, calls per chain), chosen once per process;
    NotImplementedError (asv's skip) for an INT8NAX_BENCH_PROFILE that names no profile."""
    try:
        name, _ = problems.choose_profile()
    except problems.ProfileError as exc:
        raise NotImplementedError(str(exc)) from None
    return name, frozenset(problems.profile_shapes(name)), problems.CHAIN_CALLS[name]


def chain_calls() -> int:
    return profile()[2]


def per_call_clock() -> float:
    """A clock that advances by 1 s for every `chain_calls()` s of wall time: a chain benchmark
    timed with it reads seconds per call."""
    return time.perf_counter() / chain_calls()


class ContenderBenchmark:
    """Base class: one contender (`contender`, a name in int8nax.bench.contenders.CONTENDERS)
    timed over every declared shape; subclasses add the time_, time_..._chain and track_
    methods, whose bodies call run(), chain() and tops()."""

    contender = ""
    params = [list(problems.ALL_SHAPES)]
    param_names = ["(M, K, N)"]
    timeout = 600  # seed shapes on a GPU box: data, reference check and timing of the largest
    version = "1"  # pinned: editing a comment must not hide the history (bump on purpose)

    def setup(self, shape):
        key = (self.contender, shape)
        if key not in _prepared:
            name, shapes, _ = profile()
            if shape not in shapes:
                raise NotImplementedError(
                    f"{shape} is not in the {name!r} profile; set {problems.PROFILE_ENV} to run it")
            why = contenders.skip_reason(self.contender, shape)
            if why:
                raise NotImplementedError(f"{shape}: {why}")
            try:
                _prepared[key] = contenders.get(self.contender).ready(*shape)
            except contenders.Unavailable as exc:
                print(f"{self.contender} skipped: {exc}", file=sys.stderr)
                raise NotImplementedError(str(exc)) from None
        self.prepared = _prepared[key]

    def run(self):
        self.prepared.run()

    def chain(self):
        self.prepared.chain(chain_calls())

    def tops(self, shape) -> float:
        """Throughput of this contender at `shape`, from the median of a few calls."""
        return timing.tops(shape, timing.median_seconds(self.prepared.run))


_CONTENDER_CLASS = """\
class {cls}(ContenderBenchmark):
    contender = {name!r}

    def time_{stem}(self, shape):
        self.run()

    @chained
    def time_{stem}_chain(self, shape):
        self.chain()

    @throughput
    def track_{stem}_tops(self, shape):
        return self.tops(shape)
"""
"""The benchmark class of one contender: a call, a chain and the throughput (ContenderBenchmark)."""


def contender_classes(kind: str, module: str) -> dict[str, type]:
    """{class name: class} of the suite's contenders of `kind` (int8nax.bench.contenders.SUITE:
    "raw" in bench_gemm, "full" in bench_linear), made for `module`, which puts them in its
    namespace for asv to find. The registry names each class and its benchmarks
    (Contender.asv_class and .stem), so a contender added there is timed here with nothing else
    to write. Reads the registry only: importing the suite stays free."""
    registry = contenders.CONTENDERS
    return {c.asv_class: _contender_class(c, module)
            for c in (registry[name] for name in contenders.SUITE) if c.kind == kind}


def _contender_class(c: contenders.Contender, module: str) -> type:
    """_CONTENDER_CLASS for `c`, run as the source of `module`'s class. asv records each
    benchmark's source (benchmarks.json, the site's code view) through inspect, so the source is
    also put where inspect reads it (linecache, under a name of its own)."""
    source = _CONTENDER_CLASS.format(cls=c.asv_class, name=c.name, stem=c.stem)
    filename = f"<{module}.{c.asv_class}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"__name__": module, "ContenderBenchmark": ContenderBenchmark, "chained": chained,
                 "throughput": throughput}
    exec(compile(source, filename, "exec"), namespace)
    cls = namespace[c.asv_class]
    cls.__doc__ = c.summary
    return cls


def chained(func):
    """Mark a time_ method as a dependent-chain benchmark: timed with per_call_clock."""
    func.timer = per_call_clock
    return func


def tokens_per_s(func):
    """Mark a track_ method as tokens per second (higher is better: not gated)."""
    func.unit = "tokens/s"
    return func


def peak_bytes(func):
    """Mark a track_ method as peak memory in bytes."""
    func.unit = "bytes"
    return func


def throughput(func):
    """Mark a track_ method as a TOPS display: one round (a median of calls inside), and
    higher is better, so regression gates must ignore it (asv thinks higher is worse)."""
    func.unit = "TOPS"
    func.rounds = 1
    return func


def measured(entry: dict) -> dict:
    """A measured cell of a shared setup_cache, or the exception asv reports for it: n/a
    (NotImplementedError) with the reason it was skipped, MismatchError where its check failed,
    RuntimeError where it could not run."""
    if "skip" in entry:
        raise NotImplementedError(entry["skip"])
    if "mismatch" in entry:
        raise MismatchError(entry["mismatch"])
    if "error" in entry:
        raise RuntimeError(entry["error"])
    return entry


def require_profile_shape(shape) -> None:
    """n/a (NotImplementedError) for a shape outside this run's profile."""
    name, shapes, _ = profile()
    if shape not in shapes:
        raise NotImplementedError(f"{shape} is not in the {name!r} profile; set {problems.PROFILE_ENV} to run it")
