#!/bin/bash
# Call 6: after epilogue_chunk: W8A8 at three seed shapes (the trial's edges too), then the API's
# W8A8 and extreme-scale tests on CUDA (the float64-model contract, the exact path).
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; cat .xfer/run/commit.txt; } > $OUT/env.txt 2>&1
timeout 75 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants w8a8 --no-big --seeds 128x3584x18944,512x3584x18944,1024x4096x4096 --budget 70 --timeout 68 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
timeout 110 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -m "not asv" -k cuda tests/test_w8a8_linear.py tests/test_extremes.py > $OUT/tests_w8a8.txt 2>&1; echo "w8a8 tests rc=$? $(el) s" >> $S
mv $OUT/trial/tma_trial.md $OUT/tma_trial.md; mv $OUT/trial/tma_trial.json $OUT/tma_trial.json; rm -rf $OUT/trial
cat $S; tail -n 3 $OUT/tests_w8a8.txt; grep -E "^\| [0-9]+x[0-9]+x[0-9]+" $OUT/tma_trial.md | cut -c1-150
