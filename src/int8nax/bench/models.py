"""Whole models, not single GEMMs: a few decoder layers of mlx-lm's own Qwen classes, timed in
prefill and decode in each form a user would run them in, each form checked before it is timed.

Configurations (the public dimensions; mlx-lm's ModelArgs, random weights):
    qwen2.5-0.5b   hidden 896,  MLP 4864,  14/2 heads of 64,  q/k/v biases   (CPU profile, CI)
    qwen2.5-7b     hidden 3584, MLP 18944, 28/4 heads of 128, q/k/v biases
    qwen3-8b       hidden 4096, MLP 12288, 32/8 heads of 128, q/k RMSNorm, no biases
What is timed is mlx-lm's decoder stack, `model.model`: the embedding, `layers` decoder layers
and the final RMSNorm. The LM head is left out: a full-vocabulary head (151936 wide) is one
more GEMM whose cost does not shrink with fewer layers, and per-layer figures (time / layers)
are the point. The vocabulary is cut to VOCAB rows for the same reason (a lookup costs the same).

Weights are random, seeded (mx.random with fixed keys: counter-based, the same bits on every
device), and scaled like a trained model's: linear weights N(0, 1/fan_in) so that each
projection keeps its input's scale, RMSNorm gains near 1, q/k/v biases of order 0.1,
embeddings N(0, 0.02^2). Random weights have no outlier channels, so the relative errors
reported are what quantization costs on well-behaved activations: a trained model's outliers
make per-token W8A8 worse, not better.

Forms (FORMS): bf16 and fp16 (the float model), mlx-q8 (MLX's weight-only 8-bit,
nn.quantize(bits=8, group_size=64), the embedding too, as mlx-lm's converter does), w8a8
(int8nax.nn.quantize_linears, exactly as a user calls it) and cider (cider.convert_model; an
Apple M5 only). Each runs eager or under mx.compile (MODES).

Runs (`tokens`):
    tokens > 1    prefill: model.model(ids[:, :T]) with no cache
    tokens == 1   decode: one token through mlx-lm's prompt cache (make_prompt_cache) after a
                  prompt of `context` tokens; the cache is trimmed back after every step
                  (KVCache.trim), so every timed step sees the same context. Compiled, the
                  step is one mx.compile'd function of the token and the caches' buffers at
                  that fixed context (_compiled_decode_step), since mlx-lm's KVCache keeps its
                  offset in Python
The check (Prepared.prepare, at the first call of every `tokens`, before anything is timed):
during that call every projection of the eager model records sampled rows of its input and
the matching outputs (CHECK_ROWS x CHECK_COLS, spread over the whole output so that every
128-wide tile is sampled), and each is compared with a float64 simulation of that
projection as the form holds it, on the very input it received: for W8A8 the same per-token
and per-channel codes, exact integer products and float64 for the rest
(int8nax.reference.w8a8_linear_ref), within 1 ulp; for the float and weight-only forms x @ W.T
(+ b) in float64 with W as held (MLX's dequantized 8-bit codes for mlx-q8), normwise; for
cider, whose layers' arrays the check does not read, int8nax's W8A8 model of the bf16 weights
it converted (cider's per-channel quantization is int8nax's math), within 1 ulp. Checking
each projection on its own input, rather than the model's output against a float64 model,
is what makes the bound tight: a float64 model's activations drift from bf16's by ~1%, and
per-token codes of drifted activations differ by about as much as quantization changes
them (measured with 2 layers of the 0.5B shape: W8A8 4.2% from such a model, 4.5% from
bf16), so a whole-model bound could not tell W8A8 from another quantization. A compiled form
(no per-projection hook inside mx.compile) is held to the same form run eager at the same
tokens (COMPILED_REL_TOL).
The relative error of each form's output against the bf16 model's, on a prefill of
ERROR_TOKENS, is reported (rel_error_vs_bf16), not gated.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import statistics
import sys
import time
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from .checks import MismatchError
from .peers import Unavailable


@dataclass(frozen=True)
class Config:
    """One model shape, as mlx-lm's ModelArgs of `family` ("qwen2" or "qwen3") takes it."""

    name: str
    family: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    depth: int = 2
    """Decoder layers of the real model (the generation benchmark's default; the forward
    benchmark runs a few of them). The defaults of depth, vocab and tied make a small model,
    for tests' own configurations."""
    vocab: int = 1024
    """The real model's vocabulary (its embedding and LM head rows)."""
    tied: bool = True
    """Whether the LM head is the embedding (tie_word_embeddings)."""
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6


