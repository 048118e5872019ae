"""Tile constants and launch math: the one place they live.

Kernels receive every constant below as a template argument (mx.fast.metal_kernel /
cuda_kernel `template=`), so the .metal and .cu sources hold no tile numbers of their
own, and the Metal tile-walk emulator imports the same objects. Backend sections
below add their configurations; the generic math (ceil_div, the swizzled grid and its
decode) is shared by all of them.

Swizzle: with T = 2**swizzle_log, T consecutive M-tiles share one N column of tiles,
so neighbouring threadgroups/blocks reuse the same weight tile from cache.
    grid  = (tiles_n * T, ceil(tiles_m / T))
    decode: tile_m = (gy << s) + (gx & (T - 1)), tile_n = gx >> s
Tiles that decode past tiles_m exist only to fill the grid and return at once.
"""

from __future__ import annotations

from dataclasses import dataclass


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TileConfig:
    """One GEMM tiling: output tile BM x BN per threadgroup/block, K step BK between
    barriers, and a WM x WN grid of simdgroups/warps each owning a (BM/WM) x (BN/WN) sub-tile."""

    name: str
    bm: int
    bn: int
    bk: int
    wm: int
    wn: int

    def __post_init__(self):
        if self.bm % self.wm or self.bn % self.wn:
            raise ValueError(f"{self.name}: BM/BN must divide by WM/WN")

    @property
    def sm(self) -> int:
        return self.bm // self.wm

    @property
    def sn(self) -> int:
        return self.bn // self.wn

    @property
    def threads(self) -> int:
        return 32 * self.wm * self.wn

    def template(self) -> list[tuple[str, int]]:
        """Template arguments for mx.fast.*_kernel."""
        return [("BM", self.bm), ("BN", self.bn), ("BK", self.bk), ("WM", self.wm), ("WN", self.wn)]


def swizzle_log(tiles_m: int) -> int:
    """log2 of how many M-tiles share an N column (0, 1 or 2)."""
    if tiles_m <= 3:
        return 0
    if tiles_m <= 6:
        return 1
    return 2


@dataclass(frozen=True)
class Launch:
    """Grid of threadgroups/blocks for one GEMM: what the kernel and the emulator both walk."""

    tiles_m: int
    tiles_n: int
    swizzle_log: int
    grid_x: int
    grid_y: int


def launch(m: int, n: int, cfg: TileConfig) -> Launch:
    tiles_m = ceil_div(m, cfg.bm)
    tiles_n = ceil_div(n, cfg.bn)
    s = swizzle_log(tiles_m)
    t = 1 << s
    return Launch(tiles_m, tiles_n, s, tiles_n * t, ceil_div(tiles_m, t))


def tile_of(gx: int, gy: int, s: int) -> tuple[int, int]:
    """(tile_m, tile_n) that threadgroup (gx, gy) owns; mirrors the kernels' decode."""
    t = 1 << s
    return (gy << s) + (gx & (t - 1)), gx >> s
