#!/bin/bash
# Call 3: the suite's cuda tests (two pytest processes at once), then ncu at three shapes.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
S=$OUT/steps.txt
timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short --durations=8 -m "not asv" -k cuda \
  tests/test_int8_matmul.py tests/test_w8a8_linear.py tests/test_properties.py tests/test_extremes.py tests/test_gradients.py \
  tests/test_layers.py tests/test_nn.py tests/test_validation.py tests/test_quantize.py > $OUT/tests_a.txt 2>&1 &
PA=$!
timeout 330 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short --durations=8 -m "not asv" \
  tests/test_cuda_kernels.py tests/test_cuda_cublaslt.py tests/test_cuda_epilogue.py tests/test_contenders.py \
  tests/test_benchmark_suite.py tests/test_compare.py tests/test_asv_persistent.py tests/test_peers.py > $OUT/tests_b.txt 2>&1 &
PB=$!
wait $PA; echo "tests a rc=$? $(el) s" >> $S
wait $PB; echo "tests b rc=$? $(el) s" >> $S
R=$(( 560 - $(el) )); [ $R -gt 200 ] && R=200
[ $R -gt 40 ] && python3 tools/tma_gemm_trial.py --out $OUT/ncu --ncu-shapes 128x4096x4096,512x4096x4096,2048x4096x4096 --timeout $R > $OUT/ncu.log 2>&1; echo "ncu rc=$? $(el) s" >> $S
cat $S; tail -3 $OUT/tests_a.txt $OUT/tests_b.txt
