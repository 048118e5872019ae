export T0=$(date +%s)
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
source .gpu/run/common.sh
{ echo "cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; python3 -m int8nax info; echo "install+check $(( $(date +%s) - T0 )) s"; } > $OUT/c2.txt 2>&1
cat $OUT/c2.txt
RECORD_BENCH=FirstToken LIMIT=${LIMIT:-555} bash tools/hopper_verify.sh record
mkdir -p /tmp/asvkeep && cp -r .asv/results/h* /tmp/asvkeep/ 2>/dev/null
left=$(( 588 - ($(date +%s) - T0) ))
timeout $(( left > 10 ? left : 10 )) python3 -m int8nax.bench.first_call stalls --model qwen2.5-7b > $OUT/stalls.json 2> $OUT/stalls.log
echo "first_call stalls rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/c2.txt; tail -c 1500 $OUT/stalls.json; tail -3 $OUT/stalls.log
cp $OUT/steps.txt $OUT/steps_c2.txt 2>/dev/null; ls -la $OUT /tmp/models
