# Device call 2 of the session (call 1 staged the wheels), at ae47928 (600 s limit):
export T0=$(date +%s) S=/tmp/stage; cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 && cp .gpu/part2/mlx_lm-*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 COMMIT=ae47928 INT8NAX_MODEL_CACHE=/tmp/models
L() { echo $(( T0 + $1 - $(date +%s) )); }
LIMIT=190 bash tools/hopper_verify.sh prebuild > /dev/null 2>&1
INT8NAX_REQUIRE_GPU=1 timeout -s INT -k 15 $(L 330) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -k "w8a8 or quantize" tests/test_cuda_kernels.py tests/test_cuda_tma.py tests/test_cuda_gemv.py > $OUT/tests_pack.txt 2>&1
timeout $(L 590) python3 -m int8nax compare --generate --model qwen2.5-7b --prompt-tokens 4096,512 --generation-tokens 128 --batch 1,8 --forms bf16,mlx-q8,w8a8 --markdown --json $OUT/generate.json > $OUT/generate.txt 2> $OUT/generate.log
# Device call 3, the same warm machine (440 s limit):
timeout $(L 300) python3 -m int8nax compare --generate --model qwen2.5-7b --prompt-tokens 4096,512 --generation-tokens 128 --batch 1,8 --forms bf16,w8a8 --markdown --json $OUT/generate2.json > $OUT/generate2.txt 2> $OUT/generate2.log
INT8NAX_REQUIRE_GPU=1 timeout -s INT -k 10 $(L 425) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -k "w8a8 or quantize" tests/test_cuda_tma.py tests/test_cuda_gemv.py > $OUT/tests_pack2.txt 2>&1
