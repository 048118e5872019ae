"""Rename benchmarks in asv's record, so that a renamed benchmark's history carries on.

    python tools/asv_rename.py [RESULTS_DIR ...]     (default: .asv/results)

asv 0.6.6 keys a benchmark's history by its name and version: a class or method renamed in
benchmarks/ starts an empty series, and its old points vanish from the site. This rewrites the
names in every result file (results/<machine>/*.json: the "results" and "durations" keys) and in
results/benchmarks.json (its keys and "name" fields), keeping everything else, key order
included (asv reads the files back as it wrote them). Running it again changes nothing.

RENAMES holds every rename so far, oldest first (a name is rewritten by each rule in turn):
- the ratio benchmarks were time_ benchmarks (bench_ratio.GemmRatio.time_nax_gemm_ratio, a
  custom clock advanced by the ratio) and are unitless track_ benchmarks recording the same figure;
- int8nax's own contenders are named by what they are on every backend, not after Metal's NAX
  (which runs only on an Apple M5): NaxGemm -> Int8naxGemm (time_int8nax_gemm...), NaxFull ->
  Int8naxFull, and the kernel and ratio records that name them.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

RENAMES: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"^(bench_ratio\.\w+)\.time_(\w+_ratio)$"), r"\1.track_\2"),
    (re.compile(r"^(bench_gemm)\.NaxGemm\.(time|track)_nax_gemm"), r"\1.Int8naxGemm.\2_int8nax_gemm"),
    (re.compile(r"^(bench_linear)\.NaxFull\.(time|track)_nax_full"), r"\1.Int8naxFull.\2_int8nax_full"),
    (re.compile(r"^(bench_kernel\.\w+)\.track_nax_(gemm|full)_kernel"), r"\1.track_int8nax_\2_kernel"),
    (re.compile(r"^(bench_ratio\.\w+)\.track_nax_(gemm|full)_ratio"), r"\1.track_int8nax_\2_ratio"),
)


def new_name(name: str) -> str:
    for pattern, replacement in RENAMES:
        name = pattern.sub(replacement, name)
    return name


def _renamed(entries: dict) -> dict | None:
    """`entries` with every key renamed, in the same order; None when no key changes."""
    if not any(new_name(k) != k for k in entries):
        return None
    out = {}
    for key, value in entries.items():
        name = new_name(key)
        if name in out:
            raise ValueError(f"two entries become {name!r}: the old and the new name are both recorded")
        out[name] = value
    return out


def rename_file(path: Path) -> bool:
    """Rewrite one asv JSON file (a result file or benchmarks.json); returns whether it changed."""
    data = json.loads(path.read_text())
    changed = False
    if path.name == "benchmarks.json":
        benches = {k: v for k, v in data.items() if k != "version"}
        renamed = _renamed(benches)
        if renamed is not None:
            for info in renamed.values():
                if isinstance(info, dict) and "name" in info:
                    info["name"] = new_name(info["name"])
            data = {**renamed, **({"version": data["version"]} if "version" in data else {})}
            changed = True
    else:
        for section in ("results", "durations"):
            renamed = _renamed(data.get(section) or {})
            if renamed is not None:
                data[section] = renamed
                changed = True
    if changed:
        path.write_text(json.dumps(data))
    return changed


def rename(results_dir: Path) -> list[Path]:
    """Rename in every result file of every machine under results_dir and in its benchmarks.json;
    returns the files changed."""
    files = sorted(p for p in results_dir.glob("*/*.json") if p.name != "machine.json")
    if (results_dir / "benchmarks.json").is_file():
        files.append(results_dir / "benchmarks.json")
    return [p for p in files if rename_file(p)]


def main(argv=None) -> int:
    dirs = [Path(a) for a in (sys.argv[1:] if argv is None else argv)] or [Path(".asv/results")]
    for d in dirs:
        if not d.is_dir():
            print(f"asv_rename: {d} is not a folder (asv's results_dir)", file=sys.stderr)
            return 2
        changed = rename(d)
        print(f"{d}: renamed benchmarks in {len(changed)} file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
