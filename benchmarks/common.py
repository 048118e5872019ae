"""What every benchmark class shares: the shape parameter, memoised and checked setup, skips.

The contenders, their data and their correctness checks live in the package
(int8nax.contenders) so that the command line can reuse them; this module only
adapts them to asv:
- asv_runner re-runs setup before every timed call, so the prepared contender is
  memoised per (contender, shape) for the life of the benchmark process;
- the first setup of a shape runs the contender once and checks its output
  (MismatchError fails the benchmark with the reason, nothing wrong is timed);
- a contender that cannot run here, or a shape outside this machine's profile,
  raises NotImplementedError in setup: asv records n/a and carries on.
"""

from __future__ import annotations

import sys

from int8nax import contenders

PROFILE, PROFILE_REASON = contenders.choose_profile()
RUN_SHAPES = frozenset(contenders.profile_shapes(PROFILE))

_prepared: dict[tuple[str, tuple[int, int, int]], contenders.Prepared] = {}


class ContenderBenchmark:
    """Base class: one contender (`contender`, a name in int8nax.contenders.CONTENDERS)
    timed over every declared shape; subclasses add a time_ and a track_ method."""

    contender = ""
    params = [list(contenders.ALL_SHAPES)]
    param_names = ["(M, K, N)"]
    timeout = 600  # seed shapes on a GPU box: data, reference check and timing of the largest
    version = "1"  # pinned: editing a comment must not hide the history (bump on purpose)

    def setup(self, shape):
        key = (self.contender, shape)
        if key not in _prepared:
            if shape not in RUN_SHAPES:
                raise NotImplementedError(
                    f"{shape} is not in the {PROFILE!r} profile ({PROFILE_REASON}); "
                    f"set {contenders.PROFILE_ENV} to run it")
            try:
                _prepared[key] = contenders.get(self.contender).ready(*shape)
            except contenders.Unavailable as exc:
                print(f"{self.contender} skipped: {exc}", file=sys.stderr)
                raise NotImplementedError(str(exc)) from None
        self.run = _prepared[key].run

    def tops(self, shape) -> float:
        """Throughput of this contender at `shape`, from the median of a few calls."""
        return contenders.tops(shape, contenders.median_seconds(self.run))


def throughput(func):
    """Mark a track_ method as a TOPS display: one round (a median of calls inside), and
    higher is better, so regression gates must ignore it (asv thinks higher is worse)."""
    func.unit = "TOPS"
    func.rounds = 1
    return func
