"""The cooperative tensors' lane layouts: the fragment coordinates of each lane's elements
(FragmentLayout), MLX's hardcoded float layout, shuffled layouts that nothing hardcodes, and the
layout probe's dump (kernels/metal/nax_layout.metal) read back and judged."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import tiling

FM, FN, FK = tiling.NAX_FRAG_M, tiling.NAX_FRAG_N, tiling.NAX_FRAG_K
SIMD = tiling.SIMD_WIDTH
A_ELEMS = FM * FK // SIMD
B_ELEMS = FN * FK // SIMD
C_ELEMS = FM * FN // SIMD


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
