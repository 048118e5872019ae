# session A, call 2: install; where clear_cache's cost lands (the breakdown's parts at 2048);
# W8A8 on every plan at the seed shapes; Nsight of W8A8 (quantize + GEMM) at 512 and 64 rows;
# the fused SwiGLU quantization through the models' tests
export T0=$(date +%s)
W=/tmp/w/$(basename $0 .sh); mkdir -p $W; trap 'tar -czf $OUT/$(basename $W).tgz -C $W . ; for k in a2 clear plans profile tests; do [ -e $W/$k.txt ] && cp $W/$k.txt $OUT/; done' EXIT
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl .gpu/run/wheels/*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
export COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
el() { echo "$1 rc=$2 $(( $(date +%s) - T0 )) s" >> $W/a2.txt; }
left() { local l=$(( ${END_S:-560} - ($(date +%s) - T0) )); echo $(( l < $1 ? (l > 5 ? l : 5) : $1 )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import mlx.core as mx, mlx_lm, torch, nanobind, sys; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, 'torch', torch.__version__, 'nanobind', nanobind.__version__, 'python', sys.version.split()[0])"
  echo "commit $COMMIT; install $(( $(date +%s) - T0 )) s; cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; nproc; lscpu | grep "Model name"
  python3 -c "import time; t = time.time(); from int8nax.backends import tape; m = tape.module(); print('tape', m, 'why', tape.why(), f'{time.time() - t:.1f} s')"
} > $W/a2.txt 2>&1
cat $W/a2.txt
timeout $(left 170) python3 -m int8nax compare --generate --breakdown --model qwen3-8b --forms bf16,w8a8 \
  --prompt-tokens 2048 --generation-tokens 32 --trials ${CLEAR_TRIALS:-5} --json $W/clear.json > $W/clear.txt 2> $W/clear.log
el clear $?; grep -v "ran as\|checked before" $W/clear.txt | tail -n 40 | cut -c1-260; tail -n 3 $W/clear.log
timeout $(left 100) python3 -m int8nax compare --mode kernel --plans --shapes 512x4096x4096,512x18944x3584,64x4096x4096,128x3584x18944,1024x4096x4096 \
  > $W/plans.txt 2> $W/plans.log
el plans $?; tail -n 30 $W/plans.txt | cut -c1-260; tail -n 3 $W/plans.log
PROFILE_SETS="int8_matmul,w8a8:bfloat16,w8a8:bfloat16+bias@512x4096x4096,64x4096x4096" \
  LIMIT=$(( $(date +%s) - T0 + $(left 90) )) OUT=$W bash tools/hopper_verify.sh profile > $W/profile_part.txt 2>&1
el profile $?; tail -n 30 $W/profile.txt | cut -c1-260
[ -e $W/profile.ncu-rep ] && ncu --import $W/profile.ncu-rep --csv --page raw --print-units base > $W/profile_raw.csv 2>/dev/null
INT8NAX_CUDA_SWIGLU=fused INT8NAX_REQUIRE_GPU=1 CI=true timeout -s INT -k 10 $(left 200) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short \
  tests/test_swiglu.py tests/test_tape.py > $W/tests.txt 2>&1
el "tests fused" $?; grep -E "^(FAILED|ERROR)" $W/tests.txt | head -20; tail -n 3 $W/tests.txt
cat $W/a2.txt
