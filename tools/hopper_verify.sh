#!/bin/bash
# The verification runs on a lent Hopper GPU (H100 or H200), one part per device call (each under
# the 600 s limit), logs under $OUT. Run from the repository root after the mlx-cuda wheel is
# installed into /tmp/site (docs/cuda.md, "Checking it on a GPU"). Figures and asv results are per
# card: CARD (h100 or h200, read from nvidia-smi where not given) names the asv machine.
#
#   bash tools/hopper_verify.sh record # ~430 s: the asv record of this commit (COMMIT, COMMIT_DATE) on the card's
#                                      #   machine: GEMM, linear, kernel-time and host-work benchmarks (RECORD_BENCH:
#                                      #   others. H100, 2026-12-06: FirstToken, the fresh-process first token, 299 s;
#                                      #   Generate with INT8NAX_GENERATE_CONFIGS=qwen3-8b INT8NAX_GENERATE_FORMS=
#                                      #   bf16,w8a8,mlx-q8, mlx-lm's loop, 339 s, qwen2.5-7b with bf16,w8a8 131 s;
#                                      #   HostWork 11 s), as $OUT/asv_results_$CARD.tgz to unpack into the tree and
#                                      #   commit, with the generate and first-token results saved whole beside it
#                                      #   ($OUT/generate-<model>.json, first-token-<model>.json: compare --render)
#   bash tools/hopper_verify.sh binaries  # ~200 s: the CUDA binary cache (test_cuda_binary_cache), then a
#                                      #   model's layers' first calls in fresh processes: cold, after
#                                      #   `first_call warm` (every instance to 8192 tokens), and with the cache off
#   bash tools/hopper_verify.sh generate  # mlx-lm's own loop (int8nax compare --generate) for GENERATE_MODEL,
#                                      #   GENERATE_ARGS as given (forms, prompt tokens, batch), JSON and table;
#                                      #   GENERATE_ARGS="--breakdown --prompt-tokens 2048,4096": 47 s on the H100
#   bash tools/hopper_verify.sh first-token  # ~300 s (the record's FirstToken took 299 s): W8A8's stall beyond bf16's at 50 new
#                                      #   prompt lengths in one process on this machine's cache (first_call stalls),
#                                      #   then the time to the first token of a
#                                      #   fresh process, bf16 and W8A8 (compare --generate --first-token) for
#                                      #   FIRST_TOKEN_MODEL (qwen2.5-7b) at FIRST_TOKENS (300,777,1500,4096), after
#                                      #   `int8nax warm` into a new kernel cache (the first run on a new machine);
#                                      #   FIRST_TOKEN_ARGS: more options (--forms bf16,mlx-q8,w8a8); JSON and table
#
#   bash tools/hopper_verify.sh kernel   # ~360 s: kernel time (int8nax compare --mode kernel): int8_matmul
#                                      #   against cuBLASLt, W8A8 (float16/bfloat16, +-bias) against it
#   bash tools/hopper_verify.sh plans    # ~300 s: W8A8 (bfloat16) on every plan the dispatch could give each
#                                      #   shape, against the raw GEMM (compare --mode kernel --plans):
#                                      #   the dispatch evidence, at the seed shapes and the models' layers
#                                      #   (PLANS_TOKENS=128: the models' layers at those token counts only)
#   bash tools/hopper_verify.sh models   # the model suite into .asv/results/h200 (COMMIT: the full hash here, and
#                                      #   COMMIT_DATE=<ct>), as $OUT/asv_results_h200.tgz: one asv run per group
#                                      #   (MODEL_GROUPS, default 'Bf16|Fp16 W8A8 W8A8Figures MlxQ8': W8A8 is its
#                                      #   times and ModelRatio, W8A8Figures its tracks), each saved when it ends (asv
#                                      #   writes a run's results only then: a killed run loses all of them), a group
#                                      #   started only with its time left (2026-12-05: 190, 223, 340, 146 s; 200 s
#                                      #   for another). steps.txt names the groups not
#                                      #   run: pass them as MODEL_GROUPS to the next call, with the first tarball
#                                      #   unpacked into the tree (asv adds to a commit's results file)
#   bash tools/hopper_verify.sh decode   # ~170 s (2026-12-05: 80-87 s a variant): compare --model --breakdown at
#                                      #   decode and 16 tokens, eager and compiled, W8A8 on the GEMV (the default)
#                                      #   and on the tiled kernels (INT8NAX_CUDA_KERNEL=cpasync; DECODE_VARIANTS);
#                                      #   then, to ~570 s, the decode layers' plans in kernel time (GEMV widths, forms)
#                                      #   (DECODE_PLANS=0 leaves them out)
#   bash tools/hopper_verify.sh swiglu   # ~300 s (estimated: ~20 NVRTC builds): the SwiGLU quantization kernel
#                                      #   against swiglu + the quantization kernel, bit for bit (test_cuda_swiglu),
#                                      #   and test_swiglu with INT8NAX_CUDA_SWIGLU=fused (Qwen-sized MLPs)
#   bash tools/hopper_verify.sh mlp-step # ~450 s (test 66 s; each loop >150 s): INT8NAX_CUDA_MLP=step's bit test, host work with the
#                                      #   whole-MLP step and without, mlx-lm's loop (Qwen3-8B, 512 tokens, batch 1,
#                                      #   MLX 8-bit and W8A8) with each: what the step's default waits for
#   bash tools/hopper_verify.sh swiglu-model  # ~250 s: compare --model --breakdown at 16, 512 and 4096 tokens,
#                                      #   SwiGLU split, fused and staged (what cuda.SWIGLU_DEFAULT waits for);
#                                      #   SWIGLU_TOKENS=512,4096 / SWIGLU_MODES="fused staged": fewer
#   bash tools/hopper_verify.sh bias     # ~250 s (estimated): a 16-bit bias read in its own type (INT8NAX_CUDA_BIAS=own)
#                                      #   against the cast bias, bit for bit (test_cuda_bias), then W8A8 bfloat16+bias
#                                      #   in kernel time, cast against own, at six seed shapes (the evidence for BIAS_DEFAULT, own)
#   bash tools/hopper_verify.sh profile  # >370 s (H100: 370 s reached the seed shapes only): Nsight Compute on W8A8 against the raw GEMM
#                                      #   (+-bias) where W8A8 costs > 1.15x it, the Qwen2.5-7B layers at 128 tokens and
#                                      #   at decode against bfloat16, the 4096-token gate/up GEMM and the SwiGLU
#                                      #   quantization, fused against staged (int8nax.bench.kernel.ncu:
#                                      #   profile.txt is the summary, profile.ncu-rep the report; PROFILE_SETS: others)
#   bash tools/hopper_verify.sh next     # ~560 s: the H100 page's next pending runs in one call: mlx-lm's loop under
#                                      #   both decode-GEMV rules beside the peers (tools/gemv_rule_ab.py, AB_TRIALS=5,
#                                      #   ~250 s with the model folder built), the record's kernel-time part
#                                      #   (bench_kernel; the rest: `record` with RECORD_BENCH), the plans sweep at
#                                      #   NEXT_SHAPES (the trials' shapes), the atomic split-K plans' GPU tests
#   bash tools/hopper_verify.sh prebuild # ~60-120 s: every kernel instance built into this machine's kernel
#                                      #   cache on all its CPUs (cuda_compile_check --prebuild), so the parts
#                                      #   after it in the same call compile nothing in their processes
#   bash tools/hopper_verify.sh kernels  # ~300 s: every kernel variant (test_cuda_kernels), the
#                                      #   narrow epilogue on every TMA plan
#   bash tools/hopper_verify.sh tma      # ~300 s: tests/test_cuda_tma.py whole
#   bash tools/hopper_verify.sh suite    # ~450 s: the rest of the suite, the API's cuda tests included
#
# A pytest part stopped by its limit gets SIGINT: pytest then prints the summary of what ran.
#
# Each part writes env.txt (date, GPU, driver, versions, commit), steps.txt (each step's exit
# status and seconds) and its logs; at most 8 files come back. Pass COMMIT=<hash> from this
# machine's git: the device's copy may carry a .git of the session's starting commit, not of the
# tree that runs (git rev-parse there named the wrong commit once).
# NVRTC builds are the slow part of a cold machine (prebuild: ~100 instances in 190 s on 16 CPUs).
# The device runs this checkout at this one's path, so kernels built on the CPU box by
# tools/cuda_cache_offline.py load there: carry them as a tar.xz of the folder (~5 MB for 301
# instances) and name it KERNELS_TARBALL: it is unpacked once into KERNELS_DIR (/tmp/kcache) and
# MLX_PTX_CACHE_DIR set to that, so no part compiles anything.
set -u
part=${1:?usage: hopper_verify.sh next|record|binaries|generate|first-token|kernel|plans|models|decode|swiglu|mlp-step|swiglu-model|bias|profile|prebuild|kernels|tma|suite}
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
OUT=${OUT:?set OUT to the folder for the logs}
T0=${T0:-$(date +%s)}   # export T0=$(date +%s) first where the call spent time before this script (the wheel install)
END=${LIMIT:-580}       # seconds after T0 by which a part ends; LIMIT: less, where less device time is left, or
                        # where two parts share one call (the same T0, the second with the larger LIMIT)
