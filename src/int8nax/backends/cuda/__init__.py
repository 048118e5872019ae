"""The CUDA backend through mx.fast.cuda_kernel: the kernel choice (choice.py), launch plans
(plans/), kernel sources (source.py), compiled kernels on disk (binary_cache.py) and the backend
(backend.py).

The backend registry (int8nax.backends) imports `.backend`; `BACKEND` is also this package's
attribute, loaded on first use so that importing a submodule does not build the backend.
"""


def __getattr__(name: str):
    if name == "BACKEND":
        from .backend import BACKEND

        return BACKEND
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
