"""Full linear layer, float16 x [M, K] and weights [N, K] -> float16 [M, N], on the seed shapes:
the W8A8 implementations and the baselines users compare them against."""

from .common import ContenderBenchmark, chained, throughput


class Int8naxFull(ContenderBenchmark):
    """int8nax.w8a8_linear: per-token quantization, int8 GEMM, fused dequantization."""

    contender = "int8nax-full"

    def time_int8nax_full(self, shape):
        self.run()

    @chained
    def time_int8nax_full_chain(self, shape):
        self.chain()

    @throughput
    def track_int8nax_full_tops(self, shape):
        return self.tops(shape)


class CiderFull(ContenderBenchmark):
    """cider's per-channel W8A8 linear (Apple M5 only)."""

    contender = "cider-full"

    def time_cider_full(self, shape):
        self.run()

    @chained
    def time_cider_full_chain(self, shape):
        self.chain()

    @throughput
    def track_cider_full_tops(self, shape):
        return self.tops(shape)


class MlxFp16(ContenderBenchmark):
    """Baseline: dense float16 mx.matmul."""

    contender = "mlx-fp16"

    def time_mlx_fp16_matmul(self, shape):
        self.run()

    @chained
    def time_mlx_fp16_matmul_chain(self, shape):
        self.chain()

    @throughput
    def track_mlx_fp16_matmul_tops(self, shape):
        return self.tops(shape)


class MlxQ8(ContenderBenchmark):
    """Baseline: weight-only 8-bit mx.quantized_matmul (group 64), cider's W8A16 reference."""

    contender = "mlx-q8"

    def time_mlx_q8_matmul(self, shape):
        self.run()

    @chained
    def time_mlx_q8_matmul_chain(self, shape):
        self.chain()

    @throughput
    def track_mlx_q8_matmul_tops(self, shape):
        return self.tops(shape)


class NumpySgemm(ContenderBenchmark):
    """Baseline: numpy's float32 BLAS matmul of the same shape (the CPU's yardstick)."""

    contender = "numpy-sgemm"

    def time_numpy_sgemm(self, shape):
        self.run()

    @chained
    def time_numpy_sgemm_chain(self, shape):
        self.chain()

    @throughput
    def track_numpy_sgemm_tops(self, shape):
        return self.tops(shape)
