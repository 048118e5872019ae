"""The int8nax command: which backend runs here (info), its exactness and speed (selftest,
compare, soak), the benchmark site's comparison page (site) and the regression gate (gate)."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_info(args) -> int:
    """The report, and exit status 0 whatever it says (a diagnostic: the first lines say when
    calls without an explicit backend= will fail)."""
    from .. import info

    report = info()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    picked, why = report["backend"], report["reason"]
    usable = picked is not None and report["backends"][picked]["available"]
    if picked is not None and not usable:
        # auto mode falls back to the CPU backend without asking it; when that cannot run
        # either, naming it as the backend would contradict its own line below
        why = f"{picked} would be picked ({why}), but {picked} cannot run here: {report['backends'][picked]['reason']}"
    print(f"int8nax backend: {picked if usable else 'none'}  ({why})")
    if not usable:
        print("warning: every API call without an explicit backend= fails until this is fixed")
    print(f"mlx {report['mlx_version']}, default device {report['default_device']}")
    for name, b in report["backends"].items():
        mark = "yes" if b["available"] else "no "
        print(f"  {name:6s} {mark}  {b['reason']}")
    return 0


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what was wrong, and where the help is) instead
    of the usage block first; exit status 2 as before. Subcommands inherit it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = Parser(prog="int8nax", description=__doc__)
    parser.add_argument("--version", action="version", version=f"int8nax {__version__}")
    # not required=True: argparse would then say only "the following arguments are required:
    # command"; main prints the usage with the commands instead (still a usage error, exit 2)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    p_info = sub.add_parser("info", help="backend detection report")
    p_info.add_argument("--json", action="store_true", help="machine-readable output")
    p_info.set_defaults(func=_cmd_info)
    _add_selftest(sub)
    from . import compare, convert, gate, site, soak, warm

    compare.add_parser(sub)
    site.add_parser(sub)
    gate.add_parser(sub)
    soak.add_parser(sub)
    warm.add_parser(sub)
    convert.add_parser(sub)
    return parser


def _cmd_selftest(args) -> int:
    from . import selftest

    return selftest.main(args)


def _add_selftest(sub) -> None:
    from . import selftest
    from ..bench import argtypes

    p = sub.add_parser(
        "selftest",
        help="exactness over a shape grid + timings next to cider, as markdown (for M5 owners)",
        description="Checks int8_matmul (bit-exact), quantize_activations (bit-exact) and "
        "w8a8_linear (within 1 ulp) over every (M, K, N) from --sizes, reports the NAX int8 "
        "layout, and times int8nax next to cider where cider is installed. Paste the output "
        "into an issue. Exit status: 0 all exact, 1 a check failed, 2 backend unavailable.",
    )
    p.add_argument("--backend", default="metal", type=argtypes.backend,
                   help="backend under test: metal (alias nax; the default), cuda, cpu or auto")
    # the mutually exclusive pairs below: given both, one would be silently ignored
    which_grid = p.add_mutually_exclusive_group()
    which_grid.add_argument("--grid", choices=("auto", "full", "cpu", "quick"), default="auto",
                            help="shape grid: full (sizes 1,7,33,513,4097 and six seed timing shapes), cpu (sizes "
                                 "to 2049, three timing shapes: minutes on a small CPU), quick; auto (the default) "
                                 "takes cpu for the CPU backend, full otherwise")
    p.add_argument("--sizes", type=selftest.sizes,
                   help=f"comma-separated sizes for M, K and N, each <= {selftest.MAX_K} (overrides the grid's)")
    which_grid.add_argument("--quick", action="store_true",
                            help="the quick grid (--grid quick): sizes 1,7,33 and one small timing shape")
    # --warmup, --repeat, --budget: default None, so that --no-timing can refuse a given one
    defaults = selftest.TIMING_DEFAULTS
    p.add_argument("--no-timing", action="store_true",
                   help="exactness only (takes none of --warmup, --repeat, --budget, --all)")
    p.add_argument("--warmup", type=argtypes.count(0), help=f"untimed calls per contender ({defaults['warmup']})")
    p.add_argument("--repeat", type=argtypes.count(1), help=f"timed calls per contender ({defaults['repeat']})")
    # checked at parse time: the dump is written only after the layout probe
    p.add_argument("--layout-out", metavar="FILE.npy", type=argtypes.output_file,
                   help="save the int8 layout dump (metal)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget", type=argtypes.seconds, metavar="SECONDS",
                        help="leave out a timed contender whose call is expected to take longer than this here "
                             f"({defaults['budget']:g})")
    budget.add_argument("--all", action="store_true",
                        help="time every contender whatever its expected time (no --budget)")
    p.add_argument("--json", action="store_true", help="the report as JSON instead of markdown")
    chatter = p.add_mutually_exclusive_group()
    chatter.add_argument("-v", "--verbose", action="store_true", help="progress on stderr for every shape")
    chatter.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=_cmd_selftest)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        # a missing subcommand is a usage error (argparse's exit status 2), shown as the help:
        # the usage line and every command with what it does
        parser.print_help(sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
