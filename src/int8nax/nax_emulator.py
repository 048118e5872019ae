"""Numpy emulator of the Metal NAX kernels (kernels/metal/*.metal), for checking them without Apple
hardware.

It walks what the kernels walk, with the same constants (imported from tiling, which also
feeds the kernels' template arguments): the launch from tiling.metal_gemm_dispatch, the
swizzled tile decode (tiling.tile_of), the early exit of grid-padding threadgroups, the WM x WN
simdgroups and their TM x TN matmul2d fragments, the K loop (whole BK blocks without a K mask,
then the remainder block with one), the load masks (m < M, n < N, k < K) and the store masks.
Every load address is checked against its buffer and every store is counted, so a run proves
that each output element is written exactly once and that no load leaves its buffer; the
result is the int64 product of what was loaded, compared against the reference by the tests.

Two load paths, as in nax_gemm.metal (path="generic" | "mlx_layout"):
- generic: the kernels ask the cooperative tensors for their elements' coordinates, so they do
  not depend on the lane layout; the emulator takes the layout as a parameter (FragmentLayout)
  and is run with MLX's float layout, with shuffled layouts and, on an M5, with the layout the
  probe kernel reports (layout_from_probe);
- mlx_layout: the addresses come from MLX's BaseNAXFrag lane formula (tiling.mlx_lane_base):
  one clamped row pointer per fragment row, NAX_ROW_PIECE contiguous bytes per row piece at
  constant offsets from the pointer (which advances by SK along K), SK-wide inner steps of
  SK / FK fragments, no masks on sub-tiles wholly inside C, row masks on edge sub-tiles, K
  masks in the remainder block. `layout` is then what the hardware does with the elements
  (where the MMA takes each lane's element from): with MLX's layout the result is exact, with
  any other it is wrong, which is why that path must pass the bit-exact first-use self-test.

emulate_gemv walks the small-M kernel (gemv.metal) the same way, and emulate_w8a8_decode the
W8A8 decode kernel (w8a8_decode.metal). Beyond the walks, dequantize_model mirrors the W8A8
epilogue's float32 arithmetic line by line (dequantize.metal) and quantize_model the
quantization (quantize_core.metal, quantize_rows.metal), also as a GPU that flushes float32
subnormals would run it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import tiling
from .quant import QMAX, round_half_away

FM, FN, FK = tiling.NAX_FRAG_M, tiling.NAX_FRAG_N, tiling.NAX_FRAG_K
SIMD = tiling.SIMD_WIDTH
A_ELEMS = FM * FK // SIMD
B_ELEMS = FN * FK // SIMD
C_ELEMS = FM * FN // SIMD


# ---------------------------------------------------------------------------------------------
# Cooperative-tensor layouts
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FragmentLayout:
    """Fragment coordinates (row, col) of each lane's cooperative-tensor elements, as the kernels
    read them from get_multidimensional_index (row = index[1], col = index[0]); -1 marks an
    element the tensor reports invalid.

    left  int [SIMD, A_ELEMS, 2]: (m, k) in an FM x FK fragment of A
    right int [SIMD, B_ELEMS, 2]: (n, k) in an FN x FK fragment of B (stored [N, K])
    dest  int [SIMD, C_ELEMS, 2]: (m, n) in an FM x FN fragment of C
    """

    name: str
    left: np.ndarray
    right: np.ndarray
    dest: np.ndarray


def _mlx_frag16(lane: np.ndarray, elem: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MLX's BaseNAXFrag map for a 16 x 16 fragment (M5, float types): 8 elements per lane as
    2 rows x 4 contiguous columns, the second row 8 below."""
    row = 4 * ((lane >> 4) & 1) + 2 * ((lane >> 2) & 1) + ((lane >> 1) & 1) + 8 * (elem // 4)
    col = 8 * ((lane >> 3) & 1) + 4 * (lane & 1) + elem % 4
    return row, col


def mlx_float_layout() -> FragmentLayout:
    """The layout MLX hardcodes for float operands on M5. Wide fragments (32 along N) are two
    16 x 16 fragments side by side: elements 0-7 in columns 0-15, 8-15 in columns 16-31."""
    lane = np.arange(SIMD)[:, None]
    r8, c8 = _mlx_frag16(lane, np.arange(8)[None, :])
    left = np.stack([r8, c8], axis=-1)
    wide_r = np.concatenate([r8, r8], axis=1)
    wide_c = np.concatenate([c8, c8 + 16], axis=1)
    # B^T fragments: row n is the wide dimension, so the two halves stack along rows.
    right = np.stack([np.concatenate([r8, r8 + 16], axis=1), np.concatenate([c8, c8], axis=1)], -1)
    dest = np.stack([wide_r, wide_c], axis=-1)
    return FragmentLayout("mlx-float", left, right, dest)


def shuffled_layout(rng: np.random.Generator) -> FragmentLayout:
    """A random bijection for each operand: a layout nothing hardcodes."""

    def shuffle(rows: int, cols: int, elems: int) -> np.ndarray:
        cells = rng.permutation(rows * cols)
        return np.stack([cells // cols, cells % cols], axis=-1).reshape(SIMD, elems, 2)

    return FragmentLayout(
        "shuffled", shuffle(FM, FK, A_ELEMS), shuffle(FN, FK, B_ELEMS), shuffle(FM, FN, C_ELEMS)
    )


def layout_from_probe(dump: np.ndarray) -> FragmentLayout:
    """Read the int32 [3, SIMD, 1 + 3 * CAP] dump of kernels/metal/nax_layout.metal (left, right,
    destination; per lane: capacity, then (valid, index[0], index[1]) per element)."""
    dump = np.asarray(dump)
    parts = []
    for t, elems in enumerate((A_ELEMS, B_ELEMS, C_ELEMS)):
        rec = dump[t, :, 1:].reshape(SIMD, -1, 3)[:, :elems]
        valid = rec[..., 0] == 1
        coords = np.stack([rec[..., 2], rec[..., 1]], axis=-1)  # (row, col) = (index[1], index[0])
        parts.append(np.where(valid[..., None], coords, -1))
    return FragmentLayout("probe", *parts)


def layout_problems(layout: FragmentLayout, capacities: np.ndarray | None = None) -> list[str]:
    """What would make the kernels wrong with this layout: a fragment cell held by no lane or by
    two, a coordinate outside the fragment, or (from a probe) a capacity the kernels do not
    expect. Empty list: the kernels' element-wise loads and stores cover each cell once."""
    problems = []
    shapes = (("left", layout.left, FM, FK, A_ELEMS), ("right", layout.right, FN, FK, B_ELEMS),
              ("dest", layout.dest, FM, FN, C_ELEMS))
    for t, (name, coords, rows, cols, elems) in enumerate(shapes):
        if capacities is not None and (np.asarray(capacities[t]) != elems).any():
            problems.append(f"{name}: capacity {sorted(set(np.asarray(capacities[t]).tolist()))}, "
                            f"the kernels expect {elems}")
        valid = coords[..., 0] >= 0
        r, c = coords[..., 0][valid], coords[..., 1][valid]
        if ((r >= rows) | (c < 0) | (c >= cols)).any():
            problems.append(f"{name}: coordinates outside the {rows} x {cols} fragment")
            continue
        counts = np.bincount(r * cols + c, minlength=rows * cols)
        if (counts != 1).any():
            problems.append(
                f"{name}: {(counts == 0).sum()} cells held by no lane, {(counts > 1).sum()} by several"
            )
    return problems


def mlx_layout_verdict(dump: np.ndarray) -> tuple[dict, list[str], list[str]]:
    """({"left"|"right"|"dest": equal to MLX's layout}, problems, notes) for a layout probe dump:
    the test the Metal backend applies before it builds the MLX-layout load path.

    The right operand is transposed (B stored [N, K]); if its tensor reports the coordinates
    the other way round (index[0] = n, index[1] = k) but is otherwise MLX's layout, it still
    counts as MLX's layout, since the MLX-layout path never reads reported coordinates, and a
    note says that the generic path (which does) would read them wrongly."""
    dump = np.asarray(dump)
    found = layout_from_probe(dump)
    mlx = mlx_float_layout()
    notes = []
    if not np.array_equal(found.right, mlx.right) and np.array_equal(found.right[..., ::-1], mlx.right):
        found = FragmentLayout(found.name, found.left, found.right[..., ::-1].copy(), found.dest)
        notes.append("the right operand reports (k, n) as (index[1], index[0]), transposed from what the "
                     "generic path reads")
    problems = layout_problems(found, capacities=dump[:, :, 0])
    same = {part: bool(np.array_equal(getattr(found, part), getattr(mlx, part))) for part in ("left", "right", "dest")}
    return same, problems, notes


def probe_dump(layout: FragmentLayout, cap: int = C_ELEMS) -> np.ndarray:
    """The int32 [3, SIMD, 1 + 3 * cap] dump nax_layout.metal would write on hardware with this
    layout (the inverse of layout_from_probe): for fakes and the emulator's round trip."""
    dump = np.full((3, SIMD, 1 + 3 * cap), -1, np.int32)
    for t, coords in enumerate((layout.left, layout.right, layout.dest)):
        elems = coords.shape[1]
        dump[t, :, 0] = elems
        rec = dump[t, :, 1:].reshape(SIMD, cap, 3)
        rec[:, :elems, 0] = (coords[..., 0] >= 0).astype(np.int32)
        rec[:, :elems, 1] = coords[..., 1]  # index[0] = column
        rec[:, :elems, 2] = coords[..., 0]  # index[1] = row
    return dump


# ---------------------------------------------------------------------------------------------
# The GEMM walk
# ---------------------------------------------------------------------------------------------


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
    tile choice), with the load path `path` (see the module docstring).

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


# ---------------------------------------------------------------------------------------------
# Epilogue and quantization arithmetic (float32, as the kernels compute it)
# ---------------------------------------------------------------------------------------------


def _fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """float32 fma(a, b, c) modelled in float64. a * b is exact in float64 (24 + 24 bits); the
    sum then rounds twice (float64, float32), which can differ from a true fma only by one
    float32 ulp of the result, and never for the two-product uses (fma(a, b, -fl(a*b)) is exact
    in float64 and representable in float32)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


# IEEE binary32 fields, as w8a8_gemm.metal derives them from FLT_MANT_DIG and FLT_MAX_EXP.
_FRACTION_BITS = np.finfo(np.float32).nmant  # 23
_BIAS = np.finfo(np.float32).maxexp - 1  # 127
_MIN_EXP = np.finfo(np.float32).minexp  # -126
_EXP_MASK = 2 * np.finfo(np.float32).maxexp - 1


def _pow2(k) -> np.ndarray:
    """2^k in float32 from its bits (pow2), k clipped to the normal range the kernel passes."""
    k = np.clip(np.asarray(k, np.int64), _MIN_EXP, _BIAS)
    return ((k + _BIAS).astype(np.uint32) << np.uint32(_FRACTION_BITS)).view(np.float32)


def _decode(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """decode(): x = m * 2^e, m an integer-valued float32 (exact, subnormals included)."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    biased = (bits >> np.uint32(_FRACTION_BITS)) & np.uint32(_EXP_MASK)
    hidden = np.uint32(1 << _FRACTION_BITS)
    sig = (bits & (hidden - np.uint32(1))) | np.where(biased != 0, hidden, np.uint32(0))
    e = np.where(biased != 0, biased.astype(np.int64), 1) - _BIAS - _FRACTION_BITS
    return np.copysign(sig.astype(np.float32), x).astype(np.float32), e


def _exponent_of(x: np.ndarray) -> np.ndarray:
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits >> np.uint32(_FRACTION_BITS)) & np.uint32(_EXP_MASK)).astype(np.int64) - _BIAS


