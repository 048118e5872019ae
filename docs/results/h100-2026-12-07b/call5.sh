# call 5 (as run, one command line): the breakdown at 4096 tokens, then batch-8 generation at 512
export T0=$(date +%s) COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh; export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
timeout 270 python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms bf16,mlx-q8,w8a8 --prompt-tokens 4096 --generation-tokens 128 --trials 3 --json $OUT/breakdown4096.json > $OUT/breakdown4096.txt 2> $OUT/breakdown4096.log
timeout $(( 430 - ($(date +%s) - T0) )) python3 -m int8nax compare --generate --model qwen3-8b --forms bf16,mlx-q8,w8a8 --prompt-tokens 512 --batch 8 --generation-tokens 128 --trials 3 --json $OUT/batch8.json > $OUT/batch8.txt 2> $OUT/batch8.log
