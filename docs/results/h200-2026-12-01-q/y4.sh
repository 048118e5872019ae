#!/bin/bash
# Session 3, call 3 (warm): tests/test_cuda_tma.py; then int8nax compare on the CUDA device (one
# call + eval, a dependent chain of 100, host build time) with the MLX floor, MLX's fp16 matmul and
# cuBLASLt, at six seed shapes.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
cat .xfer/run/commit.txt > $OUT/commit.txt
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_cuda_tma.py > $OUT/tests_tma.txt 2>&1; echo "tma tests rc=$? $(el) s" >> $S
timeout $(left 505) python3 -m int8nax.cli compare --shapes 128x4096x4096,512x4096x4096,2048x4096x4096,128x3584x18944,512x3584x18944,128x18944x3584 --contenders nax-gemm,nax-full,mlx-floor,mlx-fp16,cublaslt-int8 --mode call,chain,host --repeat 5 --markdown --json $OUT/compare.json > $OUT/compare.md 2> $OUT/compare.err; echo "compare rc=$? $(el) s" >> $S
cat $S; tail -n 30 $OUT/tests_tma.txt | grep -E "passed|failed|FAILED|ERROR" | head; head -40 $OUT/compare.md; tail -3 $OUT/compare.err
