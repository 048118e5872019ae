#!/bin/bash
# Re-verification at HEAD after the review commits (9ee912b, 3aa6ecf): the trial of int8_matmul's default
# (one call + eval per launch, and back to back), w8a8_linear,
# cuBLASLt, on every seed shape and 8192^3; then, in parallel, tests/test_cuda_tma.py and the API's CUDA tests.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; cat .xfer/run/commit.txt; } > $OUT/env.txt 2>&1
timeout 270 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants cublaslt,default,b2b,w8a8 --budget 260 --timeout 120 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
R=$(left 540)
timeout $R python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_cuda_tma.py > $OUT/tests_tma.txt 2>&1 &
PA=$!
timeout $R python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -m "not asv" -k cuda tests/test_int8_matmul.py \
  tests/test_w8a8_linear.py tests/test_extremes.py tests/test_gradients.py tests/test_properties.py tests/test_validation.py > $OUT/tests_api.txt 2>&1 &
PB=$!
wait $PA; echo "tma tests rc=$? $(el) s" >> $S
wait $PB; echo "api tests rc=$? $(el) s" >> $S
mv $OUT/trial/tma_trial.md $OUT/tma_trial.md; mv $OUT/trial/tma_trial.json $OUT/tma_trial.json
tar czf $OUT/trial_workers.tgz -C $OUT/trial . && rm -rf $OUT/trial
cat $S; tail -2 $OUT/tests_tma.txt $OUT/tests_api.txt; grep -E "^\| (16|64|128|256|512|1024|2048|8192)x[0-9]+x[0-9]+ \|" $OUT/tma_trial.md | cut -c1-170; sed -n '/Over the 11 seed/,/^$/p' $OUT/tma_trial.md | head -12
