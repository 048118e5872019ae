"""The NAX GEMM walk (nax_gemm.metal) over tiling.metal_gemm_dispatch's launch, in both load
paths (the package docstring says how each addresses memory): every load checked against its
buffer, every store counted (GemmWalk)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import tiling
from .layout import FK, FM, FN, SIMD, FragmentLayout, mlx_float_layout


@dataclass
class GemmWalk:
    """What an emulated GEMM launch did."""

    out: np.ndarray
    """[M, N] values handed to the epilogue (int64 accumulators, or the epilogue's output)."""
    writes: np.ndarray
    """int [M, N]: how many times each element of C was stored."""
    loads: dict = field(default_factory=lambda: {"a": 0, "b": 0})
    """Element loads issued, per buffer (counting every simdgroup that issues them)."""
    out_of_bounds: dict = field(default_factory=lambda: {"a": 0, "b": 0})
    """Loads whose address lies outside their buffer (must stay 0)."""
    barriers: list = field(default_factory=list)
    """Per non-exiting threadgroup: int [WM * WN] barriers met by each simdgroup."""
    padding_threadgroups: int = 0
    """Threadgroups that decoded past the last M tile and left at once."""
    max_abs_acc: int = 0
    """Largest |accumulator| seen (int32 must hold it)."""


def _gather(flat: np.ndarray, addr: np.ndarray, mask: np.ndarray, size: int) -> tuple[np.ndarray, int]:
    """Masked loads: values (0 where masked off) and how many live addresses leave [0, size)."""
    outside = mask & ((addr < 0) | (addr >= size))
    safe = np.where(mask & ~outside, addr, 0)
    values = np.where(mask & ~outside, flat[safe] if size else 0, 0)
    return values, int(outside.sum())


def _fragments(values: np.ndarray, coords: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Scatter lane values [..., SIMD, ELEMS] into logical fragments [..., rows, cols]."""
    valid = (coords[..., 0] >= 0).reshape(-1)
    r = coords[..., 0].reshape(-1)[valid]
    c = coords[..., 1].reshape(-1)[valid]
    lead = values.shape[:-2]
    frags = np.zeros(lead + (rows, cols), dtype=np.float64)
    frags[..., r, c] = values.reshape(lead + (-1,))[..., valid]
    return frags


PATHS = ("generic", "mlx_layout")


def _launched_tiles(d, walk: GemmWalk):
    """(tile_m, tile_n) of every threadgroup of dispatch `d` in launch order (the kernel's
    swizzled decode, tiling.tile_of); the padding threadgroups past the last M tile are counted
    in `walk` and yield nothing."""
    swizzle_log, tiles_m = d.params[3], d.params[4]
    for gy in range(d.grid[1] // d.threadgroup[1]):
        for gx in range(d.grid[0] // d.threadgroup[0]):
            tile_m, tile_n = tiling.tile_of(gx, gy, swizzle_log)
            if tile_m >= tiles_m:
                walk.padding_threadgroups += 1
                continue
            yield tile_m, tile_n


def emulate_gemm(a, b, layout: FragmentLayout | None = None, epilogue=None, path: str = "generic",
                 gpu: str | None = None, config: tiling.NaxTileConfig | None = None) -> GemmWalk:
    """Emulate the NAX GEMM launch for a int8 [M, K], b int8 [N, K] on a GPU of class `gpu`
    (tiling.metal_gemm_dispatch; in tile `config` when given, e.g. a candidate of the on-device
    tile choice), with the load path `path` (see the package docstring).

    epilogue(m, n, acc) -> values, vectorized over the stored elements; None stores acc as the
    raw GEMM does. Generic path: simdgroups of one row of the threadgroup issue the same A
    loads (and of one column the same B loads): they are computed once and counted for each.
    """
    a = np.ascontiguousarray(a, dtype=np.int8)
    b = np.ascontiguousarray(b, dtype=np.int8)
    layout = layout or mlx_float_layout()
    if path not in PATHS:
        raise ValueError(f"emulate_gemm: path must be one of {PATHS}, got {path!r}")
    m_rows, k_len = a.shape
    n_cols = b.shape[0]
    d = tiling.metal_gemm_dispatch(m_rows, n_cols, k_len, gpu, config=config)
    if path == "mlx_layout":
        return _emulate_mlx_layout(a, b, layout, epilogue, d)
    cfg = d.config
    M, N, K = d.params[:3]
    if d.grid[0] % d.threadgroup[0] or d.threadgroup[0] != cfg.threads:
        raise AssertionError(f"launch {d.grid} / {d.threadgroup} is not whole threadgroups")
    TM, TN = cfg.sm // FM, cfg.sn // FN
    a_flat, b_flat = a.reshape(-1), b.reshape(-1)

    walk = GemmWalk(
        out=np.zeros((M, N), dtype=np.float64 if epilogue else np.int64),
        writes=np.zeros((M, N), dtype=np.int32),
    )
    sg = np.arange(cfg.wm * cfg.wn)
    sg_row, sg_col = sg // cfg.wn, sg % cfg.wn
    a_ok = layout.left[..., 0] >= 0
    b_ok = layout.right[..., 0] >= 0
    c_ok = layout.dest[..., 0] >= 0

    for tile_m, tile_n in _launched_tiles(d, walk):
        m0 = tile_m * cfg.bm + sg_row * cfg.sm
        n0 = tile_n * cfg.bn + sg_col * cfg.sn
        active = (m0 < M) & (n0 < N)
        act = np.flatnonzero(active)
        rows_used = np.unique(sg_row[active])  # threadgroup rows / columns with work
        cols_used = np.unique(sg_col[active])
        # m and n of every A / B element this simdgroup row / column loads: [R, T, SIMD, E]
        a_m = (tile_m * cfg.bm + rows_used * cfg.sm)[:, None, None, None] \
            + (np.arange(TM) * FM)[None, :, None, None] + layout.left[None, None, ..., 0]
        b_n = (tile_n * cfg.bn + cols_used * cfg.sn)[:, None, None, None] \
            + (np.arange(TN) * FN)[None, :, None, None] + layout.right[None, None, ..., 0]
        # how many active simdgroups issue each row's A loads / each column's B loads
        issuers_a = np.array([(active & (sg_row == r)).sum() for r in rows_used])
        issuers_b = np.array([(active & (sg_col == c)).sum() for c in cols_used])
        acc = np.zeros((len(sg), TM, TN, FM, FN), dtype=np.int64)
        barriers = np.zeros(len(sg), dtype=np.int64)

        k_full = K // cfg.bk * cfg.bk
        blocks = [(kb, kb + cfg.bk, False) for kb in range(0, k_full, cfg.bk)]
        if k_full < K:
            blocks.append((k_full, K, True))
        for k_lo, k_hi, mask_k in blocks:
            barriers += 1  # every simdgroup, active or not, meets the block's barrier
            if not active.any():
                continue
            k0 = np.arange(k_lo, k_hi, FK)  # the block's FK-deep steps
            a_k = k0[:, None, None] + layout.left[None, ..., 1]  # [KK, SIMD, E]
            b_k = k0[:, None, None] + layout.right[None, ..., 1]
            a_addr = a_m[:, :, None] * K + a_k  # [R, TM, KK, SIMD, E]
            b_addr = b_n[:, :, None] * K + b_k
            a_mask = a_ok & (a_m[:, :, None] < M) & ((a_k < K) if mask_k else True)
            b_mask = b_ok & (b_n[:, :, None] < N) & ((b_k < K) if mask_k else True)
            a_mask = np.broadcast_to(a_mask, a_addr.shape)
            b_mask = np.broadcast_to(b_mask, b_addr.shape)
            a_vals, a_out = _gather(a_flat, a_addr, a_mask, a_flat.size)
            b_vals, b_out = _gather(b_flat, b_addr, b_mask, b_flat.size)
            walk.out_of_bounds["a"] += a_out
            walk.out_of_bounds["b"] += b_out
            walk.loads["a"] += int((a_mask.reshape(len(rows_used), -1).sum(1) * issuers_a).sum())
            walk.loads["b"] += int((b_mask.reshape(len(cols_used), -1).sum(1) * issuers_b).sum())
            # Logical fragments, K steps laid side by side: [R, TM, FM, KK * FK].
            a_frag = _fragments(a_vals, layout.left, FM, FK)
            b_frag = _fragments(b_vals, layout.right, FN, FK)
            a_cat = a_frag.transpose(0, 1, 3, 2, 4).reshape(len(rows_used), TM, FM, -1)
            b_cat = b_frag.transpose(0, 1, 3, 2, 4).reshape(len(cols_used), TN, FN, -1)
            # Each active simdgroup: its row's A fragments times its column's B fragments,
            # [S, TM, TN, FM, FN]; float64 is exact here (|partial sums| < 2**31 < 2**53).
            a_sg = a_cat[np.searchsorted(rows_used, sg_row[act])][:, :, None]
            b_sg = b_cat[np.searchsorted(cols_used, sg_col[act])][:, None].swapaxes(-1, -2)
            acc[act] += np.rint(a_sg @ b_sg).astype(np.int64)
            walk.max_abs_acc = max(walk.max_abs_acc, int(np.abs(acc).max()))
        walk.barriers.append(barriers)

        # Stores: each active simdgroup's lanes hand their destination elements, masked to C.
        dr, dc = layout.dest[..., 0], layout.dest[..., 1]
        vals = acc[act][:, :, :, np.where(c_ok, dr, 0), np.where(c_ok, dc, 0)]  # [S, TM, TN, SIMD, E]
        m = m0[act][:, None, None, None, None] + (np.arange(TM) * FM)[:, None, None, None] + dr
        n = n0[act][:, None, None, None, None] + (np.arange(TN) * FN)[:, None, None] + dc
        m, n = np.broadcast_arrays(m, n)
        keep = c_ok & (m < M) & (n < N)
        m, n, vals = m[keep], n[keep], vals[keep]
        np.add.at(walk.writes, (m, n), 1)
        walk.out[m, n] = epilogue(m, n, vals) if epilogue else vals
    return walk


def _emulate_mlx_layout(a, b, layout: FragmentLayout, epilogue, d) -> GemmWalk:
    """The MLX-layout load path of nax_gemm.metal (MlxLayoutSubtile), one simdgroup at a time,
    vectorized over its lanes, elements and K steps."""
    cfg = d.config
    M, N, K = d.params[:3]
    piece = tiling.NAX_ROW_PIECE
    pieces = FM * FK // SIMD // piece  # row pieces per lane per 16 x 16 fragment (2)
    pair = FN // FK  # 16 x 16 fragments side by side in B and C (2)
    row_jump, half_n = FM // pieces, FK
    frag = pieces * piece  # elements per lane of one 16 x 16 fragment
    tm_n, tn_n, tk_n = cfg.sm // FM, cfg.sn // FN, cfg.sk // FK
    if FM != FK or pair != 2 or pieces != 2 or frag * SIMD != FM * FK:
        raise AssertionError("the MLX layout pairs 16 x 16 fragments")
    lane = np.arange(SIMD)
    fm, fn = tiling.mlx_lane_base(lane)
    a_flat, b_flat = a.reshape(-1), b.reshape(-1)
    walk = GemmWalk(out=np.zeros((M, N), dtype=np.float64 if epilogue else np.int64),
                    writes=np.zeros((M, N), dtype=np.int32))

    # K steps: every SK step of the whole blocks (no K mask), then of the remainder (masked).
    k_full = K // cfg.bk * cfg.bk
    k0 = np.arange(0, k_full, cfg.sk)
    k_rem = np.arange(k_full, K, cfg.sk)
    steps = np.concatenate([k0, k_rem])
    mask_k = np.concatenate([np.zeros(len(k0), bool), np.ones(len(k_rem), bool)])
    blocks = k_full // cfg.bk + (k_full < K)
    # Element e of a lane's A fragment: row piece e // piece, column e % piece.
    e8 = np.arange(frag)
    a_row_off = fm[:, None] + (e8 // piece)[None, :] * row_jump  # [SIMD, 8]
    a_col_off = fn[:, None] + (e8 % piece)[None, :]
    e16 = np.arange(pair * frag)
    p16 = e16 // piece  # row pointer of the pair: fragment h = p // pieces, piece r = p % pieces
    b_row_off = fm[:, None] + (p16 // pieces)[None, :] * half_n + (p16 % pieces)[None, :] * row_jump
    b_col_off = fn[:, None] + (e16 % piece)[None, :]
    c_row_off = fm[:, None] + ((e16 % frag) // piece)[None, :] * row_jump
    c_col_off = fn[:, None] + (e16 // frag)[None, :] * half_n + (e16 % piece)[None, :]
    kk_off = np.arange(tk_n) * FK

    def gather(flat, rows, cols, rows_lim, interior, which):
        # rows [T, SIMD, E] absolute; cols [S, TK, SIMD, E] absolute -> values [S, T, TK, SIMD, E]
        row_ok = np.ones(rows.shape, bool) if interior else rows < rows_lim
        k_ok = ~mask_k[:, None, None, None] | (cols < K)
        issued = row_ok[None, :, None] & k_ok[:, None]
        addr = np.minimum(rows, rows_lim - 1)[None, :, None] * K + cols[:, None]
        outside = issued & ((addr < 0) | (addr >= flat.size))
        walk.out_of_bounds[which] += int(outside.sum())
        walk.loads[which] += int(issued.sum())
        ok = issued & ~outside
        return np.where(ok, flat[np.where(ok, addr, 0)], 0).astype(np.int64)

    for tile_m, tile_n in _launched_tiles(d, walk):
        walk.barriers.append(np.full(cfg.wm * cfg.wn, blocks, dtype=np.int64))
        for sg in range(cfg.wm * cfg.wn):
            m0 = tile_m * cfg.bm + sg // cfg.wn * cfg.sm
            n0 = tile_n * cfg.bn + sg % cfg.wn * cfg.sn
            if not (m0 < M and n0 < N):
                continue  # meets the barriers (counted above), loads and stores nothing
            interior = m0 + cfg.sm <= M and n0 + cfg.sn <= N
            cols_a = steps[:, None, None, None] + kk_off[None, :, None, None] + a_col_off[None, None]
            cols_b = steps[:, None, None, None] + kk_off[None, :, None, None] + b_col_off[None, None]
            rows_a = m0 + (np.arange(tm_n) * FM)[:, None, None] + a_row_off[None]
            rows_b = n0 + (np.arange(tn_n) * FN)[:, None, None] + b_row_off[None]
            av = gather(a_flat, rows_a, cols_a, M, interior, "a")  # [S, TM, TK, SIMD, 8]
            bv = gather(b_flat, rows_b, cols_b, N, interior, "b")  # [S, TN, TK, SIMD, 16]
            # The hardware places lane L's element e at layout cell (row, col).
            a_frag = _fragments(av, layout.left, FM, FK)  # [S, TM, TK, FM, FK]
            b_frag = _fragments(bv, layout.right, FN, FK)  # [S, TN, TK, FN, FK]
            part = np.einsum("stkmx,suknx->stumn", a_frag, b_frag, optimize=True)
            part = np.rint(part).astype(np.int64)  # [S, TM, TN, FM, FN], exact in float64
            acc = np.cumsum(part, axis=0)
            if acc.size:
                walk.max_abs_acc = max(walk.max_abs_acc, int(np.abs(acc).max()))
            c = acc[-1] if len(steps) else np.zeros((tm_n, tn_n, FM, FN), np.int64)
            # Each lane's destination element e holds the cell the hardware says; the kernel
            # stores it where MLX's layout says.
            vals = c[:, :, np.where(layout.dest[..., 0] >= 0, layout.dest[..., 0], 0),
                     np.where(layout.dest[..., 0] >= 0, layout.dest[..., 1], 0)]  # [TM, TN, SIMD, 16]
            m = m0 + (np.arange(tm_n) * FM)[:, None, None, None] + c_row_off[None, None]
            n = n0 + (np.arange(tn_n) * FN)[None, :, None, None] + c_col_off[None, None]
            m, n = np.broadcast_arrays(m, n)
            keep = np.ones(m.shape, bool) if interior else (m < M) & (n < N)
            m, n, vals = m[keep], n[keep], vals[keep]
            np.add.at(walk.writes, (m, n), 1)
            walk.out[m, n] = epilogue(m, n, vals) if epilogue else vals
    return walk
