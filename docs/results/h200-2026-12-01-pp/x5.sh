#!/bin/bash
# Call 5: W8A8 after the epilogue loads its column factors 8 pairs ahead: the trial's default
# (raw GEMM) and w8a8 on every shape; then the W8A8 tests (TMA/pp bit-identity, the API's cuda
# W8A8 and extreme-scale cases, which take the exact path).
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; cat .xfer/run/commit.txt; } > $OUT/env.txt 2>&1
timeout 200 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants default,w8a8 --budget 190 --timeout 120 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -m "not asv" -k "(w8a8 and (cuda or tma or pp)) or persistent_kernels" tests/test_cuda_tma.py \
  tests/test_w8a8_linear.py tests/test_extremes.py tests/test_cuda_kernels.py > $OUT/tests_w8a8.txt 2>&1; echo "w8a8 tests rc=$? $(el) s" >> $S
mv $OUT/trial/tma_trial.md $OUT/tma_trial.md; mv $OUT/trial/tma_trial.json $OUT/tma_trial.json
tar czf $OUT/trial_workers.tgz -C $OUT/trial . && rm -rf $OUT/trial
cat $S; tail -n 2 $OUT/tests_w8a8.txt; grep -E "^\| (16|64|128|256|512|1024|2048|8192)x[0-9]+x[0-9]+ \|" $OUT/tma_trial.md | cut -c1-150; sed -n '/Over the 11 seed/,/^$/p' $OUT/tma_trial.md | head -12
