# session B, call 3: the reduced asv record of the tree (GEMM, linear, kernel time, host work); then
# Qwen2.5-7B's 512-token prompt in mlx-lm's loop (its down projection's 511-row chunk on one_wave_tile)
export T0=$(date +%s) COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
W=/tmp/w/$(basename $0 .sh); mkdir -p $W; trap 'tar -czf $OUT/$(basename $W).tgz -C $W . ; cp $W/b3.txt $W/gen.txt $OUT/ 2>/dev/null' EXIT
el() { echo "$1 rc=$2 $(( $(date +%s) - T0 )) s" >> $W/b3.txt; }
left() { local l=$(( ${END_S:-560} - ($(date +%s) - T0) )); echo $(( l < $1 ? (l > 5 ? l : 5) : $1 )); }
date -u > $W/b3.txt
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
SHA=$COMMIT COMMIT_DATE=$COMMIT_DATE MACHINE=$CARD BENCH='^(?!.*(Model|FirstToken|Generate|TorchInt8|NumpySgemm))' \
  timeout $(left ${REC_S:-330}) bash tools/asv_offline_gpu.sh > $W/asv_record.txt 2>&1; el record $?
tar -czf $OUT/asv_results_$CARD.tgz .asv/results/$CARD; tail -n 12 $W/asv_record.txt
timeout $(left 200) python3 -m int8nax compare --generate --breakdown --model qwen2.5-7b --forms bf16,mlx-q8,w8a8 \
  --prompt-tokens 512 --generation-tokens 32 --trials 5 --json $W/gen.json > $W/gen.txt 2> $W/gen.log
el gen $?; grep -v "ran as\|checked before" $W/gen.txt | tail -n 30 | cut -c1-250; tail -n 2 $W/gen.log
cat $W/b3.txt
