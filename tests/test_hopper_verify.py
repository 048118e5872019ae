"""tools/hopper_verify.sh, which the lent H200's device calls run: it parses, and its `models` part
covers every model benchmark class exactly once over its groups of forms (one asv run per group,
each saved when it ends), with a stand-in for tools/asv_offline_gpu.sh. A broken part costs a
device session; this catches one here."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "hopper_verify.sh"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="no bash here")

STAND_IN = """#!/bin/bash
echo "BENCH=$BENCH SHA=$SHA MACHINE=$MACHINE"
"""


def test_the_script_parses():
    subprocess.run([BASH, "-n", str(SCRIPT)], check=True)


def model_classes() -> list[str]:
    sys.path.insert(0, str(ROOT))
    try:
        import benchmarks.bench_model as bench_model
        import benchmarks.bench_ratio as bench_ratio
    finally:
        sys.path.remove(str(ROOT))
    kinds = (bench_model.ModelTime, bench_model.ModelFigures)
    found = [n for n, c in vars(bench_model).items() if isinstance(c, type) and issubclass(c, kinds) and c.form]
    return found + [n for n in vars(bench_ratio) if n == "ModelRatio"]


def run_models(tmp_path: Path, **env) -> tuple[list[str], str]:
    tree = tmp_path / "tree"
    (tree / "tools").mkdir(parents=True)
    shutil.copy(SCRIPT, tree / "tools" / "hopper_verify.sh")
    (tree / "tools" / "asv_offline_gpu.sh").write_text(STAND_IN)
    out = tmp_path / "out"
    out.mkdir()
    run_env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "OUT": str(out), "COMMIT": "abc1234", "CARD": "h200",
               **env}
    subprocess.run([BASH, "tools/hopper_verify.sh", "models"], cwd=tree, env=run_env, check=True,
                   capture_output=True, timeout=60)
    benches = re.findall(r"^BENCH=(\S+) SHA=abc1234 MACHINE=h200$", (out / "asv_models.txt").read_text(), re.M)
    return benches, (out / "steps.txt").read_text()


def test_the_models_part_runs_every_model_class_in_exactly_one_group(tmp_path):
    pytest.importorskip("asv_runner")
    benches, steps = run_models(tmp_path)
    assert len(benches) == 4 and steps.count("rc=0") == 4
    classes = model_classes()
    assert len(classes) >= 21  # 5 forms x 2 modes x (time, figures), and ModelRatio
    for name in classes:
        hits = [b for b in benches if re.search(b, name)]
        # cider runs on an M5 only: the H200's record leaves it out (n/a there, as on the site)
        assert len(hits) == (0 if name.startswith("Cider") else 1), (name, hits)


def test_the_models_part_takes_the_groups_left_from_a_previous_call(tmp_path):
    benches, steps = run_models(tmp_path, MODEL_GROUPS="W8A8")
    assert benches == ["^W8A8Model(Compiled)?$|^ModelRatio$"] and "asv model suite W8A8 rc=0" in steps
    benches, steps = run_models(tmp_path / "figures", MODEL_GROUPS="W8A8Figures MlxQ8")
    assert benches == ["^(W8A8)Model(Compiled)?Figures$", "^(MlxQ8)Model(Compiled)?(Figures)?$"]


def run_part(tmp_path: Path, part: str, python3: str = 'echo "$@"', **env) -> Path:
    """Run hopper_verify.sh `part` in the repository with a stand-in python3 (by default one that
    prints its arguments: the part's command lines) and OUT in tmp_path; returns OUT."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python3").write_text(f"#!/bin/bash\n{python3}\n")
    (bin_dir / "python3").chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    run_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(out), "COMMIT": "abc1234", "CARD": "h200", **env}
    subprocess.run([BASH, "tools/hopper_verify.sh", part], cwd=ROOT, env=run_env, check=True, capture_output=True,
                   timeout=60)
    return out


def test_the_suite_part_runs_the_default_dispatch_files_first_and_every_other_file_once(tmp_path):
    out = run_part(tmp_path, "suite")  # the stand-in prints the part's pytest command line
    files = [a for a in (out / "tests_suite.txt").read_text().split() if a.startswith("tests/")]
    every = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py"))
    assert sorted(files) == [f for f in every if f not in ("tests/test_cuda_tma.py", "tests/test_cuda_kernels.py")]
    assert files[:3] == ["tests/test_w8a8_linear.py", "tests/test_nn.py", "tests/test_layers.py"]
    assert files.index("tests/test_cuda_gemv.py") < files.index("tests/test_asv.py")