CONFIGS: dict[str, Config] = {c.name: c for c in (
    Config("qwen2.5-0.5b", "qwen2", 896, 4864, 14, 2, 64, depth=24, vocab=151936, tied=True),
    Config("qwen2.5-7b", "qwen2", 3584, 18944, 28, 4, 128, depth=28, vocab=152064, tied=False),
    Config("qwen3-8b", "qwen3", 4096, 12288, 32, 8, 128, depth=36, vocab=151936, tied=False),
)}

FORMS = ("bf16", "fp16", "mlx-q8", "w8a8", "cider")
"""The forward benchmark's forms (compare --model, bench_model)."""
ALL_FORMS = ("bf16", "fp16", "mlx-q8", "mlx-q4", "w8a8", "cider")
"""Every form convert() makes, in table order: the generation benchmark's (bench.generate).
mlx-q4 is MLX's 4-bit weight-only form, which mlx-lm users compare with 8-bit."""
MLX_GROUP_SIZE = 64
"""Group size of the MLX weight-only forms: mlx-lm's default (mlx_lm.convert -q)."""
MODES = ("eager", "compiled")
VOCAB = 1024
SEED = 20261204
ERROR_TOKENS = 16
"""Prefill tokens of the relative error against bf16 (rel_error_vs_bf16)."""
MAX_TOKENS = 8192
"""Longest sequence (prompt + new tokens) a run may ask for: the seeded ids have this many."""


# --- mlx-lm ------------------------------------------------------------------------------

def mlx_lm_module(name: str):
    """mlx_lm.models.<name> (qwen2, qwen3, cache).

    mlx-lm's package __init__ imports its generation and conversion front end, which needs
    transformers (1.5 s and some 600 modules on the CPU box; absent on machines that carry
    only the mlx-lm wheel). The model classes need only MLX. So, unless mlx_lm is already
    imported, its package module is created without running __init__, and runs it in place
    the first time anything outside `mlx_lm.models` is looked up on it (`mlx_lm.generate`,
    `from mlx_lm import load`): a later user of the full package notices nothing.
    Raises Unavailable when mlx-lm is not installed.
    """
    if "mlx_lm" not in sys.modules:
        spec = importlib.util.find_spec("mlx_lm")
        if spec is None:
            raise Unavailable("mlx-lm is not installed (pip install 'int8nax[bench]', or pip install mlx-lm)")
        package = importlib.util.module_from_spec(spec)

        def run_init(attr):
            del package.__dict__["__getattr__"]
            spec.loader.exec_module(package)
            return getattr(package, attr)

        package.__getattr__ = run_init
        sys.modules["mlx_lm"] = package
    try:
        return importlib.import_module(f"mlx_lm.models.{name}")
    except ImportError as exc:
        raise Unavailable(f"mlx-lm cannot import mlx_lm.models.{name}: {exc}") from None


def model_args(config: Config, layers: int):
    """mlx-lm's ModelArgs of `config` with `layers` decoder layers."""
    module = mlx_lm_module(config.family)
    extra = {"head_dim": config.head_dim, "max_position_embeddings": 40960} if config.family == "qwen3" else {}
    return module.ModelArgs(
        model_type=config.family, hidden_size=config.hidden, num_hidden_layers=layers,
        intermediate_size=config.intermediate, num_attention_heads=config.heads,
        num_key_value_heads=config.kv_heads, rms_norm_eps=config.rms_norm_eps, vocab_size=VOCAB,
        rope_theta=config.rope_theta, tie_word_embeddings=True, **extra)


def random_weight(path: str, shape: tuple[int, ...], index: int, seed: int = SEED) -> mx.array:
    """The float32 parameter at `path` (lazy), seeded by its `index` in the model's
    parameter order, scaled as the module docstring says."""
    key = mx.random.key(seed + index)
    leaf = path.rsplit(".", 1)[-1]
    if "norm" in path:
        return 1.0 + 0.1 * mx.random.normal(shape, key=key)
    if leaf == "bias":
        return 0.1 * mx.random.normal(shape, key=key)
    if "embed_tokens" in path:
        return 0.02 * mx.random.normal(shape, key=key)
    return mx.random.normal(shape, key=key) * (shape[-1] ** -0.5)


def _random_weights(model: nn.Module) -> list[tuple[str, mx.array]]:
    """(path, float32 array) for every parameter, seeded per path (see the module docstring)."""
    from mlx.utils import tree_flatten

    return [(path, random_weight(path, value.shape, i)) for i, (path, value) in enumerate(tree_flatten(model.parameters()))]


def build(config: Config, layers: int, dtype=mx.bfloat16) -> nn.Module:
    """mlx-lm's Model for `config` with `layers` layers, random weights in `dtype`, evaluated.
    Every form starts from the bf16 model, as a user converts a bf16 checkpoint (fp16 by
    set_dtype: exact, float16 has the wider significand)."""
    module = mlx_lm_module(config.family)
    model = module.Model(model_args(config, layers))
    weights = [(p, w.astype(dtype)) for p, w in _random_weights(model)]
    model.load_weights(weights)
    mx.eval(model.parameters())
    model.eval()
    return model


