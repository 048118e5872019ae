#!/bin/bash
# Call 3 (warm, right after call 2): tools/cuda_profile.py (CUPTI timelines of one call and of a
# chain, W8A8 per kernel with the L2-summed variants, host layers), then the chain at 512 x 4096^2
# under MLX's graph-batching limits (MLX_MAX_OPS_PER_BUFFER, read once per process) and a longer chain.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
timeout 330 python3 tools/cuda_profile.py --out $OUT/profile > $OUT/profile.log 2>&1; echo "profile rc=$? $(el) s" >> $S
mkdir -p $OUT/chain
for spec in "100 100" "100 1000" "10 100" "2 100"; do
  set -- $spec
  MLX_MAX_OPS_PER_BUFFER=$1 timeout $(left 560) python3 -m int8nax.cli compare --shapes 512x4096x4096 --contenders nax-gemm,mlx-floor,mlx-fp16 --mode chain --chain-calls $2 --repeat 5 --markdown --json $OUT/chain/ops$1_calls$2.json > $OUT/chain/ops$1_calls$2.md 2>&1
  echo "chain ops=$1 calls=$2 rc=$? $(el) s" >> $S
done
tar czf $OUT/profile_chain.tgz -C $OUT profile chain && cp $OUT/profile/cuda_profile.md $OUT/ && rm -rf $OUT/chain $OUT/profile
cat $S; head -60 $OUT/cuda_profile.md
