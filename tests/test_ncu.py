"""int8nax.bench.kernel.ncu: the items it takes, the ncu command it builds, the run's order of markers
and calls (on the CPU backend, the profiler stood in), and the summary of a details CSV in
ncu's format (the GPU step itself needs ncu on the H200: tools/hopper_verify.sh profile)."""

import json

import pytest

from int8nax.bench.kernel import ncu
from int8nax.bench.kernel.cases import Prepared
from int8nax.bench.kernel.worker import Item

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(kid, name, section, metric, unit, value, grid="(132, 1, 1)", block="(384, 1, 1)"):
    return (f'"{kid}","1","python3","h","{name}","1","7","{block}","{grid}","0","9.0",'
            f'"{section}","{metric}","{unit}","{value}"')


def kernel_rows(kid, name, ns, dram_bytes_per_s="0"):
    return [
        row(kid, name, "GPU Speed Of Light Throughput", "Duration", "nsecond", ns),
        row(kid, name, "GPU Speed Of Light Throughput", "DRAM Throughput", "%", "61.5"),
        row(kid, name, "GPU Speed Of Light Throughput", "Memory Throughput", "%", "70"),
        row(kid, name, "Memory Workload Analysis", "Memory Throughput", "byte/second", dram_bytes_per_s),
        row(kid, name, "Launch Statistics", "Registers Per Thread", "register/thread", "168"),
        row(kid, name, "", "", "", ""),  # a rule's row: no metric
    ]


MARK = f"mlx::core::cu::custom_kernel_{ncu.MARKER}"
GEMM = "mlx::core::cu::custom_kernel_int8nax_tma_unspecialized_T_bfloat16"
QUANT = "mlx::core::cu::custom_kernel_int8nax_quantize_rows"


def csv_text(sequence):
    lines = ["==PROF== Connected to process 1", HEADER]
    for kid, (name, ns) in enumerate(sequence):
        lines += kernel_rows(kid, name, ns, "3,100,000,000,000" if name == GEMM else "0")
    return "\n".join(lines) + "\n"


def manifest(entries, launches=1):
    return {"env": "H200 test", "launches": launches, "entries": entries}


def entry(subject, shape, profiled=True, **kw):
    return {"key": Item(subject, shape).key, "subject": subject, "shape": list(shape), "profiled": profiled,
            "describe": "cuda tma", "check": None, **kw}


def test_sets_are_subjects_at_shapes_shape_by_shape():
    items = ncu.parse_sets(["w8a8:bfloat16,int8_matmul@512x4096x4096,128x3584x18944", "bf16@1x64x64",
                            "int8_matmul@512x4096x4096"])
    assert items == [Item("w8a8:bfloat16", (512, 4096, 4096)), Item("int8_matmul", (512, 4096, 4096)),
                     Item("w8a8:bfloat16", (128, 3584, 18944)), Item("int8_matmul", (128, 3584, 18944)),
                     Item("bf16", (1, 64, 64))]


@pytest.mark.parametrize("value,says", [("int8_matmul", "SUBJECT"), ("@16x16x16", "SUBJECT"),
                                        ("cublas@16x16x16", "'cublas'"), ("bf16@16x16", "16x16")])
def test_a_bad_set_names_the_option_and_what_came(value, says):
    with pytest.raises(ValueError, match="--set") as err:
        ncu.parse_sets([value])
    assert says in str(err.value)


def test_the_ncu_command_profiles_only_the_runs_window_with_the_summarys_sections():
    cmd = ncu.ncu_command("/o/prof", ["--set", "bf16@1x64x64", "--manifest", "/o/m.json"])
    assert cmd[0] == "ncu" and cmd[-7:] == ["python3", "-m", "int8nax.bench.kernel.ncu", "--set", "bf16@1x64x64", "--manifest",
                                           "/o/m.json"]
    text = " ".join(cmd)
    assert "--profile-from-start off" in text and "--clock-control none" in text and "--export /o/prof" in text
    assert "--print-units base" in text
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"] == list(ncu.SECTIONS)


def test_the_run_marks_each_item_and_profiles_only_after_warm_up_and_check():
    events = []
    items = [Item("int8_matmul", (5, 64, 48)), Item("w8a8:nonsense", (5, 64, 48)), Item("w8a8:float16", (5, 64, 48))]
    entries = ncu.run(items, 2, l2=1 << 16, backend="cpu", start=lambda: events.append("start"),
                      stop=lambda: events.append("stop"), mark=lambda i: events.append(("mark", i)),
                      deadline=float("inf"), log=lambda *a, **k: None)
    assert events == ["start", ("mark", 0), ("mark", 1), ("mark", 2), "stop"]
    assert [e["profiled"] for e in entries] == [True, False, True]
    assert entries[0]["check"] is None and entries[2]["check"] is None and entries[0]["describe"].startswith("cpu")
    assert "nonsense" in entries[1]["error"]


