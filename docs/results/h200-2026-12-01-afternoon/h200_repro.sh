#!/bin/bash
# compare (the measuring layer) beside the old tools/bench_cuda.py and tools/call_overhead.py,
# same shapes, same run: the reproduction that must precede deleting the old scripts.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
SH=16x4096x4096,128x4096x4096,512x4096x4096,2048x4096x4096,512x3584x18944,128x18944x3584,8192x8192x8192
mkdir -p $OUT/repro
timeout 170 python3 -m int8nax.cli compare --shapes $SH --contenders nax-gemm,cublaslt-int8,torch-int8,nax-full,mlx-fp16 \
  --mode call,chain,host --repeat 7 --markdown --json $OUT/repro/compare.json --progress > $OUT/repro/compare.md 2> $OUT/repro/compare.err; echo "compare rc=$? $(el) s" >> $OUT/repro/steps.txt
timeout 100 python3 tools/bench_cuda.py --shapes $SH --out $OUT/repro/bench_cuda > $OUT/repro/bench_cuda.txt 2>&1; echo "bench_cuda rc=$? $(el) s" >> $OUT/repro/steps.txt
timeout 40 python3 tools/call_overhead.py > $OUT/repro/call_overhead.txt 2>&1; echo "call_overhead rc=$? $(el) s" >> $OUT/repro/steps.txt
