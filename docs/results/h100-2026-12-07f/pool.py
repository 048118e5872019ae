# The driver's default memory pool keeps what is freed into it (release threshold raised to the
# maximum) before MLX makes its first allocation; then `python3 -m int8nax <args>` in this process.
# Whether mlx-lm's clear_cache costs a prefill by handing memory back to the driver, which the
# next chunk's cudaMallocAsync must map again (MLX's CUDA allocator frees its cache with cudaFreeAsync).
import ctypes, runpy, sys
cu = ctypes.CDLL("libcuda.so.1")
dev, pool = ctypes.c_int(), ctypes.c_void_p()
THRESHOLD = 4  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
rc = [cu.cuInit(0), cu.cuDeviceGet(ctypes.byref(dev), 0), cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev),
      cu.cuMemPoolSetAttribute(pool, THRESHOLD, ctypes.byref(ctypes.c_uint64(2**64 - 1)))]
got = ctypes.c_uint64()
rc.append(cu.cuMemPoolGetAttribute(pool, THRESHOLD, ctypes.byref(got)))
print(f"pool.py: driver calls rc {rc}, release threshold {got.value}", file=sys.stderr, flush=True)
if any(rc):
    sys.exit(3)
sys.argv = ["int8nax"] + sys.argv[1:]
try:
    runpy.run_module("int8nax", run_name="__main__", alter_sys=True)
finally:
    cu.cuMemPoolGetAttribute(pool, THRESHOLD, ctypes.byref(got))
    print(f"pool.py: release threshold at exit {got.value}", file=sys.stderr, flush=True)
