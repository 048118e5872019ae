"""What a model's W8A8 layers cost at their first call in a fresh process, kernels built or not.

    python -m int8nax.bench.first_call warm --model qwen2.5-7b --max-tokens 8192 [--jobs N]
    python -m int8nax.bench.first_call first --model qwen2.5-7b --tokens 300,777,1500,4096
    python -m int8nax.bench.first_call stalls --model qwen2.5-7b --lengths 50 --max-tokens 8192

`warm` builds every kernel instance the model's layers (sibling-fused, as int8nax.nn runs them:
kernel.plans.layer_shapes) meet for 1 .. max-tokens rows into MLX's kernel cache
(backends/cuda/backend.py, warm_up_layers) and prints how long that took. `first`, in a new process,
calls each layer once at each token count (bfloat16 activations, one evaluation a layer) and
prints the seconds each token count's first calls took: milliseconds where the kernels were
found on disk, NVRTC's seconds where not. `stalls`, in one process, meets `lengths` random token
counts in 1 .. max-tokens (seeded) for the first time: at each, the layers' W8A8 calls and their
bfloat16 matmuls once and then again; a length's stall is W8A8's first-minus-again seconds less
bfloat16's (what a new prompt length costs W8A8 beyond what it costs bf16 in a warm process).
Each prints one JSON line (and the cache's counts). CUDA only.
"""

from __future__ import annotations

import argparse
import json
import time

from .argtypes import count, sizes
from .kernel.plans import layer_shapes
from .models import CONFIGS


def layers_of(config) -> list[tuple[str, int, int, bool]]:
    """(name, N, K, bias) of a decoder layer's W8A8 calls: Qwen2's q|k|v carries a bias."""
    return [(name, n, k, name == "q|k|v" and config.family == "qwen2") for name, k, n in layer_shapes(config)]


def warm(config, max_tokens: int, jobs: int | None) -> dict:
    import mlx.core as mx

    from ..backends.cuda import kernels as cuda_kernels, backend as cuda

    layers = [cuda.WarmLayer("w8a8_linear", n, k, mx.float32 if bias else None) for _, n, k, bias in layers_of(config)]
    start = time.perf_counter()
    cuda.warm_up_layers(layers, max_tokens, dtype=mx.bfloat16, jobs=jobs)
    return {"step": "warm", "model": config.name, "max_tokens": max_tokens,
            "seconds": round(time.perf_counter() - start, 3), "kernels": cuda_kernels.binary_cache_status()}


def first(config, tokens) -> dict:
    import mlx.core as mx

    from ..backends.cuda import kernels as cuda_kernels, backend as cuda

    weights = {name: (mx.zeros((n, k), dtype=mx.int8), mx.ones((n,)), mx.zeros((n,)) if bias else None)
               for name, n, k, bias in layers_of(config)}
    mx.eval([w for ws in weights.values() for w in ws if w is not None])
    seconds = {}
    for m in tokens:
        start = time.perf_counter()
        for name, n, k, _ in layers_of(config):
            w, s, b = weights[name]
            mx.eval(cuda.w8a8(mx.random.normal((m, k)).astype(mx.bfloat16), w, s, b))
        seconds[m] = round(time.perf_counter() - start, 4)
    return {"step": "first", "model": config.name, "seconds_by_tokens": seconds, "kernels": cuda_kernels.binary_cache_status()}


def stalls(config, lengths: int, max_tokens: int, seed: int = 47) -> dict:
    """What meeting each of `lengths` seeded token counts in 1..max_tokens for the first time costs
    the config's W8A8 layer calls beyond what it costs their bfloat16 matmuls (module doc), in
    seconds per length, and the worst length."""
    import random

    import mlx.core as mx

    from ..backends.cuda import kernels as cuda_kernels, backend as cuda

    layers = layers_of(config)
    w8a8 = {name: (mx.zeros((n, k), dtype=mx.int8), mx.ones((n,)), mx.zeros((n,)) if bias else None)
            for name, n, k, bias in layers}
    bf16 = {name: (mx.zeros((n, k), dtype=mx.bfloat16), mx.zeros((n,), dtype=mx.bfloat16) if bias else None)
            for name, n, k, bias in layers}
    mx.eval([w for ws in (*w8a8.values(), *bf16.values()) for w in ws if w is not None])

    def w8a8_calls(x):
        for name, *_ in layers:
            w, s, b = w8a8[name]
            mx.eval(cuda.w8a8(x[name], w, s, b))

    def bf16_calls(x):
        for name, *_ in layers:
            w, b = bf16[name]
            mx.eval(x[name] @ w.T if b is None else mx.addmm(b, x[name], w.T))

    def timed(calls, x) -> float:
        start = time.perf_counter()
        calls(x)
        return time.perf_counter() - start

    rows = {}
    for m in sorted(random.Random(seed).sample(range(1, max_tokens + 1), min(lengths, max_tokens))):
        x = {name: mx.random.normal((m, k)).astype(mx.bfloat16) for name, _, k, _ in layers}
        mx.eval(list(x.values()))
        got = {"w8a8_first": timed(w8a8_calls, x), "w8a8_again": timed(w8a8_calls, x),
               "bf16_first": timed(bf16_calls, x), "bf16_again": timed(bf16_calls, x)}
        got["stall"] = (got["w8a8_first"] - got["w8a8_again"]) - (got["bf16_first"] - got["bf16_again"])
        rows[m] = {key: round(value, 4) for key, value in got.items()}
    worst = max(rows, key=lambda m: rows[m]["stall"])
    return {"step": "stalls", "model": config.name, "seed": seed, "worst_tokens": worst,
            "worst_stall_s": rows[worst]["stall"], "by_tokens": rows, "kernels": cuda_kernels.binary_cache_status()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m int8nax.bench.first_call", description=__doc__.split("\n\n")[0])
    p.add_argument("step", choices=("warm", "first", "stalls"))
    p.add_argument("--model", default="qwen2.5-7b", choices=sorted(CONFIGS))
    p.add_argument("--max-tokens", type=count(1), default=8192)
    p.add_argument("--tokens", type=sizes, default=(300, 777, 1500, 4096))
    p.add_argument("--jobs", type=count(1), default=None)
    p.add_argument("--lengths", type=count(1), default=50, help="stalls: random token counts to meet (50)")
    p.add_argument("--seed", type=int, default=47, help="stalls: the token counts' seed (47)")
    args = p.parse_args(argv)
    config = CONFIGS[args.model]
    if args.step == "warm":
        out = warm(config, args.max_tokens, args.jobs)
    elif args.step == "first":
        out = first(config, args.tokens)
    else:
        out = stalls(config, args.lengths, args.max_tokens, args.seed)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
