"""The SwiGLU quantization kernel (kernels/cuda/quant/swiglu_quantize.cuh) as it is sent to NVRTC, its
launch, and its build: no MLX CUDA and no GPU needed (the kernel's results: test_cuda_swiglu.py).

The compile test needs nvcc and MLX's own JIT headers (the kernel calls MLX's device functors,
and there is no stand-in for them): set INT8NAX_MLX_JIT_HEADERS to a folder holding
mlx/backend/cuda/device/{binary_ops,unary_ops,utils,...}.cuh of the MLX version in use (e.g.
extracted from its libmlx), and NVCC if nvcc is not on PATH; else it is skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from int8nax.backends.cuda import plans as cuda_plans, source as cuda_source

NVCC = os.environ.get("NVCC") or shutil.which("nvcc") or shutil.which("nvcc", path="/usr/local/cuda/bin")
MLX_JIT_HEADERS = os.environ.get("INT8NAX_MLX_JIT_HEADERS")
REGISTERS_PER_SM = 65536

MLX_LINE = '#include "mlx/backend/cuda/device/binary_ops.cuh"'


def compile_check():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import cuda_compile_check

    return cuda_compile_check


# ---- what is sent to NVRTC ----

def test_spec_calls_the_swiglu_rows_on_half_of_y():
    spec = cuda_source.swiglu_quantize()
    assert spec.name == "int8nax_swiglu_quantize_" + cuda_source.digest("swiglu_quantize")
    assert (spec.input_names, spec.output_names, spec.shared_memory) == (("y",), ("pack",), 0)
    # H = y's columns / 2: g = y[:, :H], u = y[:, H:]; codes and scales into the activation pack
    assert spec.source == ("int8nax::quantize_swiglu_rows<T, THREADS, HELD>(y, y_shape[1] / 2, "
                           "int8nax::pack_codes(pack, y_shape[0]), int8nax::pack_scales(pack));")
    assert spec.header == cuda_source.header("swiglu_quantize")


def test_header_includes_mlx_functors_by_their_jit_name():
    lines = cuda_source.header("swiglu_quantize").splitlines()
    assert len(lines) == 1 and lines[0].startswith('#include "/') and lines[0].endswith('/quant/swiglu_quantize.cuh"')
    # MLX's header verbatim in ours (NVRTC resolves it from the headers MLX registers), after what it needs
    assert cuda_source.walk("swiglu_quantize") == ("common.cuh", "quant/act_pack.cuh", "quant/groups.cuh",
                                                   "quant/codes.cuh", "quant/quantize.cuh",
                                                   cuda_source.MLX_BINARY_OPS, "quant/swiglu_quantize.cuh")
    assert MLX_LINE in cuda_source._read("quant/swiglu_quantize.cuh").splitlines()
    assert cuda_source.mlx_headers(cuda_source.header("swiglu_quantize")) == [cuda_source.MLX_BINARY_OPS]
    # The plain quantization kernel does not include MLX's header.
    assert "mlx/" not in cuda_source.header("quantize") and "mlx/" not in cuda_source.header_text("quantize")


def test_inlined_header_keeps_the_mlx_include_line(monkeypatch):
    cuda_source.header.cache_clear()
    monkeypatch.setattr(cuda_source, "kernels_dir", lambda: None)
    try:
        text = cuda_source.header("swiglu_quantize")
    finally:
        cuda_source.header.cache_clear()
    assert text == cuda_source.header_text("swiglu_quantize")
    assert text.count(MLX_LINE + "\n") == 1 and '#include "/' not in text
    quantize, swiglu = (cuda_source._without_includes(cuda_source._read(f))
                        for f in ("quant/quantize.cuh", "quant/swiglu_quantize.cuh"))
    # in dependency order: quant/quantize.cuh's text, MLX's functors, then the kernel that uses both
    assert text.index(quantize) < text.index(MLX_LINE) < text.index(swiglu)
    assert "quantize_swiglu_rows" in swiglu and "mlx::core::cu::Sigmoid" in swiglu


@pytest.mark.parametrize("edited", ["quant/swiglu_quantize.cuh", "quant/quantize.cuh", "quant/codes.cuh"])
def test_kernel_name_changes_with_our_header_text(monkeypatch, edited):
    before = cuda_source.swiglu_quantize().name
    cached = (cuda_source.header_text, cuda_source.digest, cuda_source.header, cuda_source.swiglu_quantize)
    for fn in cached:
        fn.cache_clear()
    real = cuda_source._read
    monkeypatch.setattr(cuda_source, "_read", lambda f: real(f) + ("// edited\n" if f == edited else ""))
    try:
        assert cuda_source.swiglu_quantize().name != before
    finally:
        monkeypatch.undo()
        for fn in cached:
            fn.cache_clear()
    assert cuda_source.swiglu_quantize().name == before


# ---- the launch (cuda_plans.cuda_swiglu_quant_launch) ----

MODEL_H = [4864, 12288, 18944]  # Qwen2.5-0.5B, Qwen3-8B, Qwen2.5-7B
SWIGLU_H = [8, 24, 896, 4095, 4096, 4104, 8192, 8200, 11008, 14336, 32768, 32776] + MODEL_H
QUANT_M = [1, 16, 100, 132, 133, 512, 4096, 100000]
SWIGLU_OVERHEAD_REGISTERS = 40
"""Registers of the SwiGLU kernel besides its held g and u words, with a margin (ptxas, CUDA 13.0,
sm_90a: at held 4, float16 64 = 32 + 32, bfloat16 54 = 32 + 22, float32 80 = 64 + 16; at held 8,
2-byte types 80 = 64 + 16); checked against ptxas by the compile test below."""


@pytest.mark.parametrize("itemsize", [2, 4])
@pytest.mark.parametrize("sms", [132, 114, 16])
def test_swiglu_launch_fits_the_registers_of_an_sm(itemsize, sms):
    for m in QUANT_M:
        for h in SWIGLU_H:
            launch = cuda_plans.cuda_swiglu_quant_launch(m, h, itemsize, sms)
            assert launch in cuda_plans.SWIGLU_QUANT_LAUNCHES
            held_registers = cuda_plans.swiglu_held_bytes(launch, itemsize) // 4
            # No __launch_bounds__ in MLX's kernels: a block whose threads need more than an SM's
            # share of registers does not launch at all.
            assert held_registers + SWIGLU_OVERHEAD_REGISTERS <= min(255, REGISTERS_PER_SM // launch.threads), (m, h)


@pytest.mark.parametrize("sms", [132, 114, 16])
def test_swiglu_launch_is_the_quantization_launch_for_2_byte_types_but_many_long_rows(sms):
    # float16 / bfloat16 rows of h fit every launch's registers: the plain kernel's reasoning holds,
    # except for many rows longer than 8192, where (512, 8) fits one row an SM and the pair launch two.
    pair = cuda_plans.SWIGLU_PAIR_LAUNCH
    paired = []
    for m in QUANT_M:
        for h in SWIGLU_H:
            launch = cuda_plans.cuda_swiglu_quant_launch(m, h, 2, sms)
            if m > sms and 8192 < h <= pair.capacity:
                assert launch == pair and cuda_plans.cuda_quant_launch(m, h, sms).held == 8, (m, h)
                paired.append((m, h))
            else:
                assert launch == cuda_plans.cuda_quant_launch(m, h, sms), (m, h)
    assert (4096, 18944) in paired and (4096, 12288) in paired


def test_the_pair_launch_fits_two_rows_an_sm():
    # 59 registers a thread (ptxas, checked by the compile test below), allocated in 8s: 64.
    pair = cuda_plans.SWIGLU_PAIR_LAUNCH
    assert 2 * pair.threads * 64 <= REGISTERS_PER_SM < 2 * pair.threads * 80  # (512, 8)'s 80: one
    assert pair.capacity >= 18944 and cuda_plans.swiglu_held_bytes(pair, 2) <= cuda_plans.SWIGLU_HELD_BYTES
    assert cuda_plans.swiglu_held_bytes(pair, 4) > cuda_plans.SWIGLU_HELD_BYTES  # float32 never takes it


@pytest.mark.parametrize("m", QUANT_M)
@pytest.mark.parametrize("h", MODEL_H)
def test_model_rows_are_held_in_registers_in_serving_types(m, h):
    launch = cuda_plans.cuda_swiglu_quant_launch(m, h, 2)
    assert launch.capacity >= h  # read once: g and u in flight together, h never in memory


def test_float32_avoids_the_launch_that_cannot_start():
    big = cuda_plans.CUDA_QUANT_LAUNCHES[-1]
    assert cuda_plans.swiglu_held_bytes(big, 4) > cuda_plans.SWIGLU_HELD_BYTES
    seen = {cuda_plans.cuda_swiglu_quant_launch(m, h, 4) for m in QUANT_M for h in SWIGLU_H}
    assert big not in seen and len(seen) == 2
    # the widest launch that fits takes the long rows and the few-row case
    assert cuda_plans.cuda_swiglu_quant_launch(1, 18944, 4) == cuda_plans.CudaQuantLaunch(256, 4)


# ---- tools/cuda_compile_check.py ----

def test_compile_check_builds_every_launch_and_dtype():
    ccc = compile_check()
    got = [(label, ins, outs, tmpl) for label, spec, ins, outs, tmpl in ccc.instances("sm_90a")
           if spec is cuda_source.swiglu_quantize()]
    want = [(f"swiglu_quantize {t} {x.threads}x{x.held}", [ccc.CUDA_TYPES[t]], ["int8_t"], [("T", t)] + x.template())
            for x in cuda_plans.SWIGLU_QUANT_LAUNCHES for t in ("float16", "bfloat16", "float32")
            if cuda_plans.swiglu_held_bytes(x, 4 if t == "float32" else 2) <= cuda_plans.SWIGLU_HELD_BYTES]
    assert got == want and len(want) == 10  # float32 at 512x8 and 512x5 cannot start: never built
    assert ccc.mlx_headers(cuda_source.swiglu_quantize()) == [cuda_source.MLX_BINARY_OPS]
    assert ccc.mlx_headers(cuda_source.quantize()) == []


def test_compile_check_skips_them_without_mlx_headers(capsys, tmp_path):
    # No nvcc is run: every selected instance needs MLX's real headers, which the stand-in is not.
    # The tripwire is an nvcc that exists (the tool refuses a missing one) and leaves a mark.
    nvcc, ran = tmp_path / "nvcc", tmp_path / "ran"
    nvcc.write_text(f"#!/bin/sh\ntouch '{ran}'\nexit 1\n")
    nvcc.chmod(0o755)
    assert compile_check().main(["--nvcc", str(nvcc), "--only", "^swiglu_quantize "]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("skipped 10 instances") and "--mlx-include" in out[0], out
    assert not ran.exists()


@pytest.mark.skipif(NVCC is None, reason="no nvcc here (set NVCC=/path/to/nvcc)")
@pytest.mark.skipif(not MLX_JIT_HEADERS, reason="MLX's JIT headers not given (set INT8NAX_MLX_JIT_HEADERS)")
def test_the_kernels_compile_against_mlx_headers(tmp_path):
    """Every instance, as MLX hands it to NVRTC, through nvcc for sm_90a: compiled, no spills,
    within an SM's registers at its launch (the tool builds only launches that can start); and in
    the PTX, the held path issues all of its row's g and u loads before the first sigmoid (ex2)."""
    ccc = compile_check()
    cases = [i for i in ccc.instances("sm_90a") if i[0].startswith("swiglu_quantize ")]
    assert len(cases) == 10
    for label, spec, ins, outs, tmpl in cases:
        dtype, launch = tmpl[0][1], cuda_plans.CudaQuantLaunch(tmpl[1][1], tmpl[2][1])
        itemsize = 4 if dtype == "float32" else 2
        cu = tmp_path / (ccc.stem(label) + ".cu")
        cu.write_text(ccc.translation_unit(spec, ins, outs, tmpl))
        base = [NVCC, "-std=c++17", "-I", MLX_JIT_HEADERS]
        proc = subprocess.run(base + ["-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-Xptxas", "-v",
                                      "-o", str(cu.with_suffix(".cubin")), str(cu)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{label}: {proc.stderr[-3000:]}"
        spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", proc.stderr)
        assert spills and all(v == "0" for v in spills), f"{label}: {proc.stderr[-2000:]}"
        (registers,) = map(int, re.findall(r"Used (\d+) registers", proc.stderr))
        assert registers * launch.threads <= REGISTERS_PER_SM, (label, registers)
        if launch == cuda_plans.SWIGLU_PAIR_LAUNCH:  # its reason to be: two rows an SM (registers in 8s)
            assert 2 * launch.threads * (-(-registers // 8) * 8) <= REGISTERS_PER_SM, (label, registers)
        assert registers <= cuda_plans.swiglu_held_bytes(launch, itemsize) // 4 + SWIGLU_OVERHEAD_REGISTERS, label
        proc = subprocess.run(base + ["-ptx", "-arch=sm_90a", "-o", str(cu.with_suffix(".ptx")), str(cu)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{label}: {proc.stderr[-3000:]}"
        ptx = cu.with_suffix(".ptx").read_text()
        loads_first = ptx[:ptx.index("ex2.approx")].count("ld.global.nc.v4.u32")
        assert loads_first == 2 * launch.held * (itemsize * 8 // 16), (label, loads_first)


def test_ptx_comparison_ignores_only_the_source_digests_nvcc_puts_in_names(tmp_path):
    # Two builds of one kernel from sources that differ only in text (so in MLX's kernel-name digest
    # and nvcc's per-file digests, the anonymous namespace's included: MLX's headers declare one)
    # are the same code; a changed instruction is not.
    body = ("// built 1\n.visible .entry _ZN3mlx4core2cu39custom_kernel_int8nax_swiglu_quantize_{k}EPKa(\n"
            ".global .align 1 .b8 _ZN52_INTERNAL_{i}_21_swiglu_quantize_f16_cu_{j}4cuda3std3__45__cpo5beginE[1];\n"
            ".global .align 1 .b8 _ZN4cuda3std3__466_GLOBAL__N__{i}_33_swiglu_quantize_f16_cu_{j}6ignoreE[1];\n"
            "\t{op}.f32 %f1, %f2, %f3;\n")
    a, b, c = tmp_path / "a.ptx", tmp_path / "b.ptx", tmp_path / "c.ptx"
    a.write_text(body.format(k="161c8835", i="07d77243", j="9d68146a", op="mul"))
    b.write_text(body.format(k="771c2bad", i="f3709a37", j="72474f8a", op="mul"))
    c.write_text(body.format(k="771c2bad", i="f3709a37", j="72474f8a", op="add"))
    normalized = compile_check().normalized_ptx
    assert normalized(str(a)) == normalized(str(b))
    assert normalized(str(a)) != normalized(str(c))


# ---- the staged kernel (kernels/cuda/quant/swiglu_quantize_staged.cuh, cuda_plans.cuda_swiglu_staged_launch) ----

def test_staged_spec_asks_its_buffers_as_shared_memory_and_ends_with_its_launch_bound():
    spec = cuda_source.swiglu_quantize_staged(151552)
    assert spec.name == "int8nax_swiglu_quantize_staged_" + cuda_source.digest("swiglu_quantize_staged")
    assert (spec.input_names, spec.output_names, spec.shared_memory) == (("y",), ("pack",), 151552)
    assert spec.source == ("int8nax::quantize_swiglu_rows_staged<T, THREADS, HELD, STAGE_BYTES>"
                           "(y, y_shape[1] / 2, y_shape[0], int8nax::pack_codes(pack, y_shape[0]), "
                           "int8nax::pack_scales(pack));")
    assert cuda_source.walk("swiglu_quantize_staged") == (
        "common.cuh", "ptx/cpasync.cuh", "quant/act_pack.cuh", "quant/groups.cuh", "quant/codes.cuh",
        "quant/quantize.cuh", cuda_source.MLX_BINARY_OPS, "quant/swiglu_quantize.cuh",
        "quant/swiglu_quantize_staged.cuh")
    # the launch bound ends the header, after every include (cuda_source.LAUNCH_BOUNDS)
    lines = spec.header.splitlines()
    assert lines[0].endswith('/quant/swiglu_quantize_staged.cuh"') and lines[1:] == [
        "#undef __global__", "#define __global__ __location__(global) __launch_bounds__(512, 1)"]
    assert cuda_source.swiglu_quantize_staged(98304).shared_memory == 98304


@pytest.mark.parametrize("sms", [132, 114, 16])
def test_staged_launch_takes_many_rows_of_2_byte_types_that_two_buffers_hold(sms):
    taken = []
    for m in QUANT_M:
        for h in SWIGLU_H:
            for itemsize in (2, 4):
                launch = cuda_plans.cuda_swiglu_staged_launch(m, h, itemsize, sms)
                fits = (4 * h * itemsize + cuda_plans.STAGED_STATIC_SMEM <= cuda_plans.SMEM_PER_BLOCK
                        and h <= 8 * 512 * cuda_plans.STAGED_MAX_HELD)
                if itemsize == 4 or h % 8 or m < 2 * sms or not fits:
                    assert launch is None, (m, h, itemsize)
                    continue
                assert launch.threads == 512 and launch.blocks == sms and launch.capacity >= h, (m, h)
                assert launch.capacity - h < 8 * 512  # the fewest groups that hold the row
                assert launch.stage_bytes == 4 * h * itemsize <= cuda_plans.SMEM_PER_BLOCK - cuda_plans.STAGED_STATIC_SMEM
                assert launch.grid(m) == ((sms * 512, 1, 1), (512, 1, 1))
                assert launch.template() == [("THREADS", 512), ("HELD", launch.held), ("STAGE_BYTES", 4 * h * 2)]
                taken.append((m, h))
    assert all((4096, h) in taken for h in MODEL_H) and (512, 18944) in taken
    assert (100000, 32768) not in taken  # 256 KB of buffers: more than a block may have
    widest = cuda_plans.staged_max_hidden(2)
    assert cuda_plans.cuda_swiglu_staged_launch(4096, widest, 2) is not None
    assert cuda_plans.cuda_swiglu_staged_launch(4096, widest + 8, 2) is None
    # the buffers and the kernel's static words (a word a warp) within one block's 227 KB
    assert 4 * widest * 2 + 4 * 512 // 32 <= 227 * 1024 < 4 * (widest + 8) * 2 + 4 * 512 // 32


def test_staged_launch_grid_is_at_most_a_block_a_row():
    launch = cuda_plans.CudaStagedLaunch(512, 5, 18944, 2, 132)
    assert launch.grid(7) == ((7 * 512, 1, 1), (512, 1, 1)) and launch.grid(4096)[0] == (132 * 512, 1, 1)


def test_compile_check_builds_the_staged_kernel_at_every_held():
    ccc = compile_check()
    got = [(label, tmpl) for label, spec, ins, outs, tmpl in ccc.instances("sm_90a")
           if label.startswith("swiglu_quantize_staged ")]
    assert [label for label, _ in got] == [f"swiglu_quantize_staged {t} 512x{h}"
                                           for h in range(1, cuda_plans.STAGED_MAX_HELD + 1)
                                           for t in ("float16", "bfloat16")]
    for _, tmpl in got:
        stage = dict(tmpl)["STAGE_BYTES"]
        assert stage + cuda_plans.STAGED_STATIC_SMEM <= cuda_plans.SMEM_PER_BLOCK
        assert 4 * 2 * 8 * 512 * (dict(tmpl)["HELD"] - 1) < stage


@pytest.mark.skipif(NVCC is None, reason="no nvcc here (set NVCC=/path/to/nvcc)")
@pytest.mark.skipif(not MLX_JIT_HEADERS, reason="MLX's JIT headers not given (set INT8NAX_MLX_JIT_HEADERS)")
def test_the_staged_kernel_compiles_within_its_launch_bound(tmp_path):
    """Every staged instance through nvcc for sm_90a: no spills, and at most 128 registers a thread
    (the bound of cuda_source.LAUNCH_BOUNDS: 512 threads x 128 = an SM's register file; without it
    ptxas took up to 136, and the launch would fail)."""
    ccc = compile_check()
    cases = [i for i in ccc.instances("sm_90a") if i[0].startswith("swiglu_quantize_staged ")]
    for label, spec, ins, outs, tmpl in cases:
        cu = tmp_path / (ccc.stem(label) + ".cu")
        cu.write_text(ccc.translation_unit(spec, ins, outs, tmpl))
        proc = subprocess.run([NVCC, "-std=c++17", "-I", MLX_JIT_HEADERS, "-cubin", "-gencode=arch=compute_90a,code=sm_90a",
                               "-Xptxas", "-v", "-o", str(cu.with_suffix(".cubin")), str(cu)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{label}: {proc.stderr[-3000:]}"
        spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", proc.stderr)
        assert spills and all(v == "0" for v in spills), f"{label}: {proc.stderr[-2000:]}"
        (registers,) = map(int, re.findall(r"Used (\d+) registers", proc.stderr))
        assert registers * 512 <= REGISTERS_PER_SM, (label, registers)
