#!/usr/bin/env bash
# Run the asv suite on a CUDA box that has no network, in the Python that is already there.
#
#   [SHA=<commit>] [MACHINE=card] [BENCH='Int8naxGemm|Int8naxFull'] [METHODS='time_\w+'] [LAUNCH=persistent]
#       tools/asv_offline_gpu.sh [asv run args...]
#
# Needs: python3 (or $PYTHON) importing mlx (mlx-cuda-13) and asv; torch is optional (the
# cuBLASLt baseline). int8nax itself comes from this checkout's src/. It runs
#     asv run --config asv.cuda.conf.json -E existing:<python> --set-commit-hash SHA --machine MACHINE
# over the seed shapes (profile "full") of every contender that can run here; contenders that
# cannot (cider off an M5, torch without CUDA) are left out with their reason printed, and so
# are the CPU-profile shapes, so no process is spawned just to say "n/a". The model benchmarks
# (benchmarks/bench_model.py's classes and bench_ratio's ModelRatio, which need mlx-lm: its wheel
# alone, without dependencies, on PYTHONPATH) run at the profile's (configuration, tokens) in the
# same way; BENCH='Model' selects only them, BENCH='W8A8Model$|ModelRatio' a few. The fresh-process
# first token (benchmarks/bench_first_token.py, about 9 minutes for Qwen2.5-7B) runs at its profile's
# cases and models; BENCH=FirstToken selects only it. Host work per call (benchmarks/bench_host.py:
# W8A8Linear, nn.Linear and QuantizedLinear, and a whole decoder layer) runs at every parameter
# (BENCH=HostWork: only it). mlx-lm's loop (benchmarks/bench_generate.py) runs at its profile's cases
# of the models in INT8NAX_GENERATE_CONFIGS and forms in INT8NAX_GENERATE_FORMS (BENCH=Generate: only
# it; one model's bf16, W8A8 and MLX 8-bit take ~400 s on an H100). Results land in
# .asv/results/$MACHINE/ (plus .asv/results/benchmarks.json), ready to commit; the log in
# .asv/asv-run-$MACHINE.log.
#
# MACHINE: the asv machine; `card` (the default) names it by the GPU (h100, h200:
# .github/scripts/asv_machine.py --name card), so that two cards never share a history; a card's
# name given by hand (MACHINE=h200) must be this GPU's, another name (a test's) is taken as it is.
#
# LAUNCH=persistent (the default) runs asv through src/int8nax/commands/asv_persistent.py: one benchmark
# process per environment instead of one per benchmark, because a new process costs ~10 s on
# the H200 (CUDA and MLX start-up, the torch import, NVRTC compiles) and asv's forkserver cannot
# be used under CUDA. LAUNCH=spawn runs plain `python -m asv` (then pass --launch-method).
# LAUNCHER: the asv_persistent.py to use (default: this checkout's, src/int8nax/commands/ or, in
# an older tree, src/int8nax/; asv_offline_commits.sh passes its own, so that trees of commits
# older than the file still get it).
#
# SHA: the commit these sources are (default: git HEAD). Without a git history here (a copy of
# the working tree), SHA is required, and COMMIT_DATE (its `git log -1 --format=%ct`) is
# recommended: asv needs a repository, so the script records the run against a throwaway
# commit of these files and then files the results under SHA. Results of several calls (say,
# BENCH='Int8naxGemm|TorchInt8' then BENCH='Int8naxFull|MlxFp16|MlxQ8' to stay within a time limit)
# merge into one file when the earlier file is in .asv/results/$MACHINE/ at the next call.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MACHINE=${MACHINE:-card}
BENCH=${BENCH:-.}
METHODS=${METHODS:-'\w+'}   # a regex of method names: 'time_\w+' leaves the TOPS tracks out
LAUNCH=${LAUNCH:-persistent}
if [ -z "${LAUNCHER:-}" ]; then
  # this tree's launcher: src/int8nax/commands/, or src/int8nax/ in trees of older commits
  for LAUNCHER in "$PWD/src/int8nax/commands/asv_persistent.py" "$PWD/src/int8nax/asv_persistent.py"; do
    [ -f "$LAUNCHER" ] && break
  done
