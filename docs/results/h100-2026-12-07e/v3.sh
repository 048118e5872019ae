# call 3: the breakdown at 2048 and 4096 tokens (3 trials), then batch-8 generation at 512 (3 trials)
export T0=$(date +%s) COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh; export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
timeout ${BD_S:-330} python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms bf16,mlx-q8,w8a8 --prompt-tokens ${LONG:-2048,4096} --generation-tokens 128 --trials 3 --json $OUT/breakdown_long.json > $OUT/breakdown_long.txt 2> $OUT/breakdown_long.log
echo "long rc=$? $(( $(date +%s) - T0 )) s"; grep -v "ran as\|checked before\|^rungs" $OUT/breakdown_long.txt | tail -n 30; tail -n 2 $OUT/breakdown_long.log
timeout $(( ${END_S:-570} - ($(date +%s) - T0) )) python3 -m int8nax compare --generate --model qwen3-8b --forms bf16,mlx-q8,w8a8 --prompt-tokens 512 --batch 8 --generation-tokens 128 --trials 3 --json $OUT/batch8.json > $OUT/batch8.txt 2> $OUT/batch8.log
echo "batch8 rc=$? $(( $(date +%s) - T0 )) s"; tail -n 12 $OUT/batch8.txt; tail -n 2 $OUT/batch8.log
