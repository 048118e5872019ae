# next session, call 3: the reduced asv record of edge-rows (GEMM, linear, kernel time, host work)
export T0=$(date +%s) COMMIT=$(cat .gpu/run/commit) COMMIT_DATE=$(cat .gpu/run/commit_date); source .gpu/run/common.sh
CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
SHA=$COMMIT COMMIT_DATE=$COMMIT_DATE MACHINE=$CARD BENCH='^(?!.*(Model|FirstToken|Generate|TorchInt8|NumpySgemm))' \
  timeout 560 bash tools/asv_offline_gpu.sh > $OUT/asv_record.txt 2>&1; echo "asv record rc=$?"
tar -czf $OUT/asv_results_$CARD.tgz .asv/results/$CARD; tail -n 12 $OUT/asv_record.txt
