# 2026-12-06 22:03-22:24 UTC, one H100 80GB HBM3 (driver 580.159.04), kernels from the carried folder
# (tools/cuda_cache_offline.py --model qwen2.5-7b,qwen3-8b --catalogue, built on the CPU box)
bash scripts/c1.sh                                                    # stage the wheels and kernels
COMMIT=4019fab... COMMIT_DATE=... bash scripts/s1c2.sh                # install; asv record of 4019fab (395 s);
                                                                     # compare --model qwen3-8b --tokens 1 --forms bf16,mlx-q8,w8a8 --breakdown (115 s)
COMMIT=... TREE_S=480 bash scripts/s1c3.sh                            # asv record of 0fc803a from its git archive at this path (105 s)
python3 -m int8nax compare --mode kernel --plans --time-limit 370 \
  --shapes 2048x4096x4096,<model_shapes(tokens=(2048, 2047))> --json plans.json   # 100 s
