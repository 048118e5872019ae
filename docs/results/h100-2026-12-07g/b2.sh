# session B, call 2: install; W8A8 and the raw GEMM on every plan where one_wave_tile now runs
# (Qwen2.5-7B's down projection at 511 and 512 rows); what mx.clear_cache() itself costs and where
# (py-spy --native); the GPU-only SwiGLU tests the tapes changed, split and fused
export T0=$(date +%s)
W=/tmp/w/$(basename $0 .sh); mkdir -p $W; trap 'tar -czf $OUT/$(basename $W).tgz -C $W . ; for k in b2 plans rawplans clr tests; do [ -e $W/$k.txt ] && cp $W/$k.txt $OUT/; done' EXIT
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl .gpu/run/wheels/*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
export COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
el() { echo "$1 rc=$2 $(( $(date +%s) - T0 )) s" >> $W/b2.txt; }
left() { local l=$(( ${END_S:-300} - ($(date +%s) - T0) )); echo $(( l < $1 ? (l > 5 ? l : 5) : $1 )); }
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import mlx.core as mx, mlx_lm, torch, nanobind, sys; print('mlx', mx.__version__, 'mlx-lm', mlx_lm.__version__, 'torch', torch.__version__, 'nanobind', nanobind.__version__, 'python', sys.version.split()[0])"
  echo "commit $COMMIT (+ working tree); install $(( $(date +%s) - T0 )) s; cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"; lscpu | grep "Model name"
  python3 -c "import time; t = time.time(); from int8nax.backends import tape; m = tape.module(); print('tape', m, 'why', tape.why(), f'{time.time() - t:.1f} s')"
} > $W/b2.txt 2>&1
cat $W/b2.txt
timeout $(left 60) python3 -m int8nax compare --mode kernel --plans --shapes 512x18944x3584,511x18944x3584 > $W/plans.txt 2> $W/plans.log
el plans $?; grep -v "^\[" $W/plans.txt | tail -n 32 | cut -c1-200
timeout $(left 60) python3 -m int8nax compare --mode kernel --raw-plans --shapes 512x18944x3584,511x18944x3584 > $W/rawplans.txt 2> $W/rawplans.log
el rawplans $?; grep -v "^\[" $W/rawplans.txt | tail -n 32 | cut -c1-200; tail -n 2 $W/rawplans.log
timeout $(left 150) /tmp/site/bin/py-spy record --native --rate 400 --format raw -o $W/clr.raw -- python3 .gpu/run/clr.py bf16 w8a8 > $W/clr.txt 2> $W/clr.log
el clr $?; cat $W/clr.txt | cut -c1-300; tail -n 3 $W/clr.log
python3 - $W/clr.raw > $W/clr_leaves.txt <<'PY'
import collections, sys
leaf, mid, total = collections.Counter(), collections.Counter(), 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    if "clear_cache" not in stack:
        continue
    frames = stack.split(";"); n = int(n); total += n
    leaf[frames[-1][:110]] += n
    i = max(j for j, f in enumerate(frames) if "clear_cache" in f)
    for f in frames[i + 1:]:
        mid[f[:110]] += n
print("samples under clear_cache:", total)
for k, v in leaf.most_common(25): print(f"leaf {v:6d} {k}")
for k, v in mid.most_common(40): print(f"under {v:6d} {k}")
PY
head -n 50 $W/clr_leaves.txt
INT8NAX_REQUIRE_GPU=1 CI=true timeout -s INT -k 10 $(left 100) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short \
  tests/test_swiglu.py -k "whole_step or model_check_compares or says_which" > $W/tests.txt 2>&1
el "tests split" $?; tail -n 3 $W/tests.txt
INT8NAX_CUDA_SWIGLU=fused INT8NAX_REQUIRE_GPU=1 CI=true timeout -s INT -k 10 $(left 120) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short \
  tests/test_swiglu.py >> $W/tests.txt 2>&1
el "tests fused" $?; grep -E "^(FAILED|ERROR)" $W/tests.txt | head -20; tail -n 3 $W/tests.txt
cat $W/b2.txt
