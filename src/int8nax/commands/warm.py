"""`int8nax warm --model FOLDER`: every kernel a model's W8A8 layers need, built before a server starts.

Loads an mlx-lm model folder lazily (`mlx_lm.load`: no weight is read; a W8A8 folder of `int8nax convert`
through int8nax.nn.folder.load, its layers W8A8 already), swaps its linears for W8A8
ones as a server would (int8nax.nn.quantize_linears: every nn.Linear, or --skip-lm-head; with
weights=False, since only their shapes matter here), and makes every kernel they launch for
1 .. max-tokens x batch rows ready (int8nax.nn.warm_up). On CUDA each kernel instance is
compiled once per machine into MLX's kernel cache (MLX_PTX_CACHE_DIR), in parallel, so a later
process answers its first request without compiling; a second run finds them all and builds
nothing. Prints what it built, how long loading, quantizing and building took, and where kernels
now come from, and whether the tape extension is ready (--json: one JSON line of the same); exit 0,
1 where a build was left to MLX, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from ..bench import argtypes


def add_parser(sub) -> None:
    """Register `int8nax warm` on the CLI's subparsers."""
    p = sub.add_parser("warm", help="build every kernel a model's W8A8 layers need, once per machine",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, type=_folder, metavar="FOLDER", help="an mlx-lm model folder")
    p.add_argument("--max-tokens", type=argtypes.count(1), default=8192,
                   help="longest prompt (or prefill chunk) to prepare for (8192)")
    p.add_argument("--batch", type=argtypes.count(1), default=1, help="largest batch served (1)")
    p.add_argument("--jobs", type=argtypes.count(1), default=None, help="compiles at once (default: the CPUs)")
    p.add_argument("--skip-lm-head", action="store_true", help="leave the lm_head unquantized, as the server will")
    p.add_argument("--json", action="store_true",
                   help="print one JSON line instead: layers, rows, backend, kernels built, seconds of each step "
                        "(load_s, quantize_s, build_s) and in all, and where kernels come from")
    p.set_defaults(func=main)


def _folder(text: str) -> str:
    if not (Path(text) / "config.json").is_file():
        raise argparse.ArgumentTypeError(f"expected an mlx-lm model folder (with a config.json), got {text!r}")
    return text


def main(args) -> int:
    from .. import backends, nn
    from ..backends import tape
    from ..backends.cuda import binary_cache as cuda_binary_cache, kernels as cuda_kernels
    from ..bench.generate import front_end
    from ..bench.peers import Unavailable

    try:
        load = front_end().load
    except Unavailable as exc:
        print(f"int8nax warm: mlx-lm cannot load models here: {exc}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    recorded = nn.folder.w8a8_layers(args.model)
    if recorded is not None:  # a W8A8 folder (int8nax convert): its layers are W8A8 once loaded
        if args.skip_lm_head:
            print("int8nax warm: error: --skip-lm-head is for mlx-lm folders; this W8A8 folder lists its own "
                  "W8A8 layers", file=sys.stderr)
            return 2
        model, _ = nn.folder.load(args.model, lazy=True)
        loaded = quantized = time.perf_counter()
        count = len(recorded)
    else:
        model, _ = load(args.model, lazy=True)
        loaded = time.perf_counter()
        skip = (lambda path, module: not path.endswith("lm_head")) if args.skip_lm_head else None
        count = nn.quantize_linears(model, predicate=skip, weights=False)
        quantized = time.perf_counter()
    rows = args.max_tokens * args.batch
    progress = None if args.json else cuda_binary_cache.terminal_progress("building kernels")
    built = nn.warm_up(model, rows, jobs=args.jobs, progress=progress)
    end = time.perf_counter()
    backend = backends.resolve(None)
    tapes = None if backend.w8a8_linear_graph is None else (tape.why() or "ready")
    cache = cuda_kernels.binary_cache() if backend.name == "cuda" else None
    status = cuda_kernels.binary_cache_status() if backend.name == "cuda" else None
    if args.json:
        print(json.dumps({"model": args.model, "layers": count, "rows": rows, "backend": backend.name, "built": built,
                          "seconds": end - start, "load_s": loaded - start, "quantize_s": quantized - loaded,
                          "build_s": end - quantized, "kernels": status, "tapes": tapes,
                          "counts": None if cache is None else asdict(cache.counts)}))
    else:
        print(f"int8nax warm: {count} W8A8 layers of {args.model}, up to {rows} rows on the {backend.name} backend: "
              f"{built} kernels built in {end - start:.1f} s (load {loaded - start:.1f} s, quantize "
              f"{quantized - loaded:.1f} s, kernels {end - quantized:.1f} s)")
        if status:
            print(f"kernels: {status}")
        if tapes is not None:
            print(f"tapes: {tapes}")
    return 1 if cache is not None and cache.counts.failed else 0
