# call 4: the reduced asv record (GEMM, linear, kernel time, host work) of the commit
export T0=$(date +%s) COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
export INT8NAX_CACHE_DIR=/tmp/int8nax-cache
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
SHA=$COMMIT COMMIT_DATE=$COMMIT_DATE MACHINE=$CARD BENCH='^(?!.*(Model|FirstToken|Generate|TorchInt8|NumpySgemm))' \
  timeout ${REC_S:-500} bash tools/asv_offline_gpu.sh > $OUT/asv_record.txt 2>&1; echo "asv record rc=$?"
tar -czf $OUT/asv_results_$CARD.tgz .asv/results/$CARD; tail -n 12 $OUT/asv_record.txt