def token_ids() -> mx.array:
    """int32 [1, MAX_TOKENS]: the seeded ids every run takes its first tokens from."""
    return mx.random.randint(0, VOCAB, (1, MAX_TOKENS), key=mx.random.key(SEED - 1)).astype(mx.int32)


# --- forms -------------------------------------------------------------------------------

def convert(model: nn.Module, form: str) -> str:
    """Turn a fresh bf16 model into `form` in place; returns a one-line description.
    Unavailable (with the reason) where the form cannot run here."""
    if form == "bf16":
        return "bf16 weights and activations"
    if form == "fp16":
        model.set_dtype(mx.float16)
        return "float16 weights and activations"
    if form in ("mlx-q8", "mlx-q4"):
        bits = int(form[-1])
        nn.quantize(model, group_size=MLX_GROUP_SIZE, bits=bits)
        return (f"nn.quantize(bits={bits}, group_size={MLX_GROUP_SIZE}): weight-only affine {bits}-bit, "
                "bf16 activations")
    if form == "w8a8":
        from .. import backends
        from ..nn import SwiGLUMLPCall, quantize_linears

        try:
            backend, reason = backends.choose(None)
        except (RuntimeError, ValueError) as exc:
            raise Unavailable(f"int8nax cannot run here: {exc}") from None
        count = quantize_linears(model)
        mlps = [m for _, m in model.named_modules() if isinstance(m, SwiGLUMLPCall)]
        one_step = sum(m.one_step() is not None for m in mlps)
        swiglu = (f"; SwiGLU MLPs: {one_step} of {len(mlps)} quantize h in one step" if one_step
                  else f"; SwiGLU MLPs: swiglu, then the quantization ({len(mlps)})" if mlps else "")
        return f"int8nax.nn.quantize_linears: {count} W8A8Linear on the {backend} backend ({reason}){swiglu}"
    if form == "cider":
        from .peers import cider

        loaded = cider.load()  # Unavailable off an M5, with the reason
        result = loaded.module.convert_model(model, verbose=False)
        return f"{loaded.describe()}; convert_model replaced {result.get('n_converted', '?')} linears"
    raise ValueError(f"form: expected one of {', '.join(ALL_FORMS)}, got {form!r}")


def weight_bytes(model: nn.Module) -> int:
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))


# --- the check: every projection against float64 on its own inputs -------------------------

CHECK_ROWS = 64
CHECK_COLS = 256
W8A8_MAX_ULP = 1.0
FLOAT_REL_TOL = 2.0**-4
"""Bounds of the projection check (module docstring).
- W8A8: within 1 ulp of the output dtype of the float64 model of the same quantization
  (int8nax.reference.w8a8_linear_ref), as every W8A8 check in int8nax: given the very input
  the layer received, the per-token codes are a definition, the integer products exact and
  the epilogue one float32 rounding away from float64.
- float and weight-only forms: normwise relative distance from x @ W.T + b in float64 (W as
  the layer holds it: MLX's dequantized 8-bit codes for mlx-q8) at most
  float_tolerance(K) = max(2^-4, 2^-8 * sqrt(K)). 2^-4 is the GEMM suite's bound for
  baselines (int8nax.bench.checks.BASELINE_REL_TOL). The second term allows a sum of K
  products rounded to bfloat16 (unit roundoff 2^-8) at every step, whose error grows like
  u * sqrt(K): MLX's CPU quantized_matmul accumulates so (measured on the CPU box: 3.5% at
  K = 896, 7.9% at K = 4864, a third of the bound at each). A projection that computes another
  problem (transposed or unscaled weights, another input) is off by ~100% or more."""


def float_tolerance(k: int) -> float:
    return max(FLOAT_REL_TOL, 2.0**-8 * np.sqrt(k))


def _np64(a: mx.array) -> np.ndarray:
    if a.dtype in (mx.bfloat16, mx.float16):
        a = a.astype(mx.float32)
    return np.array(a).astype(np.float64)


def _spread(n: int, count: int) -> np.ndarray:
    """At most `count` indices spread evenly over range(n), first and last included: with
    CHECK_ROWS/CHECK_COLS they fall in every 128-wide tile of the outputs checked here."""
    return np.unique(np.linspace(0, n - 1, min(n, count)).round().astype(np.int64))


def _projection(module) -> bool:
    from ..nn import W8A8Linear

    return isinstance(module, (nn.Linear, nn.QuantizedLinear, W8A8Linear)) or type(module).__name__ == "CiderLinear"


