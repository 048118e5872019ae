"""The PR benchmark gate's verdict, for the job summary and the job's status.

The decision itself is `int8nax gate`'s (src/int8nax/commands/gate.py: 0 quiet, 1 regression, 2 could
not measure); this script only reads it back from the gate's log (its last verdict line) and
writes it as Markdown. A log without a verdict line is a raw `asv continuous` log, and is
judged by the gate's own rule (gate.classify) from asv's exit status, so the two cannot disagree.
The gate passes only on a quiet verdict.

usage: python .github/scripts/asv_gate.py --returncode RC --log gate.log
Prints the verdict (Markdown), appends it to $GITHUB_STEP_SUMMARY when that is set, and exits
0 when the gate passes, 1 when it fails.

Standard library only, and gate.py is loaded from its file: CI runs this from asv's private
virtualenv, where neither int8nax nor MLX is installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

GATE_PY = Path(__file__).resolve().parents[2] / "src" / "int8nax" / "commands" / "gate.py"


def _load_gate():
    spec = importlib.util.spec_from_file_location("int8nax_gate_standalone", GATE_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


gate = _load_gate()


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    evidence: tuple[str, ...] = ()

    def markdown(self) -> str:
        title = "passed" if self.passed else "FAILED"
        text = f"### Benchmark gate {title}\n\n{self.reason}\n"
        if self.evidence:
            text += "\n```\n" + "\n".join(self.evidence) + "\n```\n"
        return text


def verdict(returncode: int, log: str) -> Verdict:
    """The gate's decision for one run: its exit status and its full console log (or a raw
    `asv continuous` log and asv's exit status)."""
    outcome = gate.read_verdict(log)
    if outcome is None or outcome.status != returncode:
        # No verdict line (asv's own log), or a status the log does not explain (the gate was
        # killed): judge the log by the gate's rule.
        outcome = gate.classify(returncode, log)
        if outcome.status == gate.QUIET and returncode != 0:
            outcome = gate.Outcome(gate.UNMEASURED, f"Unexpected exit status {returncode}")
    else:
        outcome = gate.Outcome(outcome.status, outcome.reason, gate.classify(returncode, log).evidence)
    return Verdict(outcome.status == gate.QUIET, outcome.reason, outcome.evidence)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--returncode", type=int, required=True, help="the gate's exit status")
    parser.add_argument("--log", required=True, help="the file holding the gate's output")
    args = parser.parse_args(argv)
    with open(args.log, encoding="utf-8", errors="replace") as f:
        result = verdict(args.returncode, f.read())
    text = result.markdown()
    print(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0 if result.passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
