"""The Metal NAX backend through mx.fast.metal_kernel: the kernel catalogue (source.py), the tile
choice (tiles.py) and the backend (backend.py).

The backend registry (int8nax.backends) imports `.backend`; `BACKEND` is also this package's
attribute, loaded on first use so that importing a submodule does not build the backend.
"""


def __getattr__(name: str):
    if name == "BACKEND":
        from .backend import BACKEND

        return BACKEND
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
