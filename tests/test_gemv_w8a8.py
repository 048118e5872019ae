"""The small-M W8A8 GEMM, the GEMV (kernels/cuda/gemm/gemv_w8a8.cuh; its cuda_choice row "gemv") without a
GPU: its index arithmetic compiled as host C++ and run through an emulation of mma.sync.m16n8k32.s8
written from the PTX ISA's fragment tables (not from the kernel's own helpers), over the kernel's
loop structure, against the exact integer product; its plans and where the choice takes it; its
instances through nvcc. The kernel itself runs in tests/test_cuda_gemv.py (CUDA only)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from int8nax.backends.cuda import choice as cuda_choice, plans as cuda_plans, source as cuda_source

CXX = shutil.which("g++") or shutil.which("clang++")
NVCC = os.environ.get("NVCC") or shutil.which("nvcc") or (shutil.which("nvcc", path="/usr/local/cuda/bin"))
HEADER = Path(cuda_source.__file__).resolve().parents[2] / "kernels" / "cuda" / "gemm/gemv_w8a8.cuh"

PROGRAM = r"""
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#define GEMV_HD static inline
#include "HEADER"
using namespace int8nax::gemv;

// mma.m16n8k32 .s8 by the PTX ISA's tables: a_i (i = 0..15, register i / 4, byte i % 4) at row
// groupID (+8 for registers 1 and 3), column 4 threadID_in_group + i % 4 (+16 for registers 2, 3);
// b_i (i = 0..7) at row 4 threadID_in_group + i % 4 (+16 for register 1), column groupID;
// c_i at row groupID (+8 for i >= 2), column 2 threadID_in_group + i % 2.
static int byte_of(uint32_t r, int i) { return (int)(int8_t)(uint8_t)(r >> (8 * i)); }
static void mma_spec(const uint32_t a[32][4], const uint32_t b[32][2], long long c[32][4]) {
  int A[16][32], B[32][8];
  for (int lane = 0; lane < 32; ++lane) {
    int g = lane / 4, t = lane % 4;
    for (int i = 0; i < 16; ++i) {
      int reg = i / 4, row = g + ((reg == 1 || reg == 3) ? 8 : 0), col = 4 * t + (i % 4) + (reg >= 2 ? 16 : 0);
      A[row][col] = byte_of(a[lane][reg], i % 4);
    }
    for (int i = 0; i < 8; ++i) {
      int reg = i / 4;
      B[4 * t + (i % 4) + (reg ? 16 : 0)][g] = byte_of(b[lane][reg], i % 4);
    }
  }
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      int row = lane / 4 + (i >= 2 ? 8 : 0), col = 2 * (lane % 4) + (i % 2);
      long long s = 0;
      for (int k = 0; k < 32; ++k) s += (long long)A[row][k] * B[k][col];
      c[lane][i] += s;
    }
}

struct Bytes { uint32_t w[4]; };
// What load16 reads: `valid` bytes of the row (at most 16), zeros after them.
static Bytes load(const int8_t* p, int valid) {
  Bytes r = {{0, 0, 0, 0}};
  for (int i = 0; i < 16 && i < valid; ++i) r.w[i / 4] |= (uint32_t)(uint8_t)p[i] << (8 * (i % 4));
  return r;
}

