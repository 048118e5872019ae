#!/bin/bash
# Tests of main on the H200 (no -x: every failure is reported). $1: seconds allowed.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
timeout ${1:-200} python3 -m pytest -v -p no:cacheprovider -m "not asv" --durations=15 \
  -k "cuda or gradients or contenders or benchmark_suite or compare or extremes or persistent" tests/ > $OUT/pytest.txt 2>&1; echo "pytest rc=$?" >> $OUT/pytest.txt
