"""The small-M W8A8 GEMM (backends/cuda_gemv.py, kernels/cuda/gemv_w8a8.cuh) timed on a GPU against
bfloat16 mx.matmul and the existing W8A8 path, before it is in the dispatch (then `compare --mode
kernel` at M <= 16 and the model benchmark take over, and this tool can go).

    PYTHONPATH=/tmp/site:$PWD/src python tools/gemv_w8a8.py [--m 1,4,8,16] [--launches 30] [--warps 8] [--unroll 2]

At the decode shapes of Qwen2.5-7B, (N, K) = (4608, 3584) q|k|v, (3584, 3584) o,
(37888, 3584) gate|up, (3584, 18944) down, and M in --m: the CUPTI kernel time of one call (median
of --launches calls, operands rotated through copies covering the L2: int8nax.bench.kernel_time's
Profiler and copies_for) of
  bf16     mx.matmul(x, W.T), x and W bfloat16 (what a bf16 model runs);
  w8a8     cuda.dequant_gemm on given codes (the existing W8A8 GEMM, its epilogue's default);
  gemv     cuda_gemv.gemv_w8a8 on the same codes;
and the whole W8A8 call from x: cuda.w8a8 (quantization kernel + GEMM), quantization kernel +
gemv_w8a8, and gemv_w8a8_x (one kernel); each bf16/x ratio > 1 means faster
than bf16. The gemv output is checked bit for bit against the w8a8 one first ("same").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

SHAPES = [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)]


def bench(ms, launches: int) -> int:
    import mlx.core as mx
    import numpy as np
    import torch

    from int8nax.backends import cuda, cuda_gemv
    from int8nax.bench.kernel_time import Profiler, copies_for, l2_bytes

    torch.zeros(1, device="cuda")  # torch's context and CUPTI before MLX's first kernel
    prof = Profiler(torch, Path(tempfile.mkdtemp()))
    print(f"mlx {mx.__version__}, {mx.device_info(mx.gpu).get('device_name')}, {cuda.sm_count()} SMs, epilogue "
          f"{cuda.epilogue_choice()}, gemv {cuda_gemv.GEMV_WARPS} warps x unroll {cuda_gemv.GEMV_UNROLL}; CUPTI "
          f"kernel µs of one call, median of {launches}; bf16/x > 1: faster than bf16")
    cols = ("bf16", "w8a8", "gemv", "call", "qgemv", "gemv_x")
    print("M | N | K | same bits | " + " | ".join(cols) + " | " + " | ".join(f"bf16/{c}" for c in cols[1:]))
    for n, k in SHAPES:
        rng = np.random.default_rng(n + k)
        w = mx.array(rng.integers(-127, 128, size=(n, k), dtype=np.int8)) * mx.array(1, dtype=mx.int8)
        sw = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32)) * 1
        wb = (w.astype(mx.float32) * sw[:, None]).astype(mx.bfloat16)
        for m in ms:
            x = mx.random.normal((m, k)).astype(mx.bfloat16)
            q, sx = cuda.quantize(x)
            copies = copies_for(w.nbytes, l2_bytes(torch))
            sets = [tuple(a * mx.array(1, dtype=a.dtype) for a in (x, q, sx, w, sw, wb)) for _ in range(copies)]
            mx.eval(sets)
            want = cuda.dequant_gemm(q, sx, w, sw, None, mx.bfloat16).view(mx.uint16)
            same = all(mx.array_equal(y.view(mx.uint16), want).item() for y in (
                cuda_gemv.gemv_w8a8(q, sx, w, sw, None, mx.bfloat16), cuda_gemv.gemv_w8a8_x(x, w, sw, None)))
            runs = {
                "bf16": lambda s: mx.matmul(s[0], s[5].T),  # what a bf16 model's layer runs
                "w8a8": lambda s: cuda.dequant_gemm(s[1], s[2], s[3], s[4], None, mx.bfloat16),  # today's GEMM
                "gemv": lambda s: cuda_gemv.gemv_w8a8(s[1], s[2], s[3], s[4], None, mx.bfloat16),
                "call": lambda s: cuda.w8a8(s[0], s[3], s[4], None),  # quantization + today's GEMM
                "qgemv": lambda s: cuda_gemv.gemv_w8a8(*cuda.quantize(s[0]), s[3], s[4], None, mx.bfloat16),
                "gemv_x": lambda s: cuda_gemv.gemv_w8a8_x(s[0], s[3], s[4], None),  # one kernel
            }
            us = {}
            for name, run in runs.items():
                def launch(i, run=run):
                    mx.eval(run(sets[i % len(sets)]))
                for i in range(3):
                    launch(i)
                us[name] = prof.time(launch, launches)[0]
            print(f"{m} | {n} | {k} | {same} | " + " | ".join(f"{us[c]:.1f}" for c in cols) + " | "
                  + " | ".join(f"{us['bf16'] / us[c]:.2f}x" for c in cols[1:]), flush=True)
            sets = None
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", default="1,4,8,16")
    ap.add_argument("--launches", type=int, default=30)
    ap.add_argument("--warps", type=int, help="override cuda_gemv.GEMV_WARPS (a block's warps)")
    ap.add_argument("--unroll", type=int, help="override cuda_gemv.GEMV_UNROLL (steps loaded ahead)")
    args = ap.parse_args(argv)
    from int8nax.backends import cuda_gemv

    cuda_gemv.GEMV_WARPS = args.warps or cuda_gemv.GEMV_WARPS
    cuda_gemv.GEMV_UNROLL = args.unroll or cuda_gemv.GEMV_UNROLL
    return bench([int(v) for v in args.m.split(",")], args.launches)


if __name__ == "__main__":
    sys.exit(main())
