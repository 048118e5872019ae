#!/bin/bash
# Call 2 (after the install): the ping-pong kernel's GPU tests (exactness at every pp plan, the
# misaligned fallback, W8A8 bit-identical), then the trial: cuBLASLt, the default dispatch,
# tma_pp on pp_plan, its plan sweep, W8A8 on tma_pp and on the default.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; cat .xfer/run/commit.txt; } > $OUT/env.txt 2>&1
timeout 170 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -x -k "pp" tests/test_cuda_tma.py > $OUT/tests_pp.txt 2>&1; echo "pp tests rc=$? $(el) s" >> $S
tail -3 $OUT/tests_pp.txt
timeout 380 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants cublaslt,default,tma_pp,pp_sweep,w8a8_pp,w8a8 --budget 370 --timeout 110 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
tar czf $OUT/trial_workers.tgz -C $OUT/trial . && rm -f $OUT/trial/worker_*
cat $S; grep -E "^\| (16|64|128|256|512|1024|2048|8192)x" $OUT/trial/tma_trial.md | grep -v "sweep" | cut -c1-200 | head -80; sed -n '/Over the 11 seed/,/^$/p' $OUT/trial/tma_trial.md | head -12; sed -n '/tma_pp plan sweep/,$p' $OUT/trial/tma_trial.md | head -40
