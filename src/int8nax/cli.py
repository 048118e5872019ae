"""Command line: `int8nax info` prints which backend runs here and why."""

from __future__ import annotations

import argparse
import json
import sys


def _cmd_info(args) -> int:
    from . import info

    report = info()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"int8nax backend: {report['backend']}  ({report['reason']})")
    print(f"mlx {report['mlx_version']}, default device {report['default_device']}")
    for name, b in report["backends"].items():
        mark = "yes" if b["available"] else "no "
        print(f"  {name:6s} {mark}  {b['reason']}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="int8nax", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="backend detection report")
    p_info.add_argument("--json", action="store_true", help="machine-readable output")
    p_info.set_defaults(func=_cmd_info)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
