export T0=$(date +%s)
source .gpu/run/common.sh
cp -rn /tmp/asvkeep/h* .asv/results/ 2>/dev/null; ls .asv/results/h1*/ | tail -3
RECORD_BENCH=Generate INT8NAX_GENERATE_CONFIGS=qwen3-8b INT8NAX_GENERATE_FORMS=bf16,w8a8,mlx-q8 \
  LIMIT=${LIMIT:-585} bash tools/hopper_verify.sh record
mkdir -p /tmp/asvkeep && cp -r .asv/results/h* /tmp/asvkeep/ 2>/dev/null
cp $OUT/steps.txt $OUT/steps_c3.txt 2>/dev/null; ls -la $OUT
