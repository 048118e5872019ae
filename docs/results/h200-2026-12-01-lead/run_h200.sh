#!/bin/bash
# One H200 call: tests of merged main on cuda, compare (new harness), asv record of 3 commits.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T0) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv
  python3 -c "import mlx.core as mx, torch, numpy, asv; print('mlx', mx.__version__, 'torch', torch.__version__, 'numpy', numpy.__version__, 'asv', asv.__version__, mx.default_device())"
  nproc; } > $OUT/env.txt 2>&1
timeout 110 python3 -m pytest -q -p no:cacheprovider -m "not asv" -x tests/test_gradients.py tests/test_contenders.py \
  tests/test_compare.py tests/test_cuda_cublaslt.py tests/test_extremes.py tests/test_int8_matmul.py \
  tests/test_w8a8_linear.py tests/test_benchmark_suite.py > $OUT/pytest.txt 2>&1; echo "pytest rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/pytest.txt
timeout 110 python3 -m int8nax.cli compare --profile full --contenders nax-gemm,cublaslt-int8,torch-int8,nax-full,mlx-fp16 \
  --mode call,chain --repeat 5 --markdown --json $OUT/compare.json > $OUT/compare.md 2>&1; echo "compare rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/compare.md
# forkserver probe: one benchmark, one shape, in the HEAD tree
LM=spawn
probe=$(ls -d .xfer/trees/*/ | sort -t- -k2 -n -r | head -1)
if (cd $probe && cp ../../../tools/asv_offline_gpu.sh tools/ && SHA=$(basename $probe | cut -d- -f1) COMMIT_DATE=0 MACHINE=probe BENCH=NaxGemm \
    METHODS=time_nax_gemm timeout 60 bash tools/asv_offline_gpu.sh --launch-method forkserver --quick ) > $OUT/probe.txt 2>&1 \
    && grep -q "time_nax_gemm" $OUT/probe.txt && ! grep -q "failed" $OUT/probe.txt; then LM=forkserver; fi
rm -rf $probe/.asv/results/probe
echo "launch method $LM, $(( $(date +%s) - T0 )) s" >> $OUT/probe.txt
TREES=.xfer/trees MACHINE=h200 METHODS='time_\w+' BENCH='^(?!NumpySgemm)' timeout $(left 585) bash tools/asv_offline_commits.sh \
  --launch-method $LM -a rounds=1 > $OUT/asv.txt 2>&1; echo "asv rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/asv.txt
tar -czf $OUT/results.tgz .asv/results/h200 .asv/results/benchmarks.json .asv/asv-run-h200-*.log 2>/dev/null
