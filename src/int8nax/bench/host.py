"""What a measurement ran on: versions, platform and the device MLX reports, for every record
the commands write (`int8nax compare --json`, the `int8nax selftest` report)."""

from __future__ import annotations

import datetime
import platform

import mlx.core as mx
import numpy as np

from .. import __version__


def environment() -> dict:
    """{date, int8nax, mlx, numpy, python, platform, macos, processor, default_device, device}."""
    try:  # the GPU's report where Metal has one (its architecture string), else the default device's
        info = mx.device_info(mx.gpu) if mx.metal.is_available() else mx.device_info()
        device = {k: str(v) for k, v in info.items()}
    except Exception as exc:
        device = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "int8nax": __version__, "mlx": mx.__version__, "numpy": np.__version__,
        "python": platform.python_version(), "platform": platform.platform(),
        "macos": platform.mac_ver()[0] or None, "processor": platform.processor() or platform.machine(),
        "default_device": str(mx.default_device()), "device": device,
    }
