# call 2: install; the generate breakdown of Qwen3-8B (bf16, MLX 8-bit, W8A8 loaded at once, interleaved):
# the prompt ladder and the generation phase (mlx-lm's loop's ms a token beside the GPU's busy ms) at
# 512 and 4096 tokens; then the bottom-edge epilogue's GPU tests and W8A8's plans at 2047/2048 rows
export T0=$(date +%s)
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
export COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import mlx.core as mx, mlx_lm, torch, sys; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"
  echo "commit $COMMIT; install $(( $(date +%s) - T0 )) s; cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; } > $OUT/g2.txt 2>&1
timeout ${BD_S:-370} python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms bf16,mlx-q8,w8a8 \
  --prompt-tokens 512,4096 --generation-tokens 128 --json $OUT/breakdown.json > $OUT/breakdown.txt 2> $OUT/breakdown.log
echo "breakdown rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/g2.txt
INT8NAX_REQUIRE_GPU=1 timeout -s INT -k 10 ${TESTS_S:-70} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_cuda_tma.py \
  -k "bottom_edge or rare_pairs or (tma_plan_is_exact and 200-4112)" > $OUT/tests_edge.txt 2>&1
echo "edge tests rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/g2.txt
left=$(( ${END_S:-588} - ($(date +%s) - T0) ))
timeout $(( left > 20 ? left : 20 )) python3 -m int8nax compare --mode kernel --plans --time-limit $(( left > 35 ? left - 15 : 20 )) \
  --shapes 2047x4096x4096,2048x4096x4096,2047x3584x4608,2047x4096x6144,2047x3584x3584 --json $OUT/plans.json > $OUT/plans.txt 2> $OUT/plans.log
echo "plans rc=$? $(( $(date +%s) - T0 )) s; kcache now $(ls /tmp/kcache | wc -l)" >> $OUT/g2.txt
grep -v "^\(rungs\|bf16\|w8a8\|mlx-q8\)" $OUT/breakdown.txt; tail -n 4 $OUT/tests_edge.txt; sed -n '/^Default plan against the fastest/,$p' $OUT/plans.txt
tail -n 3 $OUT/*.log; cat $OUT/g2.txt
