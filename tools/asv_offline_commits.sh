#!/usr/bin/env bash
# Record several commits of main on an offline GPU box in one go, newest first (so that a
# time limit cuts the oldest).
#
#   TREES=<dir> [MACHINE=card] [OUT=<dir>] [PYTHON=python3] tools/asv_offline_commits.sh [asv run args...]
#
# TREES holds one folder per commit, named <40-hex sha>-<commit date as unix seconds>, each a
# `git archive` of that commit (make them where git is: see docs/benchmarking.md). Each is run
# from its own tree (that commit's suite and src/) by this checkout's tools/asv_offline_gpu.sh
# (the runner is tooling, not code under test, so every commit gets the same one), and the
# result files are gathered into .asv/results/$MACHINE of this checkout, with the newest
# benchmarks.json. A commit whose run fails is reported and the others still run.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${TREES:?set TREES to a folder of <sha>-<date> commit trees}"
here=$PWD
# The machine is named by the card (h100, h200) unless named, with this checkout's script: the
# trees' own may predate card names, and so may their int8nax (asv_offline_gpu.sh is passed it too).
export MACHINE_SCRIPT=$here/.github/scripts/asv_machine.py
MACHINE=$(PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" "$MACHINE_SCRIPT" --name "${MACHINE:-card}" --print-name) || exit 2
mkdir -p ".asv/results/$MACHINE"
# The launcher every tree runs with: LAUNCHER, else this checkout's (src/int8nax/commands/, or
# src/int8nax/ where this checkout is older than that folder).
launcher=${LAUNCHER:-}
if [ -z "$launcher" ]; then
  for launcher in "$here/src/int8nax/commands/asv_persistent.py" "$here/src/int8nax/asv_persistent.py"; do
    [ -f "$launcher" ] && break
  done
fi
status=0
for tree in $(ls -d "$TREES"/*/ | sort -t- -k2 -n -r); do
  name=$(basename "$tree")
  sha=${name%%-*}
  date=${name##*-}
  echo "=== $sha (committed $(date -u -d @"$date" +%F\ %T 2>/dev/null || echo "$date"))"
  start=$(date +%s)
  # Earlier results of this commit merge into the new run (asv_offline_gpu.sh refiles them).
  mkdir -p "$tree/.asv/results/$MACHINE"
  cp "$here/.asv/results/$MACHINE/${sha:0:8}"-*.json "$tree/.asv/results/$MACHINE/" 2>/dev/null
  cp "$here/tools/asv_offline_gpu.sh" "$tree/tools/asv_offline_gpu.sh"
  (cd "$tree" && SHA=$sha COMMIT_DATE=$date MACHINE=$MACHINE LAUNCHER=$launcher \
     bash tools/asv_offline_gpu.sh "$@")
  rc=$?
  [ "$rc" -eq 0 ] || { echo "asv_offline_commits: $sha: asv_offline_gpu.sh exited $rc"; status=$rc; }
  cp "$tree/.asv/results/$MACHINE/"*.json "$here/.asv/results/$MACHINE/" 2>/dev/null
  # asv's record of the suite: the newest commit's (the first one run), not the last one's
  [ -n "${newest_done:-}" ] || cp "$tree/.asv/results/benchmarks.json" "$here/.asv/results/benchmarks.json" 2>/dev/null
  newest_done=1
  cp "$tree/.asv/asv-run-$MACHINE.log" "$here/.asv/asv-run-$MACHINE-${sha:0:8}.log" 2>/dev/null
  echo "=== $sha: $(( $(date +%s) - start )) s"
done
exit "$status"
