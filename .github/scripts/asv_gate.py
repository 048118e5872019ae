"""Decide the PR benchmark gate from `asv continuous`'s exit status and its log.

asv 0.6.6's exit statuses (checked): 0 = no significant slowdown beyond --factor; 1 = a
significant slowdown ("PERFORMANCE DECREASED"), but also a usage error such as an unknown commit;
2 = some benchmark failed or timed out, in which case no comparison table is printed at all.
A failure can also hide behind status 0 or 1 (a benchmark that fails on both commits compares
as n/a), so the log is searched too. The gate passes only on status 0 with a clean log.

usage: python .github/scripts/asv_gate.py --returncode RC --log asv-continuous.log
Prints the verdict (Markdown), appends it to $GITHUB_STEP_SUMMARY when that is set, and exits
0 when the gate passes, 1 when it fails.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass

# asv marks a failed benchmark with the word "failed" ("... time_x   failed", "setup_cache
# failed", "Failed to build the project"); --show-stderr prints the benchmark's traceback.
FAILURE_LINE = re.compile(r"\bfailed\b|Traceback \(most recent call last\)", re.IGNORECASE)
REGRESSION_MARK = "PERFORMANCE DECREASED"
MAX_QUOTED_LINES = 20


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
    """The gate's decision for one `asv continuous` run (exit status, full console log)."""
    failures = tuple(line.rstrip() for line in log.splitlines() if FAILURE_LINE.search(line))
    quoted = failures[:MAX_QUOTED_LINES]
    if returncode == 2 or failures:
        return Verdict(
            False,
            f"A benchmark failed (asv exit status {returncode}, {len(failures)} failure line(s) "
            "in the log). asv continuous prints no comparison table when a benchmark failed: "
            "the asv compare table in the job summary and the log artifact show which.",
            quoted,
        )
    if returncode == 1:
        if REGRESSION_MARK in log:
            return Verdict(False, "Performance decreased beyond the factor (asv exit status 1).")
        last = tuple(line for line in log.splitlines() if line.strip())[-MAX_QUOTED_LINES:]
        return Verdict(
            False,
            "asv exited with status 1 without reporting a regression: a usage error "
            "(for example an unknown commit in a shallow clone).",
            last,
        )
    if returncode != 0:
        return Verdict(False, f"Unexpected asv exit status {returncode}.")
    return Verdict(True, "No benchmark slowed down beyond the factor, and none failed.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--returncode", type=int, required=True, help="asv continuous's exit status")
    parser.add_argument("--log", required=True, help="the file holding asv continuous's output")
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