def _scale2(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """scale2(): x * 2^k with one rounding, any finite x and integer k."""
    x = np.asarray(x, np.float32)
    m, e = _decode(x)
    zero = m == 0
    h = _exponent_of(np.where(zero, np.float32(1), m))
    m1 = (m * _pow2(-h)).astype(np.float32)
    f = h + e + np.asarray(k, np.int64)
    big = m1 * _pow2(_BIAS) * _pow2(np.minimum(f - _BIAS, _BIAS))
    mid = m1 * _pow2(f)
    small = (m1 * _pow2(_MIN_EXP)) * _pow2(np.maximum(f - _MIN_EXP, _MIN_EXP))
    out = np.where(f > _BIAS, big, np.where(f >= _MIN_EXP, mid, small))
    return np.where(zero, x, out).astype(np.float32)


def _two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s = a + b
    b_virtual = s - a
    a_virtual = s - b_virtual
    return s, (a - a_virtual) + (b - b_virtual)


def _add_bias(p_hi, tail, bias) -> np.ndarray:
    q_hi, q_lo = _two_sum(p_hi, bias)
    return np.where(np.isfinite(q_hi), q_hi + (q_lo + tail), q_hi).astype(np.float32)


def _tail(a_hi, a_lo, s_hi, s_lo):
    p_hi = a_hi * s_hi
    p_lo = _fma32(a_hi, s_hi, -p_hi)
    return p_hi, _fma32(a_hi, s_lo, _fma32(a_lo, s_hi, a_lo * s_lo)) + p_lo


def dequantize_model(acc, sx, sw, bias=None) -> np.ndarray:
    """float32 y = acc * sx * sw (+ bias) as dequantize.metal's dequantize() computes it: the
    usual path (normal scales, product in [2^-102, 2^79]) and dequantize_wide for every other
    finite input (integer significands, powers of two applied once at the end)."""
    f32 = np.float32
    acc = np.asarray(acc, dtype=np.int64)
    sx, sw = np.asarray(sx, dtype=f32), np.asarray(sw, dtype=f32)
    acc, sx, sw = np.broadcast_arrays(acc, sx, sw)
    has_bias = bias is not None
    b = np.broadcast_to(np.asarray(bias if has_bias else 0, dtype=f32), acc.shape)
    with np.errstate(all="ignore"):
        a_hi = acc.astype(f32)
        a_lo = (acc - a_hi.astype(np.int64)).astype(f32)
        # usual path
        s_hi = sx * sw
        s_lo = _fma32(sx, sw, -s_hi)
        p_hi, tail = _tail(a_hi, a_lo, s_hi, s_lo)
        usual = _add_bias(p_hi, tail, b) if has_bias else (p_hi + tail).astype(f32)
        tiny = f32(np.finfo(f32).tiny)
        take_usual = ((np.abs(sx) >= tiny) & (np.abs(sw) >= tiny) & (np.abs(s_hi) >= _pow2(_MIN_EXP + _FRACTION_BITS + 1))
                      & (np.abs(s_hi) <= _pow2(_BIAS - 2 * (_FRACTION_BITS + 1))))
        # dequantize_wide
        mx_, ex = _decode(np.where(np.isfinite(sx), sx, f32(1)))
        mw_, ew = _decode(np.where(np.isfinite(sw), sw, f32(1)))
        zero = (acc == 0) | (mx_ == 0) | (mw_ == 0)
        zero_val = a_hi * mx_ * mw_
        ws_hi = mx_ * mw_
        ws_lo = _fma32(mx_, mw_, -ws_hi)
        wp_hi, wtail = _tail(a_hi, a_lo, ws_hi, ws_lo)
        e = ex + ew
        no_bias_wide = _scale2(wp_hi + wtail, e)
        if has_bias:
            mb, eb = _decode(np.where(np.isfinite(b), b, f32(1)))
            g = np.maximum(e + _exponent_of(np.where(wp_hi == 0, f32(1), wp_hi)),
                           eb + _exponent_of(np.where(mb == 0, f32(1), mb)))
            y_s = _add_bias(_scale2(wp_hi, e - g), _scale2(wtail, e - g), _scale2(mb, eb - g))
            wide = np.where(b == 0, no_bias_wide, _scale2(y_s, g))
            wide = np.where(zero, zero_val + b, wide)
        else:
            wide = np.where(zero, zero_val, no_bias_wide)
        y = np.where(take_usual, usual, wide)
        # non-finite scales: IEEE; a non-finite bias is returned as it is
        special = (acc.astype(f32) * sx * sw).astype(f32)
        if has_bias:
            special = special + b
            y = np.where(np.isfinite(b), y, b)
        y = np.where(np.isfinite(sx) & np.isfinite(sw), y, special)
        return np.asarray(y, dtype=f32)


def _flushed(x: np.ndarray, flush: bool) -> np.ndarray:
    """x as an operand or result of a float operation on a GPU that flushes float32 subnormals."""
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0) * x, x).astype(np.float32) if flush else x