static int bad = 0;
// The kernel's block of WARPS warps on w rows [n0, n0 + 8 NT), as gemv_w8a8 and warp_steps run it.
static void run_case(int M, int N, int K, int NT, int WARPS, int UNROLL, std::mt19937& gen) {
  std::vector<int8_t> q((size_t)M * K), w((size_t)N * K);
  std::uniform_int_distribution<int> d(-128, 127);
  for (auto& v : q) v = (int8_t)d(gen);
  for (auto& v : w) v = (int8_t)d(gen);
  if (gen() % 4 == 0) { for (auto& v : q) v = -128; for (auto& v : w) v = -128; }
  std::vector<long long> y((size_t)M * N, 0);
  int blocks = (N + ROWS * NT - 1) / (ROWS * NT);
  for (int blk = 0; blk < blocks; ++blk) {
    int n0 = blk * ROWS * NT;
    std::vector<long long> partial((size_t)WARPS * NT * 4 * 32, 0);
    for (int warp = 0; warp < WARPS; ++warp) {
      long long acc[8][32][4] = {};
      int total = steps(K);
      for (int s0 = warp; s0 < total; s0 += WARPS * UNROLL)
        for (int u = 0; u < UNROLL; ++u) {
          int s = s0 + u * WARPS;
          for (int tile = 0; tile < NT; ++tile)
            for (int half = 0; half < 2; ++half) {
              uint32_t a[32][4], b[32][2];
              for (int lane = 0; lane < 32; ++lane) {
                int g = lane_group(lane), k = s * STEP + lane_k(lane, 0), valid = s < total ? K - k : 0;
                int n = n0 + tile * ROWS + g;
                Bytes lo = load(q.data() + (size_t)(g < M ? g : 0) * K + k, g < M ? valid : 0);
                Bytes hi = load(q.data() + (size_t)(g + 8 < M ? g + 8 : 0) * K + k, g + 8 < M ? valid : 0);
                Bytes bw = load(w.data() + (size_t)(n < N ? n : 0) * K + k, n < N ? valid : 0);
                int w0 = fragment_word(half, 0), w1 = fragment_word(half, 1);
                a[lane][0] = lo.w[w0]; a[lane][1] = hi.w[w0]; a[lane][2] = lo.w[w1]; a[lane][3] = hi.w[w1];
                b[lane][0] = bw.w[w0]; b[lane][1] = bw.w[w1];
              }
              mma_spec(a, b, acc[tile]);
            }
        }
      for (int tile = 0; tile < NT; ++tile)
        for (int j = 0; j < 4; ++j)
          for (int lane = 0; lane < 32; ++lane)
            partial[((size_t)(warp * NT + tile) * 4 + j) * 32 + lane] = acc[tile][lane][j];
    }
    for (int e = 0; e < NT * 4 * 32; ++e) {
      int tile = e / 128, j = (e / 32) % 4, l = e % 32;
      int row = acc_row(l, j), col = n0 + tile * ROWS + acc_col(l, j);
      if (row < M && col < N) {
        long long sum = 0;
        for (int v = 0; v < WARPS; ++v) sum += partial[((size_t)(v * NT + tile) * 4 + j) * 32 + l];
        y[(size_t)row * N + col] += sum;
      }
    }
  }
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      long long want = 0;
      for (int k = 0; k < K; ++k) want += (long long)q[(size_t)m * K + k] * w[(size_t)n * K + k];
      if (y[(size_t)m * N + n] != want && bad++ < 10)
        printf("M=%d N=%d K=%d NT=%d: y[%d][%d] = %lld, want %lld\n", M, N, K, NT, m, n, y[(size_t)m * N + n], want);
    }
}

