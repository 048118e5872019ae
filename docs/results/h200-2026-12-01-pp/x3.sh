#!/bin/bash
# Call 3: after the plan input moved from a host-made array to a shape: pp tests; the trial
# (cuBLASLt, default, tma_ws, tma_pp, the pp sweep with the 7-stage tile, W8A8 on pp); then ncu
# (WarpStateStats, SpeedOfLight, LaunchStats) on 16 x 4096^2 and 2048 x 4096^2.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; cat .xfer/run/commit.txt; } > $OUT/env.txt 2>&1
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -x -k "pp or ws" tests/test_cuda_tma.py > $OUT/tests_pp.txt 2>&1; echo "pp/ws tests rc=$? $(el) s" >> $S
tail -2 $OUT/tests_pp.txt
timeout 330 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants cublaslt,default,tma_ws,tma_pp,pp_sweep,w8a8_pp --budget 320 --timeout 100 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
tar czf $OUT/trial_workers.tgz -C $OUT/trial . && rm -f $OUT/trial/worker_*
timeout 100 python3 tools/tma_gemm_trial.py --out $OUT/ncu --ncu-shapes 16x4096x4096,2048x4096x4096 --timeout 90 > $OUT/ncu.log 2>&1; echo "ncu rc=$? $(el) s" >> $S
cat $S; grep -E "^\| (16|64|128|256|512|1024|2048|8192)x" $OUT/trial/tma_trial.md | grep -E "tma_pp|tma_ws|w8a8_pp" | cut -c1-160 | head -60; sed -n '/tma_pp plan sweep/,/Every plan/p' $OUT/trial/tma_trial.md | head -20
