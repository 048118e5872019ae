# The device calls of 2026-12-06 19:41-20:03 UTC, one H100, at 0fc803a (COMMIT/COMMIT_DATE from .gpu/run/commit*)
bash .gpu/run/c1.sh                      # stage part1 and the carried kernel cache (/tmp/kcache)
bash .gpu/run/c2.sh                      # install: stopped at common.sh (COMMIT unset); c2b.sh is its rest
bash .gpu/run/c2b.sh                     # int8nax info; RECORD_BENCH=FirstToken record (299 s); first_call stalls (2 s)
bash .gpu/run/c3.sh                      # RECORD_BENCH=Generate INT8NAX_GENERATE_CONFIGS=qwen3-8b FORMS=bf16,w8a8,mlx-q8 (339 s)
GENERATE_ARGS="--breakdown --prompt-tokens 2048,4096" LIMIT=420 bash tools/hopper_verify.sh generate   # 47 s
RECORD_BENCH=HostWork LIMIT=400 bash tools/hopper_verify.sh record     # 11 s
RECORD_BENCH=Generate INT8NAX_GENERATE_CONFIGS=qwen2.5-7b INT8NAX_GENERATE_FORMS=bf16,w8a8 LIMIT=420 bash tools/hopper_verify.sh record  # 131 s
LIMIT=370 bash tools/hopper_verify.sh profile    # 322 s; profile.ncu-rep (10.7 MB) not committed