def test_items_past_the_time_limit_are_said_not_profiled():
    clock = iter([0.0, 10.0, 20.0])
    entries = ncu.run([Item("int8_matmul", (5, 64, 48)), Item("bf16", (5, 64, 48))], 1, l2=1 << 16, backend="cpu",
                      start=lambda: None, stop=lambda: None, mark=lambda i: None, deadline=5.0,
                      clock=lambda: next(clock), log=lambda *a, **k: None)
    assert [e["profiled"] for e in entries] == [True, False]
    assert "time limit" in entries[1]["error"]


def test_the_summary_attributes_kernels_between_boundaries_and_compares_w8a8_with_raw():
    seq = [(MARK, 1000), (QUANT, 2500), (GEMM, 20000), (MARK, 1000), (GEMM, 16000), (MARK, 1000)]
    kernels = ncu.read_kernels(csv_text(seq))
    assert [k["id"] for k in kernels] == list(range(6))
    assert kernels[2]["metrics"]["us"] == 20.0 and kernels[2]["metrics"]["TB/s"] == pytest.approx(3.1)
    assert kernels[2]["metrics"]["DRAM %"] == 61.5 and kernels[2]["metrics"]["regs"] == 168
    m = manifest([entry("w8a8:bfloat16", (512, 4096, 4096)), entry("int8_matmul", (512, 4096, 4096)),
                  entry("bf16", (512, 4096, 4096), profiled=False, error="not run: the time limit came first")])
    text = ncu.summary(kernels, m)
    assert "w8a8:bfloat16 512x4096x4096: 22.5 us a call, 2 kernels (exact)" in text
    assert "int8_matmul 512x4096x4096: 16.0 us a call, 1 kernels (exact)" in text
    assert "512x4096x4096 w8a8:bfloat16: 22.5 us, 1.41x int8_matmul's 16.0" in text
    assert "not profiled: bf16 512x4096x4096: not run: the time limit came first" in text
    assert "| custom_kernel_int8nax_quantize_rows | (132, 1, 1) | (384, 1, 1) | 2.5 | 62 | 0.00 | — |" in text


def test_cublaslt_is_a_subject_and_the_summary_sets_the_raw_gemm_against_it():
    assert ncu.parse_sets(["int8_matmul,cublaslt@128x18944x3584"]) == [
        Item("int8_matmul", (128, 18944, 3584)), Item("cublaslt", (128, 18944, 3584))]
    seq = [(MARK, 1000), (GEMM, 36700), (MARK, 1000), (GEMM, 29300), (MARK, 1000)]
    m = manifest([entry("int8_matmul", (128, 18944, 3584)), entry("cublaslt", (128, 18944, 3584))])
    text = ncu.summary(ncu.read_kernels(csv_text(seq)), m)
    assert "128x18944x3584: int8_matmul 36.7 us, cuBLASLt 29.3: 0.80x" in text
    assert "against the raw GEMM" not in text  # no W8A8 item


def test_a_synced_items_output_is_not_evaluated_by_mlx(monkeypatch):
    # cuBLASLt's call waits for torch's stream and returns a torch tensor, which mx.eval refuses
    class Tensor:
        pass

    out = Tensor()
    checked = []
    prepared = Prepared(lambda s: out, [("a", "b")], 1, checked.append, "exact", "cuBLASLt", synced=True)
    monkeypatch.setattr(ncu, "prepare", lambda item, l2, backend: prepared)
    entries = ncu.run([Item("cublaslt", (5, 64, 48))], 2, l2=1 << 16, backend="cpu", start=lambda: None,
                      stop=lambda: None, mark=lambda i: None, deadline=float("inf"), log=lambda *a, **k: None)
    assert "error" not in entries[0] and entries[0]["profiled"]
    assert checked == [out]


