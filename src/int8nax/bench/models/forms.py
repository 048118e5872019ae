"""The forms a model is measured in, and the conversion of a fresh bf16 model into each, as a
user converts a bf16 checkpoint."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from ..peers import Unavailable


ALL_FORMS = ("bf16", "fp16", "mlx-q8", "mlx-q4", "w8a8", "cider")
"""Every form convert() makes, in table order: the generation benchmark's (bench.generate).
mlx-q4 is MLX's 4-bit weight-only form, which mlx-lm users compare with 8-bit."""
FORMS = tuple(f for f in ALL_FORMS if f != "mlx-q4")
"""The forward benchmark's forms (compare --model, bench_model)."""
MLX_GROUP_SIZE = 64
"""Group size of the MLX weight-only forms: mlx-lm's default (mlx_lm.convert -q)."""


ONE_STEP_PROBE_ROWS = 64
"""The token counts (1 ..) at which convert asks the backend whether a SwiGLU MLP takes its one
step (Backend.swiglu_one_step_at), to say from which one it does."""


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
        from ... import backends
        from ...nn import SwiGLUMLPCall, quantize_linears

        try:
            backend, reason = backends.choose(None)
        except (RuntimeError, ValueError) as exc:
            raise Unavailable(f"int8nax cannot run here: {exc}") from None
        count = quantize_linears(model)
        mlps = [m for _, m in model.named_modules() if isinstance(m, SwiGLUMLPCall)]
        paths = [m.fused_call() for m in mlps]
        one_step, whole = paths.count("one-step"), paths.count("whole-step")
        if one_step:
            impl = backends.get(backend)
            first = next((r for r in range(1, ONE_STEP_PROBE_ROWS + 1) if impl.swiglu_one_step_at(r)), None)
            rows = "" if first == 1 else f" from {first} tokens (the model's own call below)" if first else ""
            swiglu = f"; SwiGLU MLPs: {one_step} of {len(mlps)} quantize h in one step{rows}"
        elif whole:
            swiglu = f"; SwiGLU MLPs: swiglu, then the quantization, {whole} of {len(mlps)} in one compiled step"
        else:
            swiglu = f"; SwiGLU MLPs: swiglu, then the quantization ({len(mlps)})" if mlps else ""
        return f"int8nax.nn.quantize_linears: {count} W8A8Linear on the {backend} backend ({reason}){swiglu}"
    if form == "cider":
        from ..peers import cider

        loaded = cider.load()  # Unavailable off an M5, with the reason
        result = loaded.module.convert_model(model, verbose=False)
        return f"{loaded.describe()}; convert_model replaced {result.get('n_converted', '?')} linears"
    raise ValueError(f"form: expected one of {', '.join(ALL_FORMS)}, got {form!r}")


def weight_bytes(model: nn.Module) -> int:
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(model.parameters()))