class _Recorder(nn.Module):
    """Stands in for one projection during a checked call: runs it and keeps sampled rows of
    its input and the matching outputs (rows x columns)."""

    def __init__(self, layer, path: str):
        super().__init__()
        self.layer, self.path, self.seen = layer, path, None

    def __call__(self, x):
        y = self.layer(x)
        x2, y2 = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
        rows = mx.array(_spread(x2.shape[0], CHECK_ROWS))
        cols = _spread(y2.shape[1], CHECK_COLS)
        self.seen = (x2[rows], y2[rows][:, mx.array(cols)], cols)
        return y


def check_projection(layer, x: mx.array, y: mx.array, cols: np.ndarray, source=None) -> tuple[float, str]:
    """(error, unit) of a projection's outputs y [R, len(cols)] for inputs x [R, K] against the
    float64 model of the layer as it holds its weights; MismatchError past the bound.
    `source`: the nn.Linear the layer was converted from, for layers whose own arrays the check
    does not read (cider's CiderLinear, whose per-channel quantization is int8nax's by
    definition, int8nax.quant: the reference quantizes the source's weight rows itself)."""
    from ..nn import W8A8Linear
    from ..quant import quantize_weight_np
    from ..reference import max_ulp_error, w8a8_linear_ref

    bias = layer.get("bias") if isinstance(layer, nn.Module) else None
    bias_cols = None if bias is None else _np64(bias)[cols]
    x = x.astype(mx.float32) if x.dtype == mx.bfloat16 else x  # exact; numpy has no bfloat16
    if isinstance(layer, W8A8Linear) or (type(layer).__name__ == "CiderLinear" and source is not None):
        pick = mx.array(cols)  # only the checked rows of the weights leave the device
        if isinstance(layer, W8A8Linear):
            w_q, s_w = np.array(layer.weight[pick]), np.array(layer.scales[pick])
        else:  # cider casts x and the bias to float16 (cider's C++ wrappers)
            w_q, s_w = quantize_weight_np(np.array(source.weight[pick].astype(mx.float32)))
            x = x.astype(mx.float16)
            src_bias = source.get("bias")
            bias_cols = None if src_bias is None else _np64(src_bias.astype(mx.float16))[cols]
        ref = w8a8_linear_ref(x, w_q, s_w, bias_cols)
        name = {mx.bfloat16: "bfloat16", mx.float16: "float16", mx.float32: "float32"}[y.dtype]
        err = max_ulp_error(y, ref, name)
        if not err <= W8A8_MAX_ULP:
            raise MismatchError(f"off by {err:.3g} ulp ({name}) from the float64 model of its W8A8 quantization; "
                                f"at most {W8A8_MAX_ULP} allowed")
        return err, "ulp"
    pick = mx.array(cols)  # output channels are independent: dequantize only the checked ones
    if isinstance(layer, nn.QuantizedLinear):
        w = mx.dequantize(layer.weight[pick], layer.scales[pick].astype(mx.float32),
                          layer.biases[pick].astype(mx.float32), layer.group_size, layer.bits)
    elif isinstance(layer, nn.Linear):
        w = layer.weight[pick]
    else:
        raise Unavailable(f"the projection check does not know {type(layer).__name__} layers")
    ref = _np64(x) @ _np64(w).T
    if bias_cols is not None:
        ref = ref + bias_cols
    err = rel_error(y, ref)
    tol = float_tolerance(x.shape[-1])
    if not err <= tol:
        raise MismatchError(f"normwise relative error {err:.3g} against float64 x @ W.T (+ b), "
                            f"more than {tol:.3g} (K = {x.shape[-1]})")
    return err, "rel"


def rel_error(got, ref: np.ndarray) -> float:
    """||got - ref||_F / ||ref||_F in float64 (NaN compares as a failure)."""
    g = _np64(got) if isinstance(got, mx.array) else np.asarray(got, np.float64)
    g = g.reshape(ref.shape)
    return float(np.linalg.norm(g - ref) / np.linalg.norm(ref))


# --- a form, ready to time ------------------------------------------------------------------

COMPILED_REL_TOL = 2.0**-3
"""Largest normwise relative distance of a compiled form's output from the same form run eager
(checked projection by projection) at the same tokens. mx.compile fuses elementwise work
(RoPE, SwiGLU, norms), which moves some activations by an ulp; W8A8's per-token codes turn such
a move near a rounding tie into a one-step change of a code, so the two runs may differ by up to
the quantization noise itself (5% W8A8 against bf16 over 6 layers on the CPU box), never by
the 50% to 100% of a wrong computation."""


