# What mlx-lm's mx.clear_cache() itself costs after a prefill chunk, per form, in one process:
# LAYERS decoder layers of CONFIG, a CHUNK-token chunk into a fresh prompt cache on a stream of its
# own (as generate_step runs it), mx.eval of the caches' state, then mx.clear_cache() timed alone,
# with the bytes MLX's cache held before it. Then the same with the driver's default memory pool
# keeping what is freed into it (release threshold at the maximum). Run under py-spy --native to
# see which driver calls the clear spends its time in.
import ctypes, os, statistics, sys, time
import mlx.core as mx
from int8nax.bench import models
from int8nax.bench.models import convert

CONFIG = os.environ.get("CONFIG", "qwen3-8b"); LAYERS = int(os.environ.get("LAYERS", "36"))
CHUNK = int(os.environ.get("CHUNK", "2047")); REPS = int(os.environ.get("REPS", "5"))
cfg = models.CONFIGS[CONFIG]
cache_mod = models.mlx_lm_module("cache")
tok = models.token_ids()
ids = tok[None, :CHUNK] if tok.ndim == 1 else tok[:, :CHUNK]
stream = mx.new_stream(mx.default_device())


def set_threshold():
    cu = ctypes.CDLL("libcuda.so.1"); dev, pool, got = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    rc = [cu.cuInit(0), cu.cuDeviceGet(ctypes.byref(dev), 0), cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev),
          cu.cuMemPoolSetAttribute(pool, 4, ctypes.byref(ctypes.c_uint64(2**64 - 1))),
          cu.cuMemPoolGetAttribute(pool, 4, ctypes.byref(got))]
    print(f"pool: rc {rc}, release threshold {got.value}", flush=True)


def clear_cache_timed():  # a named frame for the profile
    t = time.perf_counter(); mx.clear_cache(); return (time.perf_counter() - t) * 1e3


def trial(model):
    cache = cache_mod.make_prompt_cache(model)
    t0 = time.perf_counter()
    with mx.stream(stream):
        model.model(ids, cache=cache)
    mx.eval([c.state for c in cache])
    chunk = (time.perf_counter() - t0) * 1e3
    held = mx.get_cache_memory() / 2**30
    clear = clear_cache_timed()
    return chunk, held, clear


built = {}
for form in sys.argv[1:]:
    model = models.build(cfg, LAYERS); print(form, convert(model, form), flush=True)
    mx.eval(model.parameters()); built[form] = model
for pool in ("driver default", "threshold max"):
    if pool == "threshold max":
        set_threshold()
    for form, model in built.items():
        trial(model)
        rows = [trial(model) for _ in range(REPS)]
        med = [statistics.median(r[i] for r in rows) for i in range(3)]
        print(f"{pool:15s} {form:6s} {LAYERS} layers, chunk {CHUNK}: chunk {med[0]:.2f} ms, cache held {med[1]:.2f} GiB, "
              f"clear_cache {med[2]:.2f} ms (each: {[round(r[2], 2) for r in rows]})", flush=True)
