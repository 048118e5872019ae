# session 1, call 2: install, the asv record of this commit (GEMM, linear, kernel time, host work), then the
# decode breakdown of Qwen3-8B's layers (bf16, MLX 8-bit, W8A8) in the time left
export T0=$(date +%s)
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
source .gpu/run/common.sh
{ echo "cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; python3 -m int8nax info; echo "install+check $(( $(date +%s) - T0 )) s"; } > $OUT/c2.txt 2>&1
cat $OUT/c2.txt
LIMIT=${LIMIT:-490} bash tools/hopper_verify.sh record
mkdir -p /tmp/asvkeep && cp -r .asv/results/h* .asv/results/benchmarks.json /tmp/asvkeep/ 2>/dev/null
left=$(( 585 - ($(date +%s) - T0) ))
timeout $(( left > 10 ? left : 10 )) python3 -m int8nax compare --model qwen3-8b --tokens 1 --forms bf16,mlx-q8,w8a8 \
  --breakdown > $OUT/decode_breakdown.txt 2> $OUT/decode_breakdown.log
echo "decode breakdown rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/c2.txt
cat $OUT/decode_breakdown.txt | tail -60; tail -3 $OUT/c2.txt
cp $OUT/steps.txt $OUT/steps_c2.txt 2>/dev/null
