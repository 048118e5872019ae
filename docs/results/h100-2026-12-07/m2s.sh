# call 2, short budget (END_S seconds in all): install; the whole-MLP step's GPU bit test; mlx-lm's loop
# (Qwen3-8B, 512 tokens, batch 1, MLX 8-bit and W8A8) with the step, then without, in the time left
export T0=$(date +%s); END=${END_S:-330}
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
export COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import mlx.core as mx, mlx_lm, torch, sys; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"
  echo "commit $COMMIT; install $(( $(date +%s) - T0 )) s; cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; } > $OUT/m2s.txt 2>&1
INT8NAX_REQUIRE_GPU=1 timeout -s INT -k 10 ${TESTS_S:-75} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_swiglu.py \
  -k "whole or model_check" > $OUT/tests_mlp_step.txt 2>&1
echo "test_swiglu -k whole rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/m2s.txt; tail -n 3 $OUT/tests_mlp_step.txt
for mode in step own; do
  left=$(( END - ($(date +%s) - T0) )); [ $mode = step ] && left=$(( left / 2 ))
  INT8NAX_CUDA_MLP=$mode timeout $(( left > 20 ? left : 20 )) python3 -m int8nax compare --generate --model qwen3-8b \
    --forms mlx-q8,w8a8 --prompt-tokens 512 --batch 1 --json $OUT/generate_mlp_$mode.json > $OUT/generate_mlp_$mode.txt 2> $OUT/generate_$mode.log
  echo "generate MLP $mode rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/m2s.txt
done
tail -n 8 $OUT/generate_mlp_*.txt; cat $OUT/m2s.txt