def test_a_profile_that_does_not_fit_the_manifest_is_refused(tmp_path, capsys):
    kernels = ncu.read_kernels(csv_text([(MARK, 1000), (GEMM, 16000), (MARK, 1000)]))
    m = manifest([entry("int8_matmul", (16, 64, 64)), entry("bf16", (16, 64, 64))])
    with pytest.raises(ValueError, match="2 boundary kernels in the profile, expected 3"):
        ncu.summary(kernels, m)
    (tmp_path / "p.csv").write_text(csv_text([(MARK, 1000), (GEMM, 16000), (MARK, 1000)]))
    (tmp_path / "m.json").write_text(json.dumps(m))
    assert ncu.main(["--summarize", str(tmp_path / "p.csv"), "--manifest", str(tmp_path / "m.json")]) == 2
    assert "not of one run" in capsys.readouterr().err
    (tmp_path / "p.csv").write_text("no csv\n")
    assert ncu.main(["--summarize", str(tmp_path / "p.csv"), "--manifest", str(tmp_path / "m.json")]) == 2


def test_launches_divide_the_totals():
    kernels = ncu.read_kernels(csv_text([(MARK, 1), (GEMM, 10000), (GEMM, 12000), (MARK, 1)]))
    text = ncu.summary(kernels, manifest([entry("int8_matmul", (16, 64, 64))], launches=2))
    assert "int8_matmul 16x64x64: 11.0 us a call, 1 kernels" in text


def test_the_command_line_says_what_is_wrong(capsys):
    with pytest.raises(SystemExit) as err:
        ncu.main(["--manifest", "m.json"])
    assert err.value.code == 2 and "--set" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ncu.main(["--manifest", "m.json", "--set", "bf16@1x2"])
    assert "--set: expected MxKxN" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ncu.main(["--manifest", "m.json", "--set", "bf16@1x2x2", "--launches", "0"])
    assert "--launches" in capsys.readouterr().err


def test_without_a_cuda_gpu_the_run_says_why_and_exits_3(tmp_path, capsys):
    from int8nax.bench.kernel.cupti import skip_reason

    if skip_reason() is None:
        pytest.skip("a CUDA GPU is here: the run would profile")
    assert ncu.main(["--manifest", str(tmp_path / "m.json"), "--set", "bf16@1x64x64"]) == 3
    assert "needs" in capsys.readouterr().err and not (tmp_path / "m.json").exists()


def test_profile_runs_the_items_under_ncu_then_reads_its_report(tmp_path, capsys):
    m = tmp_path / "m.json"
    calls = []

    def runner(cmd, stdout=None, env=None):
        calls.append(cmd)
        assert env["LC_ALL"] == "C"  # numbers as read_kernels reads them
        if "--import" in cmd:
            stdout.write(csv_text([(MARK, 1), (GEMM, 10000), (MARK, 1)]))
        else:
            m.write_text(json.dumps(manifest([entry("int8_matmul", (16, 64, 64))])))

        class Done:
            returncode = 0
        return Done()

    report = str(tmp_path / "prof")
    assert ncu.profile(report, ["--set", "int8_matmul@16x64x64", "--manifest", str(m)], m, runner=runner) == 0
    assert calls[0][:1] == ["ncu"] and calls[0][-4:] == ["--set", "int8_matmul@16x64x64", "--manifest", str(m)]
    assert calls[1][:3] == ["ncu", "--import", report + ".ncu-rep"]
    assert "int8_matmul 16x64x64: 10.0 us a call" in capsys.readouterr().out
    assert (tmp_path / "prof.csv").exists()


# ncu 2025's details CSV as seen in published runs: five rule columns after "Metric Value" (empty
# on metric rows, with a trailing comma), units "ns", "byte/s", "register/thread", and rule rows
# whose section is the identifier and whose metric is empty.
HEADER_2025 = HEADER + ',"Rule Name","Rule Type","Rule Description","Estimated Speedup Type","Estimated Speedup"'


def test_the_2025_csv_format_reads_the_same():
    def rows(kid, name, ns):
        out = []
        for section, metric, unit, value in (("GPU Speed Of Light Throughput", "Duration", "ns", ns),
                                             ("GPU Speed Of Light Throughput", "DRAM Throughput", "%", "40.2"),
                                             ("Memory Workload Analysis", "Memory Throughput", "byte/s",
                                              "3995313115.40"),
                                             ("Launch Statistics", "Registers Per Thread", "register/thread", "128"),
                                             ("Scheduler Statistics", "Issued Warp Per Scheduler", "", "0.31")):
            out.append(row(kid, name, section, metric, unit, value) + ",")
        out.append(f'"{kid}","1","python3","h","{name}","1","7","(512, 1, 1)","(132, 1, 1)","0","9.0","SpeedOfLight",'
                   '"","","","SOLBottleneck","WRN","This kernel exhibits low compute throughput","global","12.5"')
        return out

    lines = [HEADER_2025] + rows(0, MARK + "(const int *, int *)", "900") + rows(1, GEMM, "406240") + \
        rows(2, MARK + "(const int *, int *)", "900")
    kernels = ncu.read_kernels("\n".join(lines) + "\n")
    assert [k["id"] for k in kernels] == [0, 1, 2]
    m = kernels[1]["metrics"]
    assert m["us"] == pytest.approx(406.24) and m["TB/s"] == pytest.approx(0.0039953, rel=1e-4) and m["regs"] == 128
    assert m["issued/sched"] == pytest.approx(0.31) and m["DRAM %"] == 40.2
    text = ncu.summary(kernels, manifest([entry("int8_matmul", (512, 4096, 4096))]))
    assert "int8_matmul 512x4096x4096: 406.2 us a call, 1 kernels" in text


