#!/bin/bash
# Follow-up call 1 (after the install): cuBLASLt timed one launch at a time as well as back to
# back, int8_matmul back to back with the per-launch accounting fixed (trial variants cublaslt, b2b);
# the floor kernel with int8_matmul's outputs (cuda_profile outputs).
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; cat .xfer/run/commit.txt; } > $OUT/env.txt 2>&1
timeout 200 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants cublaslt,b2b --budget 190 --timeout 120 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
timeout $(left 400) python3 tools/cuda_profile.py --out $OUT/outputs --sections outputs --shapes 16x4096x4096,512x4096x4096,512x3584x18944 > $OUT/outputs.log 2>&1; echo "outputs rc=$? $(el) s" >> $S
tar czf $OUT/trial_workers.tgz -C $OUT/trial . && rm -f $OUT/trial/worker_*
cat $S; cat $OUT/outputs/cuda_profile.md; grep "cublaslt\|b2b" $OUT/trial/tma_trial.md | head -40