fi
# MACHINE_SCRIPT: the asv_machine.py to use (default: this checkout's; asv_offline_commits.sh passes
# its own, which knows card names where an older commit's does not)
MACHINE_SCRIPT=${MACHINE_SCRIPT:-$PWD/.github/scripts/asv_machine.py}
case "$LAUNCH" in
  persistent) [ -f "$LAUNCHER" ] || { echo "asv_offline_gpu: no $LAUNCHER" >&2; exit 2; }
              asv=("$LAUNCHER") ;;
  spawn) asv=(-m asv) ;;
  *) echo "asv_offline_gpu: LAUNCH takes persistent or spawn, got '$LAUNCH'" >&2; exit 2 ;;
esac
py=$(command -v "$PYTHON") || { echo "asv_offline_gpu: no $PYTHON on PATH" >&2; exit 2; }
command -v git >/dev/null || { echo "asv_offline_gpu: asv needs git, which is not on PATH" >&2; exit 2; }
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export ASV_PYTHONPATH="$PYTHONPATH"   # asv 0.6.6 drops PYTHONPATH in benchmark processes otherwise
export INT8NAX_BENCH_PROFILE=${INT8NAX_BENCH_PROFILE:-full}

"$py" - <<'PY' || exit 2
import importlib.util, sys
missing = [m for m in ("mlx.core", "asv", "numpy") if importlib.util.find_spec(m.split(".")[0]) is None]
if missing:
    sys.exit(f"asv_offline_gpu: {', '.join(missing)} not importable by {sys.executable}")
import mlx.core as mx
print(f"mlx {mx.__version__}, default device {mx.default_device()}, {mx.device_info(mx.gpu) if mx.is_available(mx.gpu) else 'no GPU'}")
PY

# The machine, by card unless named (and a card's name checked against this GPU).
MACHINE=$("$py" "$MACHINE_SCRIPT" --name "$MACHINE" --print-name) || exit 2
echo "asv machine: $MACHINE"

