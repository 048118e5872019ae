"""CUDA benchmark: int8nax's GEMM against cuBLASLt int8 and MLX bf16, and W8A8 against the raw GEMM.

    python tools/bench_cuda.py [--shapes MxKxN,...] [--repeat 7] [--sweep] [--compiled] [--out DIR]

In one run on one GPU, for each (M, K, N) (default: the seed's 11 shapes plus 8192^3):
  int8nax   int8nax.int8_matmul(a [M,K], b [N,K]) on the CUDA backend (the dispatch's plan)
  cuBLASLt  torch._int_mm(a, b_nk.t()): B column-major, cuBLASLt's fast int8 layout
            (torch needs M > 16: M = 16 runs as M = 17 padded with a zero row, noted in the table)
  bf16      MLX mx.matmul of the same values in bfloat16 (a speed peer; checked to bf16 rounding)
  W8A8      int8nax.w8a8_linear(x float16 [M,K], w [N,K], s_w): quantize + GEMM + dequantize
Before timing, every contender's output is checked: int8nax and cuBLASLt equal each other on the
whole output and an int64 numpy reference on sampled rows x columns; W8A8 is within 1 ulp of the
float64 model on the sampled block. A mismatch aborts with a message.

Timing: a batch of R launches (cycling over input sets, so that the inputs do not sit in the
60 MB L2 when they would fit) between device synchronisations, warm-up excluded, median over
--repeat batches; MLX through mx.synchronize(), torch through torch.cuda.synchronize(), the same
wall-clock method for both. TOPS = 2*M*N*K / time.

--sweep also times every CUDA tile configuration x split-K for each shape (the dispatch tuning
table). --compiled adds int8nax inside mx.compile (no Python work per launch) as a contender.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time

import mlx.core as mx
import numpy as np

import int8nax
from int8nax import tiling
from int8nax.backends import cuda as cuda_backend
from int8nax.reference import exact_int_product, max_ulp_error, to_numpy, w8a8_linear_ref

SEED_SHAPES = [(m, 4096, 4096) for m in (16, 64, 128, 256, 512, 1024, 2048)] + [
    (128, 3584, 18944), (512, 3584, 18944), (128, 18944, 3584), (512, 18944, 3584)]
EXTRA_SHAPES = [(8192, 8192, 8192)]
L2_BYTES = 60 * 2**20
SAMPLE = 64  # rows and columns of the sampled int64 / float64 reference block


class Mismatch(RuntimeError):
    pass


def parse_shapes(text):
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",")]


def input_sets(bytes_per_set):
    """How many input sets to rotate so that one pass covers 3x the L2 (at most 16)."""
    return max(1, min(16, math.ceil(3 * L2_BYTES / bytes_per_set)))


def timed_batches(launch_batch, sync, repeat, target_s=0.004):
    """Median seconds per launch. launch_batch(r) issues r launches and returns what to keep alive."""
    keep = launch_batch(2)
    sync(keep)
    t0 = time.perf_counter()
    sync(launch_batch(4))
    est = max((time.perf_counter() - t0) / 4, 1e-6)
    r = int(min(256, max(4, target_s / est)))
    times = []
    for _ in range(repeat):
        sync(None)
        t0 = time.perf_counter()
        out = launch_batch(r)
        sync(out)
        times.append((time.perf_counter() - t0) / r)
        del out
    return statistics.median(times), r


def mlx_sync(out):
    if out is not None:
        mx.eval(out)
    mx.synchronize()


def make_torch_sync(torch):
    def sync(_out):
        torch.cuda.synchronize()

    return sync


def check_equal(name, got, ref):
    if got.shape != ref.shape or not np.array_equal(got, ref):
        bad = np.argwhere(got != ref) if got.shape == ref.shape else []
        where = bad[0].tolist() if len(bad) else "shape"
        raise Mismatch(f"{name}: output differs from the reference ({len(bad)} elements, first at {where})")


def env_report(torch):
    drv = "unknown"
    try:
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    info = mx.device_info(mx.gpu)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "gpu": info.get("device_name", "?"),
        "compute_capability": f"{info.get('compute_capability_major')}.{info.get('compute_capability_minor')}",
        "sms": cuda_backend.sm_count(),
        "driver": drv,
        "mlx": mx.__version__,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "int8nax": int8nax.__version__,
        "command": "python " + " ".join(sys.argv),
    }


class Shape:
    """Inputs for one (M, K, N): set 0 from numpy (checked), further sets made on the GPU."""

    def __init__(self, m, k, n, torch, rng):
        self.m, self.k, self.n = m, k, n
        self.torch = torch
        a0 = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b0 = rng.integers(-128, 128, (n, k), dtype=np.int8)
        self.a_np, self.b_np = a0, b0
        sets = input_sets(m * k + n * k)
        self.a = [mx.array(a0)] + [mx.random.randint(-128, 128, (m, k)).astype(mx.int8) for _ in range(sets - 1)]
        self.b = [mx.array(b0)] + [mx.random.randint(-128, 128, (n, k)).astype(mx.int8) for _ in range(sets - 1)]
        # torch._int_mm needs M > 16: pad with zero rows (noted in the table).
        self.torch_m = max(m, 17)
        self.a_t, self.b_t = [], []
        for i in range(sets):
            at = torch.from_numpy(np.array(self.a[i])).cuda()
            if self.torch_m != m:
                at = torch.cat([at, torch.zeros((self.torch_m - m, k), dtype=torch.int8, device="cuda")])
            self.a_t.append(at)
            self.b_t.append(torch.from_numpy(np.array(self.b[i])).cuda().contiguous())
        bf_sets = input_sets(2 * (m * k + n * k))
        self.a_bf = [self.a[i % sets].astype(mx.bfloat16) for i in range(bf_sets)]
        self.b_bf = [self.b[i % sets].astype(mx.bfloat16) for i in range(bf_sets)]
        x0 = rng.standard_normal((m, k)).astype(np.float16)
        self.x = [mx.array(x0)] + [mx.random.normal((m, k)).astype(mx.float16) for _ in range(sets - 1)]
        self.scale_w = mx.array((rng.random(n).astype(np.float32) + 0.5) / 127 / 16)
        self.rows = np.sort(rng.choice(m, min(m, SAMPLE), replace=False))
        self.cols = np.sort(rng.choice(n, min(n, SAMPLE), replace=False))
        mx.eval(self.a, self.b, self.a_bf, self.b_bf, self.x, self.scale_w)

    @property
    def ops(self):
        return 2.0 * self.m * self.n * self.k

    def sample_ref(self):
        return exact_int_product(self.a_np[self.rows], self.b_np[self.cols])

    def check_int8nax(self, name, out):
        got = np.array(out)
        check_equal(name + " (sampled int64 reference)", got[np.ix_(self.rows, self.cols)].astype(np.int64),
                    self.sample_ref())
        return got

    def check_all(self, int8nax_out):
        torch = self.torch
        mine = self.check_int8nax("int8nax", int8nax_out)
        theirs = torch._int_mm(self.a_t[0], self.b_t[0].t())[: self.m].cpu().numpy()
        check_equal("cuBLASLt (sampled int64 reference)", theirs[np.ix_(self.rows, self.cols)].astype(np.int64),
                    self.sample_ref())
        check_equal("int8nax vs cuBLASLt (whole output)", mine, theirs)
        bf = to_numpy(mx.matmul(self.a_bf[0], self.b_bf[0].T), np.float64)[np.ix_(self.rows, self.cols)]
        ref = self.sample_ref().astype(np.float64)
        rel = np.linalg.norm(bf - ref) / max(np.linalg.norm(ref), 1.0)
        if not rel <= 1e-2:
            raise Mismatch(f"MLX bf16 matmul: relative error {rel:.2e} > 1e-2")
        y = int8nax.w8a8_linear(self.x[0], self.b[0], self.scale_w)
        x_rows = np.array(self.x[0])[self.rows]
        ref_y = w8a8_linear_ref(x_rows, self.b_np[self.cols], np.array(self.scale_w)[self.cols])
        got_y = to_numpy(y, np.float64)[np.ix_(self.rows, self.cols)]
        err = max_ulp_error(got_y, ref_y, "float16")
        if not err <= 1.0:
            raise Mismatch(f"int8nax W8A8: {err:.2f} ulp from the float64 model (limit 1)")


def time_contenders(s: Shape, repeat, compiled):
    torch = s.torch
    sets, bf_sets = len(s.a), len(s.a_bf)
    res = {}

    def run_int8nax(r):
        return [int8nax.int8_matmul(s.a[i % sets], s.b[i % sets]) for i in range(r)]

    def run_w8a8(r):
        return [int8nax.w8a8_linear(s.x[i % sets], s.b[i % sets], s.scale_w) for i in range(r)]

    def run_bf16(r):
        return [mx.matmul(s.a_bf[i % bf_sets], s.b_bf[i % bf_sets].T) for i in range(r)]

    def run_torch(r):
        return [torch._int_mm(s.a_t[i % sets], s.b_t[i % sets].t()) for i in range(r)]

    res["int8nax"] = timed_batches(run_int8nax, mlx_sync, repeat)
    res["cublaslt"] = timed_batches(run_torch, make_torch_sync(torch), repeat)
    res["bf16"] = timed_batches(run_bf16, mlx_sync, repeat)
    res["w8a8"] = timed_batches(run_w8a8, mlx_sync, repeat)
    if compiled:
        gemm = mx.compile(lambda a, b: int8nax.int8_matmul(a, b))
        res["int8nax_compiled"] = timed_batches(
            lambda r: [gemm(s.a[i % sets], s.b[i % sets]) for i in range(r)], mlx_sync, repeat)
    return res


def sweep(s: Shape, repeat):
    """Seconds per launch of every (config, splits) that the kernel can run on this shape."""
    ref = s.torch._int_mm(s.a_t[0], s.b_t[0].t())[: s.m].cpu().numpy()
    sets = len(s.a)
    out = {}
    for cfg in tiling.CUDA_CONFIGS.values():
        k_blocks = tiling.ceil_div(s.k, cfg.bk)
        for splits in (1, 2, 4, 8, 16):
            if splits > 1 and k_blocks // splits < 2:
                continue
            plan = tiling.CudaPlan(cfg, splits)
            got = np.array(cuda_backend.gemm_int32(s.a[0], s.b[0], plan))
            check_equal(f"int8nax {cfg.name} x{splits}", got, ref)
            t, _ = timed_batches(
                lambda r: [cuda_backend.gemm_int32(s.a[i % sets], s.b[i % sets], plan) for i in range(r)],
                mlx_sync, repeat)
            out[f"{cfg.name}/{splits}"] = t
    return out


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", help="MxKxN,... (default: the seed's 11 shapes and 8192^3)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sweep", action="store_true", help="also time every tile config x split-K")
    parser.add_argument("--compiled", action="store_true", help="also time int8nax inside mx.compile")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for bench_cuda.md/.json")
    args = parser.parse_args(argv)

    if int8nax.info()["backend"] != "cuda":
        print("bench_cuda: the CUDA backend cannot run here:", int8nax.info()["backends"]["cuda"]["reason"])
        return 2
    try:
        import torch
    except ImportError:
        print("bench_cuda: the cuBLASLt peer needs PyTorch with CUDA (torch._int_mm)")
        return 2
    env = env_report(torch)
    shapes = parse_shapes(args.shapes) if args.shapes else SEED_SHAPES + EXTRA_SHAPES
    rng = np.random.default_rng(0)
    rows, sweeps = [], {}
    for m, k, n in shapes:
        s = Shape(m, k, n, torch, rng)
        plan = cuda_backend.default_plan(m, n, k)
        s.check_all(int8nax.int8_matmul(s.a[0], s.b[0]))
        res = time_contenders(s, args.repeat, args.compiled)
        row = {"m": m, "k": k, "n": n, "plan": f"{plan.cfg.name}/{plan.splits}", "torch_m": s.torch_m,
               **{f"{name}_s": t for name, (t, _) in res.items()}}
        rows.append(row)
        if args.sweep:
            sweeps[f"{m}x{k}x{n}"] = sweep(s, args.repeat)
        t = {name: v[0] for name, v in res.items()}
        print(f"{m:>5} {k:>6} {n:>6}  int8nax {t['int8nax']*1e6:9.1f} us {s.ops/t['int8nax']/1e12:7.1f} TOPS | "
              f"cuBLASLt {t['cublaslt']*1e6:9.1f} us | bf16 {t['bf16']*1e6:9.1f} us | "
              f"W8A8 {t['w8a8']*1e6:9.1f} us | vs cuBLASLt {t['cublaslt']/t['int8nax']:5.2f} "
              f"W8A8/raw {t['w8a8']/t['int8nax']:5.2f} [{row['plan']}]"
              + (f" | compiled {t['int8nax_compiled']*1e6:8.1f} us" if args.compiled else ""), flush=True)
        del s

    md = render_markdown(env, rows, args.compiled)
    if sweeps:
        md += render_sweep(sweeps)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "bench_cuda.md"), "w") as f:
        f.write(md)
    with open(os.path.join(args.out, "bench_cuda.json"), "w") as f:
        json.dump({"env": env, "rows": rows, "sweeps": sweeps}, f, indent=1)
    print()
    print(md)
    return 0


def render_markdown(env, rows, compiled) -> str:
    lines = [
        f"Date {env['date']}; GPU {env['gpu']} (cc {env['compute_capability']}, {env['sms']} SMs), "
        f"driver {env['driver']}; mlx {env['mlx']}, torch {env['torch']} (CUDA {env['torch_cuda']}), "
        f"Python {env['python']}, int8nax {env['int8nax']}.",
        f"Command: `{env['command']}`",
        "",
        "| M | K | N | int8nax µs | int8nax TOPS | cuBLASLt µs | cuBLASLt TOPS | int8nax / cuBLASLt | "
        "bf16 µs | bf16 TFLOP/s | int8nax / bf16 | W8A8 µs | W8A8 / raw | plan |"
        + (" compiled µs |" if compiled else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if compiled else ""),
    ]
    for r in rows:
        ops = 2.0 * r["m"] * r["n"] * r["k"]
        note = f" (M={r['torch_m']})" if r["torch_m"] != r["m"] else ""
        lines.append(
            f"| {r['m']} | {r['k']} | {r['n']} | {r['int8nax_s']*1e6:.1f} | {ops/r['int8nax_s']/1e12:.0f} | "
            f"{r['cublaslt_s']*1e6:.1f}{note} | {ops/r['cublaslt_s']/1e12:.0f} | "
            f"{r['cublaslt_s']/r['int8nax_s']:.2f} | {r['bf16_s']*1e6:.1f} | {ops/r['bf16_s']/1e12:.0f} | "
            f"{r['bf16_s']/r['int8nax_s']:.2f} | {r['w8a8_s']*1e6:.1f} | {r['w8a8_s']/r['int8nax_s']:.2f} | "
            f"{r['plan']} |" + (f" {r['int8nax_compiled_s']*1e6:.1f} |" if compiled else ""))
    seed = [r for r in rows if (r["m"], r["k"], r["n"]) in SEED_SHAPES]
    if seed:
        ratios = [r["cublaslt_s"] / r["int8nax_s"] for r in seed]
        big = [r["bf16_s"] / r["int8nax_s"] for r in rows if r["m"] >= 512]
        w8 = [r["w8a8_s"] / r["int8nax_s"] for r in seed]
        lines += [
            "",
            f"Seed shapes ({len(seed)}): int8nax / cuBLASLt geometric mean {geomean(ratios):.2f} "
            f"(target >= 1.0), lowest {min(ratios):.2f} (target >= 0.8); "
            f"W8A8 / raw highest {max(w8):.2f} (target <= 1.15)"
            + (f"; int8nax / bf16 for M >= 512 lowest {min(big):.2f} (target >= 1.6)." if big else "."),
        ]
    return "\n".join(lines) + "\n"


def render_sweep(sweeps) -> str:
    keys = sorted({k for v in sweeps.values() for k in v})
    lines = ["", "Sweep (µs per launch; * = fastest):", "",
             "| shape | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for shape, times in sweeps.items():
        best = min(times, key=times.get)
        cells = [(f"{times[k]*1e6:.1f}" + ("*" if k == best else "")) if k in times else "" for k in keys]
        lines.append(f"| {shape} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Mismatch as exc:
        print(f"bench_cuda: ABORTED, {exc}", file=sys.stderr)
        sys.exit(3)
