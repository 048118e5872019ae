"""Raw int8 GEMM, int8 [M, K] x int8 [N, K] -> exact int32 [M, N], on the seed shapes."""

from .common import ContenderBenchmark, chained, throughput


class Int8naxGemm(ContenderBenchmark):
    """int8nax.int8_matmul on the backend int8nax picks (follows MLX's device)."""

    contender = "int8nax-gemm"

    def time_int8nax_gemm(self, shape):
        self.run()

    @chained
    def time_int8nax_gemm_chain(self, shape):
        self.chain()

    @throughput
    def track_int8nax_gemm_tops(self, shape):
        return self.tops(shape)


class CiderRaw(ContenderBenchmark):
    """cider's int8_matmul_int32 (Apple M5 only)."""

    contender = "cider-raw"

    def time_cider_raw(self, shape):
        self.run()

    @chained
    def time_cider_raw_chain(self, shape):
        self.chain()

    @throughput
    def track_cider_raw_tops(self, shape):
        return self.tops(shape)


class CublasLtInt8(ContenderBenchmark):
    """cuBLASLt's int8 GEMM with a workspace and its algorithm heuristic (CUDA only): the anchor."""

    contender = "cublaslt-int8"

    def time_cublaslt_int8(self, shape):
        self.run()

    @chained
    def time_cublaslt_int8_chain(self, shape):
        self.chain()

    @throughput
    def track_cublaslt_int8_tops(self, shape):
        return self.tops(shape)


class TorchInt8(ContenderBenchmark):
    """torch._int_mm, torch's cuBLASLt path without a workspace (CUDA + torch only)."""

    contender = "torch-int8"

    def time_torch_int8(self, shape):
        self.run()

    @chained
    def time_torch_int8_chain(self, shape):
        self.chain()

    @throughput
    def track_torch_int8_tops(self, shape):
        return self.tops(shape)
