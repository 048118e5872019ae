# call 2: install; build the tape extension; GPU tests (kernels' bits at this tree); what
# clear_cache costs a 2048-token prompt, as is and with the driver's pool keeping freed memory
export T0=$(date +%s)
W=/tmp/w/$(basename $0 .sh); mkdir -p $W; trap 'tar -czf $OUT/$(basename $W).tgz -C $W . ; for k in s2 s4 buf tests clear-asis clear-pool profile ab-all; do [ -e $W/$k.txt ] && cp $W/$k.txt $OUT/; done' EXIT
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl .gpu/run/wheels/*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
export COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
el() { echo "$1 rc=$2 $(( $(date +%s) - T0 )) s" >> $W/s2.txt; }
left() { local l=$(( ${END_S:-430} - ($(date +%s) - T0) )); echo $(( l < $1 ? (l > 5 ? l : 5) : $1 )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import mlx.core as mx, mlx_lm, torch, nanobind, sys; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, 'torch', torch.__version__, 'nanobind', nanobind.__version__, 'python', sys.version.split()[0])"
  echo "commit $COMMIT; install $(( $(date +%s) - T0 )) s; cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; nproc; lscpu | grep "Model name"; uname -r
  python3 -c "import time; t = time.time(); from int8nax.backends import tape; m = tape.module(); print('tape', m, 'why', tape.why(), f'{time.time() - t:.1f} s')"
} > $W/s2.txt 2>&1
cat $W/s2.txt
INT8NAX_REQUIRE_GPU=1 CI=true timeout -s INT -k 10 ${TESTS_S:-150} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short \
  tests/test_cuda_pack.py tests/test_cuda_kernels.py tests/test_cuda_swiglu.py tests/test_w8a8_linear.py tests/test_nn.py \
  tests/test_tape.py tests/test_cuda_gemv.py tests/test_cuda_tma.py > $W/tests.txt 2>&1
el tests $?; grep -E "^(FAILED|ERROR)" $W/tests.txt | head -20; tail -n 3 $W/tests.txt
LAYERS=8 CHUNK=2047 REPS=10 timeout $(left 120) python3 .gpu/run/buf.py bf16 mlx-q8 w8a8 > $W/buf.txt 2>&1; el buf $?
grep -v "^{" $W/buf.txt | cut -c1-400 | tail -n 20
for run in pool asis; do
  pre=""; [ $run = pool ] && pre=".gpu/run/pool.py" || pre="-m int8nax"
  timeout $(left 150) python3 $pre compare --generate --breakdown --model qwen3-8b --forms bf16,w8a8 \
    --prompt-tokens 2048 --generation-tokens 32 --trials ${CLEAR_TRIALS:-3} --json $W/clear-$run.json > $W/clear-$run.txt 2> $W/clear-$run.log
  el "clear $run" $?
  grep -v "ran as\|checked before" $W/clear-$run.txt | tail -n 22; tail -n 3 $W/clear-$run.log
done
cat $W/s2.txt
