#!/bin/bash
# Session 3, call 2: the final default (W8A8 on gemm_tma_ws, the 128 x 112 split plan, the new
# quantization): the trial (cuBLASLt, default, w8a8) on every seed shape and 8192^3; W8A8 on
# tma_simple at 2048 x 4096^2 and 8192^3 in the same run (INT8NAX_CUDA_KERNEL=tma_simple, the
# plan it had before); then the API's cuda tests.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; cat .xfer/run/commit.txt; } > $OUT/env.txt 2>&1
timeout 230 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants cublaslt,default,w8a8 --budget 220 --timeout 150 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
INT8NAX_CUDA_KERNEL=tma_simple timeout 80 python3 tools/tma_gemm_trial.py --out $OUT/simple --variants w8a8 --seeds 2048x4096x4096 --budget 75 --timeout 75 > $OUT/simple.log 2>&1; echo "simple w8a8 rc=$? $(el) s" >> $S
timeout $(left 550) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -m "not asv" -k cuda tests/test_int8_matmul.py tests/test_w8a8_linear.py tests/test_extremes.py tests/test_gradients.py tests/test_properties.py tests/test_validation.py > $OUT/tests_api.txt 2>&1; echo "api tests rc=$? $(el) s" >> $S
mv $OUT/trial/tma_trial.md $OUT/tma_trial.md; mv $OUT/trial/tma_trial.json $OUT/tma_trial.json; mv $OUT/simple/tma_trial.md $OUT/simple_trial.md
tar czf $OUT/workers.tgz -C $OUT trial simple && rm -rf $OUT/trial $OUT/simple
cat $S; for f in $OUT/tests_*.txt; do echo "== $f"; tail -n 30 $f | grep -E "passed|failed|FAILED|ERROR" | head -12; done
grep -E "^\| (16|64|128|256|512|1024|2048|8192)x[0-9]+x[0-9]+ \|" $OUT/tma_trial.md | cut -c1-150; sed -n '/Over the 11/,$p' $OUT/tma_trial.md | head -40 | cut -c1-200; grep -E "^\| (2048|8192)x" $OUT/simple_trial.md | cut -c1-150; grep -E "^\| (2048|8192)x" $OUT/simple_trial.md | tail -2 | cut -c1-300
