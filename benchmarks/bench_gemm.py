"""Raw int8 GEMM, int8 [M, K] x int8 [N, K] -> exact int32 [M, N], on the seed shapes: one class
per raw contender of int8nax.bench.contenders (int8nax's GEMM, cider's, cuBLASLt's, torch's), as
the registry names it (common.contender_classes)."""

from .common import contender_classes

globals().update(contender_classes("raw", __name__))
