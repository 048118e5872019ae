"""tools/cuda_profile.py: the trace arithmetic on hand-made traces, and its refusal without a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import cuda_profile as cp  # noqa: E402


def x(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


def test_events_are_sorted_by_kind_and_gpu_copies_of_ranges_dropped():
    ev = cp.events({"traceEvents": [
        x("kernel", "k2", 30, 5), x("kernel", "k1", 10, 5), x("cuda_runtime", "cudaGraphLaunch", 8, 1),
        x("user_annotation", "eval0", 5, 40), x("gpu_user_annotation", "eval0", 9, 30),
        {"ph": "i", "cat": "kernel", "name": "instant", "ts": 1}]})
    assert [e["name"] for e in ev["kernel"]] == ["k1", "k2"]
    assert [e["name"] for e in ev["api"]] == ["cudaGraphLaunch"]
    assert [e["name"] for e in ev["range"]] == ["eval0"]


def test_busy_is_the_union_of_intervals():
    ks = [{"ts": 0, "dur": 10}, {"ts": 5, "dur": 10}, {"ts": 20, "dur": 5}, {"ts": 21, "dur": 1}]
    assert cp.busy(ks) == 15 + 5


def test_call_breakdown_of_a_hand_made_call():
    # build 0-10, eval 10-60: API launch at 30, kernels 40-45 and 47-50, eval returns at 60
    trace = {"traceEvents": [
        x("user_annotation", "build0", 0, 10), x("user_annotation", "eval0", 10, 50),
        x("cuda_runtime", "cudaGraphExecUpdate", 20, 6), x("cuda_runtime", "cudaGraphLaunch", 30, 2),
        x("kernel", "gemm", 40, 5), x("kernel", "reduce", 47, 3), x("kernel", "later", 70, 1)]}
    ev = cp.events(trace)
    row = cp.call_breakdown(ev, ev["range"][0], ev["range"][1])
    assert row["build_us"] == 10 and row["eval_us"] == 50 and row["kernels"] == 2
    assert row["eval_to_launch_us"] == 20 and row["launch_to_kernel_us"] == 10
    assert row["kernel_us"] == 8 and row["kernel_span_us"] == 10 and row["after_last_kernel_us"] == 10
    assert row["api"] == {"cudaGraphExecUpdate": 6, "cudaGraphLaunch": 2}


def test_chain_breakdown_per_call():
    # 2 calls: GPU idle until 50, kernels 50-60 and 62-72, the chain ends at 80
    trace = {"traceEvents": [
        x("user_annotation", "chain", 0, 80), x("user_annotation", "link_build", 1, 4),
        x("user_annotation", "link_build", 6, 6), x("cuda_runtime", "cudaGraphLaunch", 45, 1),
        x("kernel", "mlx::core::cu::custom_kernel_int8nax_gemm(int*)", 50, 10),
        x("kernel", "mlx::core::cu::custom_kernel_int8nax_gemm(int*)", 62, 10)]}
    ev = cp.events(trace)
    row = cp.chain_breakdown(ev, ev["range"][0], [r for r in ev["range"] if r["name"] == "link_build"], 2)
    assert row["wall_per_call_us"] == 40 and row["build_per_call_us"] == 5 and row["graph_launches"] == 1
    assert row["gpu_idle_before_first_kernel_us"] == 50 and row["gpu_busy_per_call_us"] == 10
    assert row["gpu_gaps_per_call_us"] == 1 and row["after_last_kernel_us"] == 8
    assert row["kernel_us_per_call_by_name"] == {"custom_kernel_int8nax_gemm": 10}


def test_median_row_takes_numbers_and_api_names():
    rows = [{"a": 1, "api": {"x": 1}}, {"a": 3, "api": {"x": 5, "y": 2}}, {"a": 2, "api": {}}]
    assert cp.median_row(rows) == {"a": 2, "api": {"x": 1, "y": 0.0}}


def test_without_a_gpu_it_says_why_and_exits_3(tmp_path):
    if cp.skip_reason() is None:
        pytest.skip("a CUDA device is here: the refusal path does not apply")
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "cuda_profile.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "SKIPPED" in (tmp_path / "cuda_profile.md").read_text()