MIN_SAMPLE_SECONDS = 0.25
"""Timed runs of a cell continue past `repeat` until they add up to this: a decode step of 4
layers takes 2-4 ms on the H200, where 5 samples span a few scheduler slices and the GPU's clock
ramp (host-bound cells moved by up to 40 % between runs with 5 samples)."""
MIN_WARMUP_SECONDS = 0.05
"""Untimed runs before the samples cover at least this, so the GPU leaves its idle clocks first."""
MAX_REPEAT = 200
"""Most samples (and warm-up runs) of one cell."""


@dataclass
class Prepared:
    """One (configuration, form, mode) model, ready to run at any checked `tokens`.

    run(tokens) is one forward plus evaluation: a prefill of `tokens`, or (tokens == 1) one
    decode step after `context` tokens of prompt. prepare(tokens) must come first for each
    `tokens`: it times the first call (first_call_s[tokens]) and checks it (MismatchError).
    """

    config: Config
    form: str
    mode: str
    layers: int
    context: int
    model: nn.Module
    detail: str
    weight_bytes: int
    rel_error_vs_bf16: float | None = None
    sources: dict | None = None
    """path -> the nn.Linear a projection was converted from, where the check needs it (cider)."""
    check: dict = field(default_factory=dict)
    first_call_s: dict = field(default_factory=dict)
    _ids: mx.array | None = None
    _inputs: dict = field(default_factory=dict)
    """tokens -> the ids a run(tokens) feeds (sliced and evaluated in prepare, not in the timed body)."""
    _forward: object = None
    _cache: list | None = None
    _step: object = None
    """The compiled decode step (compiled mode, after prepare(1))."""
    _buffers: list | None = None
    """[(keys, values)] of every layer's cache: the compiled step's inputs."""

    def __post_init__(self):
        self._ids = token_ids()
        inner = self.model.model
        self._forward = mx.compile(inner) if self.mode == "compiled" else inner

    # -- the timed bodies --
    def _prefill(self, tokens: int) -> mx.array:
        out = self._forward(self._inputs[tokens])
        mx.eval(out)
        return out

    def _decode(self) -> mx.array:
        if self._step is not None:
            out = self._step(self._inputs[1], self._buffers)
            mx.eval(out)
            return out
        return self._decode_eager()

    def _decode_eager(self) -> mx.array:
        out = self.model.model(self._inputs[1], cache=self._cache)
        mx.eval(out)
        for c in self._cache:
            c.trim(1)
        return out

    def run(self, tokens: int) -> mx.array:
        return self._decode() if tokens == 1 else self._prefill(tokens)

    # -- setup --
    def _start_decode(self) -> None:
        cache_module = mlx_lm_module("cache")
        self._cache = cache_module.make_prompt_cache(self.model)
        if self.mode == "compiled" and not all(type(c) is cache_module.KVCache for c in self._cache):
            kinds = sorted({type(c).__name__ for c in self._cache})
            raise Unavailable(f"compiled decode takes mlx-lm's KVCache only; this model's cache is {', '.join(kinds)}")
        mx.eval(self.model.model(self._ids[:, :self.context], cache=self._cache))
        mx.eval([c.state for c in self._cache])
        if self.mode == "compiled":
            # One eager step (trimmed back) first: it grows the buffers past the prompt to the size
            # every later step sees, so the compiled step writes in place of growing them.
            self._decode_eager()
            self._buffers = [tuple(c.state[:2]) for c in self._cache]
            self._step = _compiled_decode_step(self.model, self.context, cache_module)

    def prepare(self, tokens: int) -> None:
        """Time the first call at `tokens` and check it; Unavailable where this mode cannot
        run `tokens`, MismatchError where the output is wrong."""
        if tokens in self.first_call_s:
            return
        if not 1 <= tokens <= MAX_TOKENS:
            raise ValueError(f"tokens: expected 1 to {MAX_TOKENS}, got {tokens}")
        self._inputs[tokens] = self._ids[:, self.context:self.context + 1] if tokens == 1 else self._ids[:, :tokens]
        mx.eval(self._inputs[tokens])
        if tokens == 1:
            self._start_decode()
        t0 = time.perf_counter()
        if self.mode == "eager":
            with _recording(self.model) as recorders:
                out = self.run(tokens)
            first = time.perf_counter() - t0
            self.check[tokens] = _check_recorded(recorders, self.describe(tokens), self.sources)
            self.check[tokens] += _check_swiglu_calls(self.model, recorders, self.describe(tokens))
        else:
            out = self.run(tokens)
            first = time.perf_counter() - t0
            eager = self._decode_eager() if tokens == 1 else self.model.model(self._inputs[tokens])
            err = rel_error(out, _np64(eager))
            if not err <= COMPILED_REL_TOL:
                raise MismatchError(f"{self.describe(tokens)}: normwise relative distance {err:.3g} from the same "
                                    f"form run eager, more than {COMPILED_REL_TOL}")
            self.check[tokens] = f"{err:.2g} from eager"
        del out
        self.first_call_s[tokens] = first

    def with_mode(self, mode: str) -> "Prepared":
        """The same model (same weights, no rebuild) run in `mode`; Unavailable where it cannot."""
        if mode not in MODES:
            raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
        if mode == "compiled" and self.form == "w8a8":
            _check_compilable(self.model)
        return Prepared(self.config, self.form, mode, self.layers, self.context, self.model, self.detail,
                        self.weight_bytes, self.rel_error_vs_bf16, self.sources)

    def describe(self, tokens: int) -> str:
        what = f"decode after {self.context}" if tokens == 1 else f"prefill of {tokens}"
        return f"{self.config.name} x{self.layers} {self.form} {self.mode}, {what}"

    # -- figures --
    def seconds(self, tokens: int, repeat: int = 5, warmup: int = 1, min_seconds: float = MIN_SAMPLE_SECONDS,
                max_repeat: int = MAX_REPEAT) -> float:
        """Median seconds of one run(tokens): after `warmup` runs and at least MIN_WARMUP_SECONDS of
        them, `repeat` samples or more, until they cover min_seconds (at most max_repeat)."""
        t0 = time.perf_counter()
        done = 0
        while done < warmup or (time.perf_counter() - t0 < MIN_WARMUP_SECONDS and done < max_repeat):
            self.run(tokens)
            done += 1
        samples = []
        while len(samples) < repeat or (sum(samples) < min_seconds and len(samples) < max_repeat):
            t0 = time.perf_counter()
            self.run(tokens)
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    def peak_bytes(self, tokens: int) -> int:
        """The model's weights plus the most extra memory MLX holds during one run(tokens)
        (mx.reset_peak_memory / mx.get_peak_memory around it): what this form needs, whatever
        else the process holds."""
        gc.collect()
        mx.synchronize()
        before = mx.get_active_memory()
        mx.reset_peak_memory()
        self.run(tokens)
        return self.weight_bytes + max(0, mx.get_peak_memory() - before)


