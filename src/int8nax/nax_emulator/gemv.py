"""The small-M walks: gemv.metal's launch (emulate_gemv) and the W8A8 decode kernel,
w8a8_decode.metal (emulate_w8a8_decode), which quantizes x in registers and dequantizes behind
the same walk."""

from __future__ import annotations

import numpy as np

from .. import tiling
from .arithmetic import dequantize_model, quantize_model
from .gemm import GemmWalk
from .layout import SIMD


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
