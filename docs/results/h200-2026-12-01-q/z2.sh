#!/bin/bash
# Session 2, call 2: the new quantization kernel (register rows, tiling.cuda_quant_launch) and W8A8
# on the int32 split plan: the trial (default, w8a8) on every seed shape and 8192^3; the tma_simple
# sweep at 128 x 18944 x 3584 (every tile incl. the new 128 x 112, 1-8 splits); then
# tests/test_cuda_kernels.py (every cp.async tile, the quantization launches) and the API's W8A8,
# quantization and extreme-scale cuda tests, two pytest processes at once.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; cat .xfer/run/commit.txt; } > $OUT/env.txt 2>&1
timeout 170 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants default,w8a8 --budget 160 --timeout 120 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
timeout 110 python3 tools/tma_gemm_trial.py --out $OUT/sweep --variants sweep --no-big --seeds 128x18944x3584 --budget 100 --timeout 100 > $OUT/sweep.log 2>&1; echo "sweep rc=$? $(el) s" >> $S
R=$(left 545)
P="python3 -m pytest -q -p no:cacheprovider -rfE --tb=short"
timeout $R $P tests/test_cuda_kernels.py > $OUT/tests_kernels.txt 2>&1 &
PA=$!
timeout $R $P -m "not asv" -k cuda tests/test_w8a8_linear.py tests/test_extremes.py tests/test_quantize.py > $OUT/tests_api.txt 2>&1 &
PB=$!
wait $PA; echo "kernel tests rc=$? $(el) s" >> $S
wait $PB; echo "api tests rc=$? $(el) s" >> $S
mv $OUT/trial/tma_trial.md $OUT/tma_trial.md; mv $OUT/trial/tma_trial.json $OUT/tma_trial.json
mv $OUT/sweep/tma_trial.md $OUT/sweep_trial.md
tar czf $OUT/workers.tgz -C $OUT trial sweep && rm -rf $OUT/trial $OUT/sweep
cat $S; for f in $OUT/tests_*.txt; do echo "== $f"; tail -n 30 $f | grep -E "passed|failed|FAILED|ERROR" | head -12; done
grep -E "^\| (16|64|128|256|512|1024|2048|8192)x[0-9]+x[0-9]+ \|" $OUT/tma_trial.md | cut -c1-150; sed -n '/Kernels of one call/,$p' $OUT/tma_trial.md | head -30; grep -E "128x18944x3584" $OUT/sweep_trial.md | tail -4 | cut -c1-1500
