"""Host work per call (µs, graph built, no evaluation) of int8nax's W8A8Linear beside mlx.nn.Linear
and MLX's 8-bit QuantizedLinear, on Qwen2.5-7B's linear shapes at M = 1 and 512: the Python time
a call costs before the device can run it. Measured by int8nax.bench.host_work, which says what
runs where (on a CPU box W8A8Linear's figure is its own layer and API work over a graph-only
stand-in, because the CPU backend computes during the call). Lower is better; the regression
gate (benchmarks/gate.json) does not read these."""

from __future__ import annotations

from int8nax.bench import host_work


def _us(func):
    func.unit = "us"
    func.rounds = 1
    return func


class HostWork:
    """track_<layer>_host_us for each (K, N, bias) of host_work.SHAPES and M of host_work.TOKENS."""

    params = [list(host_work.SHAPES), list(host_work.TOKENS)]
    param_names = ["(K, N, bias)", "M"]
    timeout = 120
    version = "1"

    @_us
    def track_linear_host_us(self, shape, m):
        return host_work.host_us_per_call("linear", *shape, m)

    @_us
    def track_q8_host_us(self, shape, m):
        return host_work.host_us_per_call("q8", *shape, m)

    @_us
    def track_w8a8_host_us(self, shape, m):
        return host_work.host_us_per_call("w8a8", *shape, m)
