#!/bin/bash
# Final call: the new default plans (tma_plan) measured and checked by the trial, the jvp fix and
# the compare/benchmark-suite test fixes on the GPU.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/steps.txt
timeout 200 python3 tools/tma_gemm_trial.py --out $OUT/trial --variants default,w8a8,cublaslt --budget 190 --timeout 100 > $OUT/trial.log 2>&1; echo "trial rc=$? $(el) s" >> $S
timeout 150 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -k "jvp or compare or ratio_benchmarks_keep or offset_views or misaligned or traps" tests/test_gradients.py tests/test_compare.py tests/test_benchmark_suite.py tests/test_cuda_tma.py > $OUT/tests.txt 2>&1; echo "tests rc=$? $(el) s" >> $S
tar czf $OUT/trial_workers.tgz -C $OUT/trial . && rm -f $OUT/trial/worker_*
cat $S; tail -3 $OUT/tests.txt