def test_the_models_part_starts_a_group_only_with_its_own_time_left(tmp_path):
    # W8A8's tracks took 340 s on the H200: started with less left, the call's limit would kill
    # the asv run and lose it whole; MLX's 8-bit form (146 s) still fits.
    benches, steps = run_models(tmp_path, MODEL_GROUPS="W8A8Figures MlxQ8", LIMIT="300")
    assert benches == ["^(MlxQ8)Model(Compiled)?(Figures)?$"]
    assert "asv model suite W8A8Figures: not run" in steps and "pass MODEL_GROUPS=W8A8Figures next" in steps


def test_the_profile_part_gives_the_ncu_runner_sets_it_takes(tmp_path):
    from int8nax.bench.kernel import ncu

    out = run_part(tmp_path, "profile", LIMIT="400")
    args = (out / "profile.txt").read_text().split()
    assert args[:4] == ["-m", "int8nax.bench.kernel.ncu", "--profile", f"{out}/profile"]
    limit = int(args[args.index("--time-limit") + 1])
    assert 300 < limit < 400  # the call's budget less the report's writing
    items = ncu.parse_sets([args[i + 1] for i, a in enumerate(args) if a == "--set"])
    assert len(items) == 29 and {i.subject for i in items} == {
        "int8_matmul", "w8a8:bfloat16", "w8a8:bfloat16+bias", "bf16", "swiglu_quantize:fused:bfloat16",
        "swiglu_quantize:staged:bfloat16"}
    from int8nax.backends.cuda import plans as cuda_plans  # the staged items are shapes its launch takes on the H200

    assert all(cuda_plans.cuda_swiglu_staged_launch(i.shape[0], i.shape[1], 2, 132) is not None
               for i in items if "staged" in i.subject)


def test_the_plans_part_takes_the_model_layers_at_plans_tokens(tmp_path):
    from int8nax.bench.kernel.plans import model_shapes

    # python3 -c (the shapes) runs; anything else prints its arguments
    python3 = f'if [ "$1" = -c ]; then exec {sys.executable} "$@"; fi\necho "$@"'
    out = run_part(tmp_path, "plans", python3, PLANS_TOKENS="128")
    args = (out / "plans.txt").read_text().split()
    shapes = args[args.index("--shapes") + 1].split(",")
    assert shapes == ["x".join(map(str, s)) for s in model_shapes(tokens=(128,))] and len(shapes) == 8
    assert all(s.startswith("128x") for s in shapes) and "--plans" in args
    out = run_part(tmp_path / "default", "plans", python3)
    assert "--shapes" not in (out / "plans.txt").read_text().split()


def run_in_tree(tmp_path: Path, part: str, python3: str | None = None) -> Path:
    """Run hopper_verify.sh `part` on the H100 in a copy of the script beside the asv stand-in (a
    part that records runs no asv here), with a stand-in python3 where given (else this Python's);
    returns OUT."""
    tree = tmp_path / "tree"
    (tree / "tools").mkdir(parents=True)
    shutil.copy(SCRIPT, tree / "tools" / "hopper_verify.sh")
    (tree / "tools" / "asv_offline_gpu.sh").write_text(STAND_IN)
    bin_dir = Path(sys.executable).parent
    if python3 is not None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "python3").write_text(f"#!/bin/bash\n{python3}\n")
        (bin_dir / "python3").chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    run_env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(out), "COMMIT": "abc1234", "CARD": "h100"}
    subprocess.run([BASH, "tools/hopper_verify.sh", part], cwd=tree, env=run_env, check=True, capture_output=True,
                   timeout=60)
    return out


def test_the_record_part_runs_every_suite_class_but_the_models_on_the_cards_machine(tmp_path):
    out = run_in_tree(tmp_path, "record")
    bench, = re.findall(r"^BENCH=(\S+) SHA=abc1234 MACHINE=h100$", (out / "asv_record.txt").read_text(), re.M)
    assert re.search(bench, "Int8naxGemm") and re.search(bench, "CublasLtGemm")
    assert not re.search(bench, "W8A8ModelCompiled") and not re.search(bench, "ModelRatio")
    assert not re.search(bench, "FirstTokenFigures")  # a call of its own (RECORD_BENCH=FirstToken)
    assert "asv record rc=0" in (out / "steps.txt").read_text()


