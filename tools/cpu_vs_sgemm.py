"""CPU backend throughput against numpy float32 matmul, measured in the same run.

    python tools/cpu_vs_sgemm.py [--shapes 512x4096x4096,128x4096x4096] [--repeat 5]

Prints, per (M, K, N): int8nax int8_matmul and w8a8_linear time on the CPU backend, numpy
sgemm of the same shape, and the ratios (int8 GOP/s over sgemm GFLOP/s; W8A8 over GEMM time).
Measurements alternate between the contenders and report the median, so machine noise
hits both alike. The target of the core issue: int8/sgemm >= 0.7 at 512x4096x4096.
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
import numpy as np

import int8nax


def parse_shapes(text: str):
    return [tuple(int(v) for v in s.split("x")) for s in text.split(",")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="512x4096x4096,128x4096x4096,64x4096x4096")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"int8nax {int8nax.__version__} backend=cpu, mlx {mx.__version__}, numpy {np.__version__}")
    print(f"{'M':>6} {'K':>6} {'N':>6} | {'int8 ms':>8} {'sgemm ms':>8} {'w8a8 ms':>8} | "
          f"{'int8 GOP/s':>10} {'sgemm GF/s':>10} {'int8/sgemm':>10} {'w8a8/int8':>9}")
    for m, k, n in parse_shapes(args.shapes):
        a = mx.array(rng.integers(-128, 128, (m, k), dtype=np.int8))
        b = mx.array(rng.integers(-128, 128, (n, k), dtype=np.int8))
        x = mx.array(rng.standard_normal((m, k)).astype(np.float16))
        s_w = mx.array(rng.random(n).astype(np.float32))
        af = rng.standard_normal((m, k)).astype(np.float32)
        bf = rng.standard_normal((n, k)).astype(np.float32)
        runs = {
            "int8": lambda: mx.eval(int8nax.int8_matmul(a, b, backend="cpu")),
            "sgemm": lambda: af @ bf.T,
            "w8a8": lambda: mx.eval(int8nax.w8a8_linear(x, b, s_w, backend="cpu")),
        }
        times = {name: [] for name in runs}
        for fn in runs.values():
            fn()  # warm-up
        for _ in range(args.repeat):
            for name, fn in runs.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {name: statistics.median(v) for name, v in times.items()}
        ops = 2.0 * m * k * n
        print(f"{m:>6} {k:>6} {n:>6} | {med['int8']*1e3:8.1f} {med['sgemm']*1e3:8.1f} {med['w8a8']*1e3:8.1f} | "
              f"{ops/med['int8']/1e9:10.1f} {ops/med['sgemm']/1e9:10.1f} "
              f"{med['sgemm']/med['int8']:10.2f} {med['w8a8']/med['int8']:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