def _compiled_decode_step(model: nn.Module, context: int, cache_module):
    """mx.compile of one decode step at `context`: (ids [1, 1], [(keys, values)] of each layer's
    KVCache buffers) -> the decoder stack's output [1, 1, hidden].

    mlx-lm's KVCache keeps its offset in Python and writes its buffers in place, so a compiled
    call of the model with a live cache would freeze one step's offset into the graph and leave
    the cache holding the trace's arrays. Here every trace gets caches of its own, set to the given
    buffers at offset `context`: the step's graph is fixed, and it is the right one because every
    step the benchmark times sees the same context. The new token's keys and values are written
    into a copy of the buffers (the caller keeps them), which eager decode writes in place: per
    layer, 2 x kv_heads x head_dim x buffer length x 2 bytes more traffic (1.5 MB for the 7B at
    768 positions: under 1 us at the H200's HBM speed)."""

    def step(ids, buffers):
        cache = cache_module.make_prompt_cache(model)
        for c, (keys, values) in zip(cache, buffers):
            c.state = (keys, values, context)
        return model.model(ids, cache=cache)

    return mx.compile(step)


class _recording:
    """Context: every projection of `model` swapped for a _Recorder, swapped back on exit."""

    def __init__(self, model: nn.Module):
        self.model = model

    def __enter__(self):
        from mlx.utils import tree_map_with_path

        self.recorders = []

        def swap(path, module):
            if _projection(module):
                rec = _Recorder(module, path)
                self.recorders.append(rec)
                return rec
            return module

        self.originals = self.model.leaf_modules()
        self.model.update_modules(tree_map_with_path(swap, self.originals, is_leaf=lambda m: isinstance(m, nn.Module)))
        return self.recorders

    def __exit__(self, *exc):
        self.model.update_modules(self.originals)
        return False


def _check_recorded(recorders, what: str, sources: dict | None = None) -> str:
    """Check every recorded projection; the worst error, as text."""
    if not recorders:
        raise MismatchError(f"{what}: no projection ran (the model has none this check knows)")
    worst = {}
    for rec in recorders:
        if rec.seen is None:
            raise MismatchError(f"{what}: projection {rec.path} never ran")
        x, y, cols = rec.seen
        try:
            err, unit = check_projection(rec.layer, x, y, cols, (sources or {}).get(rec.path))
        except MismatchError as exc:
            raise MismatchError(f"{what}: projection {rec.path}: {exc}") from None
        worst[unit] = max(worst.get(unit, 0.0), err)
    return ", ".join(f"{v:.2g} {'ulp' if u == 'ulp' else 'rel'}" for u, v in worst.items())