int main() {
  // Each mma reads a permutation of its step's 64 bytes: the two halves together, every byte once.
  int seen[64] = {0};
  for (int half = 0; half < 2; ++half)
    for (int k = 0; k < 32; ++k) seen[k_of(half, k)]++;
  for (int i = 0; i < 64; ++i) if (seen[i] != 1) { printf("byte %d read %d times\n", i, seen[i]); bad++; }
  std::mt19937 gen(7);
  int cases = 0;
  const int Ks[] = {1, 15, 16, 48, 64, 100, 128, 200, 1040};
  for (int M = 1; M <= 16; ++M)
    for (int K : Ks) {
      int N = 1 + gen() % 40;
      int NT = 1 + gen() % 2, WARPS = 1 + gen() % 8, UNROLL = 1 + gen() % 3;
      run_case(M, N, K, NT, WARPS, UNROLL, gen);
      cases++;
    }
  printf("%d cases, %d wrong\n", cases, bad);
  return bad != 0;
}
"""


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (g++ or clang++) here")
def test_the_kernels_fragments_compute_the_exact_product(tmp_path):
    src = tmp_path / "gemv.cpp"
    src.write_text(PROGRAM.replace("HEADER", HEADER.as_posix()))
    exe = tmp_path / "gemv"
    build = subprocess.run([CXX, "-O2", "-std=c++17", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-3000:]
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "0 wrong" in run.stdout, run.stdout[-3000:]
    assert "144 cases" in run.stdout


def test_a_planted_fragment_error_is_caught(tmp_path):
    """The emulation can fail: with the two fragment words of an mma swapped for B alone (A and B
    then see different permutations of K), the product is wrong."""
    if CXX is None:
        pytest.skip("no C++ compiler (g++ or clang++) here")
    bad = PROGRAM.replace("b[lane][0] = bw.w[w0]; b[lane][1] = bw.w[w1];",
                          "b[lane][0] = bw.w[w1]; b[lane][1] = bw.w[w0];")
    assert bad != PROGRAM
    src = tmp_path / "gemv.cpp"
    src.write_text(bad.replace("HEADER", HEADER.as_posix()))
    exe = tmp_path / "gemv"
    assert subprocess.run([CXX, "-O2", "-std=c++17", "-o", str(exe), str(src)], capture_output=True).returncode == 0
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode != 0 and "wrong" in run.stdout


def test_kernel_specs_plans_and_the_choice():
    int32, w8a8, fused = cuda_source.gemv_int32(), cuda_source.gemv_w8a8(), cuda_source.gemv_w8a8_x()
    assert fused.input_names == ("x", "w", "scale_w", "bias") and "quant/gemv_quantize.cuh" in cuda_source.walk("gemv")
    # x's codes and scales by the quantization kernel's own helpers (the same bits)
    assert {"quant/groups.cuh", "quant/codes.cuh"} <= set(cuda_source.walk("gemv"))
    assert w8a8.input_names == ("pack", "w", "scale_w", "bias") and w8a8.output_names == ("y",)
    assert int32.input_names == ("a", "w") and int32.output_names == ("out",)
    assert len({int32.name, w8a8.name, fused.name}) == 3
    assert all(cuda_source.digest("gemv") in s.name and s.header.endswith('/gemm/gemv_w8a8.cuh"\n') for s in (int32, w8a8, fused))
    assert "epilogue/epilogue.cuh" in cuda_source.walk("gemv")
    assert "DequantStore<TOut, HAS_BIAS, NARROW, int8nax::pointee<decltype(bias)>>{" in w8a8.source
    row = cuda_choice.VARIANTS[cuda_choice.GEMV]
    assert row.specs(cuda_plans.GEMV_CONFIGS["gemv_16x8"]) == (int32, None, w8a8, None) and row.quantizing() == fused
    # Qwen2.5-7B's decode shapes on 132 SMs: 16 rows a block where that still leaves 1.5 blocks an SM
    assert [cuda_plans.gemv_plan(1, n, 3584).cfg.nt for n in (3584, 4608, 37888, 3000)] == [2, 2, 2, 1]
    assert cuda_plans.gemv_plan(1, 3584, 3584, sms=200).cfg.nt == 1
    assert cuda_plans.GemvPlan(cuda_plans.GEMV_CONFIGS["gemv_16x16_u4"]).grid(16, 4608) == ((288 * 256, 1, 1), (256, 1, 1))
    assert cuda_plans.gemv_ok(16, 3584) and not cuda_plans.gemv_ok(17, 3584) and not cuda_plans.gemv_ok(1, 0)
    assert cuda_plans.gemv_x_ok(1, 18944, 2) and cuda_plans.gemv_x_ok(8, 3584, 2)
    assert not cuda_plans.gemv_x_ok(16, 3584, 2) and not cuda_plans.gemv_x_ok(8, 3584, 4)


def test_the_rule_quantizes_inside_the_gemv_only_where_told(gemv_inside):
    # cuda_plans.gemv.GEMV_QUANTIZE_INSIDE (off by default): where x fits gemv_x_ok, and only then
    for m, k, size in ((1, 18944, 2), (8, 3584, 2), (16, 3584, 2), (8, 3584, 4)):
        assert cuda_plans.gemv_inside(m, k, size) == (gemv_inside and cuda_plans.gemv_x_ok(m, k, size))
        assert cuda_plans.gemv_plan(m, 4608, k, dtype="float32" if size == 4 else "bfloat16").fused == \
            cuda_plans.gemv_inside(m, k, size)
    assert cuda_plans.gemv_plan(1, 4608, 3584).fused is None  # no dtype: decided at the launch


@pytest.mark.parametrize("m, dtype, fits", [
    (1, "bfloat16", True), (8, "float16", True), (16, "bfloat16", False), (8, "float32", False), (16, None, False),
])
def test_w8a8_at_small_m_takes_the_gemv(m, dtype, fits, gemv_default, gemv_inside):
    got = cuda_choice.choose(m, 4608, 3584, w8a8=True, out_dtype=dtype)
    assert got.describe() == "gemv 16x16 u4 splits=1" + (" quantize=fused" if fits and gemv_inside else "")
    # on GPUs without wgmma too (mma.sync: sm80 and newer), not on those before
    assert cuda_choice.choose(m, 4608, 3584, w8a8=True, out_dtype=dtype, family="sm80").variant == cuda_choice.GEMV
    assert cuda_choice.choose(m, 4608, 3584, w8a8=True, family="simt").variant == cuda_choice.SIMT


def test_the_gemv_stops_at_16_rows_for_both_ops(gemv_default):
    assert cuda_choice.choose(17, 4608, 3584, w8a8=True).variant == cuda_choice.TMA
    assert cuda_choice.choose(17, 4608, 3584, w8a8=True, family="sm80").variant == cuda_choice.SIMT
    # int8_matmul: the GEMV's int32 kernel at M <= 16 (cuda_choice.GEMV_RAW_DEFAULT), on sm80 too
    for family in ("sm90", "sm80"):
        assert cuda_choice.choose(1, 4608, 3584, family=family).variant == cuda_choice.GEMV
        assert cuda_choice.choose(16, 4608, 3584, family=family).variant == cuda_choice.GEMV
    assert cuda_choice.choose(17, 4608, 3584).variant == cuda_choice.TMA
    assert cuda_choice.choose(17, 4608, 3584, family="sm80").variant == cuda_choice.SIMT
    assert cuda_choice.choose(1, 4608, 3584, family="simt").variant == cuda_choice.SIMT
    # named: the GEMV runs int8_matmul too, and only where M <= 16 (else the fallback)
    assert cuda_choice.choose(4, 4608, 3584, override="gemv").variant == cuda_choice.GEMV
    assert cuda_choice.choose(4, 4608, 3584, override="SMALL-M").variant == cuda_choice.GEMV
    assert cuda_choice.choose(17, 4608, 3584, override="gemv").variant == cuda_choice.CPASYNC
    with pytest.raises(ValueError, match="family: expected one of"):
        cuda_choice.choose(1, 8, 8, family="sm100")


@pytest.mark.parametrize("override, want", [("cpasync", "cpasync"), ("wgmma", "cpasync"),
                                            ("tma_simple", "tma-unspecialized"), ("tma-ws-pingpong", "tma-ws-pingpong")])
def test_the_environment_still_forces_the_tiled_kernels_at_small_m(override, want):
    for m in (1, 16):
        assert cuda_choice.choose(m, 4608, 3584, w8a8=True, out_dtype="bfloat16", override=override).variant == want


def test_reachable_counts_the_fused_and_two_kernel_forms_apart(gemv_default, gemv_inside):
    got = [(m, c.describe()) for m, c in cuda_choice.reachable(3584, 3584, 20, w8a8=True, out_dtype="bfloat16")]
    gemv = [(1, "gemv 16x16 u4 splits=1 quantize=fused"), (10, "gemv 16x16 u4 splits=1")] if gemv_inside else \
        [(1, "gemv 16x16 u4 splits=1")]
    assert got[:len(gemv)] == gemv
    assert got[len(gemv)][0] == 17 and not got[len(gemv)][1].startswith("gemv")


def test_a_call_naming_the_gemv_beyond_16_rows_is_refused(monkeypatch):
    pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import device as cuda_device, probe as cuda_probe, backend as cuda

    monkeypatch.setattr(cuda_device, "_family", lambda: "sm90")
    monkeypatch.setattr(cuda_probe, "sm_count", lambda: 132)
    with pytest.raises(ValueError, match=r"variant 'gemv' cannot run M=17, K=64 .*1 <= M <= 16"):
        cuda._explicit("gemv", None, 17, 8, 64, True)
    assert cuda._explicit("small-m", None, 3, 8, 64, True)[0] == cuda_choice.GEMV


def test_backend_describe_names_the_gemv(monkeypatch, gemv_default):
    pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import kernels as cuda_kernels, backend as cuda

    monkeypatch.setattr(cuda_kernels, "_kernel", lambda spec: pytest.fail("describe launched a kernel"))
    got = cuda.BACKEND.describe("w8a8_linear", 1, 37888, 3584, dtype="bfloat16")
    if not cuda.BACKEND.probe().available:
        assert got == "cuda gemv 16x16 u4 splits=1 (132 SMs assumed)"


def instances():
    """(label, spec, input types, output types, template) of the GEMV's instances, as
    tools/cuda_compile_check.py builds them from its cuda_choice.VARIANTS row, its trial schedules
    (--trials) included."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import cuda_compile_check as ccc

    return ccc, [i for i in ccc.instances("sm_90a", trials=True) if i[0].startswith("gemv ")]


