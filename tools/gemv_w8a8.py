"""The small-M W8A8 GEMM (backends/cuda_gemv.py, kernels/cuda/gemv_w8a8.cuh): compile it without a
GPU, or time it on one against bfloat16 mx.matmul and the existing W8A8 path.

    python tools/gemv_w8a8.py compile [--nvcc nvcc] [--arch sm_90a] [--only REGEX]
    PYTHONPATH=/tmp/site:$PWD/src python tools/gemv_w8a8.py bench [--m 1,4,8,16] [--launches 30]
        [--warps 8] [--unroll 2]

compile: every template instance gemv_w8a8 and gemv_w8a8_x can launch (float16/bfloat16/float32
out, bias or not, eft/narrow; NT 1 and 2; and the int32 product) as MLX would hand it to NVRTC
(tools/cuda_compile_check.py's translation unit and stand-in header), through nvcc -cubin with
ptxas's register and spill report.

bench (H200): at the decode shapes of Qwen2.5-7B, (N, K) = (4608, 3584) q|k|v, (3584, 3584) o,
(37888, 3584) gate|up, (3584, 18944) down, and M in --m: the CUPTI kernel time (median of
--launches calls, operands rotated over 3x the L2: tools/tma_gemm_trial.py's kernel_us) of
  bf16     mx.matmul(x, W.T), x and W bfloat16 (what a bf16 model runs);
  w8a8     cuda.dequant_gemm on given codes (the existing W8A8 GEMM, its epilogue's default);
  gemv     cuda_gemv.gemv_w8a8 on the same codes;
and the whole W8A8 call from x: cuda.w8a8 (quantization kernel + GEMM), quantization kernel +
gemv_w8a8, and gemv_w8a8_x (one kernel); each bf16/x ratio > 1 means faster
than bf16. The gemv output is checked bit for bit against the w8a8 one first ("same").
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tools"))

SHAPES = [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)]


def instances():
    from int8nax.backends import cuda_gemv

    fixed = [("WARPS", cuda_gemv.GEMV_WARPS), ("UNROLL", cuda_gemv.GEMV_UNROLL)]
    ins = ["int8_t", "int8_t", "float", "float", "float"]
    for nt in (1, 2):
        for t, ctype in (("float16", "__half"), ("bfloat16", "__nv_bfloat16"), ("float32", "float")):
            for has_bias in (True, False):
                for narrow in ((False, True) if t != "float32" else (False,)):
                    label = f"gemv w8a8_x {t}{' bias' if has_bias else ''}{' narrow' if narrow else ''} NT={nt}"
                    tmpl = [("T", t), ("NT", nt)] + fixed + [("HAS_BIAS", has_bias), ("NARROW", narrow)]
                    yield label, cuda_gemv.spec("w8a8_x"), [ctype, "int8_t", "float", "float"], [ctype], tmpl
        yield (f"gemv int32 NT={nt}", cuda_gemv.spec("int32"), ins[:2], ["int32_t"], [("NT", nt)] + fixed)
        for out, ctype in (("float16", "__half"), ("bfloat16", "__nv_bfloat16"), ("float32", "float")):
            for has_bias in (True, False):
                for narrow in ((False, True) if out != "float32" else (False,)):
                    label = f"gemv w8a8 {out}{' bias' if has_bias else ''}{' narrow' if narrow else ''} NT={nt}"
                    tmpl = [("NT", nt)] + fixed + [("TOut", out), ("HAS_BIAS", has_bias), ("NARROW", narrow)]
                    yield label, cuda_gemv.spec("w8a8"), ins, [ctype], tmpl


def compile_all(nvcc: str, arch: str, only: str | None = None) -> int:
    import cuda_compile_check as ccc

    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        include = os.path.join(tmp, "inc")
        os.makedirs(os.path.join(include, "mlx/backend/cuda/device"))
        Path(include, "mlx/backend/cuda/device/utils.cuh").write_text(ccc.STAND_IN)
        for label, spec, ins, outs, tmpl in instances():
            if only and not re.search(only, label):
                continue
            cu = os.path.join(tmp, re.sub(r"[^A-Za-z0-9]+", "_", label) + ".cu")
            Path(cu).write_text(ccc.translation_unit(spec, ins, outs, tmpl))
            num = arch[3:]
            cmd = [nvcc, "-cubin", f"-gencode=arch=compute_{num},code=sm_{num}", "-std=c++17", "-Xptxas", "-v",
                   "-I", include, "-o", cu[:-3] + ".cubin", cu]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            report = " ".join(re.findall(r"(Used \d+ registers.*|\d+ bytes stack frame.*|\(C\d{4}\).*)", proc.stderr))
            print(f"{'ok ' if proc.returncode == 0 else 'ERR'} {label:40s} {report}", flush=True)
            if proc.returncode:
                failures += 1
                print(proc.stderr[-4000:])
    return 1 if failures else 0


def bench(ms, launches: int) -> int:
    import mlx.core as mx
    import numpy as np
    import torch
    from tma_gemm_trial import kernel_us, operand_sets

    from int8nax.backends import cuda, cuda_gemv

    torch.zeros(1, device="cuda")  # torch's context first (CUPTI)
    print(f"mlx {mx.__version__}, {mx.device_info(mx.gpu).get('device_name')}, {cuda.sm_count()} SMs, "
          f"epilogue {cuda.epilogue_choice()}; gemv {cuda_gemv.GEMV_WARPS} warps, unroll {cuda_gemv.GEMV_UNROLL}; "
          f"CUPTI kernel µs, median of {launches}")
    print("M | N | K | same | bf16 | w8a8 gemm | gemv | bf16/w8a8 | bf16/gemv | w8a8 call (quant+gemm) | "
          "quant+gemv | gemv_x | bf16/call | bf16/(quant+gemv) | bf16/gemv_x")
    out_dir = Path(tempfile.mkdtemp())
    for n, k in SHAPES:
        rng = np.random.default_rng(n + k)
        w = mx.array(rng.integers(-127, 128, size=(n, k), dtype=np.int8)) + mx.array(0, dtype=mx.int8)
        sw = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
        wb = (w.astype(mx.float32) * sw[:, None]).astype(mx.bfloat16)
        mx.eval(w, sw, wb)
        for m in ms:
            x = mx.random.normal((m, k)).astype(mx.bfloat16)
            mx.eval(x)
            q, sx = cuda.quantize(x)
            mx.eval(q, sx)
            want = cuda.dequant_gemm(q, sx, w, sw, None, mx.bfloat16).view(mx.uint16)
            same = bool(mx.array_equal(cuda_gemv.gemv_w8a8(q, sx, w, sw, None, mx.bfloat16).view(mx.uint16),
                                       want).item()) and bool(
                mx.array_equal(cuda_gemv.gemv_w8a8_x(x, w, sw, None).view(mx.uint16), want).item())
            sets_bf = operand_sets(mx, (x, wb), 2 * (m * k + n * k))
            sets_i8 = operand_sets(mx, (x, q, sx, w, sw), n * k)
            runs = {
                "bf16": lambda i: mx.matmul(sets_bf[i % len(sets_bf)][0], sets_bf[i % len(sets_bf)][1].T),
                "w8a8": lambda i: cuda.dequant_gemm(*(sets_i8[i % len(sets_i8)][1:]), None, mx.bfloat16),
                "gemv": lambda i: cuda_gemv.gemv_w8a8(*(sets_i8[i % len(sets_i8)][1:]), None, mx.bfloat16),
                "call": lambda i: cuda.w8a8(sets_i8[i % len(sets_i8)][0], sets_i8[i % len(sets_i8)][3],
                                            sets_i8[i % len(sets_i8)][4], None),
                "qgemv": lambda i: cuda_gemv.gemv_w8a8(*cuda.quantize(sets_i8[i % len(sets_i8)][0]),
                                                       sets_i8[i % len(sets_i8)][3], sets_i8[i % len(sets_i8)][4],
                                                       None, mx.bfloat16),
                "gemv_x": lambda i: cuda_gemv.gemv_w8a8_x(sets_i8[i % len(sets_i8)][0], sets_i8[i % len(sets_i8)][3],
                                                          sets_i8[i % len(sets_i8)][4], None),
            }
            us = {}
            for name, run in runs.items():
                for i in range(3):
                    mx.eval(run(i))
                us[name] = kernel_us(mx, torch, out_dir, run, launches)[0]
            print(f"{m} | {n} | {k} | {same} | {us['bf16']:.1f} | {us['w8a8']:.1f} | {us['gemv']:.1f} | "
                  f"{us['bf16'] / us['w8a8']:.2f}x | {us['bf16'] / us['gemv']:.2f}x | {us['call']:.1f} | "
                  f"{us['qgemv']:.1f} | {us['gemv_x']:.1f} | {us['bf16'] / us['call']:.2f}x | "
                  f"{us['bf16'] / us['qgemv']:.2f}x | {us['bf16'] / us['gemv_x']:.2f}x", flush=True)
            sets_bf = sets_i8 = None
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile")
    c.add_argument("--nvcc", default="nvcc")
    c.add_argument("--arch", default="sm_90a")
    c.add_argument("--only", help="regex on the instance label")
    b = sub.add_parser("bench")
    b.add_argument("--m", default="1,4,8,16")
    b.add_argument("--launches", type=int, default=30)
    b.add_argument("--warps", type=int, help="override cuda_gemv.GEMV_WARPS (a block's warps)")
    b.add_argument("--unroll", type=int, help="override cuda_gemv.GEMV_UNROLL (steps loaded ahead)")
    args = ap.parse_args(argv)
    if args.cmd == "compile":
        return compile_all(args.nvcc, args.arch, args.only)
    from int8nax.backends import cuda_gemv

    if args.warps:
        cuda_gemv.GEMV_WARPS = args.warps
    if args.unroll:
        cuda_gemv.GEMV_UNROLL = args.unroll
    return bench([int(v) for v in args.m.split(",")], args.launches)


if __name__ == "__main__":
    sys.exit(main())
