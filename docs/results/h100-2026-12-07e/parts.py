# Host work of a Qwen3-8B decoder layer's parts at decode (x [1, 1, 4096] bf16, 512-token KV cache),
# graph built and dropped, per form: where W8A8's graph phase differs from MLX 8-bit's.
import copy, os, sys, time
import mlx.core as mx
from int8nax.bench import host_work, models

CONFIG = os.environ.get("CONFIG", "qwen3-8b")
cfg = models.CONFIGS[CONFIG]
CALLS, REPEATS = int(os.environ.get("CALLS", 200)), 7

def best(f):
    for _ in range(20): f()
    best = 1e9
    for _ in range(REPEATS):
        t = time.perf_counter()
        for _ in range(CALLS): f()
        best = min(best, (time.perf_counter() - t) / CALLS)
    return best * 1e6

for form in sys.argv[1:]:
    with host_work._w8a8_setting(form):
        layer = host_work.block(form, CONFIG)
        kv = models.mlx_lm_module("cache").KVCache()
        z = mx.zeros((1, cfg.kv_heads, 512, cfg.head_dim), dtype=mx.bfloat16)
        kv.update_and_fetch(z, z)
        x = mx.zeros((1, 1, cfg.hidden), dtype=mx.bfloat16)
        mx.eval(kv.state, x, layer.parameters())
        a = layer.self_attn
        def cached():
            c = copy.copy(kv); c.keys, c.values = mx.stop_gradient(kv.keys), mx.stop_gradient(kv.values); return c
        parts = {
            "q,k,v": lambda: (a.q_proj(x), a.k_proj(x), a.v_proj(x)),
            "o": lambda: a.o_proj(x),
            "mlp": lambda: layer.mlp(x),
            "norm": lambda: layer.input_layernorm(x),
            "cache copy": cached,
            "attention": lambda: a(x, None, cached()),
            "layer": lambda: layer(x, None, cached()),
        }
        cells = [f"{name} {best(f):.2f}" for name, f in parts.items()]
        import collections, re
        mx.export_to_dot(f"/tmp/{form}.dot", layer(x, None, cached()))
        nodes = collections.Counter(re.findall(r'label ="([^"]+)"', open(f"/tmp/{form}.dot").read()))
        print(f"{form}: nodes {sum(nodes.values())} {dict(nodes.most_common())}", flush=True)
        # the same, one step's arrays evaluated each time (what the loop pays: graph, then launch)
        def launched():
            t0 = time.perf_counter(); y = layer(x, None, cached()); t1 = time.perf_counter(); mx.async_eval(y); t2 = time.perf_counter(); mx.eval(y); return t1 - t0, t2 - t1
        for _ in range(20): launched()
        g, l = zip(*[launched() for _ in range(int(os.environ.get("LAUNCHES", 300)))])
        g, l = sorted(g)[len(g) // 2] * 1e6, sorted(l)[len(l) // 2] * 1e6
        print(f"{form}: us " + ", ".join(cells) + f" | one layer evaluated alone: graph {g:.1f} launch {l:.1f}", flush=True)
