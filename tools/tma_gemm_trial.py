"""Device trial of the TMA int8 GEMMs (kernels/gemm_tma.cuh) against the cp.async kernel and cuBLASLt.

    PYTHONPATH=/tmp/site:$PWD/src python tools/tma_gemm_trial.py --out DIR [--variants ...] [--budget 170]
    python tools/tma_gemm_trial.py --dry-run --out DIR      # no GPU: plans, kernel names, sources

Each variant runs in its own subprocess with a timeout (a kernel fault kills the CUDA context,
a deadlocked mbarrier hangs it); the worker appends one JSON line per shape to
DIR/worker_<variant>.jsonl as it goes, so a crash keeps what came before. Variants:
  default     what int8_matmul runs (backends/cuda.py gemm_kernel: tma_simple or cp.async)
  b2b         the same calls timed as cuBLASLt is: launched back to back and evaluated once
              (this worker runs with MLX_USE_CUDA_GRAPHS=0, so MLX launches on its one stream in
              order and independent calls cannot overlap)
  w8a8        what w8a8_linear runs on float16 x (quantization + fused GEMM [+ reduction]),
              checked bit for bit against the cp.async kernel's W8A8 (tested against the
              float64 model in the suite); its kernel time is the whole pipeline's
  tma_simple  TMA + mbarrier pipeline on tiling.tma_plan's plan (no warp specialisation)
  tma_ws      warp-specialised (producer + 2 consumer warpgroups), persistent (tiling.ws_plan)
  tma_pp      the same with ping-pong consumers, each on whole 128-row tiles (tiling.pp_plan)
  w8a8_pp     w8a8's pipeline with the GEMM on tma_pp (quantization + fused ping-pong GEMM),
              checked as w8a8 is
  w8a8_bias   w8a8 with a bias of the outputs' size (bias [N] uniform in +-16), so that it cancels
              the product closely for some values, as in a real layer
  w8a8_narrow, w8a8_narrow_bias
              the same two with INT8NAX_CUDA_EPILOGUE=narrow (float32 without the full error-free
              transformations, kernels/cuda_common.cuh dequantize_narrow), checked bit for bit
              against the cp.async kernel's narrow W8A8 and, on up to 256 of the output's rows,
              within 1 ulp of the float64 model
  pp_sweep    tma_pp at every pp_sweep_plans plan on the seed shapes
  wgmma       the cp.async + wgmma kernel
  cublaslt    cuBLASLt with a 64 MiB workspace, fastest of its heuristic's algorithms
  sweep       tma_simple at every tile x split-K plan (sweep_plans) on the seed shapes
--ncu-shapes MxKxN,... instead runs one worker under Nsight Compute (profiling only between
cudaProfilerStart and cudaProfilerStop, so the warm-up and cuBLASLt's algorithm search are left
out): per shape one call of int8_matmul's default kernel, of tma_ws, tma_pp, of cuBLASLt's chosen
algorithm and of w8a8_linear's default pipeline with the eft and then the narrow epilogue, with
the SpeedOfLight, WarpStateStats, LaunchStats and Occupancy sections, written as CSV to
DIR/ncu.csv (the kernels' names say which is which: MLX appends the template arguments, NARROW
among them, to a kernel's name; the quantization kernel, the same in both pipelines, comes in the
order of the worker log).

Per shape: bit-exact check of the whole output against float64 numpy (exact for int8 at these
K; 8192^3 checks 256 sampled rows), then kernel time. Kernel time = the CUPTI duration of every
kernel of one call (GEMM, plus the split-K reduction where there is one), read from a
torch.profiler trace, median over launches that rotate through input copies covering 3x the
60 MB L2 (cold operands), one mx.eval per launch so no two launches overlap. MLX owns its stream,
so CUDA events cannot bracket its kernels; cuBLASLt is measured the same way (CUPTI), and its
CUDA-event time over back-to-back launches is reported too. Results: DIR/tma_trial.md,
DIR/tma_trial.json, DIR/worker_<variant>.log (the worker's stdout/stderr, NVRTC logs included).
Exit status: 0 ran (look at the table), 3 skipped (the reason is printed and written), 1 error.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

import numpy as np  # noqa: E402

from int8nax import tiling  # noqa: E402
from int8nax.backends import cuda_source  # noqa: E402

VARIANTS = ("default", "b2b", "w8a8", "tma_simple", "tma_ws", "tma_pp", "w8a8_pp", "w8a8_bias", "w8a8_narrow",
            "w8a8_narrow_bias", "wgmma", "cublaslt", "sweep", "pp_sweep")
W8A8_VARIANTS = ("w8a8", "w8a8_pp", "w8a8_bias", "w8a8_narrow", "w8a8_narrow_bias")
"""The variants that time w8a8_linear's pipeline (worker_w8a8); their ratio is against the raw GEMM."""
WORKER_ENV = {"b2b": {"MLX_USE_CUDA_GRAPHS": "0"},
              "w8a8_narrow": {"INT8NAX_CUDA_EPILOGUE": "narrow"},
              "w8a8_narrow_bias": {"INT8NAX_CUDA_EPILOGUE": "narrow"}}
"""Environment a variant's worker process needs (MLX reads it once, at start)."""
SWEEP_SPLITS = (1, 2, 4, 8)

# (M, K, N): edges first (exactness only), then the 11 seed shapes and 8192^3 (exactness + time).
# "fill": None random int8, -128 every element -128; "shift": byte offsets of a and b's bases.
EDGES = [
    dict(m=1, k=16, n=1),
    dict(m=3, k=48, n=5),
    dict(m=1, k=4096, n=4096),
    dict(m=17, k=4096, n=33),
    dict(m=130, k=160, n=257),
    dict(m=200, k=4096, n=300, fill=-128),
    dict(m=256, k=18944, n=512, fill=-128),
    dict(m=1000, k=1040, n=1000),
    dict(m=4097, k=256, n=129),
    dict(m=64, k=16, n=4096, fill=-128),
]
LAST = [dict(m=77, k=4096, n=200, shift=(3, 5))]
"""Run after everything else: on the H200 (2026-12-01 12:13) the TMA kernels trapped on a
misaligned base, and the trap left the worker's CUDA context unusable for every later shape."""
SEEDS = [(m, 4096, 4096) for m in (16, 64, 128, 256, 512, 1024, 2048)] + [
    (128, 3584, 18944), (512, 3584, 18944), (128, 18944, 3584), (512, 18944, 3584)]
