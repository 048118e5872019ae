"""The H200 measurements behind the CUDA dispatch's thresholds (tests/data/cuda_dispatch_evidence.json),
replayed: each rule picks, on each measured problem, the fastest candidate (within the entry's
tolerance). Pure Python: the rules take the SM count as an argument."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from int8nax.backends.cuda import choice as cuda_choice, plans as cuda_plans

ENTRIES = json.loads((Path(__file__).resolve().parent / "data" / "cuda_dispatch_evidence.json").read_text())["entries"]


def picked(e) -> str:
    """The candidate label the rule picks for the entry's problem."""
    m, n, k, sms, w8a8 = e["m"], e["n"], e["k"], e["sms"], e["op"] == "w8a8_linear"
    if e["rule"] == "choose":
        got = cuda_choice.choose(m, n, k, w8a8=w8a8, sms=sms).variant
        if got == cuda_choice.GEMV and got not in e["us"]:
            # An entry from before the GEMV (at M <= 16): its measurements still judge the
            # rule among the tiled kernels. The GEMV's own default there has no entry yet.
            return cuda_choice.tiled_variant(cuda_choice.Problem(m, n, k, w8a8, sms=sms))
        return got
    if e["rule"] == "tma_plan":
        plan = cuda_plans.tma_plan(m, n, k, sms, w8a8)
        return f"{plan.cfg.name}/{plan.splits}"
    if e["rule"] == "epilogue_chunk":
        (tile,) = {label.split("/")[0] for label in e["us"]}
        return f"{tile}/chunk{cuda_plans.CUDA_CONFIGS[tile].epilogue_chunk}"
    raise AssertionError(f"unknown rule {e['rule']!r}")


@pytest.mark.parametrize("e", ENTRIES, ids=lambda e: f"{e['rule']}-{e['op']}-{e['m']}x{e['k']}x{e['n']}")
def test_the_rule_picks_the_measured_fastest(e):
    got = picked(e)
    if "fastest" in e:
        assert got in e["fastest"], (got, e["note"])
    else:
        times = {label: us for label, us in e["us"].items() if us is not None}
        assert got in times, f"the rule picks {got}, which this run did not time: {sorted(times)}"
        assert times[got] <= min(times.values()) * (1 + e["tolerance"]), (got, times, e["note"])


def test_every_threshold_has_evidence():
    rules = {(e["rule"], e["op"]) for e in ENTRIES}
    assert {("choose", "int8_matmul"), ("choose", "w8a8_linear"), ("tma_plan", "int8_matmul"),
            ("tma_plan", "w8a8_linear"), ("epilogue_chunk", "w8a8_linear")} <= rules
    # TMA_MIN_M_W8A8 and W8A8_WS_MIN_ROUNDS each rest on a problem where the rule declines a kernel
    declined = [e for e in ENTRIES if e["rule"] == "choose" and e["op"] == "w8a8_linear"
                and min(e["us"], key=e["us"].get) != "tma-ws-cooperative"]
    assert {(e["m"], e["n"], e["k"]) for e in declined} >= {(16, 4096, 4096), (2048, 4096, 4096)}


def test_the_w8a8_rules_rest_on_measurements_either_side():
    # each W8A8 rule has a measured problem where it fires and one where it declines
    choose = [e for e in ENTRIES if e["rule"] == "choose" and e["op"] == "w8a8_linear"]

    def coop(e):
        return cuda_choice.w8a8_cooperative(e["m"], e["n"], e["k"], e["sms"])

    for long_k in (True, False):  # w8a8_cooperative's two cases
        side = [e for e in choose if cuda_plans.long_k(e["k"]) is long_k and e["m"] > 64]
        assert any(coop(e) for e in side) and any(not coop(e) for e in side), long_k
    at_large_m = [e for e in choose if e["m"] >= cuda_plans.W8A8_COMPUTE_MIN_M and not coop(e)]
    assert any(not cuda_plans.long_k(e["k"]) for e in at_large_m)  # short K, more than one round
    assert any(e["m"] < cuda_plans.W8A8_COMPUTE_MIN_M and "tma-ws-cooperative" in e["us"] for e in choose)

    def rounds(e):
        tiles = cuda_plans.tile_count(e["m"], e["n"], cuda_plans.COOPERATIVE_CONFIGS["ws_128x256"])
        full = cuda_choice.persistent_variant(e["m"], e["n"], e["k"], e["sms"]) == cuda_choice.COOPERATIVE
        return -(-tiles // e["sms"]) if full and not coop(e) else None

    measured = {rounds(e) for e in choose} - {None}
    assert cuda_choice.W8A8_WS_MIN_ROUNDS in measured and cuda_choice.W8A8_WS_MIN_ROUNDS - 1 in measured

    wave = [e for e in ENTRIES if e["rule"] == "tma_plan" and e["op"] == "w8a8_linear"]
    takes = {cuda_plans.w8a8_wave_tile(e["m"], e["n"], e["sms"]) is not None for e in wave}
    assert takes == {True, False}
    below = [e for e in wave if e["m"] < cuda_plans.W8A8_COMPUTE_MIN_M]
    assert any(cuda_plans.wave_tile(e["m"], e["n"], e["sms"]).name + "/1" in e["us"] for e in below)
