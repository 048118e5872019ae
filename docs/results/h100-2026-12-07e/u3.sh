# call 2: install; build the tape extension; GPU tests; per-op launch cost; a layer's parts; the
# generate breakdown of Qwen3-8B at PROMPTS tokens; MLX_MAX_OPS_PER_BUFFER 20/60; py-spy of the decode loop; host work
export T0=$(date +%s)
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl .gpu/run/wheels/*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
export COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
el() { echo "$1 rc=$2 $(( $(date +%s) - T0 )) s" >> $OUT/u3.txt; }
left() { local l=$(( ${END_S:-580} - ($(date +%s) - T0) )); echo $(( l < $1 ? (l > 5 ? l : 5) : $1 )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import mlx.core as mx, mlx_lm, torch, nanobind, sys; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, 'torch', torch.__version__, 'nanobind', nanobind.__version__, 'python', sys.version.split()[0])"
  echo "commit $COMMIT; install $(( $(date +%s) - T0 )) s; cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; nproc; lscpu | grep "Model name"
  python3 -c "import time; t = time.time(); from int8nax.backends import tape; m = tape.module(); print('tape', m, 'why', tape.why(), f'{time.time() - t:.1f} s')"
} > $OUT/u3.txt 2>&1
cat $OUT/u3.txt
INT8NAX_REQUIRE_GPU=1 CI=true timeout -s INT -k 10 ${TESTS_S:-75} python3 -m pytest -q -p no:cacheprovider -rA --tb=short \
  tests/test_tape.py "tests/test_nn.py::test_siblings_at_qwen_widths_give_the_bits_of_separate_layers" tests/test_swiglu.py \
  tests/test_cuda_gemv.py tests/test_layer_host_path.py > $OUT/tests.txt 2>&1
el tests $?; grep -E "^(FAILED|ERROR)" $OUT/tests.txt | head -20; tail -n 3 $OUT/tests.txt
timeout 45 python3 .gpu/run/launch.py > $OUT/launch.txt 2>&1; el launch $?; cat $OUT/launch.txt
CALLS=100 timeout 80 python3 .gpu/run/parts.py bf16 q8 w8a8 > $OUT/parts.txt 2>&1; el parts $?; cut -c1-300 $OUT/parts.txt
timeout $(left 200) python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms bf16,mlx-q8,w8a8 \
  --prompt-tokens ${PROMPTS:-512} --generation-tokens 128 --trials ${TRIALS:-5} --json $OUT/breakdown.json > $OUT/breakdown.txt 2> $OUT/breakdown.log
el breakdown $?
grep -v "ran as\|checked before\|^rungs" $OUT/breakdown.txt | tail -n 16; tail -n 2 $OUT/breakdown.log
for ops in 20 60; do for f in mlx-q8 w8a8; do
  MLX_MAX_OPS_PER_BUFFER=$ops STEPS=300 timeout $(left 25) python3 .gpu/run/spy.py $f 2>&1 | tail -n 1 | sed "s/^/ops $ops: /" >> $OUT/ops.txt
done; done; el ops $?; cat $OUT/ops.txt
for f in mlx-q8 w8a8; do
  timeout $(left 40) /tmp/site/bin/py-spy record --native --rate 500 --format raw -o $OUT/spy-$f.txt -- python3 .gpu/run/spy.py $f > $OUT/spy-$f.log 2>&1; el "spy $f" $?; tail -n 2 $OUT/spy-$f.log
done
timeout $(left 120) python3 -m int8nax.bench.host_work > $OUT/host_work.txt 2>&1; el host_work $?; cat $OUT/host_work.txt
cat $OUT/u3.txt
