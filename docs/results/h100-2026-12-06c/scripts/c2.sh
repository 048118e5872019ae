export T0=$(date +%s)
S=/tmp/stage
cat $S/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > $S/$(cat $S/mlx_cuda_13.name) && rm $S/mlx_cuda_13.whl.part1 \
  && cp .gpu/part2/mlx_lm-*.whl $S/ && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/*.whl \
  || { echo "install failed"; exit 3; }
source .gpu/run/common.sh
{
  echo "cache entries: $(ls /tmp/kcache | grep -c '\.ptx$')"
  python3 -m int8nax info
  python3 -c "
import mlx.core as mx, int8nax
from int8nax.backends.cuda import kernels
x = mx.random.normal((512, 4096)).astype(mx.bfloat16); w = mx.zeros((4096, 4096), mx.int8); s = mx.ones((4096,))
mx.eval(int8nax.w8a8_linear(x, w, s)); print('after one w8a8 call at 512x4096x4096:', kernels.binary_cache_status())
mx.eval(int8nax.int8_matmul(mx.zeros((512, 4096), mx.int8), w)); print('after one int8_matmul:', kernels.binary_cache_status())
"
  echo "install+check $(( $(date +%s) - T0 )) s"
} > $OUT/c2.txt 2>&1
cat $OUT/c2.txt
LIMIT=${LIMIT:-575} bash tools/hopper_verify.sh record
# with the time left: the kernel, TMA and pack tests on the carried cache
left=$(( ${TESTS_END:-570} - ($(date +%s) - T0) ))
if [ $left -gt 60 ]; then
  INT8NAX_REQUIRE_GPU=1 timeout -s INT -k 15 $(( left - 15 )) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short \
    tests/test_cuda_pack.py tests/test_cuda_kernels.py tests/test_cuda_tma.py > $OUT/tests_gpu.txt 2>&1
  echo "gpu tests rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/c2.txt
  tail -n 15 $OUT/tests_gpu.txt
fi
python3 -c "from int8nax.backends.cuda import kernels; print(kernels.binary_cache_status())" >> $OUT/c2.txt 2>&1
tail -n 3 $OUT/c2.txt
