"""tools/asv_rename.py: renamed benchmarks keep their recorded history."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))

import asv_rename  # noqa: E402


def test_result_files_and_benchmarks_json_are_renamed_in_place_and_once(tmp_path):
    machine = tmp_path / "box"
    machine.mkdir()
    result = {"commit_hash": "a" * 40, "results": {
        "bench_gemm.NaxGemm.time_nax_gemm": [[1e-3], [["(1, 2, 3)"]], "1"],
        "bench_linear.MlxFp16.time_mlx_fp16_matmul": [[2e-3], [["(1, 2, 3)"]], "1"],
        "bench_ratio.GemmRatio.time_nax_gemm_ratio": [[1.1], [["(1, 2, 3)"]], "1"],
        "bench_kernel.Kernel.track_nax_full_kernel": [[7], [["(1, 2, 3)"]], "1"]},
        "durations": {"<build>": 3.0}, "version": 2}
    (machine / "aaaaaaaa-env.json").write_text(json.dumps(result))
    (machine / "machine.json").write_text('{"machine": "box"}')
    (tmp_path / "benchmarks.json").write_text(json.dumps({
        "bench_linear.NaxFull.track_nax_full_tops": {"name": "bench_linear.NaxFull.track_nax_full_tops", "unit": "TOPS"},
        "version": 2}))
    assert len(asv_rename.rename(tmp_path)) == 2
    data = json.loads((machine / "aaaaaaaa-env.json").read_text())
    assert list(data["results"]) == ["bench_gemm.Int8naxGemm.time_int8nax_gemm",
                                     "bench_linear.MlxFp16.time_mlx_fp16_matmul",
                                     "bench_ratio.GemmRatio.track_int8nax_gemm_ratio",
                                     "bench_kernel.Kernel.track_int8nax_full_kernel"]
    assert list(data["results"].values()) == list(result["results"].values())
    assert data["commit_hash"] == "a" * 40 and data["durations"] == {"<build>": 3.0}
    assert json.loads((tmp_path / "benchmarks.json").read_text()) == {
        "bench_linear.Int8naxFull.track_int8nax_full_tops": {"name": "bench_linear.Int8naxFull.track_int8nax_full_tops",
                                                             "unit": "TOPS"}, "version": 2}
    assert asv_rename.rename(tmp_path) == []  # again: nothing to do


def test_the_committed_record_uses_only_the_current_names():
    results = REPO / ".asv" / "results"
    stale = {name for path in results.glob("*/*.json") if path.name != "machine.json"
             for name in json.loads(path.read_text()).get("results", {}) if asv_rename.new_name(name) != name}
    assert stale == set()
