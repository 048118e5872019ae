"""mlx.nn layers built on int8nax: a drop-in W8A8 replacement for nn.Linear, and a model's
nn.Linear layers swapped for it in place.

The package, by responsibility:
    linear      W8A8Linear: its parameters' rules, its arrays bound once, its call
    siblings    SiblingGroup: layers that take one input run one GEMM over their joint weights
    swiglu_mlp  SwiGLU MLPs whose down projection's input is computed and quantized in one step
    model       quantize_linears, kernel_calls and warm_up over a whole model
    folder      W8A8 models saved as folders: convert once, load without quantizing
"""

from __future__ import annotations

from . import folder
from .linear import W8A8Linear
from .model import kernel_calls, quantize_linears, warm_up
from .siblings import MISSES_TO_SPLIT, SIBLINGS, SiblingGroup, group_siblings
from .swiglu_mlp import SwiGLUMLPCall, take_over_swiglu_mlps

__all__ = ["MISSES_TO_SPLIT", "folder", "SIBLINGS", "SiblingGroup", "SwiGLUMLPCall", "W8A8Linear", "group_siblings",
           "kernel_calls", "quantize_linears", "take_over_swiglu_mlps", "warm_up"]
