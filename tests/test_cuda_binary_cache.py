"""The CUDA binary cache (int8nax.backends.cuda.binary_cache): MLX's names, sources and folder
reproduced, entries written whole and checked, and on a GPU, MLX running what the cache wrote."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from int8nax.backends.cuda import binary_cache as cbc
from int8nax.backends.cuda import graphs as cuda_graphs, kernels as cuda_kernels, source as cuda_source
from int8nax.backends.kernel_spec import KernelSpec

TOY = KernelSpec("toy_k", ("a", "b"), ("out",), "out[0] = a[0] + b_shape[0];", '#include "x.cuh"\n', 0)


class Arr:
    """An input as Instance.of reads it: a dtype and a rank."""

    def __init__(self, dtype, ndim):
        self.dtype, self.ndim = dtype, ndim


def toy(template=(("T", "float16"), ("N", 4), ("B", True))):
    return cbc.Instance(TOY, (("int8", 2), ("int32", 1)), ("int32",), tuple(template))


# ---- what MLX computes ----

def test_std_hash_is_libstdcxx_std_hash(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ to compute std::hash with")
    prog = tmp_path / "h.cpp"
    prog.write_text('#include <string>\n#include <iostream>\n#include <functional>\n'
                    'int main(){std::string l; while(std::getline(std::cin,l)){std::string s;'
                    'for(size_t i=0;i+1<l.size();i+=2) s.push_back((char)std::stoi(l.substr(i,2),nullptr,16));'
                    'std::cout<<std::hex<<std::hash<std::string>{}(s)<<"\\n";}}\n')
    subprocess.run([gxx, "-O1", "-o", str(tmp_path / "h"), str(prog)], check=True)
    cases = [b"", b"a", b"abcdefg", b"abcdefgh", b"abcdefghi", bytes(range(256)) * 3, os.urandom(1001)]
    cases += [os.urandom(n) for n in range(1, 40)]
    out = subprocess.run([str(tmp_path / "h")], input="\n".join(c.hex() + "0" for c in cases) + "\n",
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == [format(cbc.std_hash(c), "x") for c in cases]


def test_kernel_name_carries_the_template_as_mlx_does():
    assert cbc.kernel_name(toy()) == "custom_kernel_toy_k_float16_t_4_t"
    assert cbc.kernel_name(toy((("B", False), ("X", "bfloat16"), ("Y", "float32")))) == \
        "custom_kernel_toy_k_f_bfloat16_t_float"
    assert cbc.kernel_name(toy(())) == "custom_kernel_toy_k"


def test_mlx_source_declares_what_the_body_names():
    src = cbc.mlx_source(toy())
    assert src.startswith(cbc.MLX_DEFAULT_HEADER + TOY.header + "namespace mlx::core::cu {")
    assert ("__global__ void custom_kernel_toy_k_float16_t_4_t(\n    const int8_t* a,\n    const int32_t* b,\n"
            "    const __grid_constant__ Shape b_shape,\n    int32_t* out) {\n") in src
    assert "  using T = __half;\n  constexpr int N = 4;\n  constexpr bool B = true;\n\n" + TOY.source in src
    assert src.endswith("\n}\n\n} // namespace mlx::core::cu\n")
    # a rank-0 input gets no shape even where the body names it; no template, no constants block
    flat = cbc.Instance(TOY, (("int8", 2), ("int32", 0)), ("int32",), ())
    assert "b_shape" not in cbc.mlx_source(flat).split(") {")[0] and "constexpr" not in cbc.mlx_source(flat)
    assert cbc.module_name(toy()) == f"custom_kernel_toy_k_float16_t_4_t_{cbc.std_hash(src.encode()):x}"
    assert cbc.module_name(toy()) != cbc.module_name(toy((("T", "bfloat16"), ("N", 4), ("B", True))))


def test_instance_of_reads_dtypes_ranks_and_template():
    import mlx.core as mx

    inst = cbc.Instance.of(TOY, [Arr(mx.int8, 2), Arr(mx.int32, 0)], [mx.float16],
                           [("T", mx.bfloat16), ("N", 3), ("B", False)])
    assert inst == cbc.Instance(TOY, (("int8", 2), ("int32", 0)), ("float16",),
                                (("T", "bfloat16"), ("N", 3), ("B", False)))
    assert isinstance(inst.template[2][1], bool) and hash(inst) == hash(inst)


def test_the_folder_and_long_names_follow_mlx(monkeypatch, tmp_path):
    monkeypatch.delenv(cbc.CACHE_ENV, raising=False)
    for var in ("TMPDIR", "TMP", "TEMP", "TEMPDIR"):
        monkeypatch.delenv(var, raising=False)
    assert cbc.cache_dir("0.32.4") == Path("/tmp/mlx/0.32.4/ptx")
    monkeypatch.setenv("TEMP", str(tmp_path))
    assert cbc.cache_dir("1.0") == tmp_path / "mlx" / "1.0" / "ptx"
    monkeypatch.setenv(cbc.CACHE_ENV, str(tmp_path / "mine"))
    assert cbc.cache_dir("1.0") == tmp_path / "mine"
    assert cbc.entry_path(tmp_path, "m" * 245) == tmp_path / ("m" * 245 + ".ptx")
    name = "a" * 245 + "b" * 245 + "c" * 7
    assert cbc.entry_path(tmp_path, name) == tmp_path / ("a" * 245) / ("b" * 245) / "ccccccc.ptx"


def test_arch_is_mlxs():
    assert cbc.arch_of((9, 0)) == "sm_90a" and cbc.arch_of((8, 6)) == "sm_86" and cbc.arch_of((10, 0)) == "sm_100a"


def test_elf_char_arrays_reads_static_arrays(tmp_path):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("no g++ to build an ELF file with")
    src = tmp_path / "j.cpp"
    src.write_text('namespace mlx { namespace core {\nstatic const char jit_source_utils[] = "#pragma once\\nint u;\\n";\n'
                   'static const char jit_source_binary_ops[] = "// ops\\n";\n'
                   'const char* use(int i) { return i ? jit_source_utils : jit_source_binary_ops; }\n}}\n')
    lib = tmp_path / "libj.so"
    subprocess.run([gxx, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True)
    assert cbc.elf_char_arrays(lib) == {"utils": b"#pragma once\nint u;\n", "binary_ops": b"// ops\n"}
    headers = dict(cbc.mlx_jit_headers(str(lib)))
    assert headers == {"mlx/backend/cuda/device/binary_ops.cuh": b"// ops\n",
                       "mlx/backend/cuda/device/utils.cuh": b"#pragma once\nint u;\n"}
    with pytest.raises(ValueError, match="not a little-endian ELF64"):
        cbc.elf_char_arrays(src)


# ---- entries ----

def test_an_entry_is_whole_and_checked(tmp_path):
    ptx = tmp_path / "sub" / "mod.ptx"
    cbc.write_entry(ptx, b"\x7fELFcubin", "mlx::core::cu::k", "_ZN3mlx4core2cu1kEv", "sm_90a", "13.0")
    assert ptx.read_bytes() == b"\x7fELFcubin"
    assert ptx.with_suffix(".txt").read_text() == "mlx::core::cu::k\t_ZN3mlx4core2cu1kEv\n"
    assert json.loads(ptx.with_suffix(cbc.SIDECAR).read_text())["arch"] == "sm_90a"
    assert not [p for p in ptx.parent.iterdir() if p.name.startswith(".tmp-")]
    assert cbc.entry_ok(ptx, "sm_90a")
    assert not cbc.entry_ok(ptx, "sm_100a")  # built for another GPU
    ptx.write_bytes(b"\x7fELFcubiX")  # corrupt
    assert not cbc.entry_ok(ptx, "sm_90a")
    ptx.write_bytes(b"\x7fELFcubin")
    ptx.with_suffix(cbc.SIDECAR).unlink()  # foreign: not ours
    assert not cbc.entry_ok(ptx, "sm_90a")
    assert not cbc.entry_ok(tmp_path / "missing.ptx", "sm_90a")


@pytest.fixture
def fake_builds(monkeypatch, tmp_path):
    """A BinaryCache in tmp_path whose builds write a fake entry (or fail for names in `fail`)."""
    monkeypatch.setenv(cbc.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(cbc, "mlx_jit_headers", lambda library: (("mlx/backend/cuda/device/utils.cuh", b""),))
    built, fail = [], set()

    def build(job):
        if job.kernel in fail:
            raise RuntimeError(f"NVRTC could not compile {job.kernel}")
        built.append(job.kernel)
        cbc.write_entry(Path(job.ptx), job.source.encode(), "mlx::core::cu::" + job.kernel, "_Z1kv", job.arch, "x")
        return job.module

    monkeypatch.setattr(cbc, "build", build)
    return cbc.BinaryCache("sm_90a", tmp_path / "mlx", "9.9"), built, fail


def test_ensure_builds_once_and_later_processes_find_it(fake_builds):
    cache, built, _ = fake_builds
    inst = toy()
    cache.ensure(inst)
    cache.ensure(inst)
    assert built == [cbc.kernel_name(inst)] and (cache.counts.built, cache.counts.found) == (1, 0)
    assert cache.entry(inst).read_bytes() == cbc.mlx_source(inst).encode()
    later = cbc.BinaryCache("sm_90a", cache.package, "9.9")  # another process
    assert later.ready() == 1 and cbc.BinaryCache("sm_100a", cache.package, "9.9").ready() == 0
    later.ensure(inst)
    assert built == [cbc.kernel_name(inst)] and (later.counts.found, later.counts.built) == (1, 0)
    cache.entry(inst).write_bytes(b"torn")  # a corrupt entry is rebuilt
    third = cbc.BinaryCache("sm_90a", cache.package, "9.9")
    third.ensure(inst)
    assert len(built) == 2 and third.counts.built == 1
    assert cache.entry(inst).read_bytes() == cbc.mlx_source(inst).encode()


def test_a_failed_build_is_left_to_mlx_and_said(fake_builds):
    cache, built, fail = fake_builds
    inst = toy()
    fail.add(cbc.kernel_name(inst))
    cache.ensure(inst)  # never raises
    assert (cache.counts.failed, cache.counts.built) == (1, 0) and "could not compile" in cache.reason
    assert not cache.entry(inst).exists()


@pytest.mark.parametrize("jobs", [1, 3])
def test_prebuild_builds_the_missing_ones_in_parallel(fake_builds, jobs):
    cache, built, fail = fake_builds
    insts = [toy((("N", n),)) for n in range(6)]
    cache.ensure(insts[0])  # already there
    fail.add(cbc.kernel_name(insts[5]))
    seen = []
    assert cache.prebuild(insts + insts[:2], jobs=jobs, progress=lambda d, t: seen.append((d, t))) == 4
    assert sorted(built) == sorted(cbc.kernel_name(i) for i in insts[:5])
    assert seen[-1] == (5, 5) and [d for d, _ in seen] == [1, 2, 3, 4, 5]
    assert (cache.counts.built, cache.counts.failed) == (5, 1)
    assert cache.prebuild(insts) == 0  # all settled in this process


# ---- the CUDA backend's launches ----

class _Kernel:
    def __call__(self, *, inputs, output_shapes, output_dtypes, **_):
        import mlx.core as mx

        return [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]


@pytest.fixture
def stand_in_cuda(monkeypatch):
    mx = pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import (
        device as cuda_device, probe as cuda_probe, settings as cuda_settings, backend as cuda,
    )

    monkeypatch.setattr(cuda.mx.fast, "cuda_kernel", lambda **_: _Kernel())
    monkeypatch.setattr(cuda_device, "_family", lambda: "sm90")
    monkeypatch.setattr(cuda_probe, "sm_count", lambda: 132)
    monkeypatch.setattr(cuda, "COMPILE", False)
    monkeypatch.delenv(cuda_settings.KERNEL_ENV, raising=False)
    cuda.clear_caches()
    yield mx, cuda
    cuda.clear_caches()


class _Recorder:
    def __init__(self):
        self.ensured, self.prebuilt = [], []

    def ensure(self, inst):
        self.ensured.append(inst)

    def prebuild(self, instances, jobs=None, progress=None):
        self.prebuilt.append(list(instances))
        return 0


def test_each_launch_asks_the_cache_for_its_instance(stand_in_cuda, monkeypatch):
    mx, cuda = stand_in_cuda
    rec = _Recorder()
    monkeypatch.setattr(cuda_kernels, "binary_cache", lambda: rec)
    x, w = mx.zeros((512, 1024), dtype=mx.bfloat16), mx.zeros((256, 1024), dtype=mx.int8)
    cuda.w8a8(x, w, mx.ones((256,)), None)
    names = [i.spec.name for i in rec.ensured]
    assert names[0] == cuda_source.quantize().name and len(names) == 2
    quant = rec.ensured[0]
    assert quant.inputs == (("bfloat16", 2),) and quant.outputs == ("int8",)  # the activation pack
    assert quant.template[0] == ("T", "bfloat16")


def test_warm_up_collects_then_prebuilds_every_instance(stand_in_cuda, monkeypatch):
    mx, cuda = stand_in_cuda
    rec = _Recorder()
    monkeypatch.setattr(cuda_kernels, "binary_cache", lambda: rec)
    layers = [cuda.WarmLayer("w8a8_linear", 4608, 3584, mx.float32), cuda.WarmLayer("w8a8_linear", 3584, 18944),
              cuda.WarmLayer("int8_matmul", 512, 1024)]
    cuda.warm_up_layers(layers, 600, dtype=mx.bfloat16)
    assert len(rec.prebuilt) == 1
    wanted = set(rec.prebuilt[0])
    # every instance a call at any M <= 600 launches was among those prebuilt, none built inline
    assert not rec.ensured or set(rec.ensured) <= wanted
    rec.ensured.clear()
    w = {layer: mx.zeros((layer.n, layer.k), dtype=mx.int8) for layer in layers}
    for m in range(1, 601, 37):
        for layer in layers:
            if layer.op == "int8_matmul":
                cuda.gemm_int32(mx.zeros((m, layer.k), dtype=mx.int8), w[layer])
            else:
                b = None if layer.bias_dtype is None else mx.zeros((layer.n,), dtype=layer.bias_dtype)
                cuda.w8a8(mx.zeros((m, layer.k), dtype=mx.bfloat16), w[layer], mx.ones((layer.n,)), b)
    assert rec.ensured and set(rec.ensured) <= wanted


def test_collecting_notes_instead_of_building(stand_in_cuda, monkeypatch):
    mx, cuda = stand_in_cuda
    rec = _Recorder()
    monkeypatch.setattr(cuda_kernels, "binary_cache", lambda: rec)
    with cuda_kernels.collect_instances() as found:
        cuda.gemm_int32(mx.zeros((64, 1024), dtype=mx.int8), mx.zeros((256, 1024), dtype=mx.int8))
    assert found and not rec.ensured
    cuda.gemm_int32(mx.zeros((64, 1024), dtype=mx.int8), mx.zeros((256, 1024), dtype=mx.int8))
    assert rec.ensured == found


def test_the_cache_can_be_turned_off(monkeypatch):
    pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import kernels as cuda_kernels

    monkeypatch.setenv(cuda_kernels.BINARY_CACHE_ENV, "off")
    cuda_kernels.binary_cache.cache_clear()
    try:
        assert cuda_kernels.binary_cache() is None
        assert f"{cuda_kernels.BINARY_CACHE_ENV}=off" in cuda_kernels.binary_cache_status()
    finally:
        cuda_kernels.binary_cache.cache_clear()


# ---- with MLX's NVRTC: a CUDA build of MLX (and, for what runs, an NVIDIA GPU) ----

def _cuda_or_skip():
    mx = pytest.importorskip("mlx.core")
    if not (getattr(mx, "cuda", None) and mx.cuda.is_available()):
        if os.environ.get("INT8NAX_REQUIRE_GPU"):
            pytest.fail("INT8NAX_REQUIRE_GPU is set but MLX sees no CUDA device")
        pytest.skip("needs MLX's CUDA backend and an NVIDIA GPU")
    from int8nax.backends.cuda import backend as cuda

    return mx, cuda


def _stdout_of(fn):
    """What fn() writes to file descriptor 1 (MLX's std::cout), and fn's result."""
    sys.stdout.flush()
    saved, (r, w) = os.dup(1), os.pipe()
    os.dup2(w, 1)
    try:
        result = fn()
    finally:
        os.dup2(saved, 1)
        os.close(w)
        os.close(saved)
    with os.fdopen(r) as f:
        return f.read(), result


def test_the_source_is_mlxs_byte_for_byte():
    mx, cuda = _cuda_or_skip()
    from int8nax.backends.cuda import source as cuda_source

    spec = cuda_source.quantize()
    kernel = mx.fast.cuda_kernel(name=spec.name, input_names=list(spec.input_names),
                                 output_names=list(spec.output_names), source=spec.source, header=spec.header)
    x = mx.zeros((3, 40), dtype=mx.bfloat16)
    launch = cuda_graphs.quant_launch(3, 40)
    template = [("T", mx.bfloat16)] + launch.template()
    grid, block = launch.grid(3)
    printed, _ = _stdout_of(lambda: kernel(inputs=[x], output_shapes=[(3, 40), (3,)], output_dtypes=[mx.int8, mx.float32],
                                           grid=grid, threadgroup=block, template=template, verbose=True))
    body = printed.split("```\n", 1)[1].rsplit("\n```", 1)[0]
    inst = cbc.Instance.of(spec, [x], [mx.int8, mx.float32], template)
    assert body == cbc.mlx_source(inst)


def test_mlx_runs_the_entry_the_cache_wrote(tmp_path):
    # An entry holding another body's binary under this kernel's module name: MLX runs it, so
    # MLX reads the entries the cache writes under the names it computes. In a process of its
    # own: MLX reads MLX_PTX_CACHE_DIR once, at its first build.
    _cuda_or_skip()
    script = tmp_path / "poison.py"
    script.write_text(
        "import mlx.core as mx\n"
        "from int8nax.backends.cuda import device as cuda_device, binary_cache as cbc\n"
        "from int8nax.backends.kernel_spec import KernelSpec\n"
        "from int8nax.backends.mlx_install import mlx_package_dir\n"
        "def spec(v):\n"
        "    return KernelSpec('int8nax_toy', ('a',), ('out',), f'out[threadIdx.x] = a[threadIdx.x] + {v};', '', 0)\n"
        "cache = cbc.BinaryCache(cbc.arch_of(cuda_device.compute_capability()), mlx_package_dir(), mx.__version__)\n"
        "a = mx.arange(32, dtype=mx.int32)\n"
        "honest = cbc.Instance.of(spec(1), [a], [mx.int32], [])\n"
        "other = cache._missing(cbc.Instance.of(spec(7), [a], [mx.int32], []))\n"
        "cbc.build(cbc.Job(other.source, other.kernel, other.module, str(cache.entry(honest)), other.arch,\n"
        "                  other.package, other.includes, other.headers))\n"
        "kernel = mx.fast.cuda_kernel(name='int8nax_toy', input_names=['a'], output_names=['out'], source=spec(1).source)\n"
        "out = kernel(inputs=[a], output_shapes=[(32,)], output_dtypes=[mx.int32], grid=(32, 1, 1), threadgroup=(32, 1, 1))[0]\n"
        "print(out.tolist())\n")
    env = dict(os.environ, MLX_PTX_CACHE_DIR=str(tmp_path / "ptx"))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [i + 7 for i in range(32)]


def test_a_fresh_process_loads_what_warm_up_built(tmp_path):
    _cuda_or_skip()
    script = tmp_path / "run.py"
    script.write_text(
        "import sys, json, numpy as np, mlx.core as mx\n"
        "from int8nax.backends.cuda import kernels as cuda_kernels, backend as cuda\n"
        "from int8nax import reference\n"
        "n, k = 384, 1024\n"
        "if sys.argv[1] == 'warm':\n"
        "    layers = [cuda.WarmLayer('w8a8_linear', n, k), cuda.WarmLayer('int8_matmul', n, k)]\n"
        "    cuda.warm_up_layers(layers, 300, dtype=mx.bfloat16, jobs=4)\n"
        "else:\n"
        "    rng = np.random.default_rng(0)\n"
        "    w = rng.integers(-127, 128, (n, k), dtype=np.int8)\n"
        "    for m in (1, 9, 64, 200, 300):\n"
        "        a = rng.integers(-128, 128, (m, k), dtype=np.int8)\n"
        "        got = np.array(cuda.gemm_int32(mx.array(a), mx.array(w)))\n"
        "        assert (got == a.astype(np.int64) @ w.T.astype(np.int64)).all()\n"
        "        x = mx.array(rng.standard_normal((m, k)).astype(np.float32)).astype(mx.bfloat16)\n"
        "        mx.eval(cuda.w8a8(x, mx.array(w), mx.ones((n,)), None))\n"
        "c = cuda_kernels.binary_cache().counts\n"
        "print(json.dumps(dict(found=c.found, built=c.built, failed=c.failed)))\n")
    env = dict(os.environ, MLX_PTX_CACHE_DIR=str(tmp_path / "ptx"))
    warm = subprocess.run([sys.executable, str(script), "warm"], env=env, capture_output=True, text=True, timeout=900)
    assert warm.returncode == 0, warm.stderr[-3000:]
    first = json.loads(warm.stdout.strip().splitlines()[-1])
    assert first["built"] > 0 and first["failed"] == 0
    run = subprocess.run([sys.executable, str(script), "run"], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    second = json.loads(run.stdout.strip().splitlines()[-1])
    assert second["built"] == 0 and second["failed"] == 0 and second["found"] > 0


def _tiny_qwen2(mx, layers=2):
    qwen2 = pytest.importorskip("mlx_lm.models.qwen2")
    args = qwen2.ModelArgs(model_type="qwen2", hidden_size=64, num_hidden_layers=layers, intermediate_size=192,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, vocab_size=96)
    model = qwen2.Model(args)
    model.set_dtype(mx.bfloat16)
    return model


def test_a_model_warmed_up_builds_nothing_inside_a_forward_at_any_length(stand_in_cuda, monkeypatch):
    # nn.warm_up(model, 8192) prebuilds every instance the model's W8A8 calls meet; a forward at 50
    # random prompt lengths in 1..8192 then asks only for those (nothing compiled in a request).
    mx, cuda = stand_in_cuda
    import random

    from int8nax import backends, nn as inn

    rec = _Recorder()
    monkeypatch.setattr(cuda_kernels, "binary_cache", lambda: rec)
    monkeypatch.setattr(backends, "resolve", lambda requested=None: cuda.BACKEND)
    model = _tiny_qwen2(mx)
    assert inn.quantize_linears(model) == 14
    calls = inn.kernel_calls(model)
    assert sorted(calls[None]) == sorted([("w8a8_linear", 64 + 2 * 32, 64, mx.float32), ("w8a8_linear", 64, 64, None),
                                          ("w8a8_linear", 2 * 192, 64, None), ("w8a8_linear", 64, 192, None)])
    inn.warm_up(model, 8192)
    wanted = set(rec.prebuilt[0])
    rec.ensured.clear()
    rng = random.Random(47)
    for length in sorted(rng.sample(range(1, 8193), 50)):
        model(mx.zeros((1, length), dtype=mx.int32))
    assert rec.ensured and set(rec.ensured) <= wanted


def test_a_model_warmed_up_on_the_gpu_compiles_nothing_later(tmp_path, monkeypatch):
    mx, cuda = _cuda_or_skip()
    import random

    from int8nax import nn as inn

    monkeypatch.setenv(cbc.CACHE_ENV, str(tmp_path))  # effective only where MLX has not read it yet
    model = _tiny_qwen2(mx)
    inn.quantize_linears(model)
    inn.warm_up(model, 8192)
    cache = cuda_kernels.binary_cache()
    built, failed = cache.counts.built, cache.counts.failed
    rng = random.Random(47)
    for length in sorted(rng.sample(range(1, 8193), 50)):
        mx.eval(model(mx.zeros((1, length), dtype=mx.int32)))
    assert (cache.counts.built, cache.counts.failed) == (built, failed) == (built, 0)


def test_the_warm_command_loads_a_folder_quantizes_and_warms(tmp_path, monkeypatch, capsys):
    pytest.importorskip("mlx.core")
    from int8nax import backends
    from int8nax.backends import base
    from int8nax.bench import generate, model_folder
    from int8nax.commands import cli

    try:
        generate.front_end()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"no mlx-lm front end: {exc}")
    monkeypatch.setenv(model_folder.CACHE_ENV, str(tmp_path))
    path = model_folder.folder("qwen2.5-0.5b", layers=1, vocab=256)
    seen = []

    def warm_up(self, layers, max_rows, dtype, *, jobs=None, progress=None):
        seen.append((sorted(layers), max_rows, dtype, jobs))
        return 3

    monkeypatch.setattr(base.Backend, "warm_up", warm_up)
    assert cli.main(["warm", "--model", str(path), "--max-tokens", "100", "--batch", "2", "--jobs", "3",
                     "--skip-lm-head"]) == 0
    out = capsys.readouterr().out
    assert "7 W8A8 layers" in out and "up to 200 rows" in out and "3 kernels built" in out
    (layers, rows, dtype, jobs), = seen
    assert rows == 200 and jobs == 3 and len(layers) == 4 and str(dtype).endswith("bfloat16")
    with pytest.raises(SystemExit) as stop:
        cli.main(["warm", "--model", str(tmp_path / "nowhere")])
    assert stop.value.code == 2 and "expected an mlx-lm model folder" in capsys.readouterr().err
