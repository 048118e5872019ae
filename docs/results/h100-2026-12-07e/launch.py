# MLX's launch (mx.async_eval) per op, by op kind: chains of CHAIN ops at decode widths, graph built,
# then launched; µs per op (median of TRIALS). Which ops make a decode step's launch cost what it does.
import os, sys, time, statistics
import mlx.core as mx
import mlx.nn as nn
from int8nax.bench import host_work

CHAIN, TRIALS = 64, 40
K = 4096
x0 = mx.random.normal((1, 1, K)).astype(mx.bfloat16)
mx.eval(x0)

def chain_of(make):
    def build():
        y = x0
        for f in make:
            y = f(y)
        return y
    return build

def measure(name, build):
    for _ in range(5): mx.eval(build())
    g, l, w = [], [], []
    for _ in range(TRIALS):
        mx.synchronize()
        t0 = time.perf_counter(); y = build(); t1 = time.perf_counter(); mx.async_eval(y); t2 = time.perf_counter(); mx.eval(y); t3 = time.perf_counter()
        g.append(t1 - t0); l.append(t2 - t1); w.append(t3 - t2)
    m = lambda v: statistics.median(v) * 1e6 / CHAIN
    print(f"{name:28s} per op us: graph {m(g):6.2f} launch {m(l):6.2f} wait {m(w):6.2f}", flush=True)


def run():
    measure("add (elementwise)", chain_of([lambda y: y + 1] * CHAIN))
    measure("reshape pair", chain_of([lambda y: y.reshape(1, K).reshape(1, 1, K)] * (CHAIN // 2)))
    measure("rms_norm", chain_of([lambda y, w=mx.ones((K,), dtype=mx.bfloat16): mx.fast.rms_norm(y, w, 1e-6)] * CHAIN))
    for kind in host_work.LAYERS:
        with host_work._w8a8_setting(kind):
            f = host_work.layer(kind, K, K, False)
            measure(f"linear {kind} 4096x4096", chain_of([f] * CHAIN))

run()
