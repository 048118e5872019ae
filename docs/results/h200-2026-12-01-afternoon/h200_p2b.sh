#!/bin/bash
# TMA trial, then main's tests on cuda, then (if time is left) the TMA kernel through the
# backend's opt-in: its GPU tests and a compare. $1: seconds allowed.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T0) )); }
B=${1:-570}
mkdir -p $OUT/tma
timeout 200 python3 tools/tma_gemm_trial.py --out $OUT/tma --budget 170 > $OUT/tma/stdout.txt 2>&1; echo "tma rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/steps.txt
timeout $(( $(left $B) > 190 ? 180 : $(left $B) - 10 )) python3 -m pytest -v -p no:cacheprovider -m "not asv" --durations=15 \
  -k "cuda or gradients or contenders or benchmark_suite or compare or extremes or persistent" tests/ > $OUT/pytest.txt 2>&1; echo "pytest rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/steps.txt
if [ $(left $B) -gt 60 ]; then
  INT8NAX_CUDA_KERNEL=tma timeout $(( $(left $B) / 2 )) python3 -m pytest -q -p no:cacheprovider tests/test_cuda_tma.py > $OUT/tma/pytest_tma.txt 2>&1; echo "pytest tma rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/steps.txt
fi
if [ $(left $B) -gt 40 ]; then
  INT8NAX_CUDA_KERNEL=tma timeout $(( $(left $B) - 5 )) python3 -m int8nax.cli compare --shapes 16x4096x4096,512x4096x4096,2048x4096x4096,8192x8192x8192 \
    --contenders nax-gemm,cublaslt-int8 --mode call,chain --repeat 5 --markdown > $OUT/tma/compare_tma.md 2>&1; echo "compare tma rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/steps.txt
fi
