"""`int8nax compare`: its table, its markdown, its n/a reasons and its mismatch verdict."""

from __future__ import annotations

import sys

import pytest

from int8nax import backends
from int8nax.commands import cli, compare_gemm

from fakes import fake_cider, pypi_cider

SHAPE = "8x64x48"
TABLE = ",".join(c for c in compare_gemm.DEFAULT_CONTENDERS if c != "mlx-q8")
"""The default contenders but mlx-q8, for the tests of the table's layout and exit status: MLX
0.32.4's CUDA quantized_matmul returned a wrong product at SHAPE on the H200 (normwise error
1.0-1.3, different from run to run, 2026-12-01), so compare rightly said MISMATCH and exited 1
there. test_contenders checks mlx-q8 itself; test_progress_bar_on_request runs the default set."""


def run_cli(capsys, *args, contenders=TABLE):
    extra = ["--contenders", contenders] if contenders else []
    rc = cli.main(["compare", "--shapes", SHAPE, "--repeat", "1", *extra, *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def row_of(text: str) -> list[str]:
    line = next(l for l in text.splitlines() if l.split()[:3] == ["8", "64", "48"])
    return line.split()


def test_table_without_peers(capsys, monkeypatch):
    from int8nax.bench.peers import cublaslt

    monkeypatch.setitem(sys.modules, "cider", None)  # import fails: "not installed"
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setattr(cublaslt, "_LOADED", [])  # loaded once per process: an earlier test on a GPU box
    rc, out, _ = run_cli(capsys)
    assert rc == 0
    header = next(l for l in out.splitlines() if l.split()[:3] == ["M", "K", "N"]).split()
    row = dict(zip(header, row_of(out)))
    assert float(row["int8nax-gemm"]) > 0 and float(row["int8nax-full"]) > 0 and float(row["mlx-fp16"]) > 0
    assert row["cider-full"] == row["cider-raw"] == row["full/raw"] == row["raw/gemm"] == "n/a"
    assert abs(float(row["full/gemm"]) - float(row["int8nax-full"]) / float(row["int8nax-gemm"])) < 0.05 * float(row["full/gemm"]) + 0.02
    assert "cider-raw: n/a: cider is not installed" in out
    assert "torch-int8: n/a: torch is not installed" in out
    assert "cublaslt-int8: n/a:" in out


def test_markdown_and_impostor(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cider", pypi_cider())
    rc, out, _ = run_cli(capsys, "--markdown")
    assert rc == 0
    lines = out.splitlines()
    head = next(i for i, l in enumerate(lines) if l.startswith("| M | K | N |"))
    assert lines[head + 1].startswith("|---|")
    assert lines[head + 2].startswith("| 8 | 64 | 48 |")
    assert any(l.startswith("- cider-full: n/a:") and "cider" in l.lower() for l in lines)


@pytest.mark.parametrize("layout,linear_name", [("nk", "perchannel_linear"), ("kn", "w8a8_linear")])
def test_cider_columns_and_ratios(capsys, monkeypatch, layout, linear_name):
    pkg, ops = fake_cider(layout=layout, linear_name=linear_name)
    monkeypatch.setitem(sys.modules, "cider", pkg)
    monkeypatch.setitem(sys.modules, "cider.ops", ops)
    rc, out, _ = run_cli(capsys)
    header = next(l for l in out.splitlines() if l.split()[:3] == ["M", "K", "N"]).split()
    row = dict(zip(header, row_of(out)))
    assert rc == 0, out
    full, raw, nax = float(row["cider-full"]), float(row["cider-raw"]), float(row["int8nax-gemm"])
    # ratios come from unrounded times; the printed ms are rounded to 3 decimals
    assert abs(float(row["full/raw"]) - full / raw) < 0.05 * full / raw + 0.02
    assert abs(float(row["raw/gemm"]) - raw / nax) < 0.05 * raw / nax + 0.02


def test_wrong_peer_is_a_mismatch_not_a_time(capsys, monkeypatch):
    pkg, ops = fake_cider(wrong="transposed")
    monkeypatch.setitem(sys.modules, "cider", pkg)
    monkeypatch.setitem(sys.modules, "cider.ops", ops)
    rc = cli.main(["compare", "--shapes", "8x64x64", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "MISMATCH" in out and "cider-raw: MISMATCH at (8, 64, 64)" in out


def test_progress_bar_on_request(capsys, monkeypatch):
    # one tick per sample (warm-up + --repeat) of each contender that runs: here MLX's and ours
    monkeypatch.setitem(sys.modules, "cider", None)
    monkeypatch.setitem(sys.modules, "torch", None)
    _, _, err = run_cli(capsys, "--progress", "--repeat", "2", contenders=None)
    ran = 4  # int8nax-gemm, int8nax-full, mlx-fp16, mlx-q8; cider, cuBLASLt and torch are n/a here
    total = ran * (2 + 1)
    assert f"] {total}/{total} " in err and "\r[" in err


def test_progress_lines_when_redirected_and_the_shapes_in_the_header(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cider", None)
    rc, out, err = run_cli(capsys, "--contenders", "int8nax-gemm,int8nax-full", contenders=None)
    assert rc == 0
    assert "shapes: 8x64x48 (--shapes)" in out.splitlines()[0]
    assert "compare: 2 of 2 cells to measure, expected ~" in err
    assert "compare: [1/2] call int8nax-gemm 8x64x48: " in err and "compare: [2/2] call int8nax-full 8x64x48: " in err
    assert "\r" not in err


def test_a_contender_over_the_budget_is_skipped_with_its_estimate(capsys, monkeypatch):
    from int8nax.bench import estimate

    real = estimate.expected_seconds
    monkeypatch.setattr(estimate, "expected_seconds",
                        lambda name, shape, **kw: estimate.Estimate(30.0, (8, 64, 48), 0.05, 0.1)
                        if name == "mlx-fp16" else real(name, shape, **kw))
    rc, out, err = run_cli(capsys, "--contenders", "int8nax-gemm,mlx-fp16", contenders=None)
    assert rc == 0
    row = row_of(out)
    assert float(row[3]) > 0 and row[4] == "n/a"
    assert ("mlx-fp16: n/a at 8x64x48 (~30 s a call (probe: 50 ms at 8x64x48)): expected time per call "
            "here over the budget of 1 s (--budget SECONDS or --all runs it)") in out
    assert "over the budget, skipped: mlx-fp16 8x64x48" in err
    # --all measures it (and probes nothing); a larger --budget admits it
    for extra in (["--all"], ["--budget", "60"]):
        rc, out, _ = run_cli(capsys, "--contenders", "int8nax-gemm,mlx-fp16", *extra, contenders=None)
        assert rc == 0 and float(row_of(out)[4]) > 0, extra


def test_the_probe_estimates_from_a_growing_ladder():
    from int8nax.bench import estimate

    rungs = estimate.ladder((512, 4096, 4096))
    assert rungs[0] == (16, 256, 256) and rungs[-1] == (512, 4096, 4096)
    assert all(sum(b) > sum(a) for a, b in zip(rungs, rungs[1:]))
    assert estimate.ladder((1, 7, 9)) == [(1, 7, 9)]
    guess = estimate.expected_seconds("int8nax-gemm", (8, 64, 48))
    assert guess.probe == (8, 64, 48) and guess.seconds == guess.probe_seconds > 0


@pytest.mark.parametrize("argv,message", [
    (["--shapes", "8x64"], "argument --shapes: expected MxKxN"),
    (["--shapes", "8x0x4"], "argument --shapes: expected MxKxN"),
    (["--shapes", "axbxc"], "argument --shapes: expected MxKxN"),
    (["--repeat", "0"], "argument --repeat: expected a positive whole number, got 0"),
    (["--contenders", "nax"], "argument --contenders: expected comma-separated names from int8nax-gemm"),
    (["--contenders", "int8nax-gemm,,"], "argument --contenders: expected comma-separated names from int8nax-gemm"),
    (["--contenders", "int8nax-gemm,,"], "got 'int8nax-gemm,,' (an empty name)"),
    (["--contenders", ",int8nax-gemm"], "argument --contenders: expected comma-separated names from int8nax-gemm"),
    (["--mode", "call,"], "argument --mode: expected comma-separated modes from call, chain, host, or kernel "
                          "alone, got 'call,'"),
    (["--mode", "cold"], "argument --mode: expected comma-separated modes from call, chain, host"),
    (["--budget", "0"], "argument --budget: expected a number of seconds > 0, got '0'"),
])
def test_bad_options_are_usage_errors_naming_the_option(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("int8nax compare: error: ") and "--help" in err


def test_a_bogus_profile_is_one_line_not_a_traceback(capsys, monkeypatch):
    monkeypatch.setenv("INT8NAX_BENCH_PROFILE", "bogus")
    assert cli.main(["compare", "--repeat", "1"]) == 2
    assert "INT8NAX_BENCH_PROFILE: expected one of full, cpu, got 'bogus'" in capsys.readouterr().err


def test_a_contender_that_raises_at_run_time_is_na_with_the_reason(capsys, monkeypatch):
    # 1x1x1: mlx-q8 cannot take K = 1 (group size 64): the table still comes, n/a with why.
    monkeypatch.setitem(sys.modules, "cider", None)
    rc = cli.main(["compare", "--shapes", "1x1x1", "--repeat", "1", "--contenders", "int8nax-gemm,mlx-q8"])
    out = capsys.readouterr().out
    assert rc == 0 and "mlx-q8: n/a: mx.quantized_matmul with group size 64 needs K" in out


def test_a_peer_failing_oddly_is_na_but_our_own_failure_fails_the_command(capsys, monkeypatch):
    from int8nax.bench import contenders

    def boom(shape, backend=None):
        raise RuntimeError("kernel launch refused")

    monkeypatch.setitem(contenders.CONTENDERS, "mlx-fp16",
                        contenders.Contender("mlx-fp16", "full", "broken", boom))
    rc = cli.main(["compare", "--shapes", SHAPE, "--repeat", "1", "--contenders", "int8nax-gemm,mlx-fp16"])
    out = capsys.readouterr().out
    assert rc == 0 and "mlx-fp16: n/a: failed at (8, 64, 48): RuntimeError: kernel launch refused" in out
    monkeypatch.setitem(contenders.CONTENDERS, "int8nax-gemm",
                        contenders.Contender("int8nax-gemm", "raw", "broken", boom))
    rc = cli.main(["compare", "--shapes", SHAPE, "--repeat", "1", "--contenders", "int8nax-gemm,mlx-fp16"])
    assert rc == 1


def test_modes_contenders_and_json(capsys, monkeypatch, tmp_path):
    import json

    out_file = tmp_path / "r.json"
    rc = cli.main(["compare", "--shapes", SHAPE, "--repeat", "1", "--contenders", "int8nax-gemm,numpy-sgemm",
                   "--mode", "call,chain", "--chain-calls", "3", "--json", str(out_file)])
    out = capsys.readouterr().out
    assert rc == 0 and "mode call: one call + eval" in out and "mode chain: per call in a chain of 3" in out
    header = next(l for l in out.splitlines() if l.split()[:3] == ["M", "K", "N"]).split()
    assert header[3:] == ["int8nax-gemm", "numpy-sgemm", "sgemm/gemm"]
    data = json.loads(out_file.read_text())
    assert data["meta"]["mlx"] and data["meta"]["backend"] == backends.choose(None)[0]
    cells = {(r["mode"], r["contender"]): r for r in data["results"]}
    assert set(cells) == {(m, c) for m in ("call", "chain") for c in ("int8nax-gemm", "numpy-sgemm")}
    assert all(r["seconds"] > 0 and r["tops"] > 0 and r["shape"] == [8, 64, 48] for r in cells.values())


def test_a_bad_backend_variable_leaves_a_table_with_the_reason(capsys, monkeypatch):
    monkeypatch.setenv("INT8NAX_BACKEND", "bogus")
    rc = cli.main(["compare", "--shapes", SHAPE, "--repeat", "1", "--contenders", "int8nax-gemm,mlx-fp16"])
    out = capsys.readouterr().out
    assert rc == 0 and "int8nax-gemm: n/a: INT8NAX_BACKEND=bogus: unknown backend 'bogus'" in out


def test_the_table_and_json_name_the_kernel_each_int8nax_contender_ran(capsys, monkeypatch, tmp_path):
    import json

    from int8nax.bench import contenders

    monkeypatch.setattr(contenders, "describe", lambda name, shape, backend=None:
                        f"cpu fake-{name} {'small' if shape[0] < 9 else 'large'}")
    out_file = tmp_path / "r.json"
    rc = cli.main(["compare", "--shapes", f"{SHAPE},16x64x48", "--repeat", "1",
                   "--contenders", "int8nax-gemm,int8nax-full,numpy-sgemm", "--json", str(out_file)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "int8nax-gemm ran: cpu fake-int8nax-gemm small (8x64x48)" in out
    assert "int8nax-gemm ran: cpu fake-int8nax-gemm large (16x64x48)" in out
    assert "int8nax-full ran: cpu fake-int8nax-full small (8x64x48)" in out
    assert "numpy-sgemm ran" not in out
    kernels = {(r["contender"], tuple(r["shape"])): r["kernel"] for r in json.loads(out_file.read_text())["results"]}
    assert kernels[("int8nax-full", (16, 64, 48))] == "cpu fake-int8nax-full large"
    assert kernels[("numpy-sgemm", (8, 64, 48))] is None


def test_w8a8_faster_than_the_raw_gemm_on_the_cpu_is_explained():
    cells = {"int8nax-gemm": compare_gemm.timing.Cell(seconds=4.68e-3, detail="int8nax backend cpu (auto)"),
             "int8nax-full": compare_gemm.timing.Cell(seconds=1.39e-3, detail="int8nax backend cpu (auto)")}
    lines = compare_gemm.notes({(16, 4096, 4096): cells}, ["int8nax-gemm", "int8nax-full"])
    assert lines == [f"full/gemm below 1 at 16x4096x4096: {compare_gemm.W8A8_ON_CPU}"]
    assert "prepares its weight once" in compare_gemm.W8A8_ON_CPU
    cells["int8nax-full"] = compare_gemm.timing.Cell(seconds=1.39e-3, detail="int8nax backend cuda (auto)")
    assert compare_gemm.notes({(16, 4096, 4096): cells}, ["int8nax-gemm", "int8nax-full"]) == []


@pytest.mark.parametrize("path,message", [
    ("/nonexistent/dir/x.json", "argument --json: expected a file in an existing folder, got "
                                "'/nonexistent/dir/x.json': no folder '/nonexistent/dir'"),
    (".", "argument --json: expected a file to write, got '.', a folder"),
    ("", "argument --json: expected a file to write, got ''"),
])
def test_a_json_path_that_cannot_be_written_is_refused_before_measuring(capsys, monkeypatch, path, message):
    from int8nax.bench import timing

    def measured(*args, **kwargs):
        raise AssertionError("measured before the path was checked")

    monkeypatch.setattr(timing, "measure", measured)
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", "--shapes", SHAPE, "--contenders", "numpy-sgemm", "--json", path])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1


def test_a_json_path_this_user_cannot_write_is_refused(capsys, monkeypatch, tmp_path):
    import os

    # the tests may run as root, for whom every folder is writable: os.access answers as for another user
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", "--shapes", SHAPE, "--json", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument --json: expected a file this user can write, got '{tmp_path}/r.json'" in err


@pytest.mark.parametrize("shapes", ["16x{over}x16", "8x64x48,200000x{over}x8"])
def test_a_k_over_int8nax_limit_is_a_usage_error_before_anything_runs(capsys, shapes):
    from int8nax.api import MAX_K

    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", "--shapes", shapes.format(over=MAX_K + 1), "--contenders", "numpy-sgemm"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert f"argument --shapes: expected K (the middle of MxKxN) at most {MAX_K}, got {MAX_K + 1} in " in err
    assert compare_gemm._shapes_arg(f"16x{MAX_K}x16") == [(16, MAX_K, 16)]  # the limit itself is allowed


def test_a_reason_is_noted_once_with_every_shape_it_applies_to(monkeypatch):
    from int8nax.bench import contenders, problems

    monkeypatch.setattr(contenders.mx, "default_device", lambda: "cpu")  # skip_reason's reasons, on any box
    ran = compare_gemm.timing.Cell(seconds=1e-3)
    per_shape = {shape: {"mlx-fp16": ran, "cider-raw": compare_gemm.timing.Cell(unavailable="cider is not installed"),
                         "int8nax-gemm": ran}
                 for shape in problems.CPU_SHAPES}
    for shape in problems.CPU_SEED_SHAPES:
        per_shape[shape] = {"mlx-fp16": compare_gemm.timing.Cell(unavailable=contenders.skip_reason("mlx-fp16", shape)),
                            "cider-raw": compare_gemm.timing.Cell(unavailable="cider is not installed"),
                            "int8nax-gemm": compare_gemm.timing.Cell(error="RuntimeError: out of memory")}
    per_shape[problems.CPU_SEED_SHAPES[0]]["int8nax-gemm"] = compare_gemm.timing.Cell(error="ValueError: K")
    lines = compare_gemm.notes(per_shape, ["mlx-fp16", "cider-raw", "int8nax-gemm"])
    seeds = [compare_gemm.estimate.shape_text(s) for s in problems.CPU_SEED_SHAPES]
    assert lines == [
        f"mlx-fp16: n/a at {', '.join(seeds)}: {contenders.CONTENDERS['mlx-fp16'].slow_on_cpu}",
        "cider-raw: n/a at every shape: cider is not installed",
        f"int8nax-gemm: n/a: failed at {problems.CPU_SEED_SHAPES[0]}: ValueError: K",
        f"int8nax-gemm: n/a: failed at {', '.join(map(str, problems.CPU_SEED_SHAPES[1:]))}: RuntimeError: out of memory",
    ]


@pytest.mark.parametrize("argv, mode", [
    ([], "gemm"),
    (["--mode", "chain", "--chain-calls", "4"], "gemm"),
    (["--mode", "kernel"], "kernel"),
    (["--mode", "kernel", "--plans"], "plans"),
    (["--raw-plans"], "plans"),
    (["--model", "qwen2.5-0.5b", "--repeat", "3"], "model"),
    (["--generate", "--model", "qwen2.5-0.5b"], "generate"),
])
def test_the_options_choose_one_mode_and_only_its_module_runs(monkeypatch, argv, mode):
    from int8nax.bench.kernel import mode as kernel_mode
    from int8nax.bench.kernel import plans as kernel_plans
    from int8nax.commands import compare, compare_model

    ran = []
    for name, module, attr in (("gemm", compare_gemm, "main"), ("kernel", kernel_mode, "main"),
                               ("plans", kernel_plans, "main"), ("model", compare_model, "main"),
                               ("generate", compare_model, "generate_main")):
        monkeypatch.setattr(module, attr, lambda args, name=name: ran.append(name) or 0)
    assert cli.main(["compare", *argv]) == 0
    assert ran == [mode] and compare.MODES.count(mode) == 1


def test_an_option_of_a_mode_not_chosen_is_refused_before_any_mode_runs(capsys, monkeypatch):
    from int8nax.commands import compare

    monkeypatch.setattr(compare_gemm, "main", lambda args: pytest.fail("the gemm mode ran"))
    assert cli.main(["compare", "--mode", "kernel", "--tokens", "1"]) == 2
    assert capsys.readouterr().err == "int8nax compare: error: --tokens needs --model\n"
    assert cli.main(["compare", "--model", "qwen2.5-0.5b", "--batch", "2"]) == 2
    assert capsys.readouterr().err == "int8nax compare: error: --batch needs --generate\n"
    assert compare.misplaced(cli.build_parser().parse_args(["compare", "--generate", "--batch", "2"]), "generate") is None


def test_the_options_choose_the_mode_in_order_generate_model_plans_kernel():
    from int8nax.commands import compare

    def mode(*argv):
        return compare.mode_of(cli.build_parser().parse_args(["compare", *argv]))

    assert mode("--generate", "--model", "qwen2.5-0.5b", "--mode", "kernel", "--plans") == "generate"
    assert mode("--model", "qwen2.5-0.5b", "--mode", "kernel", "--plans") == "model"
    assert mode("--mode", "kernel", "--plans") == "plans" and mode("--mode", "kernel") == "kernel"
    assert mode("--mode", "chain") == "gemm"


@pytest.mark.parametrize("argv, message", [
    (["--w8a8", "none"], "--w8a8 needs --mode kernel"),
    (["--bf16"], "--bf16 needs --mode kernel"),
    (["--time-limit", "5"], "--time-limit needs --mode kernel"),
    (["--launches", "3"], "--launches needs --mode kernel"),
    (["--model-modes", "compiled"], "--model-modes needs --model"),
    (["--chain-calls", "5"], "--chain-calls needs --mode chain or host"),
    (["--all", "--budget", "3"], "--all does not take --budget"),
    (["--model", "qwen2.5-0.5b", "--w8a8", "float16"], "--model does not take --w8a8"),
    (["--model", "qwen2.5-0.5b", "--mode", "chain"], "--model does not take --mode"),
    (["--model", "qwen2.5-0.5b", "--budget", "4"], "--model does not take --budget"),
    (["--model", "qwen2.5-0.5b", "--all"], "--model does not take --all"),
    (["--model", "qwen2.5-0.5b", "--plans"], "--model does not take --plans"),
    (["--generate", "--mode", "chain"], "--generate does not take --mode"),
    (["--generate", "--repeat", "3"], "--generate does not take --repeat"),
    (["--generate", "--launches", "3"], "--generate does not take --launches"),
    (["--mode", "kernel", "--contenders", "mlx-fp16"], "--mode kernel does not take --contenders"),
    (["--mode", "kernel", "--chain-calls", "4"], "--mode kernel does not take --chain-calls"),
    (["--mode", "kernel", "--repeat", "3"], "--mode kernel does not take --repeat"),
    (["--mode", "kernel", "--plans", "--budget", "3"], "--plans does not take --budget"),
])
def test_an_option_no_chosen_mode_reads_is_a_usage_error_not_left_out(capsys, monkeypatch, argv, message):
    from int8nax.bench.kernel import mode as kernel_mode
    from int8nax.bench.kernel import plans as kernel_plans
    from int8nax.commands import compare_model

    for module, attr in ((compare_gemm, "main"), (kernel_mode, "main"), (kernel_plans, "main"),
                         (compare_model, "main"), (compare_model, "generate_main")):
        monkeypatch.setattr(module, attr, lambda args: pytest.fail(f"a mode ran with {argv}"))
    assert cli.main(["compare", *argv]) == 2
    assert capsys.readouterr().err.startswith(f"int8nax compare: error: {message}")
