"""tools/cuda_cache_offline.py without NVRTC: its arguments, and the instances it hands the cache
(a model's W8A8 layers traced with stand-ins), the build itself stood in."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "cuda_cache_offline.py"


def run(*args):
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=120)


def test_bad_arguments_name_what_they_take(tmp_path):
    got = run("--mlx-package", str(tmp_path / "none"), "--out", str(tmp_path / "c"))
    assert got.returncode == 2 and "--mlx-package: expected the mlx folder of an mlx-cuda wheel" in got.stderr
    (tmp_path / "mlx" / "lib").mkdir(parents=True)
    got = run("--mlx-package", str(tmp_path / "mlx"), "--out", str(tmp_path / "c"), "--model", "gpt-9")
    assert got.returncode == 2 and "--model: expected names from" in got.stderr and "'gpt-9'" in got.stderr
    got = run("--mlx-package", str(tmp_path / "mlx"), "--out", str(tmp_path / "c"), "--max-tokens", "0")
    assert got.returncode == 2 and "expected positive counts" in got.stderr
    for shapes in ("1x4096", "1x0x4096", "ax4096x4096"):
        got = run("--mlx-package", str(tmp_path / "mlx"), "--out", str(tmp_path / "c"), "--plans", shapes)
        assert got.returncode == 2 and "--plans: expected MxKxN shapes" in got.stderr and repr(shapes) in got.stderr


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """(tool module, the instances its prebuild is handed, the arguments every run takes): the tool
    loaded from its file, NVRTC's build stood in; the stand-ins the tool installs (the SM count,
    the GPU family, mx.fast.cuda_kernel, MLX_PTX_CACHE_DIR) are undone after the test."""
    pytest.importorskip("mlx.core")
    import mlx.core as mx
    from int8nax.backends.cuda import backend as cuda, binary_cache, device, probe

    spec = importlib.util.spec_from_file_location("cuda_cache_offline", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    handed = []
    monkeypatch.setattr(binary_cache.BinaryCache, "prebuild",
                        lambda self, instances, jobs=None, progress=None: handed.extend(instances) or len(instances))
    for module, name in ((device, "_family"), (probe, "sm_count"), (probe, "_sms"), (cuda, "COMPILE")):
        monkeypatch.setattr(module, name, getattr(module, name))
    monkeypatch.setattr(mx.fast, "cuda_kernel", mx.fast.cuda_kernel)
    monkeypatch.setenv("MLX_PTX_CACHE_DIR", str(tmp_path / "c"))
    (tmp_path / "mlx" / "lib").mkdir(parents=True)
    yield tool, handed, ["--mlx-package", str(tmp_path / "mlx"), "--out", str(tmp_path / "c")]
    cuda.clear_caches()


def test_it_builds_every_instance_the_model_meets(offline, capsys):
    from int8nax.backends.cuda import backend as cuda, source as cuda_source

    tool, handed, base = offline
    try:
        assert tool.main(base + ["--max-tokens", "600"]) == 0
    finally:
        cuda.clear_caches()
    names = {i.spec.name for i in handed}
    assert len(handed) == len(set(handed)) and cuda_source.quantize().name in names
    # decode and prefill plans (at decode the GEMV after the quantization kernel: GEMV_QUANTIZE_INSIDE off)
    assert any(n.startswith("int8nax_gemv_w8a8_") and "_x_" not in n for n in names) and any("tma" in n for n in names)
    assert "instances for 1..600 rows on 132 SMs" in capsys.readouterr().out
    # two models and the compile check's catalogue: every instance of each, once
    model_only = set(handed)
    handed.clear()
    try:
        assert tool.main(base + ["--max-tokens", "600", "--model", "qwen2.5-7b,qwen3-8b", "--catalogue"]) == 0
    finally:
        cuda.clear_caches()
    import cuda_compile_check

    catalogue = {cuda_compile_check.instance(spec, ins, outs, tmpl)
                 for _, spec, ins, outs, tmpl in cuda_compile_check.instances("sm_90a")}
    assert len(handed) == len(set(handed)) and model_only | catalogue <= set(handed)
    assert "and the catalogue" in capsys.readouterr().out


def test_plans_adds_every_candidate_the_sweep_times(offline):
    # --plans 1x4096x4096: the GEMV's trial schedules (timed by the sweep, built by no rule) are handed
    from int8nax.backends.cuda import backend as cuda, plans as cuda_plans

    tool, handed, base = offline
    base = base + ["--max-tokens", "16"]
    templates = {}
    for extra in ([], ["--plans", "1x4096x4096"]):
        handed.clear()
        try:
            assert tool.main(base + extra) == 0
        finally:
            cuda.clear_caches()
        templates[bool(extra)] = {dict(i.template).get("AHEAD") for i in handed if "gemv" in i.spec.name}
    trials = {c.ahead for c in cuda_plans.GEMV_TRIALS.values()}
    assert not (trials - {0}) & templates[False] and trials <= templates[True]


def test_plans_adds_the_atomic_form_of_every_raw_split_plan(offline):
    # --plans 128x18944x3584: the sweep times the raw GEMM's split plans also with reduce="atomic"
    # (their splits added into one zero-filled output): those kernels are handed too, one output each
    from int8nax.backends.cuda import backend as cuda, choice as cuda_choice, plans as cuda_plans
    from int8nax.bench.kernel.plans import plan_candidates

    tool, handed, base = offline
    try:
        assert tool.main(base + ["--max-tokens", "1", "--plans", "128x18944x3584"]) == 0
    finally:
        cuda.clear_caches()
    atomic = [c.choice for c in plan_candidates(128, 3584, 18944, 132, False)
              if cuda_plans.reduce_of(c.choice.plan) == cuda_plans.ATOMIC]
    want = {(cuda_choice.VARIANTS[c.variant].specs(c.plan.cfg).int32_atomic.name,
             tuple(cuda_choice.VARIANTS[c.variant].template(c.plan.cfg))) for c in atomic}
    got = {(i.spec.name, tuple((k, v) for k, v in i.template)) for i in handed if i.outputs == ("int32",)}
    assert len(want) == len(atomic) > 0 and want <= got


@pytest.mark.parametrize("option, value", [
    ("--only", "("), ("--nvcc", "/nonexistent/nvcc"), ("--nvrtc", "/nonexistent/libnvrtc.so"),
    ("--keep", "FILE"), ("--keep", "FILE/sub"), ("--mlx-include", "MISSING"), ("--cuda-include", "MISSING"),
    ("--jobs", "0"), ("--jobs", "-1"), ("--jobs", "2.5"), ("--arch", "90"), ("--same-as", "MISSING")])
def test_compile_check_refuses_bad_arguments_before_any_work(tmp_path, option, value):
    """tools/cuda_compile_check.py: one usage line naming the option, what it takes and what came
    (exit 2), not a traceback from re, subprocess, ctypes or os.makedirs halfway through."""
    (tmp_path / "file").write_text("")
    value = value.replace("FILE", str(tmp_path / "file")).replace("MISSING", str(tmp_path / "missing"))
    extra = {"--jobs": ["--prebuild"], "--same-as": ["--ptx", "--keep", str(tmp_path / "out")]}.get(option, [])
    only = [] if option == "--only" else ["--only", "count_sms"]  # were it taken: one small kernel
    got = subprocess.run([sys.executable, str(ROOT / "tools" / "cuda_compile_check.py"), option, value, *extra, *only],
                         capture_output=True, text=True, timeout=120)
    last = got.stderr.strip().splitlines()[-1]
    assert got.returncode == 2 and "Traceback" not in got.stderr, got.stderr
    assert f"argument {option}: expected" in last and repr(value) in last
    assert not (tmp_path / "out").exists()


def test_the_models_kernels_hold_every_w8a8_call_decode_time_times(offline):
    # bench_kernel.DecodeTime times W8A8 (bfloat16 x, no bias) at each model layer at one token: the
    # instances those calls launch are among the ones --model builds, so the record compiles none.
    import mlx.core as mx
    from benchmarks import bench_kernel
    from int8nax.backends.cuda import backend as cuda, kernels

    tool, handed, base = offline
    try:
        assert tool.main(base + ["--max-tokens", "16", "--model", "qwen2.5-7b,qwen3-8b"]) == 0
        with kernels.collect_instances() as timed:  # the tool's stand-ins are still in place
            for m, k, n in bench_kernel.DECODE_SHAPES:
                cuda.w8a8(mx.zeros((m, k), dtype=mx.bfloat16), mx.zeros((n, k), dtype=mx.int8),
                          mx.ones((n,), dtype=mx.float32), None)
    finally:
        cuda.clear_caches()
    assert timed and set(timed) <= set(handed)
