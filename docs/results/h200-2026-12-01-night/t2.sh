#!/bin/bash
# Call 2 (after the install): the TMA plan sweep over the new tiles (128x192, 128x144, 64x32) and the
# cluster-reduced split-K plans at the 11 seed shapes (exact + CUPTI kernel time), then the kernel
# tests of those new paths (every shape edge, misaligned bases, W8A8 bit-identity).
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; } > $OUT/env.txt 2>&1
timeout 300 python3 tools/tma_gemm_trial.py --out $OUT/sweep --variants cublaslt,sweep --budget 285 --timeout 270 > $OUT/sweep.log 2>&1; echo "sweep rc=$? $(el) s" >> $S
timeout $(left 555) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -k "s3r or s2r or s8r or 128x192 or 128x144 or 64x32" tests/test_cuda_tma.py > $OUT/tma_new.txt 2>&1; echo "new-path tests rc=$? $(el) s" >> $S
tar czf $OUT/sweep_workers.tgz -C $OUT/sweep . && rm -f $OUT/sweep/worker_*
cat $S; tail -4 $OUT/tma_new.txt; grep -c "exact=True" $OUT/sweep.log; grep -c "exact=False\|ERROR" $OUT/sweep.log
