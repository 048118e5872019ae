# The device calls of 2026-12-06, 18:06-18:24 UTC, on one H100 (scripts/: what each call ran).
# call 1: carry .gpu/part1, .gpu/kcache.tar.xz (tools/cuda_cache_offline.py --model qwen2.5-7b,qwen3-8b
#         --catalogue, built on the CPU box: 301 instances), .gpu/run
bash .gpu/run/c1.sh
# call 2: install, the carried kernel cache checked, the asv record, the kernel/TMA/pack GPU tests
COMMIT=3d3456def4c56d4c1a81c947e5e42b4395101ac7 COMMIT_DATE=1796579251 bash .gpu/run/c2.sh        # 481 s
# call 3: mlx-lm's own loop, qwen2.5-7b, bf16 / W8A8 / MLX 8-bit
COMMIT=3d3456def4c56d4c1a81c947e5e42b4395101ac7 COMMIT_DATE=1796579251 LIMIT=465 bash .gpu/run/c3.sh  # 402 s
