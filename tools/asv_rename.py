"""Rename benchmarks in asv's record, so that a renamed benchmark's history carries on.

    python tools/asv_rename.py [RESULTS_DIR ...]     (default: .asv/results)

asv 0.6.6 keys a benchmark's history by its name and version: a class or method renamed in
benchmarks/ starts an empty series, and its old points vanish from the site. This rewrites the
names in every result file (results/<machine>/*.json: the "results" and "durations" keys) and in
results/benchmarks.json (its keys and "name" fields), keeping everything else, key order
included (asv reads the files back as it wrote them). Running it again changes nothing.

A file it cannot rename (not JSON, not the layout asv writes, unreadable, or holding both a
benchmark's old and new name) is left as it is, with one warning line naming it, and the rest of
the record is renamed: asv itself skips a result file it cannot read with a warning, so that file
shows no history to carry on, and one bad file among hundreds should not stop the others.

RENAMES holds every rename so far, oldest first (a name is rewritten by each rule in turn):
- the ratio benchmarks were time_ benchmarks (bench_ratio.GemmRatio.time_nax_gemm_ratio, a
  custom clock advanced by the ratio) and are unitless track_ benchmarks recording the same figure;
- int8nax's own contenders are named by what they are on every backend, not after Metal's NAX
  (which runs only on an Apple M5): NaxGemm -> Int8naxGemm (time_int8nax_gemm...), NaxFull ->
  Int8naxFull, and the kernel and ratio records that name them.
"""

from __future__ import annotations

import argparse
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


class FileError(ValueError):
    """A file this tool cannot rename; the message names it and says why."""


def _load(path: Path) -> dict:
    """The JSON object in `path`, checked for the layout rename_file rewrites; FileError otherwise."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise FileError(f"{path}: cannot read it ({exc})") from None
    except json.JSONDecodeError as exc:
        raise FileError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise FileError(f"{path}: expected a JSON object, got a {type(data).__name__}")
    if path.name == "benchmarks.json":
        for key, info in data.items():
            if isinstance(info, dict) and not isinstance(info.get("name", ""), str):
                raise FileError(f"{path}: expected the \"name\" of {key!r} to be a string, got {info['name']!r}")
    else:
        for section in ("results", "durations"):
            if not isinstance(data.get(section) or {}, dict):
                raise FileError(f"{path}: expected \"{section}\" to be a JSON object, "
                                f"got a {type(data[section]).__name__}")
    return data


def rename_file(path: Path) -> bool:
    """Rewrite one asv JSON file (a result file or benchmarks.json); returns whether it changed.
    FileError (naming the file) for one it cannot read or rename."""
    data = _load(path)
    changed = False
    if path.name == "benchmarks.json":
        benches = {k: v for k, v in data.items() if k != "version"}
        try:
            renamed = _renamed(benches)
        except ValueError as exc:
            raise FileError(f"{path}: {exc}") from None
        if renamed is not None:
            for info in renamed.values():
                if isinstance(info, dict) and "name" in info:
                    info["name"] = new_name(info["name"])
            data = {**renamed, **({"version": data["version"]} if "version" in data else {})}
            changed = True
    else:
        for section in ("results", "durations"):
            try:
                renamed = _renamed(data.get(section) or {})
            except ValueError as exc:
                raise FileError(f"{path}: {section}: {exc}") from None
            if renamed is not None:
                data[section] = renamed
                changed = True
    if changed:
        try:
            path.write_text(json.dumps(data))
        except OSError as exc:
            raise FileError(f"{path}: cannot write it ({exc})") from None
    return changed


def rename(results_dir: Path, skipped: list[str] | None = None) -> list[Path]:
    """Rename in every result file of every machine under results_dir and in its benchmarks.json;
    returns the files changed. A file that cannot be renamed raises FileError, or where `skipped`
    is a list, is left alone and its FileError's message appended there."""
    files = sorted(p for p in results_dir.glob("*/*.json") if p.name != "machine.json")
    if (results_dir / "benchmarks.json").is_file():
        files.append(results_dir / "benchmarks.json")
    changed = []
    for path in files:
        try:
            if rename_file(path):
                changed.append(path)
        except FileError as exc:
            if skipped is None:
                raise
            skipped.append(str(exc))
    return changed


def folder(text: str) -> Path:
    """An existing folder (asv's results_dir)."""
    if not Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"expected a folder (asv's results_dir), got {text!r}")
    return Path(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="asv_rename", description=__doc__.split("\n\n")[0],
                                     epilog="RENAMES in tools/asv_rename.py lists the renames.")
    parser.add_argument("results_dir", nargs="*", type=folder,
                        help="asv's results_dir(s) to rewrite in place (default: .asv/results)")
    args = parser.parse_args(argv)
    dirs = args.results_dir
    if not dirs:
        try:
            dirs = [folder(".asv/results")]
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument results_dir: {exc} (the default; run from the repository or name one)")
    for d in dirs:
        skipped: list[str] = []
        changed = rename(d, skipped)
        for line in skipped:
            print(f"asv_rename: warning: skipped {line}", file=sys.stderr)
        print(f"{d}: renamed benchmarks in {len(changed)} file(s)" + (f", skipped {len(skipped)}" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
