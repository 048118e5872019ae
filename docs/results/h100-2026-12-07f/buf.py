# What mlx-lm's clear_cache costs one prefill chunk, per form, in one process: LAYERS decoder layers
# of CONFIG, a chunk of CHUNK tokens into a fresh prompt cache, mx.eval of the caches' state (as
# generate_step does); "clear" runs mx.clear_cache() before each chunk, "keep" does not; the two
# alternate, REPS each. Then the same with the driver's default memory pool keeping what is freed
# into it (release threshold raised to the maximum; MLX's allocator frees its cache with cudaFreeAsync,
# and the pool hands memory back to the driver at each synchronisation unless the threshold says not).
# Also each form's graph of one layer (prefill chunk and decode step): nodes by primitive.
import collections, ctypes, os, re, statistics, sys, time
import mlx.core as mx
from int8nax.bench import models
from int8nax.bench.models import convert

CONFIG = os.environ.get("CONFIG", "qwen3-8b"); LAYERS = int(os.environ.get("LAYERS", "8"))
CHUNK = int(os.environ.get("CHUNK", "2047")); REPS = int(os.environ.get("REPS", "10"))
cfg = models.CONFIGS[CONFIG]
cache_mod = models.mlx_lm_module("cache")
out = os.environ.get("W", "/tmp")

def set_threshold():
    cu = ctypes.CDLL("libcuda.so.1"); dev, pool, got = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    rc = [cu.cuInit(0), cu.cuDeviceGet(ctypes.byref(dev), 0), cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev),
          cu.cuMemPoolGetAttribute(pool, 4, ctypes.byref(got))]
    before = got.value
    rc += [cu.cuMemPoolSetAttribute(pool, 4, ctypes.byref(ctypes.c_uint64(2**64 - 1))), cu.cuMemPoolGetAttribute(pool, 4, ctypes.byref(got))]
    print(f"pool: rc {rc}, release threshold {before} -> {got.value}", flush=True)

def census(t, name):
    mx.export_to_dot(f"{out}/{name}.dot", t)
    c = collections.Counter(re.findall(r'label ="([^"]+)"', open(f"{out}/{name}.dot").read()))
    return sum(c.values()), dict(c.most_common())

models_ = {}
ids = models.token_ids()[None, :CHUNK] if models.token_ids().ndim == 1 else models.token_ids()[:, :CHUNK]
for form in sys.argv[1:]:
    model = models.build(cfg, LAYERS); print(form, convert(model, form), flush=True)
    mx.eval(model.parameters()); models_[form] = model
    one = models.build(cfg, 1); convert(one, form); mx.eval(one.parameters())
    cache = cache_mod.make_prompt_cache(one)
    h = one.model.embed_tokens(ids)
    print(form, "prefill layer", census(one.model.layers[0](h, mask="causal", cache=cache[0]), f"{form}-prefill"), flush=True)
    mx.eval([c.state for c in cache])
    print(form, "decode layer", census(one.model.layers[0](h[:, :1], mask=None, cache=cache[0]), f"{form}-decode"), flush=True)
    del one, cache

def chunk(model, clear):
    cache = cache_mod.make_prompt_cache(model)
    if clear:
        mx.clear_cache()
    t0 = time.perf_counter(); model.model(ids, cache=cache); mx.eval([c.state for c in cache])
    return (time.perf_counter() - t0) * 1e3

for pool in ("driver default", "threshold max"):
    if pool == "threshold max":
        set_threshold()
    for form, model in models_.items():
        for _ in range(3):
            chunk(model, True); chunk(model, False)
        t = {True: [], False: []}
        for _ in range(REPS):
            for clear in (True, False):
                t[clear].append(chunk(model, clear))
        c, k = statistics.median(t[True]), statistics.median(t[False])
        print(f"{pool:15s} {form:7s} chunk {CHUNK} x {LAYERS} layers, ms (median of {REPS}, min-max): clear {c:.2f} "
              f"({min(t[True]):.2f}-{max(t[True]):.2f}) keep {k:.2f} ({min(t[False]):.2f}-{max(t[False]):.2f}) "
              f"clear costs {100 * (c / k - 1):.1f} %", flush=True)
