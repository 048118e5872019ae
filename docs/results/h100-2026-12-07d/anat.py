# Where a decode step's host time goes, per form: graph nodes by primitive, graph build, launch
# (async_eval), cProfile of the graph build. Qwen3-8B widths, LAYERS layers, 512-token KV cache.
import collections, cProfile, io, os, pstats, re, statistics, sys, time
import mlx.core as mx
from int8nax.bench import models
from int8nax.bench.models import convert

LAYERS = int(os.environ.get("LAYERS", "8"))
cfg = models.CONFIGS["qwen3-8b"]
cache_mod = models.mlx_lm_module("cache")
out = os.environ.get("OUT", "/tmp")

def step_graph(model, cache, y):
    logits = model(y, cache=cache)[:, -1, :]
    return mx.argmax(logits - mx.logsumexp(logits, keepdims=True), axis=-1)

for form in sys.argv[1:]:
    model = models.build(cfg, LAYERS)
    print(form, convert(model, form), flush=True)
    mx.eval(model.parameters())
    cache = cache_mod.make_prompt_cache(model)
    model(mx.zeros((1, int(os.environ.get("PROMPT", "512")) - 1), dtype=mx.int32), cache=cache)
    mx.eval([c.state for c in cache])
    y = mx.array([[1]])
    for _ in range(5):
        t = step_graph(model, cache, y); mx.eval(t)
    # nodes of one step's graph
    t = step_graph(model, cache, y)
    mx.export_to_dot(f"{out}/{form}.dot", t)
    labels = collections.Counter(re.findall(r'label ="([^"]+)"', open(f"{out}/{form}.dot").read()))
    print(form, "nodes", sum(labels.values()), dict(labels.most_common()), flush=True)
    mx.eval(t)
    g, a, e = [], [], []
    for _ in range(40):
        t0 = time.perf_counter(); t = step_graph(model, cache, y); t1 = time.perf_counter()
        mx.async_eval(t); t2 = time.perf_counter(); t.item(); t3 = time.perf_counter()
        g.append(t1 - t0); a.append(t2 - t1); e.append(t3 - t2)
    med = lambda v: statistics.median(v[5:]) * 1e3
    print(f"{form}: {LAYERS} layers, ms a step: graph {med(g):.3f} launch {med(a):.3f} wait {med(e):.3f}"
          f" | per layer us: graph {med(g)/LAYERS*1e3:.1f} launch {med(a)/LAYERS*1e3:.1f}", flush=True)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(30):
        step_graph(model, cache, y)
    pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22); print("\n".join(l[:170] for l in s.getvalue().splitlines() if l.strip()), flush=True)
    del model, cache; mx.clear_cache()