def check_projections(model: nn.Module, ids: mx.array, what: str, sources: dict | None = None) -> str:
    """Run the whole `model` (mlx-lm's Model: decoder stack and LM head) once on `ids`
    [batch, tokens] with every projection recorded, and check each against float64 on its own
    inputs (check_projection; the SwiGLU MLPs int8nax took over against their own call).
    Returns the worst error per unit, as text; MismatchError naming the projection past a bound."""
    with _recording(model) as recorders:
        mx.eval(model(ids))
    return _check_recorded(recorders, what, sources) + _check_swiglu_calls(model, recorders, what)


def _check_swiglu_calls(model: nn.Module, recorders, what: str) -> str:
    """The MLPs whose call quantize_linears replaced (int8nax.nn.SwiGLUMLPCall), where it takes one
    step for the down projection's input and its quantization, ran their model's own call while recorded,
    which the projections' check covers: each must give that call's bits on the recorded input
    rows of its gate projection. Returns a note for the check's text ("" where there are none)."""
    from ..nn import SwiGLUMLPCall

    inputs = {rec.path: rec.seen[0] for rec in recorders if rec.seen is not None}
    count = 0
    for path, module in model.named_modules():
        if not isinstance(module, SwiGLUMLPCall) or module.one_step() is None:
            continue
        x = inputs.get(f"{path}.gate_proj")
        if x is None:
            raise MismatchError(f"{what}: the MLP {path} has no recorded input")
        if not mx.array_equal(module(x), module.own_call(x)).item():
            raise MismatchError(f"{what}: the MLP {path}'s one-step SwiGLU call differs from the model's own call")
        count += 1
    return f" ({count} SwiGLU MLP call{'s' if count > 1 else ''} bit-identical)" if count else ""


_built: dict[tuple, Prepared] = {}


def prepare(config: str | Config, form: str, mode: str = "eager", layers: int = 4, context: int = 512,
            error_vs_bf16: bool = False) -> Prepared:
    """Build `config` with `layers` layers in `form` (from the bf16 model, as a user converts a
    bf16 checkpoint), ready to run in `mode`; Unavailable with the reason where it cannot run here.
    error_vs_bf16: also measure rel_error_vs_bf16 (a prefill of ERROR_TOKENS in bf16 and in the
    form)."""
    if isinstance(config, str):
        if config not in CONFIGS:
            raise ValueError(f"config: expected one of {', '.join(CONFIGS)}, got {config!r}")
        config = CONFIGS[config]
    if form not in FORMS:
        raise ValueError(f"form: expected one of {', '.join(FORMS)}, got {form!r}")
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"layers: expected a positive int, got {layers!r}")
    if not 1 <= context <= MAX_TOKENS - 1:
        raise ValueError(f"context: expected 1 to {MAX_TOKENS - 1} tokens, got {context}")
    if form == "cider":
        from .peers import cider

        cider.load()  # Unavailable off an M5: say so before building anything
    model = build(config, layers)
    probe = token_ids()[:, :ERROR_TOKENS]
    if error_vs_bf16:
        bf16_out = model.model(probe)
        mx.eval(bf16_out)
    sources = _projections(model) if form == "cider" else None
    detail = convert(model, form)
    mx.eval(model.parameters())
    if mode == "compiled" and form == "w8a8":
        _check_compilable(model)
    prepared = Prepared(config, form, mode, layers, context, model, detail, weight_bytes(model), sources=sources)
    if error_vs_bf16:
        prepared.rel_error_vs_bf16 = rel_error(model.model(probe), _np64(bf16_out))
    return prepared


def _projections(model: nn.Module) -> dict:
    """{path: projection} of every projection in `model`, by the paths _recording gives."""
    from mlx.utils import tree_flatten

    leaves = tree_flatten(model.leaf_modules(), is_leaf=lambda m: isinstance(m, nn.Module))
    return {path: m for path, m in leaves if _projection(m)}


def _check_compilable(model: nn.Module) -> None:
    """Unavailable where int8nax's backend here cannot run inside mx.compile, with int8nax's own
    reason (every backend can: the CPU backend's cpu_graph path, the GPUs' kernels)."""
    layer = model.model.layers[0].mlp.up_proj
    x = mx.zeros((1, layer.input_dims), dtype=mx.bfloat16)
    try:
        mx.eval(mx.compile(layer)(x))
    except ValueError as exc:
        raise Unavailable(f"not compilable here: {exc}") from None


# --- what each machine measures ---------------------------------------------------------------

@dataclass(frozen=True)
class Profile:
    """The model runs of a shape profile (int8nax.bench.problems.choose_profile names it)."""

    configs: tuple[str, ...]
    tokens: tuple[int, ...]
    layers: int
    context: int


