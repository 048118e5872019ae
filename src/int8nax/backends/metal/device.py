"""Whether this machine can run Metal NAX: an Apple GPU of generation >= 17 (M5; phones 18) and
macOS >= 26.4 (nax_support), from what MLX and the platform report (machine_report)."""

from __future__ import annotations

import platform
import re

import mlx.core as mx

from ..base import Probe


# ---------------------------------------------------------------------------------------------
# Detection
# ---------------------------------------------------------------------------------------------

ARCH_PATTERN = re.compile(r"applegpu_g(\d+)([a-z])")
NAX_MIN_GENERATION = 17
"""M5 family (applegpu_g17*): the first Macs with neural accelerators in the GPU."""
NAX_MIN_GENERATION_PHONE = 18
"""Phone GPUs (class letter 'p') get them one generation later (A19)."""
NAX_MIN_MACOS = (26, 4)
"""8-bit integer tensor operations arrived in macOS 26.4."""


def _parse_version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = re.findall(r"\d+", text)
    return tuple(int(p) for p in parts) if parts else None


def nax_support(metal_available: bool, architecture: str | None, macos: str | None) -> Probe:
    """Whether NAX int8 can run, from what the machine reports (a pure function, so that it can
    be tested anywhere). `architecture` is mx.device_info()["architecture"] (e.g.
    "applegpu_g17s"); `macos` is platform.mac_ver()[0] (e.g. "26.4.1"; "" off macOS)."""
    if not metal_available:
        return Probe(False, "Metal is not available (not macOS, or an MLX build without Metal)")
    match = ARCH_PATTERN.fullmatch(architecture or "")
    if match is None:
        return Probe(
            False, f"GPU architecture {architecture!r} is not an Apple GPU name like 'applegpu_g17s'"
        )
    generation, klass = int(match.group(1)), match.group(2)
    needed = NAX_MIN_GENERATION_PHONE if klass == "p" else NAX_MIN_GENERATION
    if generation < needed:
        return Probe(
            False,
            f"Apple GPU generation {generation} ({architecture}) has no neural accelerators; "
            f"NAX needs generation >= {needed} (M5 or newer)",
        )
    version = _parse_version(macos)
    want = ".".join(map(str, NAX_MIN_MACOS))
    if version is None:
        return Probe(False, f"macOS version unknown ({macos!r}); NAX int8 needs macOS >= {want}")
    if version[:2] < NAX_MIN_MACOS:
        return Probe(
            False, f"macOS {macos} lacks int8 tensor operations; NAX int8 needs macOS >= {want}"
        )
    return Probe(True, f"{architecture} on macOS {macos}")


def machine_report() -> tuple[bool, str | None, str | None]:
    """(Metal available, GPU architecture, macOS version) of this machine."""
    available = bool(mx.metal.is_available())
    architecture = None
    if available:
        try:
            architecture = mx.device_info(mx.gpu).get("architecture")
        except Exception:  # an MLX without device_info(device): ask the default device
            architecture = mx.device_info().get("architecture")
    return available, architecture, platform.mac_ver()[0]
