"""`int8nax compare`: one command over five modes, each a module with its own options.

    gemm      the default: contenders side by side per (M, K, N)   compare_gemm
    kernel    --mode kernel: CUDA kernel time against cuBLASLt     int8nax.bench.kernel.mode
    plans     --mode kernel --plans: W8A8 on every dispatch plan   int8nax.bench.kernel.plans
    model     --model: whole models, form by form                  compare_model.main
    generate  --generate: mlx-lm's generation at real depth        compare_model.generate_main

The options choose the mode: --generate, else --model, else --plans (or --raw-plans), else
--mode kernel, else gemm. An option that only a mode not chosen reads is a usage error (one
line, exit 2); options several modes read (--shapes, --repeat, --markdown, --json, --progress)
are the gemm comparison's, and each mode refuses those it does not take.
"""

from __future__ import annotations

import argparse
import functools
import sys

from ..bench.kernel import mode as kernel_mode
from ..bench.kernel import plans as kernel_plans
from . import compare_gemm, compare_model

MODES = ("gemm", "kernel", "plans", "model", "generate")


def mode_of(args: argparse.Namespace) -> str:
    """The mode `args` (compare's parsed options) choose, one of MODES."""
    if args.generate:
        return "generate"
    if args.model:
        return "model"
    if args.plans or args.raw_plans:
        return "plans"
    if args.mode == ("kernel",):
        return "kernel"
    return "gemm"


FLAGS = {"kernel": "--mode kernel", "plans": "--plans", "model": "--model", "generate": "--generate"}
"""The option that chooses each mode but gemm (the default), as messages name it."""

READ_BY = {
    "w8a8": ("kernel", "plans"), "bf16": ("kernel", "plans"), "time_limit": ("kernel", "plans"),
    "launches": ("kernel", "plans"), "plans": ("kernel", "plans"), "raw_plans": ("kernel", "plans"),
    "profile": ("gemm",), "contenders": ("gemm",), "chain_calls": ("gemm",), "budget": ("gemm",), "all": ("gemm",),
    "mode": ("gemm", "kernel", "plans"), "repeat": ("gemm", "model"), "progress": ("gemm", "model", "generate"),
}
"""The modes that read each option some modes do not (the model modes' own: GENERATE_ONLY, MODEL_ONLY)."""


@functools.cache
def _defaults() -> dict:
    """Every option's value when not given: a fresh parser's, so that the defaults have one source."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return vars(parser.parse_args([]))


def misplaced(args: argparse.Namespace, mode: str) -> str | None:
    """Why an option given does not go with `mode` (None: every one does): the options only
    --generate reads, then those only --model and --generate read, then those of the other modes.
    Given is a value other than the default: a mode that does not read an option would leave it
    out without a word."""
    defaults = _defaults()
    given = [o for o in vars(args) if o in defaults and getattr(args, o) != defaults[o]]
    for option in given:
        if option in compare_model.GENERATE_ONLY and mode != "generate":
            return f"--{option.replace('_', '-')} needs --generate"
    for option in given:
        if option in compare_model.MODEL_ONLY and mode not in ("model", "generate"):
            return f"--{option.replace('_', '-')} needs --model"
    for option in given:
        if mode not in READ_BY.get(option, (mode,)):
            flag = f"--{option.replace('_', '-')}"
            return f"{flag} needs --mode kernel" if mode == "gemm" else f"{FLAGS[mode]} does not take {flag}"
    if mode == "gemm" and "chain_calls" in given and not {"chain", "host"} & set(args.mode):
        return "--chain-calls needs --mode chain or host"
    if "budget" in given and args.all:
        return "--all does not take --budget (it measures every contender, with no probe and no budget)"
    return None


def main(args: argparse.Namespace) -> int:
    """Run the mode the options choose; its exit status (2 for an option of another mode)."""
    mode = mode_of(args)
    why = misplaced(args, mode)
    if why:
        print(f"int8nax compare: error: {why}", file=sys.stderr)
        return 2
    if mode == "generate":
        return compare_model.generate_main(args)
    if mode == "model":
        return compare_model.main(args)
    if mode == "plans":
        return kernel_plans.main(args)
    if mode == "kernel":
        return kernel_mode.main(args)
    return compare_gemm.main(args)


def add_parser(sub) -> None:
    """`compare` in the int8nax command's subcommands: every mode's options, one dispatcher."""
    p = sub.add_parser("compare", help="side-by-side timings of int8nax, cider and baselines",
                       description=__doc__ + "\n" + compare_gemm.__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=main)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Every mode's options, each mode's in its group of the help."""
    compare_gemm.add_arguments(p)
    kernel_mode.add_arguments(p.add_argument_group("kernel", "with --mode kernel: CUDA kernel time"))
    kernel_plans.add_arguments(p.add_argument_group("plans", "with --mode kernel --plans: every plan of the dispatch"))
    compare_model.add_arguments(p)
