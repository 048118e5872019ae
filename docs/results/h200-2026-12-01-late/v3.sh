#!/bin/bash
# Final call 2 (warm): compare (one call, chain, host) with the MLX floor; cuda_profile's timelines
# (with the spin floor) and host layers; Nsight Compute on W8A8's fused GEMM against the raw one.
set -u
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
left() { echo $(( ${1} - $(el) )); }
S=$OUT/steps.txt
timeout 150 python3 -m int8nax.cli compare --shapes 16x4096x4096,128x4096x4096,512x4096x4096,512x3584x18944,128x18944x3584 --contenders nax-gemm,nax-full,mlx-floor,mlx-fp16,cublaslt-int8 --mode call,chain,host --repeat 5 --markdown --json $OUT/compare.json > $OUT/compare.md 2> $OUT/compare.err; echo "compare rc=$? $(el) s" >> $S
timeout $(left 400) python3 tools/cuda_profile.py --out $OUT/profile --sections timeline,host > $OUT/profile.log 2>&1; echo "profile rc=$? $(el) s" >> $S
timeout $(left 540) ncu --profile-from-start off --target-processes all --clock-control none --csv --page details \
  --kernel-name regex:int8nax_tma_simple --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  --section LaunchStats --section Occupancy --log-file $OUT/ncu_w8a8.csv \
  python3 tools/cuda_profile.py --out $OUT/ncu_target --sections ncu-target --w8a8-shapes 1024x4096x4096,2048x4096x4096 > $OUT/ncu.log 2>&1; echo "ncu rc=$? $(el) s" >> $S
tar czf $OUT/profile.tgz -C $OUT profile ncu_target && cp $OUT/profile/cuda_profile.md $OUT/ && rm -rf $OUT/profile $OUT/ncu_target
cat $S; head -40 $OUT/compare.md; head -40 $OUT/cuda_profile.md
