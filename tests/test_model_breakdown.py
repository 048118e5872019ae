"""bench.model_breakdown's pure parts: kernel categories, busy time, a forward's figures."""

import pytest

from int8nax.bench import model_breakdown as mp


@pytest.mark.parametrize("name, want", [
    ("void mlx::core::cu::custom_kernel_int8nax_gemm_w8a8_tma_ws_cooperative_1a2b<int>(...)", "int8nax gemm"),
    ("custom_kernel_int8nax_gemv_w8a8_x_gemv_99", "int8nax gemm"),
    ("custom_kernel_int8nax_sm90_w8a8_wg2_128x112_5e", "int8nax gemm"),
    ("custom_kernel_int8nax_quantize_ab12", "int8nax quantize"),
    ("custom_kernel_int8nax_swiglu_quantize_5dbe9f3b_bfloat16_t_512_5", "int8nax quantize"),
    ("custom_kernel_int8nax_reduce_w8a8_ff", "int8nax reduce"),
    ("nvjet_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "float gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "float gemm"),
    ("void mlx::core::cu::kernel_sdpav_1pass<__nv_bfloat16, true, 128>", "attention"),
    ("void mlx::core::cu::copy_v<__nv_bfloat16, float>", "copy"),
    ("Memset (Device)", "copy"),
    ("void mlx::core::cu::rms_norm<__nv_bfloat16, 4>", "other"),
])
def test_category(name, want):
    assert mp.category(name) == want


def test_busy_time_counts_overlaps_once():
    ev = [{"ts": 0.0, "dur": 10.0}, {"ts": 5.0, "dur": 10.0}, {"ts": 30.0, "dur": 5.0}, {"ts": 31.0, "dur": 1.0}]
    assert mp.busy_us(ev) == pytest.approx(20.0)
    assert mp.busy_us([]) == 0.0


def test_forward_figures_take_the_median_forward_per_layer():
    ranges = [{"name": f"launch{i}", "ts": 1000.0 * i, "dur": d} for i, d in enumerate((400.0, 900.0, 500.0))]
    gpu = []
    for i, r in enumerate(ranges):
        gpu += [{"name": "custom_kernel_int8nax_quantize_1", "ts": r["ts"] + 10, "dur": 20.0 + i},
                {"name": "custom_kernel_int8nax_gemm_w8a8_tma_2", "ts": r["ts"] + 40, "dur": 200.0},
                {"name": "rms_norm", "ts": r["ts"] + 300, "dur": 30.0}]
    b = mp.forward_figures(gpu, ranges, layers=2)
    # the median wall is the third forward's 500 us: its kernels, halved per layer
    assert b.wall_ms == pytest.approx(0.25)
    assert b.categories["int8nax quantize"] == pytest.approx(0.011)
    assert b.categories["int8nax gemm"] == pytest.approx(0.1)
    assert b.categories["other"] == pytest.approx(0.015)
    assert b.busy_ms == pytest.approx((22.0 + 200.0 + 30.0) / 2e3)
    assert b.kernels == 3
    assert b.top[0][0].startswith("custom_kernel_int8nax_gemm") and b.top[0][2] == 1
    assert 0 < b.idle < 1


def test_forward_figures_need_ranges():
    with pytest.raises(ValueError, match="no forward ranges"):
        mp.forward_figures([], [], layers=1)
