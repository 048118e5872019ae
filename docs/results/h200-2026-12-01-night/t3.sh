#!/bin/bash
# Call 3: two more repetitions of the H200 gate calibration (tools/gate_calibrate.py --existing --copy),
# to merge with the three of 2026-12-01 14:14 (docs/results/h200-2026-12-01-evening/gate/runs.json).
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
python3 tools/gate_calibrate.py --existing --copy --config asv.cuda.conf.json --machine int8nax-cuda --runs 2 \
  --slowdowns 1.1 --factors 1.05,1.1,1.15,1.2 --budget-min ${1:-6.2} --out-dir "$OUT/gate" > $OUT/gate_console.txt 2>&1
echo "gate rc=$?" >> $OUT/gate_console.txt
tail -12 $OUT/gate_console.txt