def test_the_swiglu_quantization_kernel_is_a_subject_on_either_schedule(monkeypatch):
    """swiglu_quantize:<fused|staged>:<dtype> runs cuda_graphs._swiglu_quantize_graph with that schedule's
    launch and checks it bit for bit against the unfused graph (CUDA stood in by the CPU backend)."""
    import mlx.core as mx

    import int8nax
    from int8nax.backends.cuda import probe as cuda_probe, graphs as cuda_graphs, plans as cuda_plans
    from int8nax.bench.kernel import cases as kc

    launches = []

    def swiglu_quantize(y, launch, wrong=False):
        launches.append(launch)
        k = y.shape[1] // 2
        q, s = int8nax.quantize_activations(int8nax.backends.swiglu(y[:, :k], y[:, k:]), backend="cpu")
        return (q, s * 2) if wrong else (q, s)

    monkeypatch.setattr(cuda_probe, "sm_count", lambda: 132)
    monkeypatch.setattr(cuda_graphs, "_quantize_graph", lambda x: int8nax.quantize_activations(x, backend="cpu"))
    monkeypatch.setattr(cuda_graphs, "_swiglu_quantize_graph", swiglu_quantize)
    assert ncu.parse_sets(["swiglu_quantize:staged:bfloat16@300x24x24"]) == [
        Item("swiglu_quantize:staged:bfloat16", (300, 24, 24))]
    for schedule, want in (("staged", cuda_plans.cuda_swiglu_staged_launch(300, 24, 2, 132)),
                           ("fused", cuda_plans.cuda_swiglu_quant_launch(300, 24, 2, 132))):
        p = kc.prepare(Item(f"swiglu_quantize:{schedule}:bfloat16", (300, 24, 24)), 1 << 16, "cpu")
        out = p.call(p.sets[0])
        mx.eval(out)
        assert launches[-1] == want and p.check(out) is None and schedule in p.describe
        monkeypatch.setattr(cuda_graphs, "_swiglu_quantize_graph", lambda y, l: swiglu_quantize(y, l, wrong=True))
        assert "differ from the unfused graph" in p.check(p.call(p.sets[0]))
        monkeypatch.setattr(cuda_graphs, "_swiglu_quantize_graph", swiglu_quantize)
    with pytest.raises(ValueError, match="the staged schedule does not take M = 100"):
        kc.prepare(Item("swiglu_quantize:staged:bfloat16", (100, 24, 24)), 1 << 16, "cpu")
    with pytest.raises(ValueError, match="swiglu_quantize:<fused|staged>"):
        kc.prepare(Item("swiglu_quantize:paired:bfloat16", (100, 24, 24)), 1 << 16, "cpu")


def test_items_past_the_profiling_deadline_are_prepared_but_not_profiled():
    events = []
    clock = iter([0.0, 0.0, 1.0, 9.0])  # two preparations, then the first item's start and the second's
    entries = ncu.run([Item("int8_matmul", (5, 64, 48)), Item("bf16", (5, 64, 48))], 1, l2=1 << 16, backend="cpu",
                      start=lambda: None, stop=lambda: None, mark=lambda i: events.append(i), deadline=5.0,
                      profile_deadline=5.0, clock=lambda: next(clock), log=lambda *a, **k: None)
    assert [e["profiled"] for e in entries] == [True, False] and events == [0, 1]
    assert entries[1]["error"] == "prepared, not profiled: the time limit came first" and entries[1]["check"] is None


def test_help_prints_every_option(capsys):
    # argparse formats help texts with %: a literal percent sign in one must be written %%
    with pytest.raises(SystemExit) as stop:
        ncu.main(["--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "--time-limit" in out and f"{ncu.PROFILE_SHARE * 100:.0f}% of it" in out