el() { echo $(( $(date +%s) - T0 )); }
left() { local l=$(( $1 - $(el) )); echo $(( l > 10 ? l : 10 )); }
upto() { local d=$(( $(el) + $1 )); left $(( d < END ? d : END )); }   # a step's seconds: at most $1, within END
S=$OUT/steps.txt
CARD=${CARD:-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 | grep -o 'H[0-9][0-9]0' | tr H h)}
case "$CARD" in h100|h200) ;; *) echo "hopper_verify: CARD must be h100 or h200 (nvidia-smi names neither; set CARD)" >&2; exit 2 ;; esac
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python3 -c "import mlx.core as mx, torch, sys; print('mlx', mx.__version__, 'torch', torch.__version__, 'python', sys.version.split()[0])"
  echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown: set COMMIT)}"
} > "$OUT/env.txt" 2>&1
PYTEST="python3 -m pytest -q -p no:cacheprovider -rfE --tb=short"
if [ -n "${KERNELS_TARBALL:-}" ]; then
  KERNELS_DIR=${KERNELS_DIR:-/tmp/kcache}
  if [ ! -d "$KERNELS_DIR" ]; then
    mkdir -p "$KERNELS_DIR" && tar -xJf "$KERNELS_TARBALL" -C "$KERNELS_DIR" --strip-components=1 \
      || { rm -rf "$KERNELS_DIR"; echo "hopper_verify: cannot unpack KERNELS_TARBALL=$KERNELS_TARBALL (a tar.xz of one folder)" >&2; exit 2; }
  fi
  export MLX_PTX_CACHE_DIR=$KERNELS_DIR
  echo "kernels: $(ls "$KERNELS_DIR" | grep -c '\.ptx$') carried in $KERNELS_DIR" >> "$OUT/env.txt"
