export T0=$(date +%s)
source .gpu/run/common.sh
GENERATE_ARGS="${GENERATE_ARGS:---prompt-tokens 512,2048,4096 --generation-tokens 128 --batch 1,8 --forms bf16,w8a8,mlx-q8}" \
  LIMIT=${LIMIT:-575} bash tools/hopper_verify.sh generate
