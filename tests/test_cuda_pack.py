"""The activation pack (kernels/cuda/quant/act_pack.cuh, backends/cuda/pack.py) without a GPU: the
header's offsets, compiled as host C++ by g++, against the Python that sizes and views packs;
views and packs of given codes round-trip. The kernels that write and read packs run in
tests/test_cuda_kernels.py and test_cuda_tma.py (CUDA only)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from int8nax.backends.cuda import pack as cuda_pack, source as cuda_source

CXX = shutil.which("g++") or shutil.which("clang++")
KERNELS = Path(cuda_source.__file__).resolve().parents[2] / "kernels" / "cuda"

# common.cuh pulls in CUDA's headers: a host stand-in gives act_pack.cuh what it uses of it.
COMMON_STUB = """#pragma once
#include <cstddef>
#include <cstdint>
#define __device__
#define __forceinline__ inline
using std::size_t;
"""

PROGRAM = r"""
#include <cstdio>
#include "quant/act_pack.cuh"
int main() {
  const int cases[][2] = {CASES};
  for (const auto& c : cases) {
    int8_t* base = nullptr;
    const int8_t* cbase = nullptr;
    std::printf("%zu %zu %td %td %td\n", int8nax::pack_codes_offset(c[0]), int8nax::pack_maps_offset(c[0], c[1]),
                int8nax::pack_codes(base, c[0]) - base,
                reinterpret_cast<const int8_t*>(int8nax::pack_scales(cbase)) - cbase,
                reinterpret_cast<int8_t*>(int8nax::pack_maps(cbase, c[0], c[1])) - base);
  }
  std::printf("%zu\n", int8nax::PACK_ALIGN);
}
"""

CASES = [(1, 16), (1, 3584), (7, 13), (63, 300), (64, 4096), (511, 3584), (512, 18944), (2047, 3584), (8192, 18944),
         (100000, 16)]


@pytest.mark.skipif(CXX is None, reason="needs g++ or clang++ (the host stand-in)")
def test_header_and_python_agree_on_the_layout(tmp_path):
    (tmp_path / "quant").mkdir()
    shutil.copy(KERNELS / "quant" / "act_pack.cuh", tmp_path / "quant" / "act_pack.cuh")
    (tmp_path / "common.cuh").write_text(COMMON_STUB)
    src = tmp_path / "layout.cpp"
    src.write_text(PROGRAM.replace("CASES", ", ".join(f"{{{m}, {k}}}" for m, k in CASES)))
    exe = tmp_path / "layout"
    build = subprocess.run([CXX, "-std=c++17", "-I", str(tmp_path), "-o", str(exe), str(src)], capture_output=True,
                           text=True)
    assert build.returncode == 0, build.stderr
    lines = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60).stdout.split("\n")
    assert int(lines[len(CASES)]) == cuda_pack.PACK_ALIGN
    for (m, k), line in zip(CASES, lines):
        codes, maps, codes_ptr, scales_ptr, maps_ptr = map(int, line.split())
        assert (codes, maps) == (cuda_pack.codes_offset(m), cuda_pack.maps_offset(m, k))
        assert (codes_ptr, scales_ptr, maps_ptr) == (codes, 0, maps)


@pytest.mark.parametrize("m,k", CASES)
def test_regions_are_aligned_apart_and_inside_the_pack(m, k):
    for scratch in (0, 256, 132 * 256, 4736 * 256):
        rows, cols = cuda_pack.pack_shape(m, k, scratch)
        codes, maps = cuda_pack.codes_offset(m), cuda_pack.maps_offset(m, k)
        assert codes % cuda_pack.PACK_ALIGN == 0 and maps % cuda_pack.PACK_ALIGN == 0  # q for the TMA, maps 64-aligned
        assert codes >= 4 * m and maps >= codes + m * k  # scales, then codes, then scratch: no overlap
        assert rows == m and rows * cols >= maps + scratch
        assert rows * (cols - 1) < maps + scratch  # no more than a row of slack


def test_unpack_views_the_regions_and_pack_of_round_trips():
    mx = pytest.importorskip("mlx.core")
    rng = np.random.default_rng(7)
    m, k = 37, 300
    q = rng.integers(-127, 128, (m, k), dtype=np.int8)
    s = rng.uniform(1e-4, 1.0, m).astype(np.float32)
    s[3] = np.nan  # a row of NaN/inf keeps its NaN scale
    pack = cuda_pack.pack_of(mx.array(q), mx.array(s), scratch=1000)
    assert pack.dtype == mx.int8 and pack.shape == cuda_pack.pack_shape(m, k, 1000)
    raw = np.array(pack).reshape(-1)
    np.testing.assert_array_equal(raw[: 4 * m].view(np.float32), s)
    np.testing.assert_array_equal(raw[cuda_pack.codes_offset(m): cuda_pack.codes_offset(m) + m * k].reshape(m, k), q)
    q2, s2 = cuda_pack.unpack(pack, m, k)
    assert q2.shape == (m, k) and q2.dtype == mx.int8 and s2.shape == (m,) and s2.dtype == mx.float32
    np.testing.assert_array_equal(np.array(q2), q)
    np.testing.assert_array_equal(np.array(s2), s)
    # a row range of the views packs again (the row chunks of a very tall problem)
    q3, s3 = cuda_pack.unpack(cuda_pack.pack_of(q2[5:20], s2[5:20]), 15, k)
    np.testing.assert_array_equal(np.array(q3), q[5:20])
    np.testing.assert_array_equal(np.array(s3), s[5:20])
