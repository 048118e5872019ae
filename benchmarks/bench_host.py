"""Host work per call (µs, graph built, no evaluation) of int8nax's W8A8Linear beside mlx.nn.Linear
and MLX's 8-bit QuantizedLinear, on Qwen2.5-7B's linear shapes at M = 1 and 512, and of a whole
mlx-lm decoder layer in bf16, MLX 8-bit and W8A8 (sibling groups and the SwiGLU MLP's call
included), also decoding on a KV cache at Qwen3-8B's widths: the Python time a call costs before the device can run it;
and MLX's launch of a call's graph (mx.async_eval, LaunchHostWork). Measured by
int8nax.bench.host_work, which says what runs where (on a CPU box W8A8's figures are int8nax's
own layer and API work over a graph-only stand-in, because the CPU backend computes during the
call). The w8a8 figures are a tape's replay where the machine builds tapes (int8nax.backends.tape);
w8a8_compiled takes the tapes away (the backend's mx.compile'd entry points replay each call) and
w8a8_uncompiled the entry points too (each call builds its launches): beside w8a8 they say what each
replay saves; w8a8_mlp_step is the decoder layer with INT8NAX_CUDA_MLP=step (the SwiGLU MLP in one
compiled step). Lower is better; the regression gate (benchmarks/gate.json) does not read these."""

from __future__ import annotations

from int8nax.bench import host_work
from int8nax.bench.peers import Unavailable


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

    @_us
    def track_w8a8_compiled_host_us(self, shape, m):
        return host_work.host_us_per_call("w8a8-compiled", *shape, m)

    @_us
    def track_w8a8_uncompiled_host_us(self, shape, m):
        return host_work.host_us_per_call("w8a8-uncompiled", *shape, m)


class LaunchHostWork:
    """track_<layer>_launch_us: host_work.launch_us_per_call (MLX's mx.async_eval of a call's graph,
    µs a call) for each layer of host_work.LAUNCH_LAYERS and (K, N, bias) of host_work.SHAPES, M = 1;
    n/a where MLX computes on the CPU (host_work.launch_unmeasured)."""

    params = [list(host_work.SHAPES)]
    param_names = ["(K, N, bias)"]
    timeout = 120
    version = "1"

    def setup(self, shape):
        why_not = host_work.launch_unmeasured()
        if why_not:
            raise NotImplementedError(why_not)

    @_us
    def track_linear_launch_us(self, shape):
        return host_work.launch_us_per_call("linear", *shape)

    @_us
    def track_q8_launch_us(self, shape):
        return host_work.launch_us_per_call("q8", *shape)

    @_us
    def track_w8a8_launch_us(self, shape):
        return host_work.launch_us_per_call("w8a8", *shape)


class DecoderLayerHostWork:
    """track_<form>_layer_host_us: host_work.block_host_us of mlx-lm's Qwen2 decoder layer
    (host_work.BLOCK_CONFIG) in each of host_work.BLOCK_FORMS, M of host_work.TOKENS; n/a
    without mlx-lm."""

    params = [list(host_work.TOKENS)]
    param_names = ["M"]
    timeout = 120
    version = "1"

    def setup(self, m):
        try:
            host_work.block("bf16")
        except Unavailable as exc:
            raise NotImplementedError(str(exc)) from None

    @_us
    def track_bf16_layer_host_us(self, m):
        return host_work.block_host_us("bf16", m)

    @_us
    def track_q8_layer_host_us(self, m):
        return host_work.block_host_us("q8", m)

    @_us
    def track_w8a8_layer_host_us(self, m):
        return host_work.block_host_us("w8a8", m)

    @_us
    def track_w8a8_mlp_step_layer_host_us(self, m):
        return host_work.block_host_us("w8a8-mlp-step", m)

    @_us
    def track_w8a8_compiled_layer_host_us(self, m):
        return host_work.block_host_us("w8a8-compiled", m)

    @_us
    def track_w8a8_uncompiled_layer_host_us(self, m):
        return host_work.block_host_us("w8a8-uncompiled", m)


class CachedDecoderLayerHostWork:
    """track_<form>_cached_layer_host_us: host_work.cached_block_host_us of mlx-lm's decoder layer of
    host_work.CACHED_CONFIG decoding one token on a KV cache of host_work.CACHED_TOKENS, in each of
    host_work.CACHED_FORMS (the layer a model's decode step calls); n/a without mlx-lm."""

    timeout = 180
    version = "1"

    def setup(self):
        try:
            host_work.block("bf16", host_work.CACHED_CONFIG)
        except Unavailable as exc:
            raise NotImplementedError(str(exc)) from None

    @_us
    def track_bf16_cached_layer_host_us(self):
        return host_work.cached_block_host_us("bf16")

    @_us
    def track_q8_cached_layer_host_us(self):
        return host_work.cached_block_host_us("q8")

    @_us
    def track_w8a8_cached_layer_host_us(self):
        return host_work.cached_block_host_us("w8a8")