def test_a_card_that_is_neither_h100_nor_h200_stops_the_script(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = {"PATH": "/usr/bin:/bin", "OUT": str(out), "COMMIT": "abc1234", "CARD": "a100"}
    done = subprocess.run([BASH, "tools/hopper_verify.sh", "kernel"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "CARD must be h100 or h200" in done.stderr


def test_the_binaries_part_builds_in_one_process_and_loads_in_the_next(tmp_path):
    out = run_part(tmp_path, "binaries")  # the stand-in python3 prints its arguments
    calls = [line for line in (out / "first_call.jsonl").read_text().splitlines() if "first_call" in line]
    assert [c.split("first_call ", 1)[1].split(" --model")[0] for c in calls] == [
        "first --tokens 300", "warm --max-tokens 8192", "first --tokens 300,777,1500,4096,2047,511,1",
        "first --tokens 300"]
    steps = (out / "steps.txt").read_text()
    assert "first_call INT8NAX_CUDA_BINARY_CACHE=off first --tokens 300 rc=0" in steps


def test_the_first_token_part_measures_the_issues_prompt_lengths_in_one_command(tmp_path):
    out = run_part(tmp_path, "first-token")  # the stand-in python3 prints its arguments
    args = (out / "first_token.txt").read_text().split()
    assert args[:5] == ["-m", "int8nax", "compare", "--generate", "--first-token"]
    assert args[args.index("--model") + 1] == "qwen2.5-7b"
    assert args[args.index("--prompt-tokens") + 1] == "300,777,1500,4096"
    assert args[args.index("--json") + 1] == f"{out}/first_token.json" and "--markdown" in args
    assert "compare --generate --first-token qwen2.5-7b 300,777,1500,4096 rc=0" in (out / "steps.txt").read_text()
    out = run_part(tmp_path / "more", "first-token", FIRST_TOKENS="300", FIRST_TOKEN_ARGS="--forms bf16,mlx-q8,w8a8")
    args = (out / "first_token.txt").read_text().split()
    assert args[args.index("--prompt-tokens") + 1] == "300" and args[args.index("--forms") + 1] == "bf16,mlx-q8,w8a8"
    # the header lists the part
    assert "bash tools/hopper_verify.sh first-token" in SCRIPT.read_text()


def test_a_carried_kernel_folder_is_unpacked_once_and_named_to_mlx(tmp_path):
    # KERNELS_TARBALL: a tar.xz of one folder (tools/cuda_cache_offline.py's), unpacked into
    # KERNELS_DIR and passed on as MLX_PTX_CACHE_DIR; a tarball that cannot be unpacked stops the part
    import tarfile

    built = tmp_path / "built" / "kcache"
    built.mkdir(parents=True)
    for name in ("a_1.ptx", "a_1.txt", "b_2.ptx"):
        (built / name).write_text("x")
    tarball = tmp_path / "kcache.tar.xz"
    with tarfile.open(tarball, "w:xz") as tar:
        tar.add(built, arcname="kcache")
    where = tmp_path / "k"
    out = run_part(tmp_path / "run", "kernel", python3='echo "$MLX_PTX_CACHE_DIR $@"',
                   KERNELS_TARBALL=str(tarball), KERNELS_DIR=str(where))
    assert sorted(p.name for p in where.iterdir()) == ["a_1.ptx", "a_1.txt", "b_2.ptx"]
    assert (out / "kernel.txt").read_text().split()[0] == str(where)
    assert f"kernels: 2 carried in {where}" in (out / "env.txt").read_text()
    (tmp_path / "bad.tar.xz").write_text("not a tarball")
    bin_dir = tmp_path / "run" / "bin"
    got = subprocess.run([BASH, "tools/hopper_verify.sh", "kernel"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(out), "COMMIT": "abc1234", "CARD": "h200",
                              "KERNELS_TARBALL": str(tmp_path / "bad.tar.xz"), "KERNELS_DIR": str(tmp_path / "k2")})
    assert got.returncode == 2 and "cannot unpack KERNELS_TARBALL" in got.stderr and not (tmp_path / "k2").exists()


def test_the_next_part_runs_the_pending_tables_first_rows_each_within_its_share(tmp_path):
    out = run_in_tree(tmp_path, "next", python3='echo "$@"')  # python3 prints its command lines
    ab = (out / "ab.txt").read_text().split()
    assert ab[0] == "tools/gemv_rule_ab.py" and ab[ab.index("--trials") + 1] == "5"
    bench, = re.findall(r"^BENCH=(\S+) SHA=abc1234 MACHINE=h100$", (out / "asv_record.txt").read_text(), re.M)
    assert re.search(bench, "bench_kernel.DecodeTime.track_w8a8_decode_kernel_us")
    assert not re.search(bench, "bench_gemm.Int8naxGemm.time_gemm")
    plans = (out / "plans.txt").read_text().split()
    assert "--raw-plans" in plans and "128x18944x3584" in plans[plans.index("--shapes") + 1].split(",")
    assert "tests/test_cuda_atomic.py" in (out / "tests_atomic.txt").read_text().split()
    steps = (out / "steps.txt").read_text()
    assert all(f"{step} rc=0" in steps for step in ("gemv_rule_ab", "asv record, bench_kernel", "test_cuda_atomic"))
    # what comes back from a device call: at most 8 files
    assert len([p for p in out.iterdir() if p.is_file()]) <= 8
