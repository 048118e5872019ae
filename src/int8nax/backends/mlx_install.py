"""Where MLX is installed: the folder of its Python package that holds mlx.core, its headers
(include/) and libmlx (lib/), for what int8nax builds against it (the CUDA binary cache, the tape
extension), found without importing MLX; and the switch that turns such a build off."""

from __future__ import annotations

import os
from importlib import util as importlib_util
from pathlib import Path


def mlx_package_dir() -> Path | None:
    """MLX's package folder, or None where MLX is not installed. mlx is a namespace package: any
    folder named mlx on sys.path (MLX's own kernel cache in the temp folder, say) is one of its
    portions, so the one holding mlx.core counts."""
    spec = importlib_util.find_spec("mlx")
    locations = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    for folder in locations:
        if any(folder.glob("core.*")):  # the mlx.core extension
            return folder
    return None


OFF_VALUES = ("off", "0", "false", "no")
"""What an INT8NAX_* switch reads as off (any case, spaces around)."""


def switched_off(name: str) -> bool:
    """Whether environment variable `name` holds one of OFF_VALUES."""
    return os.environ.get(name, "").strip().lower() in OFF_VALUES
