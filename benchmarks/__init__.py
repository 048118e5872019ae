"""int8nax's asv suite: int8 GEMM and W8A8 linear against their peers (see docs/benchmarking.md)."""