# The -b regex: available contenders' classes x this profile's shapes.
regex=$("$py" - "$BENCH" "$METHODS" <<'PY'
import importlib, re, sys
sys.path.insert(0, ".")
from int8nax.bench import problems
from int8nax.bench.peers import Unavailable, cider, torch_int
from benchmarks import common

# Every module of the suite that this commit has (bench_ratio came with the gate).
modules = []
for name in ("bench_gemm", "bench_linear", "bench_ratio"):
    try:
        modules.append(importlib.import_module(f"benchmarks.{name}"))
    except ModuleNotFoundError:
        print(f"benchmarks.{name}: not in this commit", file=sys.stderr)


def cublaslt_load():
    try:
        from int8nax.bench.peers import cublaslt
    except ImportError as exc:
        raise Unavailable(f"no cuBLASLt adapter: {exc}") from None
    cublaslt.load()


probes = {"cider-raw": cider.load, "cider-full": cider.load, "torch-int8": torch_int.load,
          "cublaslt-int8": cublaslt_load, "cider": cider.load}
classes = []
for module in modules:
    for name, cls in vars(module).items():
        if not (isinstance(cls, type) and issubclass(cls, common.ContenderBenchmark)) or not cls.contender:
            continue
        if not re.search(sys.argv[1], name):
            continue
        try:
            probes.get(cls.contender, lambda: None)()
        except Unavailable as exc:
            print(f"left out {name} ({cls.contender}): {exc}", file=sys.stderr)
            continue
        classes.append(name)
# What ran and its kernel time (bench_kernel's Kernel, KernelTime), where this commit has them;
# KernelTime only where CUPTI can time kernels (MLX's CUDA backend and torch with CUDA).
try:
    bench_kernel = importlib.import_module("benchmarks.bench_kernel")
except ModuleNotFoundError:
    bench_kernel = None
for name in ("Kernel", "KernelTime"):
    if bench_kernel is None or not hasattr(bench_kernel, name) or not re.search(sys.argv[1], name):
        continue
    if name == "KernelTime":
        try:
            from int8nax.bench.kernel.cupti import skip_reason
        except ModuleNotFoundError:  # a tree of a commit from before bench/kernel/
            from int8nax.bench.cupti import skip_reason
        why = skip_reason()
        if why:
            print(f"left out {name}: kernel time {why}", file=sys.stderr)
            continue
    classes.append(name)
# The model benchmarks (bench_model's classes, bench_ratio.ModelRatio), where this commit has
# them: their parameters are (configuration, tokens), this profile's (models.PROFILES).
model_classes, runs = [], ""
try:
    bench_model = importlib.import_module("benchmarks.bench_model")
    from int8nax.bench import models
except ModuleNotFoundError:
    bench_model = None
if bench_model is not None:
    kinds = (bench_model.ModelTime, bench_model.ModelFigures)
    found = [n for n, c in vars(bench_model).items() if isinstance(c, type) and issubclass(c, kinds) and c.form]
    found += [n for m in modules for n in vars(m) if n == "ModelRatio"]
    found = [n for n in found if re.search(sys.argv[1], n)]
    try:
        models.mlx_lm_module("qwen2") if found else None
    except Unavailable as exc:
        print(f"left out the model benchmarks: {exc}", file=sys.stderr)
        found = []
    for name in found:
        form = getattr(getattr(bench_model, name, None), "form", "")
        try:
            probes.get(form, lambda: None)()
        except Unavailable as exc:
            print(f"left out {name} ({form}): {exc}", file=sys.stderr)
            continue
        model_classes.append(name)
    prof = models.PROFILES[problems.choose_profile()[0]]
    runs = "|".join(re.escape(f"{c!r}, {t}") for c in prof.configs for t in prof.tokens)
# The fresh-process first token (bench_first_token's classes), where this commit has them: their
# parameters are this profile's cases and models (first_token.PROFILES).
first_classes, cells = [], ""
try:
    bench_first_token = importlib.import_module("benchmarks.bench_first_token")
    from int8nax.bench import first_token
except ModuleNotFoundError:
    bench_first_token = None
if bench_first_token is not None:
    base = bench_first_token._FirstToken
    first_classes = [n for n, c in vars(bench_first_token).items()
                     if isinstance(c, type) and issubclass(c, base) and c is not base and re.search(sys.argv[1], n)]
    name = problems.choose_profile()[0]
    keys = [*first_token.profile_cases(name), *first_token.PROFILES[name].configs]
    cells = "|".join(re.escape(repr(k)) for k in keys)
# Host work per call (bench_host's classes), where this commit has them: every parameter.
host_classes = []
try:
    bench_host = importlib.import_module("benchmarks.bench_host")
except ModuleNotFoundError:
    bench_host = None
if bench_host is not None:
    host_classes = [n for n, c in vars(bench_host).items()
                    if isinstance(c, type) and n.endswith("HostWork") and re.search(sys.argv[1], n)]
# mlx-lm's loop (bench_generate's classes), where this commit has them: the profile's cases of the
# models in INT8NAX_GENERATE_CONFIGS and the forms in INT8NAX_GENERATE_FORMS (default: all), and
# only those, so that a later call for other forms does not record these as n/a over an earlier
# call's figures; GenerateRatio only where bf16 and W8A8 are both measured.
gen_classes, gen_cells, gen_forms = [], "", ""
try:
    bench_generate = importlib.import_module("benchmarks.bench_generate")
    from int8nax.bench import generate
except ModuleNotFoundError:
    bench_generate = None
if bench_generate is not None:
    import os
    pick = lambda env: [v.strip() for v in os.environ.get(env, "").split(",") if v.strip()]
    configs, forms = pick(generate.CONFIGS_ENV), pick(getattr(generate, "FORMS_ENV", "")) or list(generate.FORMS)
    gen_classes = [n for n in ("GenerateFigures", "GenerateRatio") if hasattr(bench_generate, n) and re.search(sys.argv[1], n)
                   and (n != "GenerateRatio" or {"bf16", "w8a8"} <= set(forms))]
    cases = [c for c, (config, *_) in generate.profile_cases(problems.choose_profile()[0]).items()
             if not configs or config in configs]
    gen_cells = "|".join(re.escape(repr(c)) for c in cases)
    gen_forms = "|".join(re.escape(repr(f)) for f in forms)
if not classes and not model_classes and not first_classes and not host_classes and not gen_classes:
    sys.exit(f"asv_offline_gpu: no runnable benchmark class matches {sys.argv[1]!r}")
shapes = "|".join(re.escape(", ".join(map(str, s))) for s in problems.profile_shapes())
parts = [rf"^bench_\w+\.(?:{'|'.join(classes)})\.(?:{sys.argv[2]})\(\((?:{shapes})\)\)$"] if classes else []
if model_classes:
    parts.append(rf"^bench_\w+\.(?:{'|'.join(model_classes)})\.(?:{sys.argv[2]})\((?:{runs})\)$")
if first_classes:
    parts.append(rf"^bench_first_token\.(?:{'|'.join(first_classes)})\.(?:{sys.argv[2]})\((?:{cells})(?:, '\w+')?\)$")
if "GenerateFigures" in gen_classes:
    parts.append(rf"^bench_generate\.GenerateFigures\.(?:{sys.argv[2]})\((?:{gen_cells}), (?:{gen_forms})\)$")
if "GenerateRatio" in gen_classes:
    parts.append(rf"^bench_generate\.GenerateRatio\.(?:{sys.argv[2]})\((?:{gen_cells})\)$")
if host_classes:
    parts.append(rf"^bench_host\.(?:{'|'.join(host_classes)})\.(?:{sys.argv[2]})(?:\(.*\))?$")
print("|".join(parts))
PY
)
echo "benchmarks: $regex"

