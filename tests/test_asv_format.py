"""int8nax.commands.site.asv_format: asv's result files as the site reads them (hand-written files)."""

from __future__ import annotations

import json
import math

import pytest

from int8nax.commands.site import asv_format

COLUMNS = ["result", "params", "version", "started_at", "duration"]


def write(tmp_path, results, **extra):
    data = {"commit_hash": "abc123", "date": 1796400000000, "env_name": "virtualenv-py3.11",
            "params": {"machine": "box"}, "result_columns": COLUMNS, "results": results, "version": 2, **extra}
    path = tmp_path / "abc123-env.json"
    path.write_text(json.dumps(data))
    return path


def test_a_parameter_grid_is_expanded_in_asv_order(tmp_path):
    results = {
        "bench_model.W8A8Model.time_w8a8": [[0.5, None, float("nan"), 2.0], [["'a'", "'b'"], ["1", "16"]], "v",
                                             1796400001000, 3.0],
        "bench_ratio.ModelRatio.track_w8a8_model_ratio": [0.25, [], "v", 1796400002000, 1.0],
        "bench_gemm.Int8naxGemm.time_int8nax_gemm": [1e-3, [["(16, 32, 64)", "(1, 2, 3)"]], "v", None, 1.0],
    }
    got = asv_format.read(write(tmp_path, results))
    assert (got.commit, got.date, got.env) == ("abc123", 1796400000000, "virtualenv-py3.11")
    grid = got.entries["bench_model.W8A8Model.time_w8a8"]
    pairs = grid.pairs()
    assert [c for c, _ in pairs] == [("'a'", "1"), ("'a'", "16"), ("'b'", "1"), ("'b'", "16")]
    assert pairs[0][1] == 0.5 and pairs[1][1] is None and math.isnan(pairs[2][1]) and pairs[3][1] == 2.0
    assert grid.started == 1796400001000
    # a single value stands for every combination; a benchmark without parameters has one, ()
    assert got.entries["bench_gemm.Int8naxGemm.time_int8nax_gemm"].pairs() == [(("(16, 32, 64)",), 1e-3), (("(1, 2, 3)",), 1e-3)]
    assert got.entries["bench_gemm.Int8naxGemm.time_int8nax_gemm"].started == 0
    assert got.entries["bench_ratio.ModelRatio.track_w8a8_model_ratio"].pairs() == [((), 0.25)]
    assert [asv_format.finite(v) for v in (0.5, None, float("nan"), float("inf"), 3, True)] == [
        True, False, False, False, True, False]


@pytest.mark.parametrize("text", ["not json", json.dumps({"commit_hash": "x"}),
                                  json.dumps({"commit_hash": "x", "result_columns": ["params"], "results": {}})])
def test_what_is_not_a_result_file_is_named(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(asv_format.NotAResultFile, match=r"bad\.json: not an asv result file"):
        asv_format.read(path)
    with pytest.raises(asv_format.NotAResultFile, match="missing.json"):
        asv_format.read(tmp_path / "missing.json")


def test_a_machine_folder_gives_its_result_files_and_its_machine_json(tmp_path):
    (tmp_path / "machine.json").write_text(json.dumps({"machine": "box", "cpu": "x"}))
    for name in ("b-env.json", "a-env.json"):
        (tmp_path / name).write_text("{}")
    assert [p.name for p in asv_format.result_paths(tmp_path)] == ["a-env.json", "b-env.json"]
    assert asv_format.machine_info(tmp_path) == {"machine": "box", "cpu": "x"}
    assert asv_format.machine_info(tmp_path / "none") == {}
