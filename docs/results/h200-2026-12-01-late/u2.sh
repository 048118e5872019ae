#!/bin/bash
# Call 2 (after the install): the L2-summed split-K plans' kernel tests (every tile, shape edges,
# N % 4 != 0, misaligned bases, W8A8 bit-identity), then the plan sweep with both ways of summing
# the splits at the six seed shapes where splitting can pay, cuBLASLt in the same run.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"; cat .xfer/run/commit.txt; } > $OUT/env.txt 2>&1
timeout 230 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -k "l2" tests/test_cuda_kernels.py tests/test_cuda_tma.py > $OUT/l2_tests.txt 2>&1; echo "l2 tests rc=$? $(el) s" >> $S
timeout $(left 530) python3 tools/tma_gemm_trial.py --out $OUT/sweep --variants cublaslt,sweep --no-big --seeds 16x4096x4096,64x4096x4096,128x4096x4096,256x4096x4096,128x18944x3584,512x18944x3584 --budget $(left 520) --timeout $(left 522) > $OUT/sweep.log 2>&1; echo "sweep rc=$? $(el) s" >> $S
tar czf $OUT/sweep_workers.tgz -C $OUT/sweep . && rm -f $OUT/sweep/worker_*
cat $S; tail -5 $OUT/l2_tests.txt; grep -c "exact=True" $OUT/sweep.log; grep -c "exact=False\|ERROR" $OUT/sweep.log
