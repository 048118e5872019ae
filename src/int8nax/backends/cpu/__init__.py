"""The CPU backend: exact int8 GEMM and W8A8 in numpy and onnxruntime (backend.py), its GEMM engines
(engines.py, onnx.py), their exactness check (check.py), the quantization (quant.py) and the in-
graph path (graph.py).

The backend registry (int8nax.backends) imports `.backend`; `BACKEND` is also this package's
attribute, loaded on first use so that importing a submodule does not build the backend.
"""


def __getattr__(name: str):
    if name == "BACKEND":
        from .backend import BACKEND

        return BACKEND
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
