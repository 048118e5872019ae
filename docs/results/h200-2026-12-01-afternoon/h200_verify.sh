#!/bin/bash
# The TMA kernel as the default: its misaligned-base fallback and the default dispatch, on cuda.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
INT8NAX_CUDA_KERNEL=tma timeout 60 python3 -m pytest -v -p no:cacheprovider tests/test_cuda_tma.py > $OUT/tma_tests.txt 2>&1; echo "tma tests rc=$?" >> $OUT/tma_tests.txt
timeout 80 python3 -m pytest -q -p no:cacheprovider -k cuda tests/test_int8_matmul.py tests/test_extremes.py tests/test_properties.py > $OUT/default_tests.txt 2>&1; echo "default tests rc=$?" >> $OUT/default_tests.txt
