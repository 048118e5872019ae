"""The selection of a variant: the layout probe's result, then the first-use self-test of the
variant built (choose_variant; INT8NAX_METAL_VARIANT forces one)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import exactness, nax_emulator
from .source import LOAD_GENERIC, LOAD_MLX_LAYOUT, KernelVariant
from . import kernel_set, launch


# ---------------------------------------------------------------------------------------------
# Selection: the layout probe, then the first-use self-test of the variant built
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutProbeResult:
    """What the layout probe (nax_layout.metal) said about the int8 cooperative tensors."""

    ran: bool
    """The probe kernel built and ran."""
    matches_mlx: bool
    """Every tensor (left, right, destination) reports MLX's BaseNAXFrag layout, capacities too."""
    same: dict
    """{"left"|"right"|"dest": equal to MLX's layout}."""
    problems: tuple
    """What would break the generic path (cells held twice or never, capacities)."""
    dump: object = None
    """The raw int32 [3, SIMD, 1 + 3 * CAP] numpy dump, or None."""
    error: str = ""
    """Why the probe did not run."""
    notes: tuple = ()
    """Remarks of the verdict (e.g. a right operand reporting transposed coordinates)."""

    def summary(self) -> str:
        if not self.ran:
            return f"the layout probe failed ({self.error})"
        if self.matches_mlx:
            return ("the layout probe reports MLX's BaseNAXFrag layout for the left, right and destination tensors"
                    + "".join(f" ({note})" for note in self.notes))
        parts = ", ".join(f"{p} {'matches' if v else 'differs'}" for p, v in self.same.items())
        return f"the layout probe reports another layout than MLX's ({parts})"


def layout_result(dump) -> LayoutProbeResult:
    """Judge a probe dump against MLX's layout (nax_emulator.mlx_layout_verdict)."""
    dump = np.asarray(dump)
    same, problems, notes = nax_emulator.mlx_layout_verdict(dump)
    return LayoutProbeResult(True, all(same.values()) and not problems, same, tuple(problems), dump, "", tuple(notes))


def probe_layout(kernels: kernel_set.KernelSet, relaxed_precision: bool = True) -> LayoutProbeResult:
    """Run the layout probe on the GPU and judge it; a probe that fails says why."""
    try:
        return layout_result(np.array(launch.run_layout_probe(kernels, relaxed_precision)))
    except Exception as exc:
        return LayoutProbeResult(False, False, {}, (), None, f"{type(exc).__name__}: {exc}")


PROBE_MATCHES = "matches"
PROBE_FAILED = "failed"
PROBE_DIFFERS = "differs"


def probe_outcome(layout: LayoutProbeResult) -> str:
    """What the layout probe said, in one word: PROBE_MATCHES (MLX's layout), PROBE_FAILED (it
    did not build or run) or PROBE_DIFFERS (it ran and reported something else)."""
    if not layout.ran:
        return PROBE_FAILED
    return PROBE_MATCHES if layout.matches_mlx else PROBE_DIFFERS


@dataclass(frozen=True)
class Selection:
    """Which variant serves this process, and why."""

    variant: KernelVariant | None
    """None: no variant passed its self-test, NAX is refused."""
    reason: str
    layout: LayoutProbeResult
    self_tests: dict
    """{variant name: failures} for every variant self-tested ([] = passed), in test order."""
    probe: str = PROBE_MATCHES
    """probe_outcome(layout)."""
    decided_by: str = ""
    """Who chose: "probe and self-test" (the probe reported MLX's layout and the fast path
    passed), "self-test" (the probe failed or disagreed, or the fast path failed and the
    generic one passed), "forced" (INT8NAX_METAL_VARIANT) or "refused"."""


VARIANT_ENV = "INT8NAX_METAL_VARIANT"
"""Names one variant (KernelVariant.name) to serve instead of the rule's choice, for A/B
measurements on an M5; it is still self-tested, and refused if it fails."""


def _first(failures: list[str]) -> str:
    return failures[0] + (f" (+{len(failures) - 1} more)" if len(failures) > 1 else "")


def choose_variant(layout: LayoutProbeResult, self_test, relaxed_precision: bool = True,
                   forced: KernelVariant | None = None) -> Selection:
    """The selection rule (pure: `self_test(variant) -> failures` is injected). The MLX-layout
    path (cider's layout, proven bit-exact on an M5 Pro) is self-tested first whatever the
    layout probe said: a probe that fails or disagrees never costs the fast path, because the
    bit-exact first-use self-test decides. If the MLX-layout path fails it, the generic path is
    tried before NAX is refused, so a wrong specialisation never returns numbers. `forced`
    (from INT8NAX_METAL_VARIANT) replaces the rule: only that variant is built and tested."""
    fast = KernelVariant(LOAD_MLX_LAYOUT, relaxed_precision)
    generic = KernelVariant(LOAD_GENERIC, relaxed_precision)
    outcome = probe_outcome(layout)
    candidates = [fast, generic]
    why = layout.summary()
    if forced is not None:
        candidates, fast = [forced], forced
        why = f"forced by {VARIANT_ENV} ({why})"
    passed = (f"; first-use self-test passed ({exactness.FIRST_USE_CHECKS} bit-exact/1-ulp checks)")
    results = {}
    for cand in candidates:
        failures = self_test(cand)
        results[cand.name] = failures
        if failures:
            continue
        if forced is not None:
            reason, decided = f"variant {cand.name}: {why}", "forced"
        elif cand is fast and outcome == PROBE_MATCHES:
            reason, decided = f"variant {cand.name}: {why}", "probe and self-test"
        elif cand is fast:
            reason = (f"variant {cand.name}: {why}; the MLX-layout path (cider's layout) was built anyway "
                      "and the bit-exact self-test decided")
            decided = "self-test"
        else:
            reason = f"variant {cand.name}: {why}; {fast.name} failed its self-test ({_first(results[fast.name])})"
            decided = "self-test"
        return Selection(cand, reason + passed, layout, results, outcome, decided)
    last = results[candidates[-1].name]
    tried = " and ".join(results)
    reason = (f"the first-use self-test failed ({tried}; {why}), so int8nax will not return its "
              f"numbers: {_first(last)}")
    return Selection(None, reason, layout, results, outcome, "refused")