def _bit_width(n: int) -> int:
    return int(n).bit_length()


def quantize_model(x32: np.ndarray, flush_subnormals: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """quantize_rows.metal (row_scale and code_of of quantize_core.metal) on float32 [R, K]: (int8
    codes, float32 scales, int [R, K] how many times each code was written), with the kernel's thread partition (thread t of QT takes
    k = t, t + QT, ...) and its arithmetic: absmax on the magnitude bits, small scales as an
    integer quotient, rows below 2^-TINY scaled from their bits. flush_subnormals: every float
    operation reads and writes subnormals as zero, as a flushing GPU would (moves and bit casts
    do not)."""
    f32 = np.float32
    x32 = np.ascontiguousarray(x32, dtype=f32)
    rows, k_len = x32.shape
    d = tiling.metal_quant_dispatch(rows)
    qt, tiny_shift = d.threadgroup[0], dict(d.template)["TINY"]
    writes = np.zeros((rows, k_len), dtype=np.int64)
    for t in range(min(qt, k_len)):
        writes[:, t::qt] += 1
    inf_bits = np.uint32(_EXP_MASK << _FRACTION_BITS)
    mag_mask = inf_bits | np.uint32((1 << _FRACTION_BITS) - 1)
    bits = x32.view(np.uint32)
    mag = bits & mag_mask
    bad = (mag >= inf_bits).any(axis=1)
    amax = mag.max(axis=1, initial=np.uint32(0))

    def pow2_bits(k):
        return np.uint32((k + _BIAS) << _FRACTION_BITS)

    def decode_bits(b):
        biased = (b >> np.uint32(_FRACTION_BITS)) & np.uint32(_EXP_MASK)
        sig = (b & np.uint32((1 << _FRACTION_BITS) - 1)) | np.where(biased != 0, np.uint32(1 << _FRACTION_BITS), 0)
        e = np.where(biased != 0, biased.astype(np.int64), 1) - _BIAS - _FRACTION_BITS
        sign = np.where(b & ~mag_mask != 0, -1, 1)
        return (sign * sig.astype(np.int64)), e

    subnormal_exp = _MIN_EXP - _FRACTION_BITS
    small = amax < pow2_bits(_MIN_EXP + _bit_width(QMAX))
    m, e = decode_bits(amax)
    numer = np.where(small, m << np.clip(e - subnormal_exp, 0, 62), 0)
    q, rest = numer // QMAX, numer % QMAX
    up = (2 * rest > QMAX) | ((2 * rest == QMAX) & (q % 2 == 1))
    small_bits = (q + up).astype(np.uint32)
    with np.errstate(all="ignore"):
        big = (amax.view(f32) / f32(QMAX)).astype(f32)  # normal operands and result
    scale_bits = np.where(small, small_bits, big.view(np.uint32))
    scale_bits = np.where(scale_bits == 0, f32(1).view(np.uint32), scale_bits).astype(np.uint32)
    tiny = amax < pow2_bits(-tiny_shift)

    def scaled_up(b, k):
        mm, ee = decode_bits(b)
        with np.errstate(all="ignore"):  # rows that are not tiny: computed, then not taken
            return (mm.astype(f32) * _pow2(ee + k)).astype(f32)  # exact for tiny rows

    scale_up = np.where(tiny, scaled_up(scale_bits, tiny_shift), scale_bits.view(f32)).astype(f32)
    with np.errstate(all="ignore"):
        inv = (f32(1) / scale_up).astype(f32)
        v = np.where(tiny[:, None], scaled_up(bits, tiny_shift), _flushed(x32, flush_subnormals))
        prod = _flushed((v * inv[:, None]).astype(f32), flush_subnormals)
        codes = np.clip(round_half_away(prod), -QMAX, QMAX)
    codes[bad] = 0
    scale = scale_bits.view(f32).copy()
    scale[bad] = np.nan
    return codes.astype(np.int8), scale, writes


# ---------------------------------------------------------------------------------------------
# The small-M kernel (gemv.metal)
# ---------------------------------------------------------------------------------------------


def emulate_gemv(a, b, epilogue=None, dispatch=None) -> GemmWalk:
    """Emulate gemv.metal's launch (tiling.metal_gemv_dispatch, or `dispatch`, e.g.
    tiling.metal_decode_dispatch's) for a int8 [M, K], b int8 [N, K]: per simdgroup, each lane's
    ROW_PIECE-byte (MV_PIECE) pieces at k = lane * ROW_PIECE + step * SIMD * ROW_PIECE, masked to
    m < M, n < N and k < K, exact int sums per lane, then the simdgroup's sum handed to the
    epilogue by lane r * MV_MAX_M + m. Counts every element load (A once per simdgroup, B once)
    and every store."""
    a = np.ascontiguousarray(a, dtype=np.int8)
    b = np.ascontiguousarray(b, dtype=np.int8)
    m_rows, k_len = a.shape
    n_cols = b.shape[0]
    d = dispatch or tiling.metal_gemv_dispatch(m_rows, n_cols, k_len)
    t = dict(d.template)
    rows, sgs, max_m = t["MV_ROWS"], t["MV_SG"], t["MV_MAX_M"]
    piece = t.get("MV_PIECE", t.get("ROW_PIECE"))
    if rows * max_m > SIMD:
        raise AssertionError("one lane per output element of a simdgroup")
    walk = GemmWalk(out=np.zeros((m_rows, n_cols), dtype=np.float64 if epilogue else np.int64),
                    writes=np.zeros((m_rows, n_cols), dtype=np.int32))
    a_flat, b_flat = a.reshape(-1).astype(np.int64), b.reshape(-1).astype(np.int64)
    lane = np.arange(SIMD)
    k0 = lane[None, :] * piece + np.arange(0, max(k_len, 1), SIMD * piece)[:, None]  # [steps, SIMD]
    cols = k0[..., None] + np.arange(piece)  # [steps, SIMD, piece]
    k_ok = cols < k_len
    for tg in range(d.grid[0] // d.threadgroup[0]):
        for sg in range(sgs):
            n0 = (tg * sgs + sg) * rows
            if n0 >= n_cols:
                continue  # the whole simdgroup leaves; no barrier to meet
            m = np.arange(max_m)
            a_ok = (m < m_rows)[:, None, None, None] & k_ok[None]
            a_addr = np.minimum(m, m_rows - 1)[:, None, None, None] * k_len + cols[None]
            n = n0 + np.arange(rows)
            b_ok = (n < n_cols)[:, None, None, None] & k_ok[None]
            b_addr = np.minimum(n, n_cols - 1)[:, None, None, None] * k_len + cols[None]
            for which, ok, addr, flat in (("a", a_ok, a_addr, a_flat), ("b", b_ok, b_addr, b_flat)):
                walk.loads[which] += int(ok.sum())
                walk.out_of_bounds[which] += int((ok & ((addr < 0) | (addr >= flat.size))).sum())
            av = np.where(a_ok, a_flat[np.where(a_ok, a_addr, 0)], 0)  # [max_m, steps, SIMD, piece]
            bv = np.where(b_ok, b_flat[np.where(b_ok, b_addr, 0)], 0)  # [rows, steps, SIMD, piece]
            per_lane = np.einsum("mslp,rslp->mrl", av, bv)  # exact int64 lane sums
            walk.max_abs_acc = max(walk.max_abs_acc, int(np.abs(per_lane).max(initial=0)))
            total = per_lane.sum(axis=-1)  # simd_sum
            mm, rr = np.meshgrid(np.arange(max_m), np.arange(rows), indexing="ij")
            keep = (mm < m_rows) & (n0 + rr < n_cols)
            mm, nn, vals = mm[keep], (n0 + rr)[keep], total[keep]
            np.add.at(walk.writes, (mm, nn), 1)
            walk.out[mm, nn] = epilogue(mm, nn, vals) if epilogue else vals
    return walk


def emulate_w8a8_decode(x32, w, s_w, bias=None, flush_subnormals: bool = False) -> tuple[np.ndarray, GemmWalk]:
    """w8a8_decode.metal on float32 x [M, K] (M <= METAL_MV_MAX_M), int8 w [N, K], float32 s_w
    [N]: (float32 y [M, N] before the cast to the output dtype, the walk). Each simdgroup's row
    scales and codes are quantize_model's (the same row_scale and code_of, and a max of bits does
    not depend on the partition), walked over tiling.metal_decode_dispatch's lanes and
    MV_PIECE-byte steps, then dequantize_model: the two-launch path's numbers by construction."""
    x32 = np.ascontiguousarray(x32, dtype=np.float32)
    codes, scales, _ = quantize_model(x32, flush_subnormals)
    m_rows, k_len = x32.shape
    d = tiling.metal_decode_dispatch(m_rows, w.shape[0], k_len)
    b = None if bias is None else np.asarray(bias, np.float32)

    def epilogue(m, n, acc):
        return dequantize_model(acc, scales[m], np.asarray(s_w, np.float32)[n], None if b is None else b[n])

    walk = emulate_gemv(codes, w, epilogue, d)
    return walk.out.astype(np.float32), walk
