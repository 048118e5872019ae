# calls 3-6 of 2026-12-07 on the H200 (the machine warm from calls 1-2: c1.sh, g2.sh); each began with
#   export T0=$(date +%s) COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
# call 3: REC_S=530 bash .gpu/run/n3.sh                       (asv_record.txt; the record is .asv/results/h200/bd17dc7f-*)
# call 4 (breakdown_step.*):
INT8NAX_CUDA_MLP=step timeout 300 python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms mlx-q8,w8a8 \
  --prompt-tokens 512 --generation-tokens 128 --trials 5 --json $OUT/breakdown_step.json
# call 5 (decode_breakdown.txt, decode.json):
timeout 190 python3 -m int8nax compare --model qwen3-8b --tokens 1 --forms bf16,mlx-q8,w8a8 --breakdown --json $OUT/decode.json
# call 6 (decode_own.txt, decode_step.txt, host_work.txt):
for m in own step; do INT8NAX_CUDA_MLP=$m python3 -m int8nax compare --model qwen3-8b --tokens 1 --forms mlx-q8,w8a8 --model-modes eager,compiled; done
python3 -m int8nax.bench.host_work
# call 7 (breakdown_own.*):
INT8NAX_CUDA_MLP=own timeout 150 python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms mlx-q8,w8a8 \
  --prompt-tokens 512 --generation-tokens 128 --trials 5 --json $OUT/breakdown_own.json
