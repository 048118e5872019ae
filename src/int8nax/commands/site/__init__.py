"""`int8nax site HTML_DIR`: the comparison page of the published asv site.

Run after `asv publish`. It reads asv's result files (.asv/results/<machine>/*.json) directly
and writes, into the published site,
    compare.html  for each machine, at the latest commit that has results there, and for each
                  shape with results: the contenders side by side as a plot (inline SVG, no
                  JavaScript, so it opens offline) and a table: seconds per call in both modes
                  (time_<name>: one call then block; time_<name>_chain: per call of a dependent
                  chain), the speed ratio to each peer, TOPS = 2*M*K*N / time, and the fraction
                  of the machine's roofline (ceilings: int8nax.bench.machines)
    compare.json  the same entries, machine-readable (tools/asv_site.py checks the page and
                  this file against asv's own graph files)
and links the page from asv's index.html. asv 0.6.6's index loads its JavaScript from CDNs:
the command copies the same libraries, shipped with int8nax (int8nax.commands.site.vendor), into the
site and points index.html at them, so that the graphs work offline. Should they still fail
to load, asv sends the browser to error.html; the command points that fallback at
compare.html#offline instead, which says why the interactive graphs are missing.

asv's result files are read through int8nax.commands.site.asv_format (format version 2): a number is a
result, NaN n/a (skipped), null a failure; a benchmark absent from a file was not run at
that commit.
"""

# The docstring above is the command's --help. The package, by step:
#     results        each machine's latest results, read from asv's result files (asv_format)
#     comparison     the contenders side by side per shape: ceilings, ratios, kernels, what is absent
#     page           compare.html
#     loop_section   the headline models section: mlx-lm's loop and the first token
#     model_section  the model benchmarks' section of the page (a few layers' forward: the diagnostic)
#     asv_pages      what asv published (its commits), and the edits of its index.html and graph page
#     vendor         asv's JavaScript and CSS libraries, shipped with int8nax and served with the site
# and the command itself (publish, main) here.

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ...bench import argtypes, problems
from . import loop_section, model_section, vendor
from .asv_pages import link_index, published_commits, tune_graphs
from .comparison import compare, to_json
from .page import render
from .results import SiteError


def this_machine(machine_file: Path | None = None) -> str | None:
    """The asv machine name of this computer (asv keys ~/.asv-machine.json by host name, as
    `asv machine --yes` wrote it), or None when it has none."""
    import socket

    path = machine_file or Path.home() / ".asv-machine.json"
    try:
        entries = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    entry = entries.get(socket.gethostname()) if isinstance(entries, dict) else None
    return entry.get("machine") if isinstance(entry, dict) else None


def publish(html_dir: Path, results_dir: Path, first: str | None = None, here: str | None = None) -> dict:
    """Write compare.html and compare.json into html_dir and link them from index.html.
    `here`: this computer's asv machine (its section first unless `first` names another)."""
    index = html_dir / "index.html"
    if not index.is_file():
        raise SiteError(f"{index} does not exist: run `asv publish` first")
    commits = published_commits(html_dir)
    blocks = compare(results_dir, commits, first or here, here)
    page = render(blocks, str(results_dir))
    # The model sections go at the end of the page: mlx-lm's loop (the headline), then a few layers' forward.
    models = (loop_section.section(results_dir, commits, first or here) + "\n"
              + model_section.section(results_dir, commits, first or here))
    page = page.replace("</body></html>", models + "\n</body></html>")
    (html_dir / "compare.html").write_text(page)
    data = to_json(blocks)
    data["models"] = model_section.to_json(model_section.read(results_dir, commits))
    data["loop"] = loop_section.to_json(loop_section.read(results_dir, commits))
    (html_dir / "compare.json").write_text(json.dumps(data, indent=1, allow_nan=False))
    tuned, untuned = tune_graphs(html_dir, first or (here if here in data["machines"] else None))
    changed = link_index(index) + tuned
    try:
        if vendor.vendor(html_dir):
            changed.append("libraries served with the site (vendor/)")
    except vendor.VendorError as exc:
        raise SiteError(str(exc)) from None
    return {"page": str(html_dir / "compare.html"), "index": changed, "untuned": untuned,
            "machines": {m: sum(e["has_result"] for e in v["entries"]) for m, v in data["machines"].items()},
            "absent": {m: v["absent"] for m, v in data["machines"].items()},
            "unmeasured": {m: len(v["unmeasured_shapes"]) for m, v in data["machines"].items()},
            "here": here if here in data["machines"] else None}


def html_dir(text: str) -> Path:
    """asv's html_dir: a folder holding the index.html `asv publish` writes (argparse type)."""
    folder = Path(argtypes.folder(text))
    if not (folder / "index.html").is_file():
        raise argparse.ArgumentTypeError(f"expected asv's html_dir (with an index.html: run `asv publish` first), "
                                         f"got {text!r}, which has none")
    return folder


def add_parser(sub) -> None:
    p = sub.add_parser(
        "site", help="write the comparison page into a published asv site (after `asv publish`)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # a path that is not what its argument takes is a usage error (exit 2), as for every command;
    # exit 1 is left for results that cannot be read
    p.add_argument("html_dir", type=html_dir, help="asv's html_dir (.asv/html)")
    p.add_argument("--results", type=lambda text: Path(argtypes.folder(text)),
                   help="asv's results_dir (default: 'results' beside html_dir, i.e. .asv/results)")
    p.add_argument("--machine", help="the machine whose section comes first (default: this computer's asv "
                                     "machine, from ~/.asv-machine.json)")
    p.set_defaults(func=main)


def main(args) -> int:
    results = args.results or args.html_dir.parent / "results"
    if not results.is_dir():
        print(f"int8nax site: error: argument --results: expected asv's results_dir, got none, and the default "
              f"{str(results)!r} (beside html_dir) does not exist: run `asv run` first, or pass --results "
              "(see int8nax site --help)", file=sys.stderr)
        return 2
    try:
        report = publish(args.html_dir, results, args.machine, this_machine())
    except SiteError as exc:
        print(f"int8nax site: {exc}", file=sys.stderr)
        return 1
    counts = ", ".join(f"{m}: {n}" for m, n in report["machines"].items()) or "no machine has results"
    print(f"wrote {report['page']} (entries with results per machine: {counts}); "
          f"index.html: {', '.join(report['index']) or 'already linked'}")
    if report["untuned"]:
        print(f"int8nax site: asv's graph page left as it is: {'; '.join(report['untuned'])}", file=sys.stderr)
    here = report["here"]
    if here:
        # asv's own output shows a skip as n/a, without its reason: the reasons, once each
        print(f"what asv showed as n/a on this machine ({here}):")
        groups: dict[str, list[str]] = {}
        for name, why in report["absent"][here].items():
            groups.setdefault(why or "ran, but recorded no time", []).append(name)
        for why, names in groups.items():
            print(f"  {', '.join(names)}: {why}")
        if report["unmeasured"][here]:
            print(f"  {report['unmeasured'][here]} of the {len(problems.ALL_SHAPES)} declared shapes: not in this "
                  "machine's profile (INT8NAX_BENCH_PROFILE=full measures them)")
        print("  other n/a cells: a contender too slow for a shape on this device, skipped by the suite "
              "(see compare.html)")
    return 0
