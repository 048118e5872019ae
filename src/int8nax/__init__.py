"""int8nax: exact INT8 GEMM and W8A8 linear for MLX.

Backends: Metal NAX (Apple M5), CUDA tensor cores, and an exact CPU path; the
one used follows MLX's device (see int8nax.info()).
"""

from .api import int8_matmul, quantize_activations, quantize_weight_int8, swiglu_w8a8_linear, w8a8_linear
from .backends import info

__version__ = "0.1.0"

__all__ = [
    "int8_matmul",
    "quantize_weight_int8",
    "quantize_activations",
    "w8a8_linear",
    "swiglu_w8a8_linear",
    "info",
    "__version__",
]