@pytest.mark.skipif(NVCC is None, reason="no nvcc here (set NVCC=/path/to/nvcc)")
def test_the_kernels_compile_for_sm90a_without_spills(tmp_path):
    """The instances as MLX hands them to NVRTC (tools/cuda_compile_check.py's translation unit and
    stand-in for MLX's header), through nvcc -cubin for sm_90a: compiled, no spills. A sample by
    default (nvcc takes seconds an instance); INT8NAX_GEMV_COMPILE_ALL=1 compiles all 38 and the
    trial schedules' 3 each."""
    ccc, every_instance = instances()
    include = tmp_path / "inc" / "mlx" / "backend" / "cuda" / "device"
    include.mkdir(parents=True)
    (include / "utils.cuh").write_text(ccc.STAND_IN)
    sample = ("gemv i32 gemv_16x16_u4", "gemv w8a8 gemv_16x16_u4 bfloat16 narrow", "gemv w8a8_x gemv_16x8 float16",
              "gemv w8a8_x gemv_16x16_u4 float32", "gemv w8a8_x gemv_16x8 bfloat16 narrow bias bfloat16",
              "gemv i32 gemv_16x16_u4a8", "gemv w8a8_x gemv_16x16_a8 bfloat16 narrow")
    every = os.environ.get("INT8NAX_GEMV_COMPILE_ALL") == "1"
    assert len(every_instance) == 38 + 3 * len(cuda_plans.GEMV_TRIALS) and set(sample) <= {i[0] for i in every_instance}
    done = 0
    for label, spec, ins, outs, tmpl in every_instance:
        if not every and label not in sample:
            continue
        cu = tmp_path / (re.sub(r"[^A-Za-z0-9]+", "_", label) + ".cu")
        cu.write_text(ccc.translation_unit(spec, ins, outs, tmpl))
        proc = subprocess.run([NVCC, "-cubin", "-gencode=arch=compute_90a,code=sm_90a", "-std=c++17", "-Xptxas", "-v",
                               "-I", str(tmp_path / "inc"), "-o", str(cu.with_suffix(".cubin")), str(cu)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{label}: {proc.stderr[-3000:]}"
        spills = re.findall(r"(\d+) bytes spill (?:stores|loads)", proc.stderr)
        assert spills and all(v == "0" for v in spills), f"{label}: {proc.stderr[-2000:]}"
        done += 1
    assert done == (len(every_instance) if every else len(sample))


class _Recorder:
    """Stands in for a kernel object: records (name, grid, template) and returns zeros."""

    def __init__(self, spec, launches):
        self.spec, self.launches = spec, launches

    def __call__(self, *, inputs, output_shapes, output_dtypes, grid, threadgroup, template, **_):
        import mlx.core as mx

        self.launches.append((self.spec.name, grid, dict(template)))
        return [mx.zeros(s, dtype=d) for s, d in zip(output_shapes, output_dtypes)]


@pytest.mark.parametrize("family", ["sm90", "sm80"])
def test_w8a8_linear_launches_the_gemv_at_decode(monkeypatch, family, gemv_default, gemv_inside):
    """What the W8A8 entry point launches (kernels stood in): at M = 1 the quantization kernel and
    the GEMV, or with GEMV_QUANTIZE_INSIDE the GEMV that quantizes x itself, alone; at M = 16,
    K = 3584 (112 KB of bfloat16 x) the two kernels either way; at M = 17 the tiled kernels (dp4a
    where there is no wgmma)."""
    mx = pytest.importorskip("mlx.core")
    from int8nax.backends.cuda import (
        device as cuda_device, kernels as cuda_kernels, probe as cuda_probe,
        settings as cuda_settings, backend as cuda,
    )

    launches = []
    monkeypatch.setattr(cuda_kernels, "_kernel", lambda spec: _Recorder(spec, launches))
    monkeypatch.setattr(cuda_device, "_family", lambda: family)
    monkeypatch.setattr(cuda_probe, "sm_count", lambda: 132)
    monkeypatch.setattr(cuda, "COMPILE", False)
    monkeypatch.delenv(cuda_settings.KERNEL_ENV, raising=False)
    monkeypatch.delenv(cuda_settings.EPILOGUE_ENV, raising=False)
    cuda.clear_caches()
    try:
        n, k = 4608, 3584
        w, s = mx.zeros((n, k), dtype=mx.int8), mx.ones((n,), dtype=mx.float32)
        got = {}
        for m in (1, 16, 17):
            launches.clear()
            mx.eval(cuda.w8a8(mx.zeros((m, k), dtype=mx.bfloat16), w, s, mx.zeros((n,))))
            got[m] = [name.rsplit("_", 1)[0] for name, _, _ in launches]
        two = ["int8nax_quantize", "int8nax_gemv_w8a8"]
        assert got[1] == (["int8nax_gemv_w8a8_x"] if gemv_inside else two) and got[16] == two
        assert got[17][0] == "int8nax_quantize" and "gemv" not in " ".join(got[17])
        assert ("simt" in got[17][1]) == (family == "sm80")
        launches.clear()
        mx.eval(cuda.w8a8(mx.zeros((1, k), dtype=mx.bfloat16), w, s, None))
        (name, grid, template), = launches[-1:]
        assert grid == ((n // 16) * 256, 1, 1) and len(launches) == (1 if gemv_inside else 2)
        assert template == {("T" if gemv_inside else "TOut"): mx.bfloat16, "NT": 2, "WARPS": 8, "UNROLL": 4, "AHEAD": 0,
                            "HAS_BIAS": False, "NARROW": True}
        # the environment forces the previous kernels at small M
        monkeypatch.setenv(cuda_settings.KERNEL_ENV, "cpasync")
        cuda.clear_caches()
        launches.clear()
        mx.eval(cuda.w8a8(mx.zeros((1, k), dtype=mx.bfloat16), w, s, None))
        names = [name for name, _, _ in launches]
        assert names[0].startswith("int8nax_quantize") and not any("gemv" in x for x in names)
        assert any(("simt" if family == "sm80" else "cpasync") in x for x in names)
    finally:
        cuda.clear_caches()
