# session C, call 2: install; W8A8's SwiGLU MLPs split against fused in mlx-lm's loop (Qwen3-8B,
# 2048 tokens: the breakdown's parts and the GB in MLX's cache at the clear), alternated, one
# process per setting; pairs until END_S
export T0=$(date +%s)
W=/tmp/w/$(basename $0 .sh); mkdir -p $W; trap 'tar -czf $OUT/$(basename $W).tgz -C $W . ; cp $W/c2.txt $OUT/' EXIT
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl .gpu/run/wheels/*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
export COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
el() { echo "$1 rc=$2 $(( $(date +%s) - T0 )) s" >> $W/c2.txt; }
left() { echo $(( ${END_S:-200} - ($(date +%s) - T0) )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  echo "commit $COMMIT; install $(( $(date +%s) - T0 )) s; cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; lscpu | grep "Model name"
  python3 -c "import time; t = time.time(); from int8nax.backends import tape; m = tape.module(); print('tape', m, 'why', tape.why(), f'{time.time() - t:.1f} s')"
} > $W/c2.txt 2>&1
cat $W/c2.txt
for i in 1 2 3; do
  for mode in split fused; do
    [ $(left) -lt 50 ] && break 2
    INT8NAX_CUDA_SWIGLU=$mode timeout $(( $(left) - 3 )) python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms w8a8 \
      --prompt-tokens 2048 --generation-tokens 4 --trials ${TRIALS:-5} --json $W/sw-$mode-$i.json > $W/sw-$mode-$i.txt 2> $W/sw-$mode-$i.log
    el "$mode $i" $?
    echo "== $mode $i"; grep -E "^ *(loop|no-clear|one-chunk|forward) " $W/sw-$mode-$i.txt | cut -c1-160; grep "ran as" $W/sw-$mode-$i.txt | grep -o "SwiGLU[^;]*" | head -1
  done
done
cat $W/c2.txt
