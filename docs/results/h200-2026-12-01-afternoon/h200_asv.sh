#!/bin/bash
# The whole asv suite on the commits in .xfer/trees (newest first), and bench_ratio on the one in
# .xfer/trees-head (whose other classes ran in the morning call), through
# tools/asv_offline_commits.sh + src/int8nax/asv_persistent.py. $1: seconds allowed.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T0) )); }
mkdir -p $OUT/asv
{ date -u; ls -d .git 2>&1; nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv; } > $OUT/asv/env.txt 2>&1
TREES=.xfer/trees-head MACHINE=h200 BENCH='Ratio' timeout $(left ${1:-540}) bash tools/asv_offline_commits.sh \
  -a rounds=1 > $OUT/asv/asv-ratio.txt 2>&1; echo "asv ratio rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/asv/asv-ratio.txt
TREES=.xfer/trees MACHINE=h200 BENCH='^(?!NumpySgemm)' timeout $(left ${1:-540}) bash tools/asv_offline_commits.sh \
  -a rounds=1 > $OUT/asv/asv.txt 2>&1; echo "asv rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/asv/asv.txt
tar -czf $OUT/asv/results.tgz .asv/results/h200 .asv/results/benchmarks.json .asv/asv-run-h200-*.log 2>/dev/null
