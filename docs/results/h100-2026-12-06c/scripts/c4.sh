export T0=$(date +%s)
source .gpu/run/common.sh
LIMIT=${LIMIT:-575} bash tools/hopper_verify.sh first-token
