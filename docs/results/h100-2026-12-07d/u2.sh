# call 2: install (with nanobind), build the tape extension; GPU tests of tapes and the layers (-rA); host work;
# the generate breakdown of Qwen3-8B at 512 tokens (bf16, MLX 8-bit, W8A8; 128 new tokens, 5 trials)
export T0=$(date +%s)
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl .gpu/run/wheels/*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
export COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import mlx.core as mx, mlx_lm, torch, nanobind, sys; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, 'torch', torch.__version__, 'nanobind', nanobind.__version__, 'python', sys.version.split()[0])"
  echo "commit $COMMIT; install $(( $(date +%s) - T0 )) s; cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"
  python3 -c "import time; t = time.time(); from int8nax.backends import tape; m = tape.module(); print('tape', m, 'why', tape.why(), f'{time.time() - t:.1f} s')"
} > $OUT/u2.txt 2>&1
cat $OUT/u2.txt
INT8NAX_REQUIRE_GPU=1 CI=true timeout -s INT -k 10 ${TESTS_S:-130} python3 -m pytest -q -p no:cacheprovider -rA --tb=short \
  "tests/test_cuda_gemv.py::test_swiglu_made_inside_the_gemv_gives_the_bits_of_swiglu_then_the_gemv" tests/test_tape.py \
  tests/test_swiglu.py "tests/test_nn.py::test_siblings_at_qwen_widths_give_the_bits_of_separate_layers" \
  tests/test_cuda_gemv.py tests/test_cuda_swiglu.py > $OUT/tests.txt 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/u2.txt; grep -E "^(FAILED|ERROR)" $OUT/tests.txt | head -20; grep -E "^PASSED.*(swiglu_made_inside|h_inside|taken_over)" $OUT/tests.txt | head; tail -n 3 $OUT/tests.txt
timeout 120 python3 -m int8nax.bench.host_work > $OUT/host_work.txt 2>&1; echo "host work rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/u2.txt
cat $OUT/host_work.txt
LAYERS=8 timeout ${ANAT_S:-110} python3 .gpu/run/anat.py mlx-q8 w8a8 > $OUT/anat.txt 2>&1; echo "anat rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/u2.txt
grep -E "nodes|ms a step" $OUT/anat.txt | cut -c1-400
left=$(( ${END_S:-585} - ($(date +%s) - T0) ))
timeout $(( left > 30 ? left : 30 )) python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms bf16,mlx-q8,w8a8 \
  --prompt-tokens ${PROMPTS:-512} --generation-tokens 128 --trials ${TRIALS:-5} --json $OUT/breakdown.json > $OUT/breakdown.txt 2> $OUT/breakdown.log
echo "breakdown rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/u2.txt
grep -v "ran as\|checked before\|^rungs" $OUT/breakdown.txt | tail -n 16; tail -n 2 $OUT/breakdown.log; cat $OUT/u2.txt