PROFILES: dict[str, Profile] = {
    # 4 layers: the embedding, final norm and MLX's per-evaluation cost (~25 us on CUDA) come
    # to a few percent of a decode step (0.34 ms per bf16 layer of the 7B on the H200), and two
    # configurations in four forms stay near 15 GB.
    "full": Profile(("qwen2.5-7b", "qwen3-8b"), (1, 16, 128, 512, 2048, 4096), layers=4, context=512),
    # One layer of the small configuration at decode and 16 tokens: MLX's CPU bf16 GEMM runs
    # a 16-token layer in ~0.25 s on the 2-core box, and every benchmark process builds its model.
    # A prompt of 8: at this size a decode step's cost is its projections (attention over 8 or
    # 512 keys of 14 heads of 64 is a rounding error next to 15 M weights).
    "cpu": Profile(("qwen2.5-0.5b",), (1, 16), layers=1, context=8),
}
ALL_TOKENS: tuple[int, ...] = tuple(sorted({t for p in PROFILES.values() for t in p.tokens}))


def skip_reason(profile: str, form: str, mode: str, tokens: int) -> str | None:
    """Why a run of this profile is not measured (None: it is)."""
    if profile == "cpu" and mode == "compiled":
        return ("compiled forms are not in the cpu profile: MLX's CPU device builds a compiled graph's "
                "kernels with the system C++ compiler at its first call (16-27 s per form on the 2-core box)")
    if profile == "cpu" and form == "mlx-q8":
        return ("mlx-q8 is not in the cpu profile: MLX's CPU quantized_matmul takes ~0.35 s per token and "
                "layer of the 0.5B shape on the 2-core box (its prompt alone would take seconds); "
                "`int8nax compare --model qwen2.5-0.5b --forms mlx-q8` measures it")
    if profile == "cpu" and form == "fp16" and tokens > 1:
        return ("fp16 measures decode only on the cpu profile: its prefill runs on the MLX CPU GEMM that bf16's "
                "does (0.25-0.3 s per layer at 16 tokens on the 2-core box), which bf16 already shows")
    return None


def gpu_time(model: Prepared, tokens: int) -> dict:
    """{"gpu_ms_per_layer": the GPU's busy time of one forward per layer (bench.model_profile:
    CUPTI, the figure that host-bound token counts do not blur)}, or {"gpu_na": why not}."""
    from . import model_profile

    got, why = model_profile.measured(model, tokens, forwards=2)
    if got is None:
        return {"gpu_na": f"GPU time: {why}"}
    return {"gpu_ms_per_layer": got.busy_ms} if got.busy_ms > 0 else {"gpu_na": "GPU time: CUPTI saw no kernel"}


def profile_figures(profile: str, form: str, mode: str, repeat: int = 3) -> dict:
    """{(configuration, tokens): figures} of every run of `profile` in `form` and `mode`, one
    model per configuration: {"tokens_per_s", "peak_bytes", "first_call_s", "check"} where it
    ran and passed its check, {"skip": why} where it is not measured here, {"mismatch": what}
    where the check failed (nothing timed), {"error": what} where it raised. Never raises:
    asv calls it from setup_cache, where an exception fails the whole class."""
    prof = PROFILES[profile]
    out: dict = {}
    from . import model_profile
    from .kernel import cupti

    if cupti.skip_reason() is None:
        model_profile.start()  # torch's CUDA context (and CUPTI's) first, as compare --breakdown
    for config in prof.configs:
        skips = {t: skip_reason(profile, form, mode, t) for t in prof.tokens}
        if all(skips.values()):
            out.update({(config, t): {"skip": why} for t, why in skips.items()})
            continue
        try:
            base = prepare(config, form, "eager", layers=prof.layers, context=prof.context)
            model = base if mode == "eager" else base.with_mode(mode)
        except Unavailable as exc:
            out.update({(config, t): {"skip": str(exc)} for t in prof.tokens})
            continue
        except Exception as exc:  # noqa: BLE001 - reported per run below
            out.update({(config, t): {"error": f"{type(exc).__name__}: {exc}"} for t in prof.tokens})
            continue
        for t in prof.tokens:
            why = skips[t]
            if why:
                out[(config, t)] = {"skip": why}
                continue
            try:
                model.prepare(t)
                out[(config, t)] = {"tokens_per_s": t / model.seconds(t, repeat=repeat, warmup=1),
                                    "peak_bytes": model.peak_bytes(t), "first_call_s": model.first_call_s[t],
                                    "check": model.check[t], **gpu_time(model, t)}
            except Unavailable as exc:
                out[(config, t)] = {"skip": str(exc)}
            except MismatchError as exc:
                out[(config, t)] = {"mismatch": str(exc)}
            except Exception as exc:  # noqa: BLE001
                out[(config, t)] = {"error": f"{type(exc).__name__}: {exc}"}
        del base, model
        gc.collect()
    return out
