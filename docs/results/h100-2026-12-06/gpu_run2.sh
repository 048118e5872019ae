# call B: install, the binary cache's part, the default cache warmed for the model, host work
bash gpu_install.sh
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 T0=$(date +%s)
COMMIT=$1 LIMIT=330 bash tools/hopper_verify.sh binaries
unset MLX_PTX_CACHE_DIR
timeout 150 python3 -m int8nax.bench.first_call warm --model qwen2.5-7b --max-tokens 16384 >> $OUT/warm_default.jsonl 2>&1
tail -n 2 $OUT/warm_default.jsonl
timeout 60 python3 -c "
from int8nax.bench import host_work as h
print('host', h.host_backend())
for s in h.SHAPES:
  for m in h.TOKENS:
    print(s, m, *[(k, round(h.host_us_per_call(k, *s, m), 2)) for k in ('linear', 'q8', 'w8a8')])
" 2>&1 | tee $OUT/host_us.txt
ls /tmp/mlx/*/ptx | wc -l
