"""Kernel time: what the GPU spends in the kernels of one call, operands cold in L2, next to
cuBLASLt measured in the same run (`int8nax compare --mode kernel`, CUDA only).

What is timed, per (M, K, N) (default: the 11 seed shapes, problems.SEED_SHAPES, and for the
headline alone problems.EXTRA_SHAPES, 8192^3, shown but outside the geometric mean):

    int8_matmul       int8nax.int8_matmul(a, b, backend="cuda"): int8 [M, K] x int8 [N, K] -> int32
    cublaslt          cuBLASLt's int8 TN GEMM (peers.cublaslt: 64 MiB workspace, fastest of its
                      heuristic's algorithms), on the same a and b; also timed back to back
                      (no synchronize between launches: back_to_back_us in the JSON)
    w8a8:<dtype>[+bias]
                      int8nax.w8a8_linear(x, w, scale_w, bias, backend="cuda") on x of that dtype
                      (problems.linear_problem's x, w8a8_weights' w and scales): every kernel of the
                      call, quantization, GEMM and any split-K reduction, against int8_matmul's time
    bf16              (--bf16) mx.matmul(x, W.T) with x and W bfloat16: the layer a bfloat16 model
                      runs, against w8a8:bfloat16[+bias] (decode's target: W8A8 no slower)

Method. Each launch is one call and one mx.eval (cuBLASLt: one enqueue and one synchronize), so
no two launches overlap. The CUPTI activity records of the launches' kernels (memsets and copies
included) are read through torch.profiler (int8nax.bench.kernel.cupti): MLX launches on its own stream
from CUDA graphs, so CUDA events cannot bracket its kernels; cuBLASLt is timed the same way for a
like-for-like figure. A launch's time is the sum of its kernels' durations; the figure is the
median over `launches` launches (after 3 untimed ones), which rotate through copies of the inputs
covering ROTATE_L2 times the L2 (read from the device), so that the operands come from HBM.

Every timed output is checked after the timing (int8nax.bench.kernel.cases), on the same inputs
(copies are bit-identical): integers bit-exactly against the int64 product, W8A8 within 1 ulp of
the float64 model of its quantization (problems.py, int8nax.reference); on up to CHECK_ROWS rows
(first and last halves) for M above that. A wrong output is shown as MISMATCH and its time
dropped.

Each row names what ran: the backend's describe() and the kernels CUPTI saw.

Other kernels. The environment chooses what int8nax runs, as for any call (the workers inherit
it, and the JSON records it): INT8NAX_CUDA_KERNEL=<variant> times another GEMM kernel variant
(`--w8a8 none` for the raw GEMM alone), INT8NAX_CUDA_EPILOGUE=eft W8A8's other epilogue,
INT8NAX_CUDA_BIAS=own a 16-bit bias read by the kernels in its own type (no cast first).
`--plans` times every plan the dispatch could give instead (int8nax.bench.kernel.plans, on this
mode's worker, operands and checks).

Robustness. The items run in a worker process (python -m int8nax.bench.kernel.mode --worker;
int8nax.bench.kernel.worker), which writes one JSON line per item as it goes; if it dies (a kernel
fault kills the CUDA context), the item it was on is recorded as failed and a fresh worker takes
the rest. A budget in seconds (compile time included) stops the run; items not reached are
listed as not run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from functools import partial

from .. import argtypes
from .cupti import skip_reason
from ..estimate import shape_text
from .cases import CHECK_ROWS, FLOAT_PEERS, ROTATE_L2, WARMUP, measure
from .worker import LAUNCHES, Item, run_items, spawn_worker, worker_main
from ..text import table_lines
from ..problems import EXTRA_SHAPES, SEED_SHAPES, Shape

BUDGET_S = 330.0
"""Default seconds for the whole run, compile time included (one device call is 600 s at most)."""

W8A8_DTYPE_BIAS = ("float16", "float16+bias", "bfloat16", "bfloat16+bias")
"""The W8A8 calls timed by default, named by dtype and bias: x's (and the output's) dtype, with or
without a bias of that dtype. (INT8NAX_CUDA_KERNEL's variants are kernel schedules, another thing.)"""

ENV_KEYS = ("INT8NAX_CUDA_KERNEL", "INT8NAX_CUDA_EPILOGUE", "INT8NAX_CUDA_BIAS", "MLX_USE_CUDA_GRAPHS")
"""Environment settings that change what runs; recorded with the results."""

NO_CUDA_EXIT = 2

METHOD = ("CUPTI durations (torch.profiler) of every GPU activity of one call + mx.eval, summed per launch; "
          "median over the launches, which rotate through input copies covering ROTATE_L2 x the L2")


# ---- what to run -------------------------------------------------------------------------------

def parse_w8a8(text: str) -> tuple[str, ...]:
    """'float16,bfloat16+bias' -> those W8A8 dtype/bias names; '' or 'none' -> none. ValueError
    naming --w8a8 for anything else."""
    if text.strip().lower() in ("", "none"):
        return ()
    out = []
    for part in text.split(","):
        dtype_bias = part.strip().lower()
        if dtype_bias not in W8A8_DTYPE_BIAS:
            raise ValueError(f"--w8a8: expected comma-separated variants from {', '.join(W8A8_DTYPE_BIAS)} "
                             f"(or none), got {part.strip()!r}")
        out.append(dtype_bias)
    return tuple(dict.fromkeys(out))


def plan_items(shapes, w8a8=W8A8_DTYPE_BIAS, cublaslt: bool = True, extra=(), bf16: bool = False) -> list[Item]:
    """The run's items in order: the headline first (int8_matmul and cuBLASLt, shape by shape,
    the `extra` shapes last), then each W8A8 dtype/bias over `shapes`, then (bf16) bfloat16
    mx.matmul over `shapes`, so that a budget cut keeps the headline whole."""
    items = []
    for shape in [*shapes, *extra]:
        items.append(Item("int8_matmul", tuple(shape)))
        if cublaslt:
            items.append(Item("cublaslt", tuple(shape)))
    for dtype_bias in w8a8:
        items += [Item(f"w8a8:{dtype_bias}", tuple(shape)) for shape in shapes]
    if bf16:
        items += [Item("bf16", tuple(shape)) for shape in shapes]
    return items


# ---- tables and JSON (pure) --------------------------------------------------------------------

def geomean(values) -> float | None:
    values = [v for v in values if v is not None]
    if not values or any(v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _by(records, subject):
    return {tuple(r["shape"]): r for r in records if r["subject"] == subject}


def _cell(rec: dict | None) -> str:
    if rec is None:
        return "-"
    if "us" in rec:
        return f"{rec['us']:.1f}"
    return "MISMATCH" if "mismatch" in rec else "n/a"


def summary(records: list[dict]) -> dict:
    """Geometric means: cuBLASLt µs / int8_matmul µs over the shapes where both ran, and per
    W8A8 dtype/bias its µs / int8_matmul's (the cost over the raw GEMM; above 1 is slower)."""
    ours, lt = _by(records, "int8_matmul"), _by(records, "cublaslt")
    shapes = [s for s, r in ours.items() if not r.get("extra")]
    out = {}
    pairs = [(s, lt[s]["us"] / ours[s]["us"]) for s in shapes if "us" in ours[s] and "us" in lt.get(s, {})]
    if pairs:
        worst = min(pairs, key=lambda p: p[1])
        out["vs_cublaslt"] = {"geomean": geomean([p[1] for p in pairs]), "shapes": len(pairs), "of": len(shapes),
                              "lowest": worst[1], "lowest_at": list(worst[0]), "meaning": "cuBLASLt µs / int8nax µs"}
    for subject in dict.fromkeys(r["subject"] for r in records if r["subject"].startswith("w8a8:")):
        mine = _by(records, subject)
        pairs = [(s, mine[s]["us"] / ours[s]["us"]) for s in mine if "us" in mine[s] and "us" in ours.get(s, {})]
        if pairs:
            worst = max(pairs, key=lambda p: p[1])
            out[subject] = {"geomean": geomean([p[1] for p in pairs]), "shapes": len(pairs), "of": len(mine),
                            "highest": worst[1], "highest_at": list(worst[0]),
                            "meaning": "W8A8 µs / int8_matmul µs"}
    bf16 = _by(records, "bf16")
    for subject in ("w8a8:bfloat16", "w8a8:bfloat16+bias"):
        mine = _by(records, subject)
        pairs = [(s, bf16[s]["us"] / mine[s]["us"]) for s in mine if "us" in mine[s] and "us" in bf16.get(s, {})]
        if pairs:
            worst = min(pairs, key=lambda p: p[1])
            out[f"bf16/{subject}"] = {"geomean": geomean([p[1] for p in pairs]), "shapes": len(pairs),
                                      "lowest": worst[1], "lowest_at": list(worst[0]),
                                      "meaning": "bfloat16 matmul µs / W8A8 µs (above 1: W8A8 faster)"}
    return out


def render(records: list[dict], markdown: bool = False) -> str:
    """The headline table (int8_matmul, cuBLASLt, ratio, TOPS, kernel) with its geometric mean,
    then the W8A8 table (each dtype/bias's µs and its ratio to int8_matmul's), then what failed."""
    ours, lt = _by(records, "int8_matmul"), _by(records, "cublaslt")
    sums = summary(records)
    rows = []
    for shape, r in ours.items():
        peer = lt.get(shape)
        ratio = f"{peer['us'] / r['us']:.2f}x" if peer and "us" in peer and "us" in r else "n/a"
        rows.append([*map(str, shape), _cell(r), _cell(peer), ratio + ("*" if r.get("extra") else ""),
                     f"{r['tops']:.0f}" if "tops" in r else "n/a", r.get("describe", "") + kernels_text(r)])
    out = ["int8_matmul against cuBLASLt (kernel µs; ratio = cuBLASLt µs / int8nax µs, above 1: int8nax faster)", ""]
    out += table_lines(["M", "K", "N", "int8nax", "cuBLASLt", "ratio", "TOPS", "kernel"], rows, markdown,
                       align_last=False)
    if "vs_cublaslt" in sums:
        s = sums["vs_cublaslt"]
        out += ["", f"geometric mean over {s['shapes']} of {s['of']} shapes: {s['geomean']:.2f}x cuBLASLt; "
                    f"lowest {s['lowest']:.2f}x at {shape_text(s['lowest_at'])}"
                    + (" (* not in the mean)" if any(r.get("extra") for r in ours.values()) else "")]
    w8a8 = list(dict.fromkeys(r["subject"] for r in records if r["subject"].startswith("w8a8:")))
    if w8a8:
        rows = []
        by = {v: _by(records, v) for v in w8a8}
        for shape, r in ours.items():
            if r.get("extra"):
                continue
            cells = [*map(str, shape), _cell(r)]
            for v in w8a8:
                w = by[v].get(shape)
                cell = _cell(w)
                if w and "us" in w and "us" in r:
                    cell += f" ({w['us'] / r['us']:.2f}x)"
                cells.append(cell)
            rows.append(cells)
        out += ["", "", "W8A8 (every kernel of w8a8_linear) against the raw int32 GEMM (µs; ratio = W8A8 µs / "
                        "int8_matmul µs, above 1: W8A8 costs more)", ""]
        out += table_lines(["M", "K", "N", "int8_matmul", *(v.removeprefix("w8a8:") for v in w8a8)], rows,
                           markdown, align_last=False)
        out.append("")
        for v in w8a8:
            if v in sums:
                s = sums[v]
                out.append(f"{v}: geometric mean {s['geomean']:.2f}x over {s['shapes']} of {s['of']} shapes; "
                           f"highest {s['highest']:.2f}x at {shape_text(s['highest_at'])}")
        ran = [f"  {v.removeprefix('w8a8:')} {shape_text(s)}: {w.get('describe', '')}{kernels_text(w)}"
               for v in w8a8 for s, w in by[v].items() if "parts" in w]
        out += ["", "W8A8 kernels:", *ran] if ran else []
    bf16 = _by(records, "bf16")
    if bf16:
        mine = {v: _by(records, v) for v in ("w8a8:bfloat16", "w8a8:bfloat16+bias")}
        rows = []
        for shape, b in bf16.items():
            cells = [*map(str, shape), _cell(b)]
            for v in mine.values():
                w = v.get(shape)
                cells.append(_cell(w) + (f" ({b['us'] / w['us']:.2f}x)" if w and "us" in w and "us" in b else ""))
            rows.append(cells)
        out += ["", "", "W8A8 bfloat16 against bfloat16 mx.matmul (µs; ratio = bf16 µs / W8A8 µs, above 1: W8A8 "
                        "faster)", ""]
        out += table_lines(["M", "K", "N", "bf16", "w8a8 bfloat16", "w8a8 bfloat16+bias"], rows, markdown,
                           align_last=False)
        out += [f"{k}: geometric mean {v['geomean']:.2f}x over {v['shapes']} shapes; lowest {v['lowest']:.2f}x at "
                f"{shape_text(v['lowest_at'])}" for k, v in sums.items() if k.startswith("bf16/")]
    problems = [r for r in records if any(k in r for k in ("error", "mismatch", "not_run"))]
    if problems:
        out += ["", "Not measured:"]
        for r in problems:
            why = r.get("mismatch") and f"MISMATCH: {r['mismatch']}" or r.get("error") or f"not run: {r['not_run']}"
            out.append(f"  {Item(r['subject'], tuple(r['shape'])).key}: {why[:300]}")  # the JSON has it whole
    return "\n".join(out)


def kernels_text(rec: dict) -> str:
    parts = rec.get("parts") or []
    return (" [" + ", ".join(f"{name[:40]} {us:.1f}" for name, us in parts) + "]") if parts else ""


def failed(records: list[dict]) -> bool:
    """A wrong output anywhere, or an int8nax item that raised or died (a peer's error is its own)."""
    return any("mismatch" in r or (r["subject"] not in ("cublaslt", *FLOAT_PEERS) and "error" in r) for r in records)


def to_json(records: list[dict], meta: dict) -> dict:
    return {"meta": meta, "summary": summary(records), "results": records}


def environment() -> dict:
    from .. import host

    env = {**host.environment(), "method": METHOD,
           "rotate_l2": ROTATE_L2, "warmup": WARMUP, "check_rows": CHECK_ROWS,
           "settings": {k: os.environ[k] for k in ENV_KEYS if k in os.environ}}
    try:
        import torch

        env["torch"] = torch.__version__
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
    except Exception:  # noqa: BLE001
        pass
    try:
        env["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                       capture_output=True, text=True, timeout=20).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["driver"] = None
    return env


# ---- command line ------------------------------------------------------------------------------

def _w8a8_arg(text: str) -> tuple[str, ...]:
    try:
        return parse_w8a8(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--w8a8: ")) from None


def add_arguments(parser) -> None:
    """The options only `compare --mode kernel` reads."""
    parser.add_argument("--w8a8", type=_w8a8_arg, default=None, metavar="VARIANTS",
                        help=f"mode kernel: W8A8 variants to time against the raw GEMM, comma-separated from "
                             f"{', '.join(W8A8_DTYPE_BIAS)}, or none (default: all; with --plans: bfloat16)")
    parser.add_argument("--bf16", action="store_true",
                        help="mode kernel: also time bfloat16 mx.matmul(x, W.T) at each shape, against W8A8's "
                             "bfloat16 variants")
    parser.add_argument("--time-limit", type=argtypes.positive(float), default=BUDGET_S, metavar="SECONDS",
                        help=f"mode kernel: seconds for the whole run, compilation included ({BUDGET_S:.0f}); "
                             "items not reached are listed as not run")
    parser.add_argument("--launches", type=argtypes.positive(int), default=LAUNCHES,
                        help=f"mode kernel: timed launches per item, the median is kept ({LAUNCHES})")


def select_shapes(shapes=None) -> tuple[list[Shape], list[Shape]]:
    """(shapes, extra): the shapes asked for (--shapes) and none extra, else the 11 seed shapes
    and, for the headline alone, EXTRA_SHAPES (outside the geometric mean)."""
    if shapes:
        return [tuple(s) for s in shapes], []
    return list(SEED_SHAPES), [s for s in EXTRA_SHAPES if s not in SEED_SHAPES]


def main(args) -> int:
    """`int8nax compare --mode kernel` (args: compare's parsed options). Exit status: 0 every
    int8nax item measured and checked (or not reached in the budget), 1 a wrong output or a
    failed int8nax item, 2 nothing can be measured here."""
    prog = "int8nax compare --mode kernel"
    why = skip_reason()
    if why:
        print(f"{prog}: {why}; nothing was measured.", file=sys.stderr)
        return NO_CUDA_EXIT
    budget, launches = getattr(args, "time_limit", BUDGET_S), getattr(args, "launches", LAUNCHES)
    shapes, extra = select_shapes(getattr(args, "shapes", None))
    w8a8 = getattr(args, "w8a8", None)
    items = plan_items(shapes, W8A8_DTYPE_BIAS if w8a8 is None else w8a8, extra=extra, bf16=getattr(args, "bf16", False))
    meta = environment()
    meta.update({"launches": launches, "budget_s": budget, "command": "int8nax " + " ".join(sys.argv[1:])})
    print(f"{prog}: {len(items)} items over {len(shapes) + len(extra)} shapes; {run_line(meta, budget)}",
          flush=True)
    t0 = time.time()
    records = run_items(items, budget, launches, spawn=partial(spawn_worker, module=WORKER_MODULE))
    for r in records:
        if tuple(r["shape"]) not in shapes:
            r["extra"] = True  # shown, outside the geometric mean
    meta["seconds"] = round(time.time() - t0, 1)
    report(render(records, getattr(args, "markdown", False)), to_json(records, meta), meta, launches,
           getattr(args, "json", None))
    return 1 if failed(records) else 0


def run_line(meta: dict, budget: float) -> str:
    """The GPU, driver, versions, settings and budget of a run, in one line (environment()'s meta)."""
    return (f"{meta.get('gpu', '?')}, driver {meta.get('driver', '?')}, mlx {meta['mlx']}, "
            f"torch {meta.get('torch', '?')}; settings {meta['settings'] or 'default'}; budget {budget:.0f} s")


def report(text: str, payload: dict, meta: dict, launches: int, json_path: str | None) -> None:
    """Print a run's rendered table and how it was measured; write `payload` to json_path if given."""
    print(text)
    print(f"\n({meta['seconds']} s; CUPTI kernel time, median of {launches} launches, inputs rotated over "
          f"{ROTATE_L2}x the L2)")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(payload, f, indent=1)


WORKER_MODULE = "int8nax.bench.kernel.mode"
"""The module a kernel-mode worker runs (python -m): this one, whose entry point below hands
the worker cases.measure."""


if __name__ == "__main__":
    sys.exit(worker_main(measure))
