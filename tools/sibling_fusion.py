"""Sibling layers fused (int8nax.nn.quantize_linears' default) against each layer alone, on a
stack of Qwen2-shaped decoder layers: the W8A8 calls a forward makes, whether both give the
same bits, and their speed (and bf16's) eager and under mx.compile.

    python tools/sibling_fusion.py [--layers 4] [--tokens 1,16,512,2048] [--repeat 10]
        [--config qwen2.5-7b|tiny] [--backend cuda|cpu] [--modes eager,compiled]

The layer is written here with mlx-lm's module names and call order (q_proj/k_proj/v_proj with
biases, o_proj, gate_proj/up_proj, down_proj; RMSNorm, RoPE, causal SDPA with grouped KV heads,
SwiGLU), so that it needs no mlx-lm. Random weights. Each row: tokens, the W8A8 calls of one
forward (each is one quantization and one GEMM launch, plus a split-K reduction where the plan
splits), whether fused and unfused outputs are bit-identical, and the median wall time of a
forward + eval (ms) for bf16, unfused W8A8 and fused W8A8, with the speed-ups over bf16. On the
CPU backend (numpy; no mx.compile) pass --modes eager and a small --config.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mlx.core as mx  # noqa: E402
import mlx.nn as nn  # noqa: E402
import numpy as np  # noqa: E402

from int8nax import backends  # noqa: E402
from int8nax.nn import quantize_linears  # noqa: E402

CONFIGS = {
    # hidden, heads, kv heads, head dim, mlp
    "qwen2.5-7b": (3584, 28, 4, 128, 18944),
    "tiny": (256, 4, 2, 64, 512),
}


class Attention(nn.Module):
    def __init__(self, dims, heads, kv_heads, head_dim):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(dims, heads * head_dim)
        self.k_proj = nn.Linear(dims, kv_heads * head_dim)
        self.v_proj = nn.Linear(dims, kv_heads * head_dim)
        self.o_proj = nn.Linear(heads * head_dim, dims, bias=False)
        self.rope = nn.RoPE(head_dim, traditional=False, base=1e6)

    def __call__(self, x):
        b, t, _ = x.shape
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = self.rope(q.reshape(b, t, self.heads, -1).transpose(0, 2, 1, 3))
        k = self.rope(k.reshape(b, t, self.kv_heads, -1).transpose(0, 2, 1, 3))
        v = v.reshape(b, t, self.kv_heads, -1).transpose(0, 2, 1, 3)
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=self.head_dim ** -0.5,
                                                 mask="causal" if t > 1 else None)
        return self.o_proj(o.transpose(0, 2, 1, 3).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, dims, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dims, hidden, bias=False)
        self.up_proj = nn.Linear(dims, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dims, bias=False)

    def __call__(self, x):
        return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, dims, heads, kv_heads, head_dim, hidden):
        super().__init__()
        self.self_attn = Attention(dims, heads, kv_heads, head_dim)
        self.mlp = MLP(dims, hidden)
        self.input_layernorm = nn.RMSNorm(dims)
        self.post_attention_layernorm = nn.RMSNorm(dims)

    def __call__(self, x):
        h = x + self.self_attn(self.input_layernorm(x))
        return h + self.mlp(self.post_attention_layernorm(h))


class Stack(nn.Module):
    def __init__(self, layers, config):
        super().__init__()
        self.layers = [Layer(*config) for _ in range(layers)]

    def __call__(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def median_ms(fn, x, repeat):
    mx.eval(fn(x))
    mx.eval(fn(x))
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        mx.eval(fn(x))
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", default="1,16,512,2048")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--config", choices=sorted(CONFIGS), default="qwen2.5-7b")
    ap.add_argument("--backend", default=None)
    ap.add_argument("--modes", default="eager,compiled", help="eager, compiled (mx.compile of each stack), or both")
    args = ap.parse_args(argv)

    mx.random.seed(0)
    dense = Stack(args.layers, CONFIGS[args.config])
    dense.set_dtype(mx.bfloat16)
    mx.eval(dense.parameters())
    unfused, fused = Stack(args.layers, CONFIGS[args.config]), Stack(args.layers, CONFIGS[args.config])
    for m in (unfused, fused):
        m.update(dense.parameters())
    quantize_linears(unfused, backend=args.backend, fuse=False)
    quantize_linears(fused, backend=args.backend)
    for m in (unfused, fused):
        m.set_dtype(mx.bfloat16)
        mx.eval(m.parameters())

    impl = backends.resolve(args.backend)
    calls = []
    real = impl.w8a8_linear
    impl.w8a8_linear = lambda x, w, s, b: calls.append(w.shape[0]) or real(x, w, s, b)
    print(f"backend {impl.name}, {args.layers} layers of {args.config}, bfloat16 activations")
    heads = ("tokens", "calls unfused", "calls fused", "same bits", "bf16 ms", "unfused ms", "fused ms",
             "unfused/bf16", "fused/bf16")
    modes = [(mode, mode == "compiled") for mode in args.modes.split(",") if mode]
    for mode, compiled in modes:
        print(f"\n{mode}:")
        print(" | ".join(heads))
        fns = {name: (mx.compile(m) if compiled else m) for name, m in
               (("bf16", dense), ("unfused", unfused), ("fused", fused))}
        for tokens in (int(t) for t in args.tokens.split(",")):
            x = mx.random.normal((1, tokens, CONFIGS[args.config][0])).astype(mx.bfloat16)
            counts = []
            for name in ("unfused", "fused"):
                calls.clear()
                mx.eval(fns[name](x))
                counts.append(len(calls))
            bits = [np.array(fns[name](x).view(mx.uint16)) for name in ("unfused", "fused")]
            same = np.array_equal(*bits)
            ms = {name: median_ms(fn, x, args.repeat) for name, fn in fns.items()}
            row = [tokens, counts[0], counts[1], same, f"{ms['bf16']:.3f}", f"{ms['unfused']:.3f}",
                   f"{ms['fused']:.3f}", f"{ms['bf16'] / ms['unfused']:.2f}x", f"{ms['bf16'] / ms['fused']:.2f}x"]
            print(" | ".join(str(v) for v in row), flush=True)
    impl.w8a8_linear = real


if __name__ == "__main__":
    main()
