# session B, call 2: install; the raw GEMM and W8A8 on every plan at the small-M and long-K seed
# shapes (where int8_matmul trails cuBLASLt); dd6760b's 511-row W8A8 plans (PLANS_TOKENS=511)
export T0=$(date +%s)
W=/tmp/w/$(basename $0 .sh); mkdir -p $W; trap 'tar -czf $OUT/$(basename $W).tgz -C $W . ; for k in b1 plans p511 q; do [ -e $W/$k.txt ] && cp $W/$k.txt $OUT/; done' EXIT
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl .gpu/run/wheels/*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
export COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
el() { echo "$1 rc=$2 $(( $(date +%s) - T0 )) s" >> $W/b1.txt; }
left() { local l=$(( ${END_S:-480} - ($(date +%s) - T0) )); echo $(( l < $1 ? (l > 5 ? l : 5) : $1 )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import mlx.core as mx, mlx_lm, torch, sys; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"
  echo "commit $COMMIT; install $(( $(date +%s) - T0 )) s; cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; nproc; lscpu | grep "Model name"
} > $W/b1.txt 2>&1
cat $W/b1.txt
L=$(left 200)
timeout $L python3 -m int8nax compare --mode kernel --plans --raw-plans --time-limit $(( L - 15 )) \
  --shapes 16x4096x4096,32x4096x4096,64x4096x4096,128x4096x4096,512x4096x4096,1024x4096x4096,128x18944x3584,128x3584x18944 \
  --json $W/plans.json > $W/plans.txt 2> $W/plans.log
el plans $?; sed -n '/^Default plan against the fastest/,$p' $W/plans.txt | cut -c1-200; tail -n 3 $W/plans.log
timeout $(left 90) python3 .gpu/run/q.py > $W/q.txt 2> $W/q.log
el quant $?; cat $W/q.txt; tail -n 3 $W/q.log
mkdir -p $W/p511
PLANS_TOKENS=511 OUT=$W/p511 LIMIT=$(( $(date +%s) - T0 + $(left 150) )) bash tools/hopper_verify.sh plans > $W/p511.txt 2>&1
el p511 $?; tail -n 30 $W/p511.txt | cut -c1-200
cat $W/b1.txt
