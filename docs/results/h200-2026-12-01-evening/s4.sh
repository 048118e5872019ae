#!/bin/bash
# Call 4: the regression gate's calibration on the H200 (tools/gate_calibrate.py --existing), from a
# copy of the tree without the device copy's stale .git (which would make it clone an old commit).
# $1: minutes of budget.
set -u
export PYTHONUNBUFFERED=1
rm -rf /tmp/gtree && mkdir -p /tmp/gtree
tar --exclude=./.git --exclude=./.gpu --exclude=./.xfer --exclude=./.asv -cf - . | (cd /tmp/gtree && tar xf -)
cd /tmp/gtree && export PYTHONPATH=/tmp/site:$PWD/src
python3 tools/gate_calibrate.py --existing --config asv.cuda.conf.json --machine int8nax-cuda --runs 5 --slowdowns 1.1 \
  --budget-min ${1:-8.5} --out-dir "$OUT/gate" > $OUT/gate_console.txt 2>&1; echo "gate rc=$?" >> $OUT/gate_console.txt
tail -30 $OUT/gate_console.txt
