#!/bin/bash
# Follow-up call 2 (warm): the rest of the test suite on the H200 (tests/test_cuda_tma.py ran in
# the final call 1), MLX's default device the GPU.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/steps.txt
timeout 560 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short --durations=15 --ignore tests/test_cuda_tma.py tests > $OUT/tests_rest.txt 2>&1; echo "suite rc=$? $(el) s" >> $S
cat $S; tail -40 $OUT/tests_rest.txt