# A committed machine keeps its one description (asv_machine.py --keep): each lent VM reports its
# own kernel build and RAM size, which would make a second H200 series on the site.
"$py" "$MACHINE_SCRIPT" --name "$MACHINE" --keep ".asv/results/$MACHINE/machine.json"

# asv needs a git repository holding the commit; a bare copy of the working tree has none.
# A copy whose files another user owns (the device machine runs as root) is refused by git's
# safe.directory check unless allowed; environment config reaches asv's own git calls too.
export GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=safe.directory GIT_CONFIG_VALUE_0='*'
scratch=""
aside=""
filed=""
# Only a repository whose top level is this folder will do: asv clones "." otherwise (a tree
# copied into some other checkout sits inside that checkout's repository).
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$(pwd -P)" ] \
    && git rev-parse --verify -q "${SHA:-HEAD}^{commit}" >/dev/null 2>&1; then
  sha=$(git rev-parse "${SHA:-HEAD}^{commit}")
  record=$sha
else
  [ -n "${SHA:-}" ] || { echo "asv_offline_gpu: no git history here: set SHA (and COMMIT_DATE)" >&2; exit 2; }
  # The whole hash: asv files results by its first 8 characters, and the site matches it to history.
  [[ "$SHA" =~ ^[0-9a-f]{40}$ ]] || { echo "asv_offline_gpu: SHA takes a commit's full 40-character hash (git rev-parse), got '$SHA'" >&2; exit 2; }
  if [ -e .git ]; then   # a repository without SHA (a partial copy): set aside while asv runs
    aside=.git.offline-aside.$$
    mv .git "$aside"
    echo "asv_offline_gpu: .git does not hold $SHA: set aside as $aside until the run ends" >&2
  fi
  sha=$SHA
  git init -q -b main .
  git add -A -- src benchmarks pyproject.toml 'asv*.json'
  git -c user.name=asv-offline -c user.email=asv-offline@int8nax.invalid commit -q -m "scratch copy of $sha"
  scratch=$(git rev-parse HEAD)
  record=$scratch
  # On any exit, a run killed by a time limit too: results go back under SHA (a killed asv run
  # writes nothing, but the results of earlier calls wait under the scratch commit meanwhile).
  trap '[ -z "$filed" ] || refile "$scratch" "$sha"; rm -rf .git; [ -z "$aside" ] || mv "$aside" .git' EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
fi

# Move results between the real commit and the scratch one (so that runs merge), keeping the date.
refile() {
  "$py" - "$MACHINE" "$1" "$2" "${COMMIT_DATE:-}" <<'PY'
import json, sys
from pathlib import Path
machine, src, dst, date = sys.argv[1:]
for path in sorted(Path(".asv/results", machine).glob(f"{src[:8]}-*.json")):
    data = json.loads(path.read_text())
    data["commit_hash"] = dst
    if date:
        data["date"] = int(date) * 1000
    path.unlink()
    target = path.with_name(f"{dst[:8]}-{data['env_name']}.json")
    target.write_text(json.dumps(data, indent=None, sort_keys=True))
    print(f"results filed under {dst[:8]}: {target}")
PY
}
[ -z "$scratch" ] || { refile "$sha" "$scratch"; filed=1; }

mkdir -p .asv
set +e
echo "launch: $LAUNCH (${asv[*]})"
"$py" "${asv[@]}" run --config asv.cuda.conf.json -E "existing:$py" --set-commit-hash "$record" \
  --machine "$MACHINE" --show-stderr -b "$regex" "$@" 2>&1 | tee ".asv/asv-run-$MACHINE.log"
status=${PIPESTATUS[0]}
set -e
[ -z "$scratch" ] || { refile "$scratch" "$sha"; filed=""; }

echo
echo "asv exited $status (0: all ran; 2: some benchmark failed, see the log)"
ls -l ".asv/results/$MACHINE" .asv/results/benchmarks.json
echo "commit them with: git add .asv/results/$MACHINE .asv/results/benchmarks.json"
exit "$status"
