"""Fill a CUDA kernel cache without a GPU, to carry to a GPU machine.

    python tools/cuda_cache_offline.py --mlx-package DIR --out CACHE [--model qwen2.5-7b[,qwen3-8b]]
                                       [--max-tokens 8192] [--arch sm_90a] [--sms 132] [--jobs N] [--catalogue]
                                       [--plans MxKxN,...]

MLX keys a custom kernel's cached module by its name and a hash of its source, and int8nax's
sources include the kernel headers by absolute path (backends/cuda/source.py): an entry built here
is found on a GPU machine that runs this checkout at the same path (the lent GPUs run it at this
one's path). This builds, with NVRTC from the nvidia-cuda-nvrtc wheel (LD_LIBRARY_PATH) and the
MLX of an unpacked mlx-cuda wheel (DIR: its `mlx` folder, whose libmlx.so holds MLX's device
headers), every instance the model's W8A8 layers meet for 1 .. max-tokens rows on a GPU of `sms`
SMs (bfloat16 activations, the default SwiGLU and bias settings), into CACHE: pass
MLX_PTX_CACHE_DIR=CACHE on the GPU machine (a `carry` of the folder), where the process then
compiles none of them. `--catalogue` adds every instance tools/cuda_compile_check.py builds (every
tile of every variant, the quantization, reduction and SM-count kernels: what the GEMM, linear and
kernel-time benchmarks and the tests meet). The launches are traced with stand-ins for
mx.fast.cuda_kernel, the SM count and the GPU family; nothing runs. On an H100 (mlx 0.32.4) a
folder built so served the asv record, the kernel tests and a 7B model with nothing compiled
there (docs/results/cuda-h100.md); `int8nax info` counts the kernels loaded from it.

The two inputs, on the CPU box (MLX's version must be the GPU machine's):
    unzip -q mlx_cuda_13-<version>-*.whl -d /tmp/mlxcuda            # DIR=/tmp/mlxcuda/mlx
    pip install -q --no-deps --target /tmp/nvrtc nvidia-cuda-nvrtc==13.0.88
    export LD_LIBRARY_PATH=/tmp/nvrtc/nvidia/cu13/lib
and to carry the result: tar -cJf kcache.tar.xz -C <parent of CACHE> <CACHE's name>, named to
tools/hopper_verify.sh by KERNELS_TARBALL. 301 instances took 552 s on 2 cores (AMD Zen 4).
`--plans 1x3584x37888,...` adds what a plans sweep at those shapes launches: every candidate of
bench.kernel.plans.plan_candidates, the GEMV's trial schedules among them.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mlx-package", required=True, help="the `mlx` folder of an unpacked mlx-cuda wheel")
    parser.add_argument("--out", required=True, help="the cache folder to fill (MLX_PTX_CACHE_DIR there)")
    parser.add_argument("--model", default="qwen2.5-7b",
                        help="models of int8nax.bench.models, comma-separated (qwen2.5-7b)")
    parser.add_argument("--catalogue", action="store_true",
                        help="add every instance of tools/cuda_compile_check.py's catalogue")
    parser.add_argument("--plans", default="",
                        help="MxKxN shapes, comma-separated: add every plan `int8nax compare --mode kernel --plans "
                             "--raw-plans --shapes` times there (bfloat16 W8A8 with and without a bias, the raw GEMM)")
    parser.add_argument("--max-tokens", type=int, default=8192, help="rows to prepare for (8192)")
    parser.add_argument("--arch", default="sm_90a", help="NVRTC's --gpu-architecture (sm_90a)")
    parser.add_argument("--sms", type=int, default=132, help="the GPU's SM count, which the plans depend on (132)")
    parser.add_argument("--jobs", type=int, default=None, help="NVRTC compiles at once (default: the CPUs)")
    args = parser.parse_args(argv)
    package = Path(args.mlx_package)
    if not (package / "lib").is_dir():
        parser.error(f"--mlx-package: expected the mlx folder of an mlx-cuda wheel (with lib/), got {str(package)!r}")
    if args.max_tokens < 1 or args.sms < 1:
        parser.error(f"--max-tokens and --sms: expected positive counts, got {args.max_tokens} and {args.sms}")
    try:
        plan_shapes = [tuple(int(v) for v in text.split("x")) for text in args.plans.split(",") if text]
    except ValueError:
        plan_shapes = [()]
    if any(len(shape) != 3 or min(shape) < 1 for shape in plan_shapes):
        parser.error(f"--plans: expected MxKxN shapes of positive sizes, comma-separated, got {args.plans!r}")
    os.environ["MLX_PTX_CACHE_DIR"] = str(Path(args.out).resolve())

    import mlx.core as mx

    from int8nax.backends.cuda import backend as cuda, binary_cache, device, kernels, probe
    from int8nax.bench.first_call import layers_of
    from int8nax.bench.models import CONFIGS

    models = args.model.split(",")
    if unknown := [m for m in models if m not in CONFIGS]:
        parser.error(f"--model: expected names from {sorted(CONFIGS)}, comma-separated, got {unknown[0]!r}")

    class StandIn:  # a kernel object that records nothing and returns unevaluated zeros
        def __call__(self, *, output_shapes, output_dtypes, **_):
            return [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]

    mx.fast.cuda_kernel = lambda **_: StandIn()
    device._family = lambda: "sm90" if args.arch.startswith("sm_90") else "sm80"
    probe.sm_count = lambda: args.sms
    probe._sms = lambda: args.sms
    cuda.COMPILE = False
    layers = [cuda.WarmLayer("w8a8_linear", n, k, mx.float32 if bias else None)
              for model in models for _, n, k, bias in layers_of(CONFIGS[model])]
    with kernels.collect_instances() as found:
        for layer in dict.fromkeys(layers):
            for call in cuda._warm_calls(layer, args.max_tokens, mx.bfloat16):
                call()
        if plan_shapes:
            from int8nax.bench.kernel.plans import plan_candidates

            for m, k, n in plan_shapes:
                a, w = mx.zeros((m, k), dtype=mx.int8), mx.zeros((n, k), dtype=mx.int8)
                x, s = mx.zeros((m, k), dtype=mx.bfloat16), mx.ones((n,), dtype=mx.float32)
                for c in plan_candidates(m, n, k, args.sms, False):
                    cuda.gemm_int32(a, w, variant=c.choice.variant, plan=c.choice.plan)
                for bias in (None, mx.zeros((n,), dtype=mx.float32)):
                    for c in plan_candidates(m, n, k, args.sms, True, bias=bias is not None, out_dtype="bfloat16"):
                        cuda.w8a8(x, w, s, bias, variant=c.choice.variant, plan=c.choice.plan)
    instances = list(dict.fromkeys(found))
    if args.catalogue:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import cuda_compile_check

        instances = list(dict.fromkeys(instances + [cuda_compile_check.instance(spec, ins, outs, tmpl)
                                                    for _, spec, ins, outs, tmpl in cuda_compile_check.instances(args.arch)]))
    cache = binary_cache.BinaryCache(args.arch, package, mx.__version__)
    start = time.perf_counter()
    built = cache.prebuild(instances, args.jobs, binary_cache.terminal_progress("building CUDA kernels"))
    print(f"{args.model}{' and the catalogue' if args.catalogue else ''}: {len(instances)} instances for 1..{args.max_tokens} rows on {args.sms} SMs, {built} built "
          f"into {cache.folder} in {time.perf_counter() - start:.0f} s ({cache.counts}){': ' + cache.reason if cache.reason else ''}")
    return 1 if cache.counts.failed else 0


if __name__ == "__main__":
    sys.exit(main())