fi

case "$part" in
  next)
    # One call for what the pending table asks first, each step cut to its share so that the later
    # ones run: the loop A/B decides the decode rule where users measure, the record's kernel part
    # gives DecodeTime its first figures, the sweep and the tests judge the trial plans.
    timeout $(upto 250) python3 tools/gemv_rule_ab.py --model qwen3-8b --peers mlx-q8,bf16 --trials ${AB_TRIALS:-5} \
      > "$OUT/ab.txt" 2>&1   # its progress lines hold every trial's figures
    echo "gemv_rule_ab rc=$? $(el) s" >> "$S"
    cat "$OUT/ab.txt"
    SHA=${COMMIT:?set COMMIT} MACHINE=$CARD BENCH='bench_kernel\.' timeout $(upto 200) bash tools/asv_offline_gpu.sh \
      > "$OUT/asv_record.txt" 2>&1
    echo "asv record, bench_kernel rc=$? $(el) s" >> "$S"
    tar -czf "$OUT/asv_results_$CARD.tgz" .asv/results/$CARD .asv/results/benchmarks.json 2>/dev/null
    budget=$(upto 120)
    timeout $budget python3 -m int8nax compare --mode kernel --plans --raw-plans --time-limit $(( budget - 8 )) \
      --shapes ${NEXT_SHAPES:-128x18944x3584,128x4096x4096,1x18944x3584,1x4096x24576,1x3584x4608,16x4096x4096} \
      --json "$OUT/plans.json" > "$OUT/plans.txt" 2>&1   # eight files come back: logs beside their output
    echo "compare --mode kernel --plans --raw-plans rc=$? $(el) s" >> "$S"
    sed -n '/^Default plan against the fastest/,$p' "$OUT/plans.txt"
    INT8NAX_REQUIRE_GPU=1 timeout -s INT -k 5 $(left $END) $PYTEST tests/test_cuda_atomic.py > "$OUT/tests_atomic.txt" 2>&1
    echo "test_cuda_atomic rc=$? $(el) s" >> "$S"
    ;;
  record)
    # INT8NAX_BENCH_SAVE: the generate and first-token measurements also leave their whole results
    # in $OUT (generate-<model>.json, first-token-<model>.json; bench.saved), kept if asv is cut short
    SHA=${COMMIT:?set COMMIT} MACHINE=$CARD BENCH="${RECORD_BENCH:-^(?!.*(Model|FirstToken|Generate))}" \
      INT8NAX_BENCH_SAVE=$OUT timeout $(left $(( END - 10 ))) bash tools/asv_offline_gpu.sh > "$OUT/asv_record.txt" 2>&1
    echo "asv record rc=$? $(el) s" >> "$S"
    tar -czf "$OUT/asv_results_$CARD.tgz" .asv/results/$CARD .asv/results/benchmarks.json 2>/dev/null
    tail -n 30 "$OUT/asv_record.txt"
    ;;
  binaries)
    INT8NAX_REQUIRE_GPU=1 timeout -s INT -k 30 $(left $(( END - 200 ))) $PYTEST tests/test_cuda_binary_cache.py \
      > "$OUT/tests_binaries.txt" 2>&1
    echo "test_cuda_binary_cache rc=$? $(el) s" >> "$S"
    export MLX_PTX_CACHE_DIR=$(mktemp -d)   # an empty cache: the first process builds
    for step in "first --tokens 300" "warm --max-tokens 8192" "first --tokens 300,777,1500,4096,2047,511,1" \
                "off first --tokens 300"; do
      case "$step" in off*) env=INT8NAX_CUDA_BINARY_CACHE=off; step=${step#off } ;; *) env= ;; esac
      env $env timeout $(left $END) python3 -m int8nax.bench.first_call $step --model ${FIRST_MODEL:-qwen2.5-7b} \
        >> "$OUT/first_call.jsonl" 2>> "$OUT/first_call.log"
      echo "first_call $env $step rc=$? $(el) s" >> "$S"
    done
    cat "$OUT/first_call.jsonl"
    ;;
  generate)
    timeout $(left $END) python3 -m int8nax compare --generate --model ${GENERATE_MODEL:-qwen2.5-7b} \
      ${GENERATE_ARGS:-} --json "$OUT/generate.json" > "$OUT/generate.txt" 2> "$OUT/generate.log"
    echo "compare --generate ${GENERATE_MODEL:-qwen2.5-7b} rc=$? $(el) s" >> "$S"
    cat "$OUT/generate.txt"
    ;;
  first-token)
    # First, in one process on this machine's kernel cache: 50 new prompt lengths in 1..8192, W8A8's stall
    # at each beyond bf16's (first_call stalls); then the fresh processes.
    timeout $(left $(( END - 400 ))) python3 -m int8nax.bench.first_call stalls --model ${FIRST_TOKEN_MODEL:-qwen2.5-7b} \
      > "$OUT/stalls.json" 2> "$OUT/stalls.log"
    echo "first_call stalls rc=$? $(el) s" >> "$S"
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('worst stall', d['worst_stall_s'], 's at', d['worst_tokens'], 'tokens;', d['kernels'])" "$OUT/stalls.json"
    # SIGINT at the limit: the command stops its current process, and the JSON holds every process before it
    timeout -s INT -k 30 $(left $END) python3 -m int8nax compare --generate --first-token \
      --model ${FIRST_TOKEN_MODEL:-qwen2.5-7b} --prompt-tokens ${FIRST_TOKENS:-300,777,1500,4096} ${FIRST_TOKEN_ARGS:-} \
      --markdown --json "$OUT/first_token.json" > "$OUT/first_token.txt" 2> "$OUT/first_token.log"
    echo "compare --generate --first-token ${FIRST_TOKEN_MODEL:-qwen2.5-7b} ${FIRST_TOKENS:-300,777,1500,4096} rc=$? $(el) s" >> "$S"
    cat "$OUT/first_token.txt"
    ;;
  kernel)
    timeout 560 python3 -m int8nax compare --mode kernel --json "$OUT/kernel.json" \
      > "$OUT/kernel.txt" 2> "$OUT/kernel.log"
    echo "compare --mode kernel rc=$? $(el) s" >> "$S"
    cat "$OUT/kernel.txt"
    ;;
  plans)
    # PLANS_TOKENS=128: the models' layers at those token counts only (W8A8's GPU time at 128
    # tokens equals bfloat16's at half the weight bytes: which plans do better there)
    shapes=()
    if [ -n "${PLANS_TOKENS:-}" ]; then
      shapes=(--shapes "$(python3 -c "from int8nax.bench.kernel.plans import model_shapes, shape_text; print(','.join(map(shape_text, model_shapes(tokens=tuple(map(int, '$PLANS_TOKENS'.split(',')))))))")")
    fi
    timeout $(left $END) python3 -m int8nax compare --mode kernel --plans --time-limit $(( $(left $END) - 40 )) \
      "${shapes[@]}" --json "$OUT/plans.json" > "$OUT/plans.txt" 2> "$OUT/plans.log"
    echo "compare --mode kernel --plans rc=$? $(el) s" >> "$S"
    sed -n '/^Default plan against the fastest/,$p' "$OUT/plans.txt"
    ;;
  models)
    for group in ${MODEL_GROUPS:-'Bf16|Fp16' W8A8 W8A8Figures MlxQ8}; do
      case "$group" in   # W8A8 in two runs: its kernel builds at each new token count made one run
                         # outlast 390 s on the H200 (2026-12-05), and a killed asv run saves nothing
        W8A8) bench="^W8A8Model(Compiled)?\$|^ModelRatio\$" ;;
        *Figures) bench="^(${group%Figures})Model(Compiled)?Figures\$" ;;
        *) bench="^(${group})Model(Compiled)?(Figures)?\$" ;;
      esac
      case "$group" in   # seconds a group took on the H200 (2026-12-05), with some to spare
        'Bf16|Fp16') need=210 ;; W8A8) need=250 ;; W8A8Figures) need=370 ;; MlxQ8) need=170 ;; *) need=200 ;;
      esac
      budget=$(left $(( END - 10 )))
      if [ "$budget" -lt "$need" ]; then
        echo "asv model suite $group: not run ($budget s left), pass MODEL_GROUPS=$group next" >> "$S"
        continue
      fi
      SHA=${COMMIT:?set COMMIT} MACHINE=$CARD BENCH="$bench" timeout "$budget" bash tools/asv_offline_gpu.sh \
        >> "$OUT/asv_models.txt" 2>&1
      echo "asv model suite $group rc=$? $(el) s" >> "$S"
    done
    tar -czf "$OUT/asv_results_$CARD.tgz" .asv/results/$CARD .asv/results/benchmarks.json 2>/dev/null
    tail -n 30 "$OUT/asv_models.txt"
    ;;
  decode)
    # the GEMV (the default since 2026-12-05) against the tiled kernels. (INT8NAX_CUDA_BIAS has
    # nothing to change here: int8nax.nn's biases are float32; the bias part times it.)
    for kernel in ${DECODE_VARIANTS:-gemv cpasync}; do
      INT8NAX_CUDA_KERNEL=$kernel timeout $(left $(( END - 20 ))) python3 -m int8nax compare \
        --model qwen2.5-7b,qwen3-8b --tokens 1,16 --forms bf16,w8a8 --model-modes eager,compiled --breakdown \
        > "$OUT/decode_$kernel.txt" 2>> "$OUT/models.log"
      echo "compare --model decode, kernel $kernel rc=$? $(el) s" >> "$S"
    done
    grep -h -A6 "ms/layer" "$OUT"/decode_*.txt
    # With the time left: the models' decode layers (M = 1 and 16) in kernel time on every plan,
    # each GEMV width and form among them (the kernel-level evidence next to the model's).
    shapes=$(python3 -c "from int8nax.bench.kernel.plans import model_shapes, shape_text; print(','.join(map(shape_text, model_shapes(tokens=(1, 16)))))")
    budget=$(left $(( END - 10 )))
    if [ "${DECODE_PLANS:-1}" = 1 ] && [ "$budget" -gt 90 ]; then
      timeout "$budget" python3 -m int8nax compare --mode kernel --plans --shapes "$shapes" \
        --time-limit $(( budget - 30 )) --json "$OUT/plans_decode.json" > "$OUT/plans_decode.txt" 2>> "$OUT/models.log"
      echo "compare --mode kernel --plans at the decode layers rc=$? $(el) s" >> "$S"
      sed -n '/^Default plan against the fastest/,$p' "$OUT/plans_decode.txt"
    fi
    ;;
  swiglu)
    INT8NAX_CUDA_SWIGLU=fused timeout -s INT -k 30 $(left $END) $PYTEST tests/test_cuda_swiglu.py tests/test_swiglu.py \
      > "$OUT/tests_swiglu.txt" 2>&1
    echo "test_cuda_swiglu + test_swiglu (fused) rc=$? $(el) s" >> "$S"
    ;;
  mlp-step)
    # INT8NAX_CUDA_MLP=step, the SwiGLU MLP in one compiled step (its GPU record: docs/results/cuda-h100.md): its
    # bit-for-bit test against the own call, the host work of a layer and a decoder layer with the step
    # and without, then mlx-lm's loop (MLP_STEP_MODEL, batch 1) with each, MLX 8-bit beside W8A8
    timeout -s INT -k 30 $(left $(( END - 300 ))) $PYTEST tests/test_swiglu.py -k "whole or model_check" \
      > "$OUT/tests_mlp_step.txt" 2>&1
    echo "test_swiglu -k whole rc=$? $(el) s" >> "$S"
    timeout 90 python3 -m int8nax.bench.host_work > "$OUT/host_work.txt" 2>&1  # the layer with the step and without
    echo "host work rc=$? $(el) s" >> "$S"
    for mode in step own; do
      [ "$mode" = step ] && share=2 || share=1
      INT8NAX_CUDA_MLP=$mode timeout $(( ($(left $END) - 10) / share )) python3 -m int8nax compare --generate \
        --model ${MLP_STEP_MODEL:-qwen3-8b} --forms mlx-q8,w8a8 --prompt-tokens 512 --batch 1 \
        --json "$OUT/generate_mlp_$mode.json" > "$OUT/generate_mlp_$mode.txt" 2>> "$OUT/generate.log"
      echo "compare --generate, MLP $mode rc=$? $(el) s" >> "$S"
    done
    tail -n 3 "$OUT/tests_mlp_step.txt"; cat "$OUT/host_work.txt"; tail -n 8 "$OUT"/generate_mlp_*.txt
    ;;
  swiglu-model)
    for mode in ${SWIGLU_MODES:-split fused staged}; do
      INT8NAX_CUDA_SWIGLU=$mode timeout $(left $END) python3 -m int8nax compare --model qwen2.5-7b \
        --tokens ${SWIGLU_TOKENS:-16,512,4096} --forms bf16,w8a8 --breakdown > "$OUT/swiglu_$mode.txt" 2>> "$OUT/models.log"
      echo "compare --model, SwiGLU $mode rc=$? $(el) s" >> "$S"
    done
    grep -h -A8 "ms/layer" "$OUT"/swiglu_*.txt
    ;;
  bias)
    timeout -s INT -k 30 $(left $(( END - 280 ))) $PYTEST tests/test_cuda_bias.py > "$OUT/tests_bias.txt" 2>&1
    echo "test_cuda_bias rc=$? $(el) s" >> "$S"
    for mode in cast own; do
      [ "$mode" = cast ] && share=2 || share=1
      budget=$(( ($(left $END) - 20) / share ))
      INT8NAX_CUDA_BIAS=$mode timeout "$budget" python3 -m int8nax compare --mode kernel --w8a8 bfloat16+bias \
        --shapes 16x4096x4096,128x4096x4096,512x4096x4096,2048x4096x4096,128x3584x18944,128x18944x3584 \
        --time-limit $(( budget - 20 )) --json "$OUT/bias_$mode.json" > "$OUT/bias_$mode.txt" 2> "$OUT/bias_$mode.log"
      echo "compare --mode kernel --w8a8 bfloat16+bias, bias $mode rc=$? $(el) s" >> "$S"
    done
    tail -n 16 "$OUT"/bias_*.txt
    ;;
  profile)
    # The W8A8 speed targets not yet met, each where the profile should say why: W8A8 over the raw GEMM
    # (1.31-1.71x, 2026-12-04), the 128-token layers (W8A8's GPU time = bfloat16's, at half the
    # weight bytes), decode's GEMV (2.0 TB/s), the 4096-token gate/up GEMM (W8A8 +14 % over raw),
    # and the SwiGLU quantization fused against staged (loads then arithmetic, or both at once?).
    # In order of need (items not reached by the time limit are said not profiled; the largest last).
    sets=${PROFILE_SETS:-"int8_matmul,w8a8:bfloat16,w8a8:bfloat16+bias@512x4096x4096,128x3584x18944,2048x4096x4096
      swiglu_quantize:fused:bfloat16,swiglu_quantize:staged:bfloat16@4096x18944x18944,2048x12288x12288
      w8a8:bfloat16,bf16@128x3584x4608,128x3584x3584,128x3584x37888,128x18944x3584
      w8a8:bfloat16,bf16@1x3584x4608,1x3584x37888,1x18944x3584
      int8_matmul,w8a8:bfloat16@4096x3584x37888"}
    args=$(for s in $sets; do printf -- '--set %s ' "$s"; done)
    budget=$(left $(( END - 10 )))
    MLX_USE_CUDA_GRAPHS=0 timeout "$budget" python3 -m int8nax.bench.kernel.ncu --profile "$OUT/profile" \
      --manifest "$OUT/profile_manifest.json" --time-limit $(( budget - 30 )) $args \
      > "$OUT/profile.txt" 2> "$OUT/profile.log"
    echo "ncu profile rc=$? $(el) s" >> "$S"
    cat "$OUT/profile.txt"
    ;;
  prebuild)
    timeout $(left $END) python3 tools/cuda_compile_check.py --prebuild --jobs "$(nproc)" > "$OUT/prebuild.txt" 2>&1
    echo "prebuild rc=$? $(el) s" >> "$S"
    tail -n 3 "$OUT/prebuild.txt"
    ;;
  kernels)
    timeout -s INT -k 30 $(left 330) $PYTEST tests/test_cuda_kernels.py > "$OUT/tests_kernels.txt" 2>&1
    echo "test_cuda_kernels rc=$? $(el) s" >> "$S"
    timeout -s INT -k 30 $(left 420) $PYTEST -k narrow tests/test_cuda_tma.py > "$OUT/tests_narrow.txt" 2>&1
    echo "test_cuda_tma -k narrow rc=$? $(el) s" >> "$S"
    ;;
  tma)
    timeout -s INT -k 30 $(left $END) $PYTEST tests/test_cuda_tma.py > "$OUT/tests_tma.txt" 2>&1
    echo "test_cuda_tma rc=$? $(el) s" >> "$S"
    ;;
  suite)
    # Everything but the two files the kernels and tma parts run (test_asv's gate test needs a
    # network the H200 lacks: its failure is expected and read from the log). The files that run
    # the API's default dispatch at M <= 16 (the GEMV) go first, so a LIMIT that ends the run
    # early still covers them (given a folder, pytest would sort them back among the rest).
    first="tests/test_w8a8_linear.py tests/test_nn.py tests/test_layers.py tests/test_models.py tests/test_threads.py
           tests/test_extremes.py tests/test_cuda_gemv.py tests/test_gemv_w8a8.py"
    rest=$(for f in tests/test_*.py; do
             case " $(echo $first) tests/test_cuda_tma.py tests/test_cuda_kernels.py " in *" $f "*) ;; *) echo "$f" ;; esac
           done)
    timeout -s INT -k 30 $(left $END) $PYTEST $first $rest > "$OUT/tests_suite.txt" 2>&1
    echo "suite rc=$? $(el) s" >> "$S"
    ;;
  *)
    echo "unknown part $part" >&2; exit 2 ;;
esac
cat "$S"
for f in "$OUT"/tests_*.txt; do
  [ -e "$f" ] || continue
  echo "== $f"; tail -n 40 "$f" | grep -E "passed|failed|FAILED|ERROR" | head -15
done
