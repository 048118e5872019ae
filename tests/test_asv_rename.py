"""tools/asv_rename.py: renamed benchmarks keep their recorded history."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

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


def test_help_is_help_and_a_missing_folder_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        asv_rename.main(["--help"])
    assert exit_.value.code == 0
    assert "results_dir" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        asv_rename.main([str(tmp_path / "absent")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "results_dir" in err and "absent" in err and "Traceback" not in err


def test_a_file_asv_cannot_read_is_skipped_with_a_warning_naming_it_and_the_rest_renamed(tmp_path, capsys):
    machine = tmp_path / "box"
    machine.mkdir()
    good = machine / "good-env.json"
    good.write_text(json.dumps({"results": {"bench_gemm.NaxGemm.time_nax_gemm": [[1e-3]]}}))
    bad = {"notjson-env.json": "{bad", "list-env.json": "[1]", "section-env.json": '{"results": [1]}',
           "both-env.json": json.dumps({"results": {"bench_gemm.NaxGemm.time_nax_gemm": 1,
                                                    "bench_gemm.Int8naxGemm.time_int8nax_gemm": 2}})}
    for name, text in bad.items():
        (machine / name).write_text(text)
    (machine / "bytes-env.json").write_bytes(b"\xff")
    (tmp_path / "benchmarks.json").write_text(json.dumps({"bench_ratio.R.time_x_ratio": {"name": 3}}))
    assert asv_rename.main([str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    warned = err.strip().splitlines()
    assert len(warned) == len(bad) + 2
    for name in [*bad, "bytes-env.json", "benchmarks.json"]:
        assert sum(name in line for line in warned) == 1
    assert "skipped 6" in out
    assert list(json.loads(good.read_text())["results"]) == ["bench_gemm.Int8naxGemm.time_int8nax_gemm"]
    for name, text in bad.items():
        assert (machine / name).read_text() == text  # left as it was
