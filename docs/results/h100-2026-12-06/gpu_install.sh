cat /tmp/stage/mlx_cuda_13.whl.part1 .gpu/part2/mlx_cuda_13.whl.part2 > /tmp/stage/$(cat /tmp/stage/mlx_cuda_13.name)
rm /tmp/stage/mlx_cuda_13.whl.part1; cp .gpu/part2/mlx_lm-*.whl /tmp/stage/
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/stage/*.whl > $OUT/pip.log 2>&1
echo installed
