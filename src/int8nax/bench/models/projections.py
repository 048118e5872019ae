"""The check of a model run: every projection's sampled outputs against the float64 model of
the projection as the form holds it, on the very input it received (the package docstring
says why per projection, and the bounds)."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from ..checks import MismatchError
from ..peers import Unavailable


CHECK_ROWS = 64
CHECK_COLS = 256
W8A8_MAX_ULP = 1.0
FLOAT_REL_TOL = 2.0**-4
"""Bounds of the projection check (package docstring).
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
    from ...nn import W8A8Linear

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
    from ...nn import W8A8Linear
    from ...quant import quantize_weight_np
    from ...reference import max_ulp_error, w8a8_linear_ref

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


FUSED_CALL_WORDS = {"one-step": "one-step SwiGLU call", "whole-step": "whole-MLP step"}
"""SwiGLUMLPCall.fused_call's answers in a check's words."""


def _check_swiglu_calls(model: nn.Module, recorders, what: str) -> str:
    """The MLPs whose call quantize_linears replaced (int8nax.nn.SwiGLUMLPCall), where it takes
    another call than the model's own (SwiGLUMLPCall.fused_call: one kernel for the down
    projection's input and its quantization, or the backend's step for the whole MLP), ran their
    model's own call while recorded, which the projections' check covers: each must give that
    call's bits on the recorded input rows of its gate projection. Returns a note for the check's
    text ("" where there are none)."""
    from ...nn import SwiGLUMLPCall

    inputs = {rec.path: rec.seen[0] for rec in recorders if rec.seen is not None}
    count = 0
    for path, module in model.named_modules():
        kind = module.fused_call() if isinstance(module, SwiGLUMLPCall) else None
        if kind is None:
            continue
        x = inputs.get(f"{path}.gate_proj")
        if x is None:
            raise MismatchError(f"{what}: the MLP {path} has no recorded input")
        if not mx.array_equal(module(x), module.own_call(x)).item():
            raise MismatchError(f"{what}: the MLP {path}'s {FUSED_CALL_WORDS[kind]} differs from the model's own call")
        count += 1
    return f" ({count} SwiGLU MLP call{'s' if count > 1 else ''} bit-identical)" if count else ""


def _projections(model: nn.Module) -> dict:
    """{path: projection} of every projection in `model`, by the paths _recording gives."""
    from mlx.utils import tree_flatten

    leaves = tree_flatten(model.leaf_modules(), is_leaf=lambda m: isinstance(m, nn.Module))
    return {path: m for path, m in leaves if _projection(m)}
