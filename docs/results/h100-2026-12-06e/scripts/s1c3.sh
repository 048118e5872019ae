# session 1, call 3: the asv record (GEMM, linear, kernel time) of the commit whose tree is in .gpu/trees, run
# from this checkout's path (its kernel headers at the same absolute paths: the carried kernel folder serves it)
export T0=$(date +%s)
source .gpu/run/common.sh
cp -rn /tmp/asvkeep/h* .asv/results/ 2>/dev/null
T=$(ls -d .gpu/trees/*/ | head -1); name=$(basename $T); sha=${name%%-*}; cdate=${name##*-}
rm -rf src benchmarks && cp -r $T/src $T/benchmarks . && cp $T/asv*.json .
echo "tree $sha $cdate; kernels differ: $(diff -rq src/int8nax/kernels $T/src/int8nax/kernels | wc -l)" > $OUT/c3.txt
SHA=$sha COMMIT_DATE=$cdate MACHINE=h100 BENCH='^(?!.*(Model|FirstToken|Generate|TorchInt8|NumpySgemm|HostWork))' \
  timeout ${TREE_S:-560} bash tools/asv_offline_gpu.sh > $OUT/asv_record_tree.txt 2>&1
echo "asv record of $sha rc=$? $(( $(date +%s) - T0 )) s" >> $OUT/c3.txt
cp /tmp/asvkeep/benchmarks.json .asv/results/benchmarks.json 2>/dev/null
tar -czf $OUT/asv_results_h100.tgz .asv/results/h100 .asv/results/benchmarks.json
mkdir -p /tmp/asvkeep && cp -r .asv/results/h* /tmp/asvkeep/
python3 -c "from int8nax.backends.cuda import kernels; print(kernels.binary_cache_status())" >> $OUT/c3.txt 2>&1
tail -n 25 $OUT/asv_record_tree.txt; cat $OUT/c3.txt; ls .asv/results/h100
