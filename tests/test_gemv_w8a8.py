"""The small-M W8A8 GEMM (kernels/cuda/gemv_w8a8.cuh, backends/cuda_gemv.py) without a GPU: its
index arithmetic compiled as host C++ and run through an emulation of mma.sync.m16n8k32.s8 written
from the PTX ISA's fragment tables (not from the kernel's own helpers), over the kernel's loop
structure, against the exact integer product; and the launcher's checks. The kernel itself runs in
tests/test_cuda_gemv.py (CUDA only)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from int8nax.backends import cuda_gemv

CXX = shutil.which("g++") or shutil.which("clang++")
NVCC = os.environ.get("NVCC") or shutil.which("nvcc") or (shutil.which("nvcc", path="/usr/local/cuda/bin"))
HEADER = Path(cuda_gemv.__file__).resolve().parents[1] / "kernels" / "cuda" / "gemv_w8a8.cuh"

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


def test_kernel_spec_and_launch_shape():
    w8a8, int32, fused = cuda_gemv.spec("w8a8"), cuda_gemv.spec("int32"), cuda_gemv.spec("w8a8_x")
    assert fused.input_names == ("x", "w", "scale_w", "bias") and "quantize.cuh" in fused.header
    assert w8a8.input_names == ("q", "w", "scale_x", "scale_w", "bias") and w8a8.output_names == ("y",)
    assert int32.input_names == ("q", "w")
    assert cuda_gemv.digest() in w8a8.name and w8a8.name != int32.name
    assert "gemv_w8a8.cuh" in w8a8.header and "cuda_common.cuh" in w8a8.header
    assert "DequantStore<TOut, HAS_BIAS, NARROW>" in w8a8.source
    # Qwen2.5-7B's decode shapes on 132 SMs: 16 rows a block where that still leaves 1.5 blocks an SM
    assert [cuda_gemv.tiles_per_block(n, 132) for n in (3584, 4608, 37888, 3000)] == [2, 2, 2, 1]
    assert cuda_gemv.gemv_ok(16, 3584) and not cuda_gemv.gemv_ok(17, 3584) and not cuda_gemv.gemv_ok(1, 0)
    assert cuda_gemv.gemv_x_ok(1, 18944) and cuda_gemv.gemv_x_ok(8, 3584) and not cuda_gemv.gemv_x_ok(16, 3584)
    assert [cuda_gemv.decode_path(m, 3584, 2) for m in (1, 8, 16, 17)] == ["gemv_x", "gemv_x", "gemv", None]


def test_launcher_names_bad_operands():
    import mlx.core as mx

    with pytest.raises(ValueError, match=r"gemv_w8a8: takes 1 <= M <= 16 rows.*M=17"):
        cuda_gemv.gemv_w8a8(mx.zeros((17, 64), mx.int8), mx.ones((17,)), mx.zeros((8, 64), mx.int8), mx.ones((8,)),
                            None, mx.float16)
    with pytest.raises(ValueError, match=r"gemv_int32: 'q' must be int8 \[M, K\]"):
        cuda_gemv.gemv_int32(mx.zeros((2, 64), mx.float16), mx.zeros((8, 64), mx.int8))
    with pytest.raises(ValueError, match=r"gemv_w8a8_x: 'x' must be float16 or bfloat16 or float32 \[M, K\]"):
        cuda_gemv.gemv_w8a8_x(mx.zeros((2, 64), mx.int8), mx.zeros((8, 64), mx.int8), mx.ones((8,)), None)


def instances():
    """(label, spec, input types, output types, template) of every instance the launchers build."""
    fixed = [("WARPS", cuda_gemv.GEMV_WARPS), ("UNROLL", cuda_gemv.GEMV_UNROLL)]
    types = (("float16", "__half"), ("bfloat16", "__nv_bfloat16"), ("float32", "float"))
    for nt in (1, 2):
        yield f"int32 NT={nt}", cuda_gemv.spec("int32"), ["int8_t", "int8_t"], ["int32_t"], [("NT", nt)] + fixed
        for t, ctype in types:
            for has_bias in (True, False):
                for narrow in ((False, True) if t != "float32" else (False,)):
                    tag = f"{t}{' bias' if has_bias else ''}{' narrow' if narrow else ''} NT={nt}"
                    epi = [("HAS_BIAS", has_bias), ("NARROW", narrow)]
                    yield (f"w8a8 {tag}", cuda_gemv.spec("w8a8"), ["int8_t", "int8_t", "float", "float", "float"],
                           [ctype], [("NT", nt)] + fixed + [("TOut", t)] + epi)
                    yield (f"w8a8_x {tag}", cuda_gemv.spec("w8a8_x"), [ctype, "int8_t", "float", "float"], [ctype],
                           [("T", t), ("NT", nt)] + fixed + epi)


@pytest.mark.skipif(NVCC is None, reason="no nvcc here (set NVCC=/path/to/nvcc)")
def test_the_kernels_compile_for_sm90a_without_spills(tmp_path):
    """The instances as MLX hands them to NVRTC (tools/cuda_compile_check.py's translation unit and
    stand-in for MLX's header), through nvcc -cubin for sm_90a: compiled, no spills. A sample by
    default (nvcc takes seconds an instance); INT8NAX_GEMV_COMPILE_ALL=1 compiles all 42."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    import cuda_compile_check as ccc

    include = tmp_path / "inc" / "mlx" / "backend" / "cuda" / "device"
    include.mkdir(parents=True)
    (include / "utils.cuh").write_text(ccc.STAND_IN)
    sample = ("int32 NT=2", "w8a8 bfloat16 bias narrow NT=2", "w8a8_x float16 bias NT=1", "w8a8_x float32 NT=2")
    every = os.environ.get("INT8NAX_GEMV_COMPILE_ALL") == "1"
    done = 0
    for label, spec, ins, outs, tmpl in instances():
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
    assert done == (42 if every else len(sample))
