"""Numpy emulator of the Metal NAX kernels (kernels/metal/*.metal), for checking them without Apple
hardware.

It walks what the kernels walk, with the same constants (imported from tiling, which also
feeds the kernels' template arguments): the launch from tiling.metal_gemm_dispatch, the
swizzled tile decode (tiling.tile_of), the early exit of grid-padding threadgroups, the WM x WN
simdgroups and their TM x TN matmul2d fragments, the K loop (whole BK blocks without a K mask,
then the remainder block with one), the load masks (m < M, n < N, k < K) and the store masks.
Every load address is checked against its buffer and every store is counted, so a run proves
that each output element is written exactly once and that no load leaves its buffer; the
result is the int64 product of what was loaded, compared against the reference by the tests.

Two load paths, as in nax_gemm.metal (path="generic" | "mlx_layout"):
- generic: the kernels ask the cooperative tensors for their elements' coordinates, so they do
  not depend on the lane layout; the emulator takes the layout as a parameter (FragmentLayout)
  and is run with MLX's float layout, with shuffled layouts and, on an M5, with the layout the
  probe kernel reports (layout_from_probe);
- mlx_layout: the addresses come from MLX's BaseNAXFrag lane formula (tiling.mlx_lane_base):
  one clamped row pointer per fragment row, NAX_ROW_PIECE contiguous bytes per row piece at
  constant offsets from the pointer (which advances by SK along K), SK-wide inner steps of
  SK / FK fragments, no masks on sub-tiles wholly inside C, row masks on edge sub-tiles, K
  masks in the remainder block. `layout` is then what the hardware does with the elements
  (where the MMA takes each lane's element from): with MLX's layout the result is exact, with
  any other it is wrong, which is why that path must pass the bit-exact first-use self-test.

emulate_gemv walks the small-M kernel (gemv.metal) the same way, and emulate_w8a8_decode the
W8A8 decode kernel (w8a8_decode.metal). Beyond the walks, dequantize_model mirrors the W8A8
epilogue's float32 arithmetic line by line (dequantize.metal) and quantize_model the
quantization (quantize_core.metal, quantize_rows.metal), also as a GPU that flushes float32
subnormals would run it.

The package, by what it models:
    layout      the cooperative tensors' lane layouts: MLX's, shuffled ones, the probe's dump
    gemm        the NAX GEMM walk, both load paths (GemmWalk: what a launch loaded and stored)
    gemv        the small-M walk and the W8A8 decode walk
    arithmetic  the W8A8 epilogue's and the quantizer's float32 arithmetic
"""

from __future__ import annotations

from .arithmetic import dequantize_model, quantize_model
from .gemm import PATHS, GemmWalk, emulate_gemm
from .gemv import emulate_gemv, emulate_w8a8_decode
from .layout import (FragmentLayout, layout_from_probe, layout_problems, mlx_float_layout, mlx_layout_verdict,
                     probe_dump, shuffled_layout)

__all__ = ["FragmentLayout", "GemmWalk", "PATHS", "dequantize_model", "emulate_gemm", "emulate_gemv",
           "emulate_w8a8_decode", "layout_from_probe", "layout_problems", "mlx_float_layout", "mlx_layout_verdict",
           "probe_dump", "quantize_model", "shuffled_layout"]
