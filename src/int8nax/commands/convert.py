"""`int8nax convert --model FOLDER --out FOLDER`: an mlx-lm model folder quantized once and saved in
W8A8 form (int8nax.nn.folder), so that a server loads it with no quantization at each start:

    from int8nax.nn import folder
    model, tokenizer = folder.load("<out>")      # then mlx_lm.generate / stream_generate as usual

Every nn.Linear becomes a W8A8Linear (--skip-lm-head: not the lm_head); the folder holds their
int8 weights, float32 scales and biases, the other parameters as they were, the tokenizer, and a
config.json that lists the W8A8 layers. Prints the layers and the weight files' sizes; exit 0, 2 on a
usage error (one line).
"""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    """Register `int8nax convert` on the CLI's subparsers."""
    p = sub.add_parser("convert", help="save an mlx-lm model folder in W8A8 form, quantized once",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, metavar="FOLDER", help="an mlx-lm model folder (bf16, fp16 or fp32)")
    p.add_argument("--out", required=True, metavar="FOLDER", help="the W8A8 folder to write (new, or empty)")
    p.add_argument("--skip-lm-head", action="store_true", help="leave the lm_head unquantized")
    p.set_defaults(func=main)


def main(args) -> int:
    from ..nn import folder

    try:
        got = folder.convert(args.model, args.out, skip_lm_head=args.skip_lm_head)
    except (ValueError, ImportError) as exc:
        print(f"int8nax convert: error: {exc}", file=sys.stderr)
        return 2
    print(f"int8nax convert: {got['layers']} W8A8 layers of {args.model} saved in {args.out} in {got['seconds']:.1f} s; "
          f"weights {got['src_bytes'] / 1e9:.3g} GB -> {got['dst_bytes'] / 1e9:.3g} GB. Load it with "
          f"int8nax.nn.folder.load({args.out!r}).")
    return 0
