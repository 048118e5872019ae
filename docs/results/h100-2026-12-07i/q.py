# The quantization kernel alone on each launch (threads, held): CUPTI kernel time, median of 30
# launches rotating over copies of x covering 4x the L2; every launch's pack checked bit for bit
# against the default launch's.
import sys, tempfile
from pathlib import Path
import numpy as np
import mlx.core as mx
import torch
from int8nax.backends.cuda import graphs, plans
from int8nax.bench.kernel.cupti import Profiler

torch.zeros(1, device="cuda"); mx.eval(mx.zeros(1))
prof = Profiler(torch, Path(tempfile.mkdtemp()))
l2 = torch.cuda.get_device_properties(0).L2_cache_size
LAUNCHES = [plans.CudaQuantLaunch(t, h) for t, h in ((128, 4), (256, 4), (512, 8), (64, 8), (32, 16), (64, 4))]
SHAPES = [(64, 4096), (511, 4096), (512, 4096), (1024, 4096), (2048, 4096), (4096, 4096), (2047, 3584), (512, 18944), (2048, 18944)]
for m, k in SHAPES:
    copies = max(2, -(-4 * l2 // (m * k * 2)))
    xs = [(mx.random.normal((m, k)) * 3).astype(mx.bfloat16) for _ in range(copies)]
    mx.eval(xs)
    default = graphs.quant_launch(m, k)
    want = np.array(graphs._quantize_pack(xs[0], default))
    cells = []
    for la in LAUNCHES:
        try:
            got = np.array(graphs._quantize_pack(xs[0], la))
            same = np.array_equal(got, want)
            us, _ = prof.time(lambda i: mx.eval(graphs._quantize_pack(xs[i % copies], la)), 30)
            cells.append(f"{la.threads}x{la.held}{'*' if la == default else ''} {us:.2f}{'' if same else ' MISMATCH'}")
        except Exception as exc:  # noqa: BLE001
            cells.append(f"{la.threads}x{la.held} error {type(exc).__name__}: {str(exc)[:80]}")
    print(f"{m}x{k} bf16 ({m * k * 3 / 1e6:.1f} MB moved): " + " | ".join(cells), flush=True)
