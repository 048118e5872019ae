"""bench.estimate: the probe's time per call against contenders of known cost (a fixed cost
per call plus a cost per operation), on a simulated clock: no call sleeps."""

from __future__ import annotations

import functools
import itertools
import types

import pytest

from int8nax.commands import compare_gemm
from int8nax.bench import contenders, estimate
from int8nax.bench.problems import ops

TARGET = (512, 4096, 4096)


class FakeCost:
    """A contender's simulated time per call: `fixed` (one value, or a cycle of them: a loaded
    CPU's waits) plus `per_op` seconds per operation. `spent` adds up every simulated call."""

    def __init__(self, fixed, per_op: float):
        self.fixed = itertools.cycle(fixed if isinstance(fixed, (list, tuple)) else [fixed])
        self.per_op = per_op
        self.spent = 0.0
        self.shapes = []

    def __call__(self, prepared) -> float:
        seconds = next(self.fixed) + self.per_op * ops(prepared.shape)
        self.spent += seconds
        self.shapes.append(prepared.shape)
        return seconds


@pytest.fixture
def fake(monkeypatch):
    """The contender "fake": its prepared problem is only its shape (FakeCost times it)."""
    monkeypatch.setitem(contenders.CONTENDERS, "fake", contenders.Contender(
        "fake", "full", "a shape and nothing else", lambda shape, backend: types.SimpleNamespace(shape=shape)))
    return "fake"


# ~20 ms a call whatever the size, unevenly: numpy's two-thread sgemm on the loaded 2-core box
# (15-24 ms at 64x512x512), whose first rung of 20 ms the probe once scaled to 2-22 s a call
LOADED_WAITS = [0.022, 0.025, 0.018, 0.024, 0.021, 0.026]


@pytest.mark.parametrize("work", [0.1, 0.4])
def test_a_fixed_cost_per_call_is_not_scaled_up_as_work(fake, work):
    cost = FakeCost(LOADED_WAITS, work / ops(TARGET))
    guess = estimate.expected_seconds(fake, TARGET, budget=1.0, time_call=cost)
    # within the budget it may still count some fixed cost as work (it sizes only the forecast
    # of the run's length), but it is never under half the real time, and never over the budget
    assert (work + min(LOADED_WAITS)) / 2 <= guess.seconds <= 1.0, guess.text()
    assert cost.spent < 1.0, cost.spent  # the probe stays cheap next to the budget


def test_a_contender_of_a_tenth_of_a_second_is_not_skipped_for_the_budget(fake, monkeypatch):
    cost = FakeCost(LOADED_WAITS, 0.1 / ops(TARGET))
    monkeypatch.setattr(estimate, "expected_seconds", functools.partial(estimate.expected_seconds, time_call=cost))
    for budget in (compare_gemm.DEFAULT_BUDGET_S, 0.25):
        tasks = compare_gemm.plan([TARGET, (64, 4096, 4096), (16, 4096, 4096)], (fake,), budget=budget)
        assert [t.skip for t in tasks] == [None, None, None], budget
        assert all(t.estimate <= budget for t in tasks), [t.estimate for t in tasks]


def test_a_slow_contender_is_skipped_on_the_word_of_a_long_call_that_grew_with_its_work(fake):
    # 0.05 s a call plus 10 s of work at the target: the line through two rungs finds both,
    # where the rung's time over its share of the operations would count the 0.05 s as work
    cost = FakeCost(0.05, 10.0 / ops(TARGET))
    guess = estimate.expected_seconds(fake, TARGET, budget=1.0, time_call=cost)
    assert guess.seconds == pytest.approx(10.05, rel=1e-6)
    assert guess.probe_seconds >= estimate.SKIP_S and ops(guess.base) <= ops(guess.probe) / 2
    assert TARGET not in cost.shapes and cost.spent < 1.5
    assert f"at {estimate.shape_text(guess.base)})" in guess.text()


def test_a_call_that_is_all_fixed_cost_is_not_skipped(fake):
    # no rung grows with its work, so none can say the target is over the budget: the climb
    # goes on until the ratio of operations left is small enough to bring it within
    cost = FakeCost(0.3, 0.0)
    guess = estimate.expected_seconds(fake, TARGET, budget=1.0, time_call=cost)
    assert 0.3 <= guess.seconds <= 1.0, guess.text()


def test_a_call_as_long_as_the_budget_settles_a_skip_at_once(fake):
    cost = FakeCost(0.3, 0.0)
    guess = estimate.expected_seconds(fake, TARGET, budget=0.2, time_call=cost)
    assert len(cost.shapes) == 2 and guess.probe == cost.shapes[0] and guess.seconds > 0.2


def test_an_estimate_within_the_budget_ends_the_probe_early(fake):
    # 1 ms a call and 0.5 s of work at the target: no need to climb to it
    cost = FakeCost(1e-3, 0.5 / ops(TARGET))
    guess = estimate.expected_seconds(fake, TARGET, budget=1.0, time_call=cost)
    assert guess.probe != TARGET and guess.seconds == pytest.approx(0.501, rel=0.05)
    assert cost.spent < 0.5


def test_a_fast_contender_climbs_to_the_target_and_is_its_own_estimate(fake):
    cost = FakeCost(1e-4, 1e-3 / ops(TARGET))
    guess = estimate.expected_seconds(fake, TARGET, time_call=cost)
    assert guess.probe == TARGET and guess.seconds == pytest.approx(1.1e-3) and guess.base is None
