# call 3: the same breakdown without tapes (INT8NAX_TAPES=off: the compiled entry points), for the A/B
export T0=$(date +%s) COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
INT8NAX_TAPES=off timeout ${BD_S:-560} python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms bf16,mlx-q8,w8a8 \
  --prompt-tokens ${PROMPTS:-512,4096} --generation-tokens 128 --trials ${TRIALS:-5} --json $OUT/breakdown_off.json > $OUT/breakdown_off.txt 2> $OUT/breakdown_off.log
echo "breakdown (tapes off) rc=$? $(( $(date +%s) - T0 )) s"
grep -v "^\(rungs\)" $OUT/breakdown_off.txt | tail -n 40; tail -n 3 $OUT/breakdown_off.log
