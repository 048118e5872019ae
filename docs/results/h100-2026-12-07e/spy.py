# A decode loop (mlx-lm's generate_step pattern, LAYERS layers of Qwen3-8B, 512-token cache) for a
# sampling profiler: the frames under decode_loop are the step's graph and launch.
import os, sys, time
import mlx.core as mx
from int8nax.bench import models
from int8nax.bench.models import convert

LAYERS, STEPS = int(os.environ.get("LAYERS", "8")), int(os.environ.get("STEPS", "400"))
cfg = models.CONFIGS["qwen3-8b"]
cache_mod = models.mlx_lm_module("cache")
form = sys.argv[1]
model = models.build(cfg, LAYERS)
print(form, convert(model, form), flush=True)
mx.eval(model.parameters())
cache = cache_mod.make_prompt_cache(model)
model(mx.zeros((1, 511), dtype=mx.int32), cache=cache)
mx.eval([c.state for c in cache])
stream = mx.new_stream(mx.default_device())

def step(y):
    with mx.stream(stream):
        logits = model(y[None], cache=cache)[:, -1, :]
        return mx.argmax(logits - mx.logsumexp(logits, keepdims=True), axis=-1)

def decode_loop(steps):
    y = step(mx.array([1])); mx.async_eval(y)
    for _ in range(steps):
        nxt = step(y); mx.async_eval(nxt); y.item(); y = nxt
    return y.item()

decode_loop(20)
t = time.perf_counter(); decode_loop(STEPS); dt = (time.perf_counter() - t) / STEPS
print(f"{form}: {LAYERS} layers, {dt * 1e3:.3f} ms a step", flush=True)
