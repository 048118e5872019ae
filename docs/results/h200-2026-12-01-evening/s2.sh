#!/bin/bash
# Call 2 (after the install): the TMA default's kernel tests, the two unexplained failures,
# the kernel-time trial (default dispatch, W8A8 pipeline, cuBLASLt, tma_simple plan sweep), compare.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; } > $OUT/env.txt 2>&1
timeout 130 python3 -m pytest -q -p no:cacheprovider -rfEs --tb=short tests/test_cuda_tma.py > $OUT/tma_tests.txt 2>&1; echo "tma tests rc=$? $(el) s" >> $S
timeout 70 python3 -m pytest -q -p no:cacheprovider -rfE --tb=long -k "vjp_and_jvp or markdown_and_impostor or cider_columns" tests/test_gradients.py tests/test_compare.py > $OUT/two_failures.txt 2>&1; echo "two failures rc=$? $(el) s" >> $S
timeout 40 python3 -m int8nax.cli compare --shapes 8x64x48 --repeat 1 > $OUT/compare_8x64x48.txt 2>&1; echo "compare 8x64x48 rc=$? $(el) s" >> $S
B=$(left 400); [ $B -gt 240 ] && B=240
timeout $((B + 10)) python3 tools/tma_gemm_trial.py --out $OUT/trial --variants default,w8a8,cublaslt,sweep --budget $B --timeout 110 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
SH=16x4096x4096,128x4096x4096,512x4096x4096,2048x4096x4096,512x3584x18944,128x18944x3584,8192x8192x8192
timeout $(left 530) python3 -m int8nax.cli compare --shapes $SH --contenders nax-gemm,cublaslt-int8,nax-full,mlx-fp16 --mode call,chain,host --repeat 7 --markdown --json $OUT/compare.json > $OUT/compare.md 2> $OUT/compare.err; echo "compare rc=$? $(el) s" >> $S
cat $S
