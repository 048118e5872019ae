"""int8nax.bench.kernel.mode (`int8nax compare --mode kernel`): what runs on a CPU box: the items
and shapes, rotation sizing and the checks of a timed output (bench.kernel.cases), the CUPTI
record arithmetic (bench.kernel.cupti), the worker supervision (bench.kernel.worker), the tables, the
JSON, and the refusal without CUDA."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from int8nax.commands import cli
from int8nax.bench.kernel import cupti
from int8nax.bench.kernel import cases as kc
from int8nax.bench.kernel import mode as kt
from int8nax.bench.kernel import worker as kw
from int8nax.bench import problems


def has_cuda() -> bool:
    return getattr(mx, "cuda", None) is not None and mx.cuda.is_available()


# ---- what is run -------------------------------------------------------------------------------

def test_default_shapes_are_the_seed_shapes_plus_8192_cubed_for_the_headline_and_shapes_given_win():
    shapes, extra = kt.select_shapes(None)
    assert shapes == list(problems.SEED_SHAPES) and len(shapes) == 11
    assert extra == [(8192, 8192, 8192)] == list(problems.EXTRA_SHAPES)
    assert kt.select_shapes([(8192, 8192, 8192)]) == ([(8192, 8192, 8192)], [])
    items = kt.plan_items(shapes, ("float16",), extra=extra)
    assert [i.key for i in items[22:24]] == ["int8_matmul 8192x8192x8192", "cublaslt 8192x8192x8192"]
    assert len(items) == 24 + 11 and all(i.shape != (8192, 8192, 8192) for i in items[24:])


def test_headline_items_come_before_every_w8a8_item():
    shapes = list(problems.SEED_SHAPES[:3])
    items = kt.plan_items(shapes, ("float16", "bfloat16+bias"))
    assert [i.subject for i in items[:6]] == ["int8_matmul", "cublaslt"] * 3
    assert [i.shape for i in items[:6:2]] == shapes
    assert [i.subject for i in items[6:]] == ["w8a8:float16"] * 3 + ["w8a8:bfloat16+bias"] * 3
    assert len(kt.plan_items(shapes, (), cublaslt=False)) == 3
    assert items[0].key == "int8_matmul 16x4096x4096"


def test_w8a8_variants_parse_and_refuse_unknown_names():
    assert kt.parse_w8a8("bfloat16+bias, float16,float16") == ("bfloat16+bias", "float16")
    assert kt.parse_w8a8("none") == () and kt.parse_w8a8("") == ()
    with pytest.raises(ValueError, match="--w8a8: .*got 'fp8'"):
        kt.parse_w8a8("float16,fp8")


@pytest.mark.parametrize("nbytes", [1, 16 << 20, 25 << 20, 85 << 20, 50 << 20, 1 << 30])
def test_rotation_covers_more_than_three_l2s(nbytes):
    l2 = 50 << 20
    copies = kc.copies_for(nbytes, l2)
    assert copies >= 2
    assert copies * nbytes >= kc.ROTATE_L2 * l2 > 3 * l2 or copies == 2
    if copies > 2:  # no more copies than needed
        assert (copies - 1) * nbytes < kc.ROTATE_L2 * l2
    with pytest.raises(ValueError, match="positive"):
        kc.copies_for(0, l2)


def test_checked_rows_are_all_rows_or_both_ends():
    assert kc.checked_rows(16) == list(range(16))
    rows = kc.checked_rows(2048, limit=512)
    assert len(rows) == 512 and rows[:2] == [0, 1] and rows[-1] == 2047 and len(set(rows)) == 512
    assert 256 not in rows and 1791 not in rows and 1792 in rows


def test_geomean_and_tops():
    assert kt.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert kt.geomean([0.5, 2.0, 1.0, None]) == pytest.approx(1.0)
    assert kt.geomean([]) is None and kt.geomean([1.0, 0.0]) is None
    assert kc.tops((8192, 8192, 8192), 699.0) == pytest.approx(2 * 8192**3 / 699e-6 / 1e12)


# ---- CUPTI records ------------------------------------------------------------------------------

def trace(kernels, ranges=()):
    ev = [{"ph": "X", "cat": cat, "name": n, "ts": ts, "dur": d} for cat, n, ts, d in kernels]
    ev += [{"ph": "X", "cat": "user_annotation", "name": n, "ts": ts, "dur": d} for n, ts, d in ranges]
    ev += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 1.0, "dur": 3.0},
           {"ph": "i", "cat": "kernel", "name": "instant", "ts": 2.0}]
    return {"traceEvents": ev}


def test_launches_split_evenly_and_parts_are_medians():
    k = [("kernel", "void mlx::core::cu::quantize<float>(int*)", 1000 * i, q) for i, q in enumerate((4, 9, 5))]
    k += [("kernel", "int8nax_gemm_w8a8", 1000 * i + 100, g) for i, g in enumerate((20, 22, 21))]
    gpu, ranges = cupti.gpu_events(trace(k))
    assert [e["name"][:8] for e in gpu] == ["void mlx", "int8nax_"] * 3 and ranges == []
    us, parts = cupti.launch_figures(cupti.split_launches(gpu, ranges, 3))
    assert us == 26.0  # the launches sum to 24, 31, 26
    assert parts == [["quantize", 5.0], ["int8nax_gemm_w8a8", 21.0]]


def test_an_extra_kernel_in_one_launch_goes_by_the_launch_ranges():
    k = [("kernel", "gemm", 1000.0 * i, 10.0 + i) for i in range(3)] + [("gpu_memset", "Memset", 1500.0, 2.0)]
    r = [(f"launch{i}", 1000.0 * i - 50, 900.0) for i in range(3)]
    gpu, ranges = cupti.gpu_events(trace(k, r))
    groups = cupti.split_launches(gpu, ranges, 3)
    assert [len(g) for g in groups] == [1, 2, 1]
    us, parts = cupti.launch_figures(groups)
    assert us == 12.0  # the launches sum to 10, 11 + 2, 12
    assert parts == [["gemm", 11.0]]  # from the launches that ran the common sequence
    with pytest.raises(ValueError, match="4 GPU activities for 3 launches"):
        cupti.split_launches(gpu, [], 3)


def test_short_kernel_names():
    assert cupti.short_name("void mlx::core::cu::int8nax_tma_ws<128, 256>(signed char const*, int)") == "int8nax_tma_ws"
    assert cupti.short_name("sm90_xmma_gemm_i8i32_i8i32_i32_tn_n_tilesize128x128x128") == \
        "sm90_xmma_gemm_i8i32_i8i32_i32_tn_n_tilesize128x128x128"


# ---- supervision: workers that die, the budget --------------------------------------------------

def test_a_dying_worker_loses_only_its_item_and_the_budget_stops_the_rest():
    items = kt.plan_items([(16, 64, 64), (32, 64, 64)], ("float16",))
    calls = []

    def spawn(todo, out, launches, timeout):
        calls.append([i.key for i in todo])
        with open(out, "a") as fh:
            for i in todo:
                if i.key == "cublaslt 16x64x64" and len(calls) == 1:
                    fh.write('{"subject": "cublaslt", "sha')  # cut short by the crash
                    return "exit -11"
                fh.write(json.dumps({"subject": i.subject, "shape": list(i.shape), "us": 1.0}) + "\n")
        return "ok"

    recs = kw.run_items(items, 100.0, spawn=spawn)
    assert len(calls) == 2 and calls[1][0] == "int8_matmul 32x64x64"
    assert [("us" in r, "error" in r) for r in recs] == [(True, False), (False, True)] + [(True, False)] * 4
    assert "died on it (exit -11" in recs[1]["error"]

    now = [0.0]

    def slow(todo, out, launches, timeout):
        with open(out, "a") as fh:
            fh.write(json.dumps({"subject": todo[0].subject, "shape": list(todo[0].shape), "us": 1.0}) + "\n")
        now[0] += timeout
        return "timed out"

    recs = kw.run_items(items, 60.0, spawn=slow, clock=lambda: now[0])
    assert "us" in recs[0] and "budget ran out during it" in recs[1]["error"]
    assert all("not_run" in r and "60 s" in r["not_run"] for r in recs[2:])


def test_a_lost_context_restarts_after_the_recorded_fault_and_a_broken_worker_stops_at_once():
    items = kt.plan_items([(16, 64, 64), (32, 64, 64)], (), cublaslt=False)
    calls = []

    def spawn(todo, out, launches, timeout):
        calls.append(len(todo))
        with open(out, "a") as fh:
            fault = len(calls) == 1
            fh.write(json.dumps({"subject": todo[0].subject, "shape": list(todo[0].shape),
                                 **({"error": "RuntimeError: illegal address"} if fault else {"us": 2.0})}) + "\n")
            if fault:
                return f"exit {kw.CONTEXT_LOST}"
            for i in todo[1:]:
                fh.write(json.dumps({"subject": i.subject, "shape": list(i.shape), "us": 1.0}) + "\n")
        return "ok"

    recs = kw.run_items(items, 100.0, spawn=spawn)
    assert calls == [2, 1] and recs[0]["error"] == "RuntimeError: illegal address" and recs[1]["us"] == 2.0

    calls.clear()

    def broken(todo, out, launches, timeout):
        calls.append(len(todo))
        return "exit 1"

    recs = kw.run_items(items, 100.0, spawn=broken)
    assert calls == [2] and all("failed before its first item" in r["error"] for r in recs)


# ---- tables, JSON, exit status ------------------------------------------------------------------

def records():
    a, b, c = (16, 4096, 4096), (512, 4096, 4096), (128, 18944, 3584)
    ours = {a: 12.0, b: 17.6, c: 30.0}
    peer = {a: 10.8, b: 17.6, c: 24.3}
    recs = []
    for s in (a, b, c):
        recs.append({"subject": "int8_matmul", "shape": list(s), "us": ours[s], "tops": kc.tops(s, ours[s]),
                     "describe": "cuda tma_simple 64x64", "parts": [["int8nax_gemm", ours[s]]]})
        recs.append({"subject": "cublaslt", "shape": list(s), "us": peer[s], "describe": "cuBLASLt 13"})
    recs.append({"subject": "w8a8:float16", "shape": list(a), "us": 18.0, "describe": "cuda w8a8",
                 "parts": [["quantize", 3.0], ["gemm", 15.0]]})
    recs.append({"subject": "w8a8:float16", "shape": list(b), "mismatch": "off by 3 ulp", "timed_us": 20.0})
    recs.append({"subject": "w8a8:float16", "shape": list(c), "not_run": "the run's budget (60 s) was spent first"})
    return recs


def test_an_extra_shape_is_shown_but_outside_the_mean():
    big = (8192, 8192, 8192)
    recs = records() + [{"subject": "int8_matmul", "shape": list(big), "us": 699.0, "tops": kc.tops(big, 699.0),
                         "extra": True},
                        {"subject": "cublaslt", "shape": list(big), "us": 100.0, "extra": True}]
    assert kt.summary(recs)["vs_cublaslt"] == kt.summary(records())["vs_cublaslt"]
    text = kt.render(recs)
    row = next(line for line in text.splitlines() if line.split()[:3] == ["8192", "8192", "8192"])
    assert row.split()[3:7] == ["699.0", "100.0", "0.14x*", "1573"]
    assert "(* not in the mean)" in text
    assert sum(line.split()[:3] == ["8192", "8192", "8192"] for line in text.splitlines()) == 1  # not in W8A8's


def test_summary_geomean_against_cublaslt_and_w8a8_against_the_raw_gemm():
    s = kt.summary(records())
    ratios = [10.8 / 12.0, 1.0, 24.3 / 30.0]
    assert s["vs_cublaslt"]["geomean"] == pytest.approx(math.prod(ratios) ** (1 / 3))
    assert s["vs_cublaslt"]["lowest"] == pytest.approx(0.81) and s["vs_cublaslt"]["lowest_at"] == [128, 18944, 3584]
    assert s["w8a8:float16"]["geomean"] == pytest.approx(1.5) and s["w8a8:float16"]["shapes"] == 1
    assert s["w8a8:float16"]["of"] == 3


def test_render_headline_table_w8a8_table_and_what_was_not_measured():
    text = kt.render(records())
    lines = text.splitlines()
    row = next(line for line in lines if line.split()[:3] == ["128", "18944", "3584"])
    assert row.split()[3:7] == ["30.0", "24.3", "0.81x", f"{kc.tops((128, 18944, 3584), 30.0):.0f}"]
    assert "cuda tma_simple 64x64 [int8nax_gemm 30.0]" in row
    assert "geometric mean over 3 of 3 shapes: 0.90x cuBLASLt; lowest 0.81x at 128x18944x3584" in text
    w8a8 = {tuple(line.split()[:3]): line.split()[3:] for line in text.split("W8A8 (every kernel")[1].splitlines()
            if line[:1] == " " or line[:1].isdigit()}
    assert w8a8[("16", "4096", "4096")] == ["12.0", "18.0", "(1.50x)"]
    assert w8a8[("512", "4096", "4096")] == ["17.6", "MISMATCH"]
    assert w8a8[("128", "18944", "3584")] == ["30.0", "n/a"]
    assert "w8a8:float16 512x4096x4096: MISMATCH: off by 3 ulp" in text
    assert "w8a8:float16 128x18944x3584: not run: the run's budget (60 s) was spent first" in text
    assert "float16 16x4096x4096: cuda w8a8 [quantize 3.0, gemm 15.0]" in text
    md = kt.render(records(), markdown=True)
    assert "| M | K | N | int8nax | cuBLASLt | ratio | TOPS | kernel |" in md


def test_json_carries_records_summary_and_meta():
    doc = json.loads(json.dumps(kt.to_json(records(), {"gpu": "H200"})))
    assert doc["meta"] == {"gpu": "H200"} and len(doc["results"]) == 9
    assert doc["summary"]["vs_cublaslt"]["shapes"] == 3


def test_failed_means_a_wrong_output_or_a_failed_int8nax_item():
    recs = records()
    assert kt.failed(recs)  # the mismatch
    ok = [r for r in recs if "mismatch" not in r]
    assert not kt.failed(ok)
    assert not kt.failed(ok + [{"subject": "cublaslt", "shape": [1, 1, 1], "error": "Unavailable"}])
    assert kt.failed(ok + [{"subject": "int8_matmul", "shape": [1, 1, 1], "error": "RuntimeError: NVRTC"}])


# ---- the checks of a timed output (the CPU backend stands in; the profiler is a stub) -----------

class WallClock:
    def time(self, launch, launches):
        for i in range(launches):
            launch(i)
        return 5.0, [["stub", 5.0]]


CTX = {"profiler": WallClock(), "launches": 2, "l2_bytes": 1 << 16, "backend": "cpu"}


@pytest.mark.parametrize("subject,input_bytes", [
    ("int8_matmul", 20 * 64 + 48 * 64),  # a int8 [M, K], b int8 [N, K]
    ("w8a8:float16+bias", 20 * 64 * 2 + 48 * 64 + 48 * 4 + 48 * 2),  # x, w, scale_w float32, bias float16
    ("w8a8:bfloat16", 20 * 64 * 2 + 48 * 64 + 48 * 4),
])
def test_a_timed_output_is_checked(subject, input_bytes):
    rec = kc.measure(kw.Item(subject, (20, 64, 48)), CTX)
    assert rec["exact"] and rec["us"] == 5.0 and "mismatch" not in rec
    assert rec["copies"] == kc.copies_for(input_bytes, CTX["l2_bytes"]) == -(-4 * (1 << 16) // input_bytes)
    assert rec["describe"] == "cpu" or rec["describe"].startswith("cpu ")


def test_a_wrong_output_is_a_mismatch_and_loses_its_time(monkeypatch):
    import int8nax

    real = int8nax.int8_matmul
    monkeypatch.setattr(int8nax, "int8_matmul", lambda a, b, backend=None: real(a, b, backend=backend) + 1)
    rec = kc.measure(kw.Item("int8_matmul", (20, 64, 48)), CTX)
    assert "us" not in rec and "differ from the int64 product" in rec["mismatch"]
    real_w8a8 = int8nax.w8a8_linear
    monkeypatch.setattr(int8nax, "w8a8_linear",
                        lambda x, w, s, b=None, backend=None: real_w8a8(x, w, s, b, backend=backend) * 1.01)
    rec = kc.measure(kw.Item("w8a8:float16", (20, 64, 48)), CTX)
    assert "us" not in rec and "ulp" in rec["mismatch"]


@pytest.mark.parametrize("subject", sorted(kc.FLOAT_PEERS))
def test_mlx_own_forms_are_timed_and_checked_against_the_weights_they_multiply(subject, monkeypatch):
    # bf16 and MLX's 8-bit quantized matmul on bfloat16 x [20, 128] and w [48, 128] (groups of 64):
    # in tolerance as MLX computes them, a mismatch once their output is off by 10 %
    rec = kc.measure(kw.Item(subject, (20, 128, 48)), CTX)
    assert rec["us"] == 5.0 and "mismatch" not in rec and rec["describe"] == kc.FLOAT_PEERS[subject]
    operands = 20 * 128 * 2 + (48 * 128 * 2 if subject == "bf16" else 48 * 128 + 2 * 48 * 2 * 2)
    assert rec["copies"] == kc.copies_for(operands, CTX["l2_bytes"])
    name = "matmul" if subject == "bf16" else "quantized_matmul"
    real = getattr(mx, name)
    monkeypatch.setattr(mx, name, lambda *a, **kw: real(*a, **kw) * 1.1)
    rec = kc.measure(kw.Item(subject, (20, 128, 48)), CTX)
    assert "us" not in rec and "off by" in rec["mismatch"]


# ---- the command ---------------------------------------------------------------------------------

def test_the_command_runs_its_items_in_workers_of_this_module(monkeypatch, capsys):
    seen = {}

    def run_items(items, budget, launches, spawn):
        seen.update(items=items, spawn=spawn)
        return []

    monkeypatch.setattr(kt, "skip_reason", lambda: None)
    monkeypatch.setattr(kt, "environment", lambda: {"mlx": "0", "settings": {}})
    monkeypatch.setattr(kt, "run_items", run_items)
    assert cli.main(["compare", "--mode", "kernel", "--shapes", "16x64x48", "--w8a8", "none"]) == 0
    assert [i.key for i in seen["items"]] == ["int8_matmul 16x64x48", "cublaslt 16x64x48"]
    assert seen["spawn"].func is kw.spawn_worker and seen["spawn"].keywords == {"module": kt.WORKER_MODULE}


def test_the_worker_entry_point_runs_as_a_module():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", kt.WORKER_MODULE, "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "--worker" in proc.stdout, proc.stderr


def test_without_cuda_one_clear_line_and_exit_2(capsys, tmp_path):
    if has_cuda():
        pytest.skip("a CUDA device is present: the mode would run")
    rc = cli.main(["compare", "--mode", "kernel", "--json", str(tmp_path / "never-written.json")])
    out, err = capsys.readouterr()
    assert rc == kt.NO_CUDA_EXIT and out == ""
    assert err.count("\n") == 1 and err.startswith("int8nax compare --mode kernel: needs ")
    assert "nothing was measured" in err
    assert not (tmp_path / "never-written.json").exists()


@pytest.mark.parametrize("argv,message", [
    (["--mode", "kernel,call"], "mode kernel runs alone"),
    (["--mode", "kernel", "--w8a8", "fp8"], "got 'fp8'"),
    (["--mode", "kernel", "--launches", "0"], "positive"),
    (["--mode", "kernel", "--time-limit", "soon"], "positive"),
])
def test_bad_options_are_usage_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", *argv])
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_on_cuda_a_small_run_measures_checks_and_names_every_item(tmp_path):
    # The whole pipeline on the device (workers, CUPTI, cuBLASLt, checks); a GPU-only test.
    if not has_cuda():
        pytest.skip("needs MLX's CUDA backend: unverified here")
    import os
    import subprocess
    import sys

    out = tmp_path / "kernel.json"
    proc = subprocess.run([sys.executable, "-m", "int8nax", "compare", "--mode", "kernel", "--shapes",
                           "64x512x256,130x1040x200", "--w8a8", "float16+bias,bfloat16", "--launches", "5",
                           "--json", str(out)], capture_output=True, text=True, timeout=300, env=os.environ)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(out.read_text())["results"]
    assert len(results) == 8
    for r in results:
        if r["subject"] == "cublaslt" and "error" in r:
            continue  # cuBLASLt may be missing from this install: n/a, said so
        assert r.get("exact") and r["us"] > 0 and r["parts"] and r["describe"], r
    assert "geometric mean" in proc.stdout or "n/a" in proc.stdout


def test_a_failing_describe_is_said_and_keeps_the_figure(monkeypatch):
    from int8nax import backends

    def broken(*args, **kw):
        raise KeyError("plan")

    monkeypatch.setattr(backends.get("cpu"), "describe", broken)
    rec = kc.measure(kw.Item("int8_matmul", (20, 64, 48)), CTX)
    assert rec["us"] == 5.0 and rec["describe"] == "cpu (describe failed: KeyError: 'plan')"


def test_bf16_items_come_last_and_are_set_against_w8a8_bfloat16():
    shapes = [(1, 3584, 4608), (16, 3584, 4608)]
    items = kt.plan_items(shapes, ("bfloat16",), bf16=True)
    assert [i.subject for i in items[-2:]] == ["bf16", "bf16"] and [i.shape for i in items[-2:]] == shapes
    assert all(i.subject != "bf16" for i in kt.plan_items(shapes, ("bfloat16",)))
    recs = [{"subject": "int8_matmul", "shape": [1, 3584, 4608], "us": 5.0},
            {"subject": "w8a8:bfloat16", "shape": [1, 3584, 4608], "us": 4.0},
            {"subject": "bf16", "shape": [1, 3584, 4608], "us": 8.0},
            {"subject": "bf16", "shape": [16, 3584, 4608], "error": "RuntimeError: no"}]
    s = kt.summary(recs)["bf16/w8a8:bfloat16"]
    assert (s["geomean"], s["shapes"], s["lowest_at"]) == (2.0, 1, [1, 3584, 4608])
    text = kt.render(recs)
    assert "against bfloat16 mx.matmul" in text and "4.0 (2.00x)" in text
    assert not kt.failed(recs)  # a peer's failure is not int8nax's


def test_record_runs_each_launch_in_its_range_and_reads_the_trace_back(monkeypatch, tmp_path):
    # A stand-in for torch.profiler: it notes the host ranges and the kernels launched inside them
    # and writes them as a chrome trace, as torch's does; record must run launch(0..n-1) in order,
    # synchronise before the profile closes, and return the trace's records with no file left over.
    import contextlib
    import json as _json
    import types

    clock, events, log = [0.0], [], []

    @contextlib.contextmanager
    def record_function(name):
        start = clock[0]
        yield
        events.append({"ph": "X", "cat": "user_annotation", "name": name, "ts": start, "dur": clock[0] - start})

    class Profile:
        def __init__(self, activities):
            self.activities = activities

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            log.append("profile closed")
            return False

        def export_chrome_trace(self, path):
            Path(path).write_text(_json.dumps({"traceEvents": events}))

    profiler = types.ModuleType("torch.profiler")
    profiler.ProfilerActivity = types.SimpleNamespace(CPU="cpu", CUDA="cuda")
    profiler.profile, profiler.record_function = Profile, record_function
    torch = types.ModuleType("torch")
    torch.profiler = profiler
    torch.cuda = types.SimpleNamespace(synchronize=lambda: log.append("synchronized"))
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.profiler", profiler)

    def launch(i):
        log.append(i)
        events.append({"ph": "X", "cat": "kernel", "name": f"k{i}", "ts": clock[0] + 0.5, "dur": 2.0 + i})
        clock[0] += 10.0

    gpu, ranges = cupti.record(torch, launch, 3, tmp_path)
    assert log == [0, 1, 2, "synchronized", "profile closed"]
    assert [e["name"] for e in gpu] == ["k0", "k1", "k2"] and [e["name"] for e in ranges] == ["launch0", "launch1", "launch2"]
    assert cupti.launch_figures(cupti.split_launches(gpu, ranges, 3))[0] == 3.0  # median of 2, 3, 4
    assert list(tmp_path.iterdir()) == []
