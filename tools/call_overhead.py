"""Where the per-call wall clock of a small GEMM goes: int8nax's Python layer or MLX.

    python tools/call_overhead.py [--shape 16x4096x4096] [--calls 200]

Times, in one run on the default device, the same int8 GEMM called four ways: the public
int8nax.int8_matmul (validation + backend choice + backend), the backend object directly
(no validation), the public call inside mx.compile, and MLX's own float16 matmul of the same
shape for reference. Each figure is the median over 7 batches of wall time per call, one
mx.eval per call (what a user's loop does).
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
import numpy as np

import int8nax
from int8nax import backends


def per_call(fn, calls: int) -> float:
    mx.eval(fn())
    batches = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(calls):
            mx.eval(fn())
        mx.synchronize()
        batches.append((time.perf_counter() - t0) / calls)
    return statistics.median(batches)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="16x4096x4096")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    m, k, n = (int(v) for v in args.shape.split("x"))
    rng = np.random.default_rng(0)
    a = mx.array(rng.integers(-128, 128, (m, k), dtype=np.int8))
    b = mx.array(rng.integers(-128, 128, (n, k), dtype=np.int8))
    x16 = mx.array(rng.standard_normal((m, k)).astype(np.float16))
    w16 = mx.array(rng.standard_normal((n, k)).astype(np.float16))
    mx.eval(a, b, x16, w16)
    name, why = backends.choose(None)
    impl = backends.get(name)
    compiled = mx.compile(lambda p, q: int8nax.int8_matmul(p, q))
    ways = {
        "int8nax.int8_matmul": lambda: int8nax.int8_matmul(a, b),
        f"backend '{name}' direct": lambda: impl.int8_matmul(a, b),
        "mx.compile(int8_matmul)": lambda: compiled(a, b),
        "mx.matmul fp16": lambda: mx.matmul(x16, w16.T),
        "mx.eval of nothing new": lambda: a,
    }
    print(f"shape {m}x{k}x{n}, backend {name} ({why}), {mx.default_device()}")
    for label, fn in ways.items():
        try:
            print(f"  {label:28s} {per_call(fn, args.calls) * 1e6:8.1f} us/call")
        except ValueError as exc:  # the CPU backend (numpy) cannot be traced by mx.compile
            print(f"  {label:28s}      n/a ({exc})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
