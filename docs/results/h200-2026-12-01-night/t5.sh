#!/bin/bash
# Last call: w8a8_linear's restored plans (cp.async split below M = 17, tma_plan without the wave
# tile) checked and timed by the trial, then compare with the MLX floor (call, chain, host modes).
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/steps.txt
timeout 100 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants w8a8 --no-big --budget 95 --timeout 95 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
timeout 70 python3 -m int8nax.cli compare --shapes 16x4096x4096,512x4096x4096,512x3584x18944 --contenders nax-gemm,nax-full,mlx-floor,mlx-fp16 --mode call,chain,host --repeat 5 --markdown --json $OUT/compare.json > $OUT/compare.md 2> $OUT/compare.err; echo "compare rc=$? $(el) s" >> $S
rm -f $OUT/trial/worker_*
cat $S; cat $OUT/compare.md | head -30