BIG = (8192, 8192, 8192)
L2_BYTES = 60 << 20
SAMPLED_ROWS = 256
PEAK_TOPS = 1979.0


def log(*args):
    print(*args, flush=True)


def shape_cases(include_big: bool = True, seeds=None) -> list[dict]:
    """The edges, the seed shapes (or only those in `seeds`, (M, K, N) tuples), 8192^3, LAST."""
    cases = [dict(c, kind="edge") for c in EDGES]
    cases += [dict(m=m, k=k, n=n, kind="seed") for m, k, n in SEEDS if seeds is None or (m, k, n) in seeds]
    if include_big:
        m, k, n = BIG
        cases.append(dict(m=m, k=k, n=n, kind="big"))
    cases += [dict(c, kind="edge") for c in LAST]
    for c in cases:
        c.setdefault("fill", None)
        c.setdefault("shift", (0, 0))
        c["label"] = f"{c['m']}x{c['k']}x{c['n']}" + (" (-128)" if c["fill"] == -128 else "") + (
            f" (base +{c['shift'][0]}/+{c['shift'][1]} B)" if any(c["shift"]) else "")
    return cases


def sweep_plans(m: int, n: int, k: int, sms: int = 132) -> list:
    """The tma_simple plans the sweep times: every tile with 1-8 K splits of >= 4 K blocks each,
    but no 128-row tile for M <= 64 and no split whose blocks outnumber what the SMs hold at once
    (tma_plan takes neither)."""
    blocks = tiling.ceil_div(k, tiling.CUDA_SWIZZLE_BYTES)
    out = []
    for c in tiling.CUDA_CONFIGS.values():
        if c.bm > 64 and m <= 64:
            continue
        tiles = tiling.tile_count(m, n, c)
        out += [tiling.CudaPlan(c, s) for s in SWEEP_SPLITS
                if s == 1 or (blocks // s >= 4 and tiles * s <= sms * tiling.blocks_per_sm(c))]
    return out


SWEEPS = ("sweep", "pp_sweep")
PP_SWEEP_SPLITS = (1, 2, 4)


def pp_sweep_plans(m: int, n: int, k: int, sms: int = 132) -> list:
    """The tma_pp plans pp_sweep times: each tile with 1-4 K splits of >= 4 K blocks (a split only
    while the units fit on the SMs twice over), with ws_group's raster band and with none
    (group 1), on min(SMs, units) blocks."""
    blocks = tiling.ceil_div(k, tiling.CUDA_SWIZZLE_BYTES)
    out = []
    for c in tiling.CUDA_PP_CONFIGS.values():
        tiles_m = tiling.ceil_div(m, c.bm)
        for s in PP_SWEEP_SPLITS:
            units = tiling.ws_units(m, n, c, s)
            if s > 1 and (blocks // s < 4 or units > 2 * sms):
                continue
            for g in dict.fromkeys((tiling.ws_group(tiles_m, c, sms), 1)):
                out.append(tiling.CudaWsPlan(c, s, g, max(1, min(sms, units))))
    return out


def pp_plan_name(p) -> str:
    return f"{p.cfg.name} splits={p.splits} group={p.group} blocks={p.blocks}"


def plan_description(variant: str, m: int, n: int, k: int, sms: int = 132, w8a8: bool = False) -> dict:
    """What a variant launches for a shape (pure Python: the dry run and the table use it);
    w8a8: the plan of w8a8_linear's GEMM."""
    if variant == "b2b":
        return plan_description("default", m, n, k, sms)
    if variant == "default" or (variant in W8A8_VARIANTS and variant != "w8a8_pp"):
        # The default dispatch (INT8NAX_CUDA_KERNEL unset; W8A8 with its own rules: tiling.tma_plan).
        w8a8 = variant != "default"
        kernel = tiling.cuda_gemm_kernel(m, n, k, w8a8=w8a8, sms=sms)
        d = plan_description(kernel, m, n, k, sms, w8a8=w8a8)
        return {**d, "plan": f"{kernel}: {d['plan']}"}
    if variant == "sweep":
        return {"plan": f"{len(sweep_plans(m, n, k))} tma_simple plans"}
    if variant == "pp_sweep":
        return {"plan": f"{len(pp_sweep_plans(m, n, k))} tma_pp plans"}
    if variant in ("tma_simple", "tma_ws", "tma_pp", "w8a8_pp") and not tiling.tma_ok(k):
        return {"plan": f"not taken (K % {tiling.TMA_K_MULTIPLE} != 0)"}
    if variant in ("tma_pp", "w8a8_pp"):
        w8a8 = w8a8 or variant == "w8a8_pp"
        p = tiling.pp_plan(m, n, k, sms, w8a8=w8a8)
        spec = cuda_source.gemm_w8a8_tma_pp(p.cfg) if w8a8 and p.splits == 1 else cuda_source.gemm_tma_pp(p.cfg)
        return {"plan": pp_plan_name(p), "kernel": spec.name, "smem": spec.shared_memory,
                "units": tiling.ws_units(m, n, p.cfg, p.splits)}
    if variant == "tma_ws":
        p = tiling.ws_plan(m, n, k, sms)
        spec = cuda_source.gemm_w8a8_tma_ws(p.cfg) if w8a8 and p.splits == 1 else cuda_source.gemm_tma_ws(p.cfg)
        return {"plan": f"{p.cfg.name} splits={p.splits} group={p.group} blocks={p.blocks}", "kernel": spec.name,
                "smem": spec.shared_memory, "units": tiling.ws_units(m, n, p.cfg, p.splits)}
    if variant in ("tma_simple", "wgmma"):
        p = tiling.tma_plan(m, n, k, sms, w8a8) if variant == "tma_simple" else tiling.cuda_plan(m, n, k, sms)
        spec = cuda_source.gemm_tma_simple(p.cfg) if variant == "tma_simple" else cuda_source.gemm_int32("sm90", p.cfg)
        lau = tiling.launch(m, n, p.cfg)
        return {"plan": f"{p.cfg.name} splits={p.splits} grid={lau.grid_x}x{lau.grid_y}x{p.splits}",
                "kernel": spec.name, "smem": spec.shared_memory}
    return {"plan": "cuBLASLt heuristic (fastest of up to 8)"}


# ---- data and reference ----------------------------------------------------------------------

def make_operands(case: dict):
    m, k, n = case["m"], case["k"], case["n"]
    if case["fill"] is not None:
        a = np.full((m, k), case["fill"], dtype=np.int8)
        b = np.full((n, k), case["fill"], dtype=np.int8)
    else:
        rng = np.random.default_rng(m * 1000003 + k * 1009 + n)
        a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
        b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
    return a, b


def reference_rows(a: np.ndarray, b: np.ndarray, rows) -> np.ndarray:
    """Exact int64 a[rows] . b^T: float64 products of int8 and their sums stay below 2^53."""
    bt = b.astype(np.float64).T
    out = []
    for i in range(0, len(rows), 1024):
        out.append(a[rows[i:i + 1024]].astype(np.float64) @ bt)
    return np.rint(np.concatenate(out)).astype(np.int64)


def checked_rows(case: dict) -> np.ndarray:
    m = case["m"]
    if case["kind"] != "big":
        return np.arange(m)
    rng = np.random.default_rng(7)
    rows = np.concatenate([np.arange(64), rng.choice(np.arange(64, m - 64), SAMPLED_ROWS - 128, replace=False),
                           np.arange(m - 64, m)])
    return np.sort(rows)


def compare(got: np.ndarray, ref: np.ndarray) -> dict:
    bad = np.argwhere(got.astype(np.int64) != ref)
    res = {"exact": bool(len(bad) == 0), "mismatches": int(len(bad))}
    if len(bad):
        r, c = bad[0]
        res["first_mismatch"] = {"index": [int(r), int(c)], "got": int(got[r, c]), "want": int(ref[r, c])}
        # Where the wrong elements lie, to tell a load/map bug (whole tiles, zeros) from an edge bug.
        res["wrong_rows"] = int(len(np.unique(bad[:, 0])))
        res["wrong_cols"] = int(len(np.unique(bad[:, 1])))
        res["wrong_row_range"] = [int(bad[:, 0].min()), int(bad[:, 0].max())]
        res["wrong_col_range"] = [int(bad[:, 1].min()), int(bad[:, 1].max())]
        res["zeros_where_wrong"] = float(np.mean(got[bad[:, 0], bad[:, 1]] == 0))
    return res


def copies_for(bytes_per_set: int) -> int:
    return max(1, min(8, math.ceil(3 * L2_BYTES / bytes_per_set)))


def launches_for(case: dict) -> int:
    return 10 if case["kind"] == "big" else 30


# ---- CUPTI kernel durations through torch.profiler --------------------------------------------

def profile_kernels(torch, run_once, launches: int, name_filter=None, tmp_dir: Path | None = None,
                    serial: bool = False):
    """(median µs of the kernels of one launch, kernel names, kernel count, parts) from a chrome
    trace of `launches` calls of run_once(i); every launch must run the same kernels, in series
    (serial: checked, no kernel may start before the one before it ended). parts: one launch's
    kernels in order, each [name, median µs] (where the pipeline's time goes: W8A8's quantization
    apart from its GEMM); empty in serial mode, whose launches cannot be cut apart."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(launches):
            run_once(i)
        torch.cuda.synchronize()
    path = (tmp_dir or Path("/tmp")) / f"trace_{os.getpid()}.json"
    prof.export_chrome_trace(str(path))
    with open(path) as f:
        trace = json.load(f)
    path.unlink(missing_ok=True)
    kernels = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"]
    if name_filter:
        kernels = [e for e in kernels if name_filter(e.get("name", ""))]
    kernels.sort(key=lambda e: e.get("ts", 0))
    if not kernels or len(kernels) % launches:
        return None, sorted({e.get("name", "?") for e in kernels}), len(kernels), []
    if serial:
        # Back to back, MLX may order one launch's kernels apart (every GEMM, then every
        # reduction), so launches cannot be cut out of the trace: per kernel name, the median
        # duration times its launches per call (a mean would let one slow launch count, as a
        # 4 ms outlier did at 512 x 18944 x 3584 on 2026-12-01).
        if any(b["ts"] < a["ts"] + a["dur"] for a, b in zip(kernels, kernels[1:])):
            return None, sorted({e.get("name", "?") for e in kernels}), len(kernels), []
        by_name: dict[str, list[float]] = {}
        for e in kernels:
            by_name.setdefault(e.get("name", "?"), []).append(float(e["dur"]))
        if any(len(v) % launches for v in by_name.values()):
            return None, sorted(by_name), len(kernels), []
        us = sum(sorted(v)[len(v) // 2] * (len(v) // launches) for v in by_name.values())
        return us, sorted(n[:80] for n in by_name), len(kernels), []
    per = len(kernels) // launches
    sums = [sum(float(e["dur"]) for e in kernels[i * per:(i + 1) * per]) for i in range(launches)]
    sums.sort()
    parts = []
    for j in range(per):
        durs = sorted(float(kernels[i * per + j]["dur"]) for i in range(launches))
        parts.append([kernels[j].get("name", "?")[:80], durs[len(durs) // 2]])
    return sums[len(sums) // 2], sorted({e.get("name", "?")[:80] for e in kernels}), len(kernels), parts


# ---- workers -----------------------------------------------------------------------------------

def emit(fh, record: dict) -> None:
    fh.write(json.dumps(record) + "\n")
    fh.flush()


def worker_mlx(variant: str, out_dir: Path, cases: list[dict]) -> int:
    import mlx.core as mx
    import torch

    from int8nax.backends import cuda

    torch.zeros(1, device="cuda")  # torch's context first (the profiler needs CUPTI up)
    sms = cuda.sm_count()
    log(f"[{variant}] mlx {mx.__version__}, {mx.device_info(mx.gpu).get('device_name')}, {sms} SMs")
    fh = open(out_dir / f"worker_{variant}.jsonl", "a")
    emit(fh, {"variant": variant, "event": "start", "sms": sms})

    if variant == "sweep":
        return sweep(cuda, mx, torch, fh, out_dir, [c for c in cases if c["kind"] == "seed"])
    if variant == "pp_sweep":
        return sweep(cuda, mx, torch, fh, out_dir, [c for c in cases if c["kind"] == "seed"], pp=True)
    if variant in W8A8_VARIANTS:
        return worker_w8a8(cuda, mx, torch, fh, out_dir, cases, sms, variant)

    def call(a, b, m, n, k):
        if variant in ("default", "b2b"):
            return cuda.gemm_int32(a, b)
        if variant == "wgmma":
            return cuda.gemm_int32(a, b, plan=tiling.cuda_plan(m, n, k, sms), family="sm90")
        return cuda.tma_gemm_int32(a, b, variant)

    for case in cases:
        m, k, n = case["m"], case["k"], case["n"]
        rec = {"variant": variant, "shape": case["label"], "m": m, "k": k, "n": n, "kind": case["kind"],
               **plan_description(variant, m, n, k, sms)}
        t0 = time.time()
        try:
            a_np, b_np = make_operands(case)
            sa, sb = case["shift"]
            a, b = device_operand(mx, a_np, sa), device_operand(mx, b_np, sb)
            mx.eval(a, b)
            out = call(a, b, m, n, k)
            mx.eval(out)
            rows = checked_rows(case)
            got = np.array(mx.take(out, mx.array(rows.astype(np.int32)), axis=0) if case["kind"] == "big" else out)
            rec.update(compare(got, reference_rows(a_np, b_np, rows)))
            rec["checked_rows"] = int(len(rows))
            del out, got
            if case["kind"] != "edge" and rec["exact"]:
                sets = operand_sets(mx, (a, b), m * k + n * k + 4 * m * n)
                for _ in range(3):
                    mx.eval(call(*sets[0], m, n, k))
                timer = kernel_us_b2b if variant == "b2b" else kernel_us
                rec["us"], rec["kernels"], rec["timing"], rec["kernel_parts"] = timer(
                    mx, torch, out_dir, lambda i: call(*sets[i % len(sets)], m, n, k), launches_for(case))
                rec["tops"] = tops(m, n, k, rec["us"])
                sets = None
        except Exception as exc:  # noqa: BLE001  (NVRTC errors arrive as RuntimeError with the log)
            rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["traceback"] = traceback.format_exc()[-4000:]
            log(f"[{variant}] {case['label']}: ERROR {rec['error'][:4000]}")
        rec["seconds"] = round(time.time() - t0, 2)
        emit(fh, rec)
        log(f"[{variant}] {case['label']:34s} exact={rec.get('exact')} us={rec.get('us')} "
            f"{rec.get('plan', '')} ({rec['seconds']} s)")
    emit(fh, {"variant": variant, "event": "done"})
    return 0


def device_operand(mx, x_np: np.ndarray, shift: int = 0):
    """int8 x_np on the device: computed there (mx.array(numpy) is managed memory), or, with a
    shift, a row-contiguous view whose base is `shift` bytes past its allocation."""
    if shift:
        return mx.array(np.concatenate([np.zeros(shift, np.int8), x_np.ravel()]))[shift:].reshape(x_np.shape)
    return mx.array(x_np) + mx.array(0, dtype=mx.int8)


def tops(m: int, n: int, k: int, us: float) -> float:
    return 2.0 * m * n * k / (us * 1e-6) / 1e12


def kernel_us(mx, torch, out_dir, launch, launches):
    """(µs, kernel names, how, parts) of one launch(i) + mx.eval: CUPTI, or wall time if it saw
    none (parts: profile_kernels')."""
    # Every kernel of the call counts, int8nax's and any MLX runs for it (a fill, a copy); the
    # operands were evaluated before the profile started.
    us, names, count, parts = profile_kernels(torch, lambda i: mx.eval(launch(i)), launches, tmp_dir=out_dir)
    if us is not None:
        return us, names, "CUPTI kernel time", parts
    t1 = time.perf_counter()
    for i in range(launches):
        mx.eval(launch(i))
    return (time.perf_counter() - t1) / launches * 1e6, names, f"wall per call + eval (CUPTI gave {count} records)", []


def kernel_us_b2b(mx, torch, out_dir, launch, launches):
    """(µs, kernel names, how, no parts) of launch(i), the launches queued back to back and evaluated once:
    cuBLASLt's conditions (this worker runs without CUDA graphs, so MLX launches in order on its
    one stream). The kernels of the trace must not overlap."""
    pending = []

    def run_once(i):
        pending.append(launch(i))
        if i == launches - 1:
            mx.eval(pending)

    us, names, count, _ = profile_kernels(torch, run_once, launches, tmp_dir=out_dir, serial=True)
    if us is None:
        raise RuntimeError(f"back-to-back timing: {count} kernels for {launches} launches, or overlapping kernels")
    return us, names, "CUPTI kernel time, back to back", []


def operand_sets(mx, arrays, bytes_per_set):
    """The arrays and copies of them covering 3x the L2, evaluated on the device."""
    sets = [tuple(arrays)] + [tuple(x + mx.array(0, dtype=x.dtype) for x in arrays)
                              for _ in range(copies_for(bytes_per_set) - 1)]
    mx.eval(sets)
    return sets


def sweep(cuda, mx, torch, fh, out_dir, cases, pp: bool = False) -> int:
    """tma_simple at every sweep_plans plan (pp: tma_pp at every pp_sweep_plans plan) of each seed
    shape: exact check, then kernel time."""
    variant, kernel = ("pp_sweep", "tma_pp") if pp else ("sweep", "tma_simple")
    for case in cases:
        m, k, n = case["m"], case["k"], case["n"]
        a_np, b_np = make_operands(case)
        ref = reference_rows(a_np, b_np, np.arange(m))
        a, b = device_operand(mx, a_np), device_operand(mx, b_np)
        sets = operand_sets(mx, (a, b), m * k + n * k + 4 * m * n)
        plans = pp_sweep_plans(m, n, k, cuda.sm_count()) if pp else sweep_plans(m, n, k, cuda.sm_count())
        for plan in plans:
            rec = {"variant": variant, "shape": case["label"], "m": m, "k": k, "n": n, "kind": "sweep",
                   "plan": pp_plan_name(plan) if pp else plan.name}
            t0 = time.time()
            try:
                rec.update(compare(np.array(cuda.tma_gemm_int32(a, b, kernel, plan)), ref))
                if rec["exact"]:
                    for _ in range(3):
                        mx.eval(cuda.tma_gemm_int32(a, b, kernel, plan))
                    rec["us"], rec["kernels"], rec["timing"], rec["kernel_parts"] = kernel_us(
                        mx, torch, out_dir, lambda i: cuda.tma_gemm_int32(*sets[i % len(sets)], kernel, plan),
                        launches_for(case))
                    rec["tops"] = tops(m, n, k, rec["us"])
            except Exception as exc:  # noqa: BLE001
                rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["seconds"] = round(time.time() - t0, 2)
            emit(fh, rec)
            log(f"[{variant}] {case['label']:20s} {rec['plan']:40s} exact={rec.get('exact')} us={rec.get('us')}")
        sets = None  # free the copies before the next shape
    emit(fh, {"variant": variant, "event": "done"})
    return 0


def worker_w8a8(cuda, mx, torch, fh, out_dir, cases, sms, variant: str) -> int:
    """w8a8_linear's pipeline (a W8A8_VARIANTS variant) on float16 x [M, K] (its codes near a's),
    w = b, scales s [N], a bias for the *_bias variants; w8a8_pp: the quantization and the
    ping-pong kernel's W8A8 GEMM instead. The epilogue is the worker's (WORKER_ENV)."""
    from int8nax import exactness

    pp = variant == "w8a8_pp"
    with_bias = variant.endswith("_bias")
    narrow = cuda.epilogue_choice() == "narrow"

    def pipeline(x, w, s, bias):
        if not pp:
            return cuda.w8a8(x, w, s, bias)
        q, sx = cuda.quantize(x)
        return cuda.dequant_gemm(q, sx, w, s, bias, x.dtype, kernel="tma_pp")

    for case in cases:
        m, k, n = case["m"], case["k"], case["n"]
        rec = {"variant": variant, "shape": case["label"], "m": m, "k": k, "n": n, "kind": case["kind"],
               **plan_description(variant, m, n, k, sms)}
        if pp and not tiling.tma_ok(k):
            emit(fh, rec)
            continue
        t0 = time.time()
        try:
            a_np, b_np = make_operands(case)
            rng = np.random.default_rng(m + n + k)
            x = (mx.array(a_np).astype(mx.float16) * mx.array(0.01, dtype=mx.float16))
            s = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
            bias = mx.array(rng.uniform(-16, 16, n).astype(np.float32)) if with_bias else None
            w = device_operand(mx, b_np, case["shift"][1])  # the case's B shift moves the weight's base
            mx.eval(x, s, w)
            rows = checked_rows(case)
            pick = (lambda y: mx.take(y, mx.array(rows.astype(np.int32)), axis=0)) if case["kind"] == "big" else (
                lambda y: y)
            y = pick(pipeline(x, w, s, bias))
            got = np.array(y).view(np.uint16)
            # The cp.async kernel on tma_plan's W8A8 plan: the same dequantization (each output one
            # function of its inputs, on either epilogue), and integer sums are the same whatever the plan.
            want = np.array(pick(cuda.w8a8(x, w, s, bias, plan=tiling.tma_plan(m, n, k, sms, w8a8=True),
                                           family="sm90")))
            bad = np.argwhere(got != want.view(np.uint16))
            rec.update({"exact": bool(len(bad) == 0), "mismatches": int(len(bad)), "checked_rows": int(len(rows)),
                        "check": "bit-identical to the cp.async kernel's W8A8"})
            if narrow and rec["exact"]:
                # The narrow epilogue is new: the output that ran is also held to the float64 model
                # (1 ulp): the edge shapes whole, 256 rows elsewhere (the model's GEMM runs on the host).
                if case["kind"] == "big":
                    xr, yr = mx.take(x, mx.array(rows.astype(np.int32)), axis=0), y
                elif case["kind"] == "seed":
                    xr, yr = x[:256], y[:256]
                else:
                    xr, yr = x, y
                problem = exactness.check_w8a8(lambda *_: yr, xr, b_np, np.array(s),
                                               None if bias is None else np.array(bias))
                rec.update({"exact": problem is None, "model_check": problem or "within 1 ulp of the float64 model"})
            if case["kind"] != "edge" and rec["exact"]:
                sets = operand_sets(mx, (x, w, s), 2 * m * k + n * k + 2 * m * n)
                for _ in range(3):
                    mx.eval(pipeline(*sets[0], bias))
                rec["us"], rec["kernels"], rec["timing"], rec["kernel_parts"] = kernel_us(
                    mx, torch, out_dir, lambda i: pipeline(*sets[i % len(sets)], bias), launches_for(case))
                rec["tops"] = tops(m, n, k, rec["us"])
                sets = None
        except Exception as exc:  # noqa: BLE001
            rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["traceback"] = traceback.format_exc()[-4000:]
            log(f"[{variant}] {case['label']}: ERROR {rec['error'][:4000]}")
        rec["seconds"] = round(time.time() - t0, 2)
        emit(fh, rec)
        log(f"[{variant}] {case['label']:34s} exact={rec.get('exact')} us={rec.get('us')} {rec.get('plan', '')}")
    emit(fh, {"variant": variant, "event": "done"})
    return 0


NCU_SECTIONS = ("SpeedOfLight", "WarpStateStats", "LaunchStats", "Occupancy")


def ncu_command(out_dir: Path, shapes: str) -> list[str]:
    cmd = ["ncu", "--profile-from-start", "off", "--target-processes", "all", "--clock-control", "none", "--csv",
           "--page", "details", "--log-file", str(out_dir / "ncu.csv")]
    for section in NCU_SECTIONS:
        cmd += ["--section", section]
    return cmd + [sys.executable, str(Path(__file__).resolve()), "--out", str(out_dir), "--worker", "ncu",
                  "--ncu-shapes", shapes]


def worker_ncu(out_dir: Path, shapes: list[tuple[int, int, int]]) -> int:
    """One profiled call each of the default kernel, tma_ws, tma_pp, cuBLASLt and W8A8's default
    pipeline with each epilogue (eft, narrow: quantization + GEMM [+ reduction]) per shape (run
    under ncu)."""
    import mlx.core as mx
    import torch

    from int8nax.backends import cuda
    from int8nax.bench.peers import cublaslt

    torch.zeros(1, device="cuda")
    for m, k, n in shapes:
        a_np, b_np = make_operands(dict(m=m, k=k, n=n, fill=None))
        a, b = device_operand(mx, a_np), device_operand(mx, b_np)
        mx.eval(a, b)
        run = cublaslt.prepare(a_np, b_np, timing_runs=2)
        plan, kernel = cuda.w8a8_plan(m, n, k)
        x = mx.array(a_np).astype(mx.float16) * mx.array(0.01, dtype=mx.float16)
        s = mx.array(np.random.default_rng(n).uniform(1e-3, 1e-2, n).astype(np.float32))
        mx.eval(x, s)

        def w8a8(narrow):
            return lambda: mx.eval(cuda.w8a8_graph(x, b, s, cuda._no_bias(), kernel, plan, False, narrow=narrow))

        calls = {"default": lambda: mx.eval(cuda.gemm_int32(a, b)),
                 "tma_ws": lambda: mx.eval(cuda.tma_gemm_int32(a, b, "tma_ws")),
                 "tma_pp": lambda: mx.eval(cuda.tma_gemm_int32(a, b, "tma_pp")),
                 "cublaslt": lambda: (run.call(), run.sync()),
                 "w8a8_eft": w8a8(False), "w8a8_narrow": w8a8(True)}
        for call in calls.values():
            for _ in range(3):
                call()
        torch.cuda.synchronize()
        for name, call in calls.items():
            what = {"default": cuda.gemm_kernel(m, n, k)}.get(name, f"{kernel} {plan.name}" if name.startswith("w8a8")
                                                               else name)
            log(f"[ncu] {m}x{k}x{n} {name}: {what}")
            torch.cuda.profiler.start()
            call()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
        run = None
    return 0


def worker_cublaslt(out_dir: Path, cases: list[dict]) -> int:
    import torch

    from int8nax.bench.peers import cublaslt

    fh = open(out_dir / "worker_cublaslt.jsonl", "a")
    lib = cublaslt.load()
    emit(fh, {"variant": "cublaslt", "event": "start", "library": lib.describe()})
    log(f"[cublaslt] {lib.describe()}")
    for case in cases:
        if case["kind"] == "edge":
            continue
        m, k, n = case["m"], case["k"], case["n"]
        rec = {"variant": "cublaslt", "shape": case["label"], "m": m, "k": k, "n": n, "kind": case["kind"]}
        t0 = time.time()
        try:
            a_np, b_np = make_operands(case)
            run = cublaslt.prepare(a_np, b_np, timing_runs=10)
            out = run.call()
            run.sync()
            rows = checked_rows(case)
            got = out[torch.as_tensor(rows, device="cuda")].cpu().numpy()
            rec.update(compare(got, reference_rows(a_np, b_np, rows)))
            rec["plan"] = ", ".join(f"{key} {v}" for key, v in run.config.items())
            copies = copies_for(m * k + n * k + 4 * m * n)
            sets = [(run.a, run.b)] + [(run.a.clone(), run.b.clone()) for _ in range(copies - 1)]
            stream = torch.cuda.current_stream().cuda_stream

            def launch(i):
                x, y = sets[i % len(sets)]
                run.lt.matmul(run.algo, x.data_ptr(), y.data_ptr(), run.out.data_ptr(), run.workspace.data_ptr(), stream)

            launches = launches_for(case)
            us, names, _, _ = profile_kernels(torch, launch, launches, tmp_dir=out_dir)
            rec["kernels"] = names
            # each launch alone, as int8nax's "default" launches are (one mx.eval each)
            rec["isolated_us"], _, _, _ = profile_kernels(torch, lambda i: (launch(i), torch.cuda.synchronize()),
                                                       launches, tmp_dir=out_dir)
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for i in range(launches):
                launch(i)
            stop.record()
            stop.synchronize()
            rec["events_us"] = start.elapsed_time(stop) * 1e3 / launches
            rec["us"] = us if us is not None else rec["events_us"]
            rec["timing"] = "CUPTI kernel time" if us is not None else "CUDA events, back to back"
            rec["tops"] = tops(m, n, k, rec["us"])
            sets = run = None  # free the copies before the next shape
            torch.cuda.empty_cache()
        except Exception as exc:  # noqa: BLE001
            rec["error"] = f"{type(exc).__name__}: {exc}"
            rec["traceback"] = traceback.format_exc()[-4000:]
        rec["seconds"] = round(time.time() - t0, 2)
        emit(fh, rec)
        log(f"[cublaslt] {case['label']:34s} exact={rec.get('exact')} us={rec.get('us')} ({rec['seconds']} s)")
    emit(fh, {"variant": "cublaslt", "event": "done"})
    return 0


# ---- the parent ------------------------------------------------------------------------------

def skip_reason() -> str | None:
    """Why no device trial can run here (None: a CUDA device of compute capability 9.0)."""
    try:
        import mlx.core as mx
    except Exception as exc:  # noqa: BLE001
        return f"mlx does not import ({exc})"
    cuda = getattr(mx, "cuda", None)
    if cuda is None or not cuda.is_available():
        return "MLX reports no CUDA device (mx.cuda.is_available() is False)"
    info = mx.device_info(mx.gpu)
    cc = (int(info.get("compute_capability_major", 0)), int(info.get("compute_capability_minor", 0)))
    if cc != (9, 0):
        return f"{info.get('device_name', '?')} has compute capability {cc[0]}.{cc[1]}; the TMA kernels need 9.0 (sm_90a)"
    return None


def read_records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


def fmt(v, spec):
    return "" if v is None else format(v, spec)


def write_report(out_dir: Path, status: dict, records: list[dict], env: dict) -> None:
    anchor = {r["shape"]: r.get("us") for r in records if r.get("variant") == "cublaslt" and r.get("us")}
    lines = [f"# TMA GEMM trial ({env.get('date', '')})", "",
             f"commit {env.get('commit', '?')}; {env.get('gpu', '?')}; mlx {env.get('mlx', '?')}; torch {env.get('torch', '?')}", "",
             "Time: CUPTI kernel duration of one call (GEMM + split-K reduction), median over launches rotating "
             "through input copies (3x L2), one mx.eval per launch (b2b: all launches queued, one eval, no CUDA "
             "graphs); cuBLASLt the same way, launched back to back (events column: back-to-back CUDA events).", "",
             "## Workers", "", "| variant | status | seconds |", "|---|---|---|"]
    for v, st in status.items():
        lines.append(f"| {v} | {st['status']} | {st.get('seconds', '')} |")
    lines += ["", "## Results", "",
              "| shape (M x K x N) | variant | plan | exact? | µs | TOPS | speed vs cuBLASLt (its µs / µs) |",
              "|---|---|---|---|---|---|---|"]
    order = {c["label"]: i for i, c in enumerate(shape_cases())}
    rows = sorted((r for r in records if "shape" in r and r["variant"] not in SWEEPS),
                  key=lambda r: (order.get(r["shape"], 1 << 20), VARIANTS.index(r["variant"])))
    for r in rows:
        exact = "ERROR" if "error" in r else ("yes" if r.get("exact") else (
            f"NO ({r.get('mismatches')} wrong, rows {r.get('wrong_row_range')}, cols {r.get('wrong_col_range')}, "
            f"{100 * r.get('zeros_where_wrong', 0):.0f}% zeros)"))
        if r.get("kind") == "big" and "exact" in r:
            exact += f" ({r.get('checked_rows')} rows)"
        ratio = ""
        if r.get("us") and anchor.get(r["shape"]) and r["variant"] != "cublaslt":
            ratio = f"{anchor[r['shape']] / r['us']:.2f}x"
        us = fmt(r.get("us"), ".1f")
        if r["variant"] == "cublaslt" and r.get("events_us"):
            us += f" (events {r['events_us']:.1f}" + (
                f", one at a time {r['isolated_us']:.1f})" if r.get("isolated_us") else ")")
        lines.append(f"| {r['shape']} | {r['variant']} | {r.get('plan', '')} | {exact} | {us} | "
                     f"{fmt(r.get('tops'), '.0f')} | {ratio} |")
    lines += geomean_lines(records, anchor) + sweep_lines(records, anchor) + sweep_lines(records, anchor, pp=True)
    parts = [r for r in rows if len(r.get("kernel_parts") or []) > 1]
    if parts:
        lines += ["", "## Kernels of one call (median µs each)", "", "| shape | variant | kernels |", "|---|---|---|"]
        for r in parts:
            lines.append(f"| {r['shape']} | {r['variant']} | " + "; ".join(
                f"{name.split('int8nax_')[-1][:40]} {us:.1f}" for name, us in r["kernel_parts"]) + " |")
    errors = [r for r in records if "error" in r]
    if errors:
        lines += ["", "## Errors", ""]
        for r in errors:
            lines += [f"### {r['variant']} {r['shape']}", "", "```", r["error"][:6000], "```", ""]
    (out_dir / "tma_trial.md").write_text("\n".join(lines) + "\n")
    (out_dir / "tma_trial.json").write_text(json.dumps({"env": env, "workers": status, "records": records}, indent=1))


def geomean_lines(records, anchor) -> list[str]:
    """Per variant: the geometric mean (and lowest) of cuBLASLt's µs / the variant's over the
    seed shapes, where every one was timed. For w8a8 the ratio is against the raw GEMM
    (default) at the same shape instead: the pipeline's cost over the int8nax GEMM."""
    seeds = [f"{m}x{k}x{n}" for m, k, n in SEEDS]
    out = ["", "## Over the 11 seed shapes", "", "| variant | against | geometric mean | lowest |", "|---|---|---|---|"]
    by = {(r["variant"], r["shape"]): r.get("us") for r in records if "shape" in r and r["variant"] not in SWEEPS}
    for v in VARIANTS:
        if v == "cublaslt" or v in SWEEPS:
            continue
        raw = "tma_pp" if v == "w8a8_pp" else "default"
        base, what = (({s: by.get((raw, s)) for s in seeds}, f"{raw} (raw GEMM) µs / {v} µs: < 1 = costlier")
                      if v in W8A8_VARIANTS else (anchor, "cuBLASLt µs / variant µs"))
        ratios = [base[s] / by[(v, s)] for s in seeds if by.get((v, s)) and base.get(s)]
        if len(ratios) == len(seeds):
            gm = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            out.append(f"| {v} | {what} | {gm:.2f}x | {min(ratios):.2f}x |")
    return out


def sweep_lines(records, anchor, pp: bool = False) -> list[str]:
    """The sweep's (pp: pp_sweep's) fastest plan per shape against the rule's plan, then every plan."""
    variant, kernel = ("pp_sweep", "tma_pp") if pp else ("sweep", "tma_simple")
    rows = [r for r in records if r.get("variant") == variant and r.get("us")]
    if not rows:
        return []
    rule = "pp_plan" if pp else "tma_plan"
    out = ["", f"## {kernel} plan sweep (fastest plan per shape; every plan in tma_trial.json)", "",
           f"| shape | fastest plan | µs | vs cuBLASLt | {rule}'s plan | its µs |", "|---|---|---|---|---|---|"]
    for shape in dict.fromkeys(r["shape"] for r in rows):
        mine = [r for r in rows if r["shape"] == shape]
        best = min(mine, key=lambda r: r["us"])
        m, k, n = best["m"], best["k"], best["n"]
        label = pp_plan_name(tiling.pp_plan(m, n, k, 132)) if pp else tiling.tma_plan(m, n, k, 132).name
        cur = next((r["us"] for r in mine if r["plan"] == label), None)
        vs = f"{anchor[shape] / best['us']:.2f}x" if anchor.get(shape) else ""
        out.append(f"| {shape} | {best['plan']} | {best['us']:.1f} | {vs} | {label} | {fmt(cur, '.1f')} |")
    out += ["", "Every plan (µs):", ""]
    for shape in dict.fromkeys(r["shape"] for r in rows):
        mine = sorted((r for r in rows if r["shape"] == shape), key=lambda r: r["us"])
        out.append(f"- {shape}: " + ", ".join(f"{r['plan']} {r['us']:.1f}" for r in mine))
    done = [r for r in records if r.get("variant") == variant and "exact" in r]
    out.append("")
    out.append(f"{variant} exactness: {sum(1 for r in done if r['exact'])} plans bit-exact, "
               f"{sum(1 for r in done if not r['exact'])} not.")
    return out


def environment() -> dict:
    env = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        env["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                       cwd=ROOT, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.SubprocessError):
        env["commit"] = "?"
    try:
        import mlx.core as mx

        env["mlx"] = mx.__version__
        if mx.cuda.is_available():
            env["gpu"] = mx.device_info(mx.gpu).get("device_name", "?")
    except Exception:  # noqa: BLE001
        pass
    try:
        import torch

        env["torch"] = torch.__version__
    except Exception:  # noqa: BLE001
        pass
    return env


def dry_run(out_dir: Path, variants, cases) -> int:
    """Assemble every source and plan the trial would use; no GPU, no MLX."""
    lines = ["# TMA GEMM trial: dry run (no GPU)", "", "| shape (M x K x N) | variant | plan | kernel | smem |",
             "|---|---|---|---|---|"]
    specs = {}
    for case in cases:
        for v in variants:
            d = plan_description(v, case["m"], case["n"], case["k"])
            lines.append(f"| {case['label']} | {v} | {d['plan']} | {d.get('kernel', '')} | {d.get('smem', '')} |")
            if "kernel" in d:
                specs[d["kernel"]] = d["smem"]
    for name, smem in specs.items():
        if smem > tiling.CUDA_MAX_SHARED_BYTES:
            log(f"ERROR {name}: {smem} bytes of shared memory > {tiling.CUDA_MAX_SHARED_BYTES}")
            return 1
    for part in ("tma", "tma_ws"):
        text = cuda_source.header_text(part)  # reads every header file of the part
        lines.append(f"\nheader {part}: {len(text)} characters, digest {cuda_source.digest(part)}")
    (out_dir / "tma_trial_dry_run.md").write_text("\n".join(lines) + "\n")
    log("\n".join(lines))
    log(f"dry run: {len(specs)} kernel objects, {len(cases)} shapes; nothing was run on a GPU")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--no-big", action="store_true", help="leave out 8192^3")
    parser.add_argument("--seeds", help="MxKxN,...: time only these of the seed shapes (the edges still run)")
    parser.add_argument("--budget", type=float, default=170.0, help="seconds for all workers together")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds at most per worker")
    parser.add_argument("--ncu-shapes", help="MxKxN,...: profile these with Nsight Compute instead (module docstring)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {VARIANTS}")
    seeds = [tuple(int(v) for v in t.split("x")) for t in args.seeds.split(",")] if args.seeds else None
    if seeds and not set(seeds) <= set(SEEDS):
        parser.error(f"--seeds: not seed shapes: {sorted(set(seeds) - set(SEEDS))}")
    cases = shape_cases(not args.no_big, seeds)

    ncu_shapes = [tuple(int(v) for v in t.split("x")) for t in args.ncu_shapes.split(",")] if args.ncu_shapes else []
    if args.worker:
        if args.worker == "ncu":
            return worker_ncu(out_dir, ncu_shapes)
        if args.worker == "cublaslt":
            return worker_cublaslt(out_dir, cases)
        return worker_mlx(args.worker, out_dir, cases)
    if args.dry_run:
        return dry_run(out_dir, variants, cases)

    reason = skip_reason()
    env = environment()
    if reason:
        log(f"SKIP: {reason}")
        (out_dir / "tma_trial.md").write_text(f"# TMA GEMM trial\n\nSKIPPED: {reason}\n\nNothing was run or checked.\n")
        (out_dir / "tma_trial.json").write_text(json.dumps({"env": env, "skipped": reason}, indent=1))
        return 3

    if ncu_shapes:
        cmd = ncu_command(out_dir, args.ncu_shapes)
        log(" ".join(cmd))
        with open(out_dir / "worker_ncu.log", "w") as logf:
            try:
                proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, timeout=args.timeout, cwd=ROOT)
                log(f"ncu worker exit {proc.returncode}")
            except subprocess.TimeoutExpired:
                log(f"ncu worker timed out after {args.timeout:.0f} s (partial CSV kept)")
        return 0

    start = time.time()
    status = {}
    records = []
    for i, v in enumerate(variants):
        left = args.budget - (time.time() - start)
        # Keep 20 s for each variant still to come.
        timeout = min(args.timeout, left - 20.0 * (len(variants) - 1 - i))
        if timeout < 10:
            status[v] = {"status": "not run (budget spent)"}
            continue
        jsonl = out_dir / f"worker_{v}.jsonl"
        jsonl.unlink(missing_ok=True)
        t0 = time.time()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--out", str(out_dir), "--worker", v]
        if args.no_big:
            cmd.append("--no-big")
        if args.seeds:
            cmd += ["--seeds", args.seeds]
        log(f"== {v} (timeout {timeout:.0f} s)")
        with open(out_dir / f"worker_{v}.log", "w") as logf:
            try:
                proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, timeout=timeout, cwd=ROOT,
                                      env={**os.environ, **WORKER_ENV.get(v, {})})
                st = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
            except subprocess.TimeoutExpired:
                st = f"timed out after {timeout:.0f} s (hang or slow; partial results kept)"
        recs = [r for r in read_records(jsonl) if "shape" in r]
        done = any(r.get("event") == "done" for r in read_records(jsonl))
        if st.startswith("exit") or (st == "ok" and not done):
            tail = (out_dir / f"worker_{v}.log").read_text()[-6000:]
            log(f"-- {v} worker log tail:\n{tail}")
        status[v] = {"status": st, "seconds": round(time.time() - t0, 1), "shapes": len(recs)}
        records += recs
        for r in recs:
            if "error" in r:
                log(f"   {v} {r['shape']}: {r['error'][:3000]}")
        log(f"   {v}: {st}, {len(recs)} shapes, {sum(bool(r.get('exact')) for r in recs)} exact, "
            f"{time.time() - t0:.1f} s")
        write_report(out_dir, status, records, env)
    write_report(out_dir, status, records, env)
    log((out_dir / "tma_trial.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
