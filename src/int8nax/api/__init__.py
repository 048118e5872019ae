"""The public functions: validate, handle the degenerate cases once, dispatch to a backend.

Threads: every public function may be called from any number of threads at once (the
concurrency test, tests/test_threads.py, runs 8). MLX (0.32) gives each thread its own streams,
so an unevaluated array made on one thread must be evaluated there before another uses it (the
CPU backend names such an argument in its error).

State kept across calls, none of it per shape: the custom functions (gradients), the tracer
check's compiled identity per live thread (tracing), the scale arrays whose values were checked
(arguments); each module says how much. The CPU backend keeps one prepared weight per live
weight array (backends.cpu.PreparedWeights) and nothing per shape.

The package, by responsibility:
    integer    int8_matmul, quantize_weight_int8, quantize_activations
    linear     w8a8_linear and swiglu_w8a8_linear: the inline check, the checked path, the call
    bound      bind and BoundLinear: a layer's arrays checked once (int8nax.nn)
    arguments  the inline checks' constants, the checked scale arrays, [..., K] as rows
    gradients  the custom functions: straight-through gradients, refusals for integer outputs
    tracing    whether a transformation traces a call (an untraced one skips the custom functions)
    errors     MLX's refusals reworded to name the function and the argument
"""

from __future__ import annotations

from .._checks import MAX_K
from .arguments import B_LAYOUTS
from .bound import BoundLinear, bind
from .integer import int8_matmul, quantize_activations, quantize_weight_int8
from .linear import swiglu_w8a8_linear, w8a8_linear

__all__ = ["B_LAYOUTS", "MAX_K", "BoundLinear", "bind", "int8_matmul", "quantize_activations",
           "quantize_weight_int8", "swiglu_w8a8_linear", "w8a8_linear"]
