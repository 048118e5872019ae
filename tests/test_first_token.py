"""The time to the first token of a fresh process (int8nax.bench.first_token), `int8nax compare
--generate --first-token`, `int8nax warm --json` and benchmarks/bench_first_token.py: the warm runs
first into a new kernel cache, then MLX's first process, then one process per (prompt length, form)
with the same cache; the options and the arguments fail with their names; the suite reads each cell
and says why one is not measured; the GPU script selects the suite's cells.

Most tests stand in for the child processes (first_token.run_child); one measures a tiny model's
real processes (a few seconds each on the 2-core CPU box)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlx_lm", reason="mlx-lm (the `bench` and `test` extras) is not installed")
pytest.importorskip("transformers", reason="mlx-lm's generation front end needs transformers")

from int8nax.bench import first_token, model_folder, models, saved  # noqa: E402
from int8nax.bench.checks import MismatchError  # noqa: E402
from int8nax.commands import cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks import bench_first_token  # noqa: E402

TINY = models.Config("tiny-first", "qwen2", 64, 128, 2, 1, 32, depth=2, vocab=256, tied=True)


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("INT8NAX_BENCH_PROFILE", "cpu")
    monkeypatch.setenv(model_folder.CACHE_ENV, str(tmp_path_factory.getbasetemp() / "models"))
    monkeypatch.setitem(models.CONFIGS, TINY.name, TINY)


class Children:
    """Stands in for first_token.run_child: records each process's arguments and the kernel cache
    folder it was given (and whether that folder existed then), answers from `answer`."""

    def __init__(self, answer=None):
        self.calls: list[tuple[list[str], str, bool]] = []
        self.answer = answer or (lambda argv: None)

    def __call__(self, argv, env, timeout=first_token.CHILD_TIMEOUT_S):
        folder = env[first_token.KERNEL_CACHE_ENV]
        self.calls.append((list(argv), folder, os.path.isdir(folder)))
        got = self.answer(argv)
        if got is not None:
            return got
        if argv[:2] == ["int8nax", "warm"]:
            for name in ("k1.cubin", "k2.cubin"):  # what a build writes
                (Path(folder) / name).write_text("")
            return {"model": argv[3], "layers": 14, "rows": int(argv[5]), "backend": "cuda", "built": 26,
                    "seconds": 40.0, "load_s": 5.0, "quantize_s": 20.0, "build_s": 15.0, "kernels": "26 ready",
                    "counts": {"found": 0, "built": 26, "failed": 0}, "process_s": 44.0}
        form, tokens = argv[2], int(argv[3])
        out = {"first_token_s": tokens / 1000 + (0.1 if form == "w8a8" else 0.0), "load_s": 1.0, "convert_s": 2.0,
               "detail": form, "backend": "cuda" if form == "w8a8" else None,
               "kernels": {"found": 7, "built": 0, "failed": 0} if form == "w8a8" else None, "process_s": 5.0}
        if "--check" in argv:
            out["check"] = "0.5 ulp" if form == "w8a8" else "0.001 rel"
        return out


def _stand_in(monkeypatch, answer=None) -> Children:
    children = Children(answer)
    monkeypatch.setattr(first_token, "run_child", children)
    return children


# --- the measurement, processes stood in for ------------------------------------------------------

def test_the_warm_runs_first_then_mlxs_first_process_then_one_process_a_cell(monkeypatch):
    children = _stand_in(monkeypatch)
    heard = []
    result = first_token.measure(TINY, ("w8a8", "bf16"), (300, 4096, 777), on_step=lambda r: heard.append(
        [c.first_token_s is not None for c in r.cells]))
    argvs = [argv for argv, _, _ in children.calls]
    path = str(model_folder.folder(TINY))
    assert argvs[0] == ["int8nax", "warm", "--model", path, "--max-tokens", "4096", "--json"]  # the longest prompt
    assert argvs[1] == ["int8nax.bench.first_token", path, "bf16", "300", "256"]  # MLX's kernels: the shortest
    cells = [(a[2], int(a[3]), "--check" in a) for a in argvs[2:]]
    assert cells == [("bf16", 300, True), ("w8a8", 300, True), ("bf16", 4096, False), ("w8a8", 4096, False),
                     ("bf16", 777, False), ("w8a8", 777, False)]  # each form checked in its first process
    assert all(a[0] == "int8nax.bench.first_token" and a[-2 if "--check" in a else -1] == "256" for a in argvs[1:])
    # one new kernel cache folder for every process of the run, removed afterwards
    folders = {folder for _, folder, _ in children.calls}
    assert len(folders) == 1 and all(existed for _, _, existed in children.calls)
    assert result.kernel_cache == folders.pop() and not os.path.exists(result.kernel_cache)
    assert len(heard) == 8 and heard[-1] == [True] * 6  # after every process
    by = {(c.form, c.prompt_tokens): c for c in result.cells}
    assert [c.form for c in result.cells] == ["bf16", "w8a8"] * 3 and result.prompt_tokens == [300, 4096, 777]
    assert by[("w8a8", 777)].minus_bf16 == pytest.approx(0.1) and by[("bf16", 777)].minus_bf16 == 0
    assert by[("w8a8", 300)].check == "0.5 ulp" and by[("w8a8", 4096)].check is None
    assert by[("w8a8", 300)].kernels == {"found": 7, "built": 0, "failed": 0}
    assert result.warm["built"] == 26 and result.mlx_first["prompt_tokens"] == 300
    assert result.warm["cache_added"] == 2 and result.mlx_first["cache_added"] == 0
    assert [c.cache_added for c in result.cells] == [0] * 6
    assert not first_token.failed([result])


def test_a_process_that_compiles_shows_in_the_files_it_added(monkeypatch, capsys):
    def answer(argv):
        if argv[2:4] == ["w8a8", "64"]:
            folder = Path(os.environ[first_token.KERNEL_CACHE_ENV])
            (folder / "late.cubin").write_text("")
        return None

    children = _stand_in(monkeypatch)
    real = children.__call__

    def calling(argv, env, timeout=first_token.CHILD_TIMEOUT_S):
        monkeypatch.setenv(first_token.KERNEL_CACHE_ENV, env[first_token.KERNEL_CACHE_ENV])
        answer(argv)
        return real(argv, env, timeout)

    monkeypatch.setattr(first_token, "run_child", calling)
    rc, got = _cli(capsys, "--generate", "--first-token", "--model", TINY.name, "--prompt-tokens", "16,64")
    assert rc == 0, got.err
    assert "files added to the kernel cache: the warm 2, MLX's first process 0; then w8a8 at 64: 1" in got.out


def test_without_w8a8_no_warm_runs(monkeypatch):
    children = _stand_in(monkeypatch)
    result = first_token.measure(TINY, ("bf16", "mlx-q8"), (16,))
    assert [a[2] for a, _, _ in children.calls] == ["bf16", "bf16", "mlx-q8"] and result.warm is None


def test_a_given_kernel_cache_folder_is_used_and_kept(monkeypatch, tmp_path):
    children = _stand_in(monkeypatch)
    first_token.measure(TINY, ("bf16",), (16,), kernel_cache=tmp_path)
    assert {folder for _, folder, _ in children.calls} == {str(tmp_path)} and tmp_path.is_dir()


def test_a_mismatch_drops_the_forms_figures_and_its_later_processes(monkeypatch):
    children = _stand_in(monkeypatch, lambda argv: {"mismatch": "off by 3 ulp", "process_s": 4.0}
                         if argv[2:3] == ["w8a8"] else None)
    result = first_token.measure(TINY, ("bf16", "w8a8"), (16, 64))
    assert [a[2] for a, _, _ in children.calls[1:]] == ["bf16", "bf16", "w8a8", "bf16"]  # no w8a8 at 64
    w8a8 = [c for c in result.cells if c.form == "w8a8"]
    assert [c.status() for c in w8a8] == ["MISMATCH", "MISMATCH"] and w8a8[1].mismatch.endswith("(at 16 tokens)")
    assert all(c.first_token_s is None and c.minus_bf16 is None for c in w8a8)
    assert first_token.failed([result])


def test_a_failed_process_is_reported_and_the_other_lengths_still_run(monkeypatch):
    def answer(argv):
        if argv[:2] == ["int8nax", "warm"]:
            return {"failed": "the process failed (exit 2): no mlx-lm"}
        if argv[2:4] == ["w8a8", "16"]:
            return {"failed": "the process took more than 600 s"}
        return None

    children = _stand_in(monkeypatch, answer)
    result = first_token.measure(TINY, ("bf16", "w8a8"), (16, 64))
    assert len(children.calls) == 6
    by = {(c.form, c.prompt_tokens): c for c in result.cells}
    assert by[("w8a8", 16)].status() == "failed" and by[("w8a8", 64)].first_token_s is not None
    assert first_token.failed([result])  # W8A8 (and its warm) failing fails the run


def test_an_unavailable_form_says_why_in_every_cell(monkeypatch):
    _stand_in(monkeypatch, lambda argv: {"n/a": "cider is not installed", "process_s": 1.0}
              if argv[2:3] == ["cider"] else None)
    result = first_token.measure(TINY, ("bf16", "cider"), (16, 64))
    cider = [c for c in result.cells if c.form == "cider"]
    assert [c.status() for c in cider] == ["n/a", "n/a"] and cider[1].unavailable == "cider is not installed"
    assert not first_token.failed([result])


@pytest.mark.parametrize("bad, name", [
    ({"config": "qwen9"}, "config"), ({"forms": ("bf16", "q3")}, "forms"), ({"forms": ()}, "forms"),
    ({"forms": ("bf16", "bf16")}, "forms"), ({"prompt_tokens": ()}, "prompt_tokens"),
    ({"prompt_tokens": (0,)}, "prompt_tokens"), ({"prompt_tokens": (True,)}, "prompt_tokens"),
    ({"prompt_tokens": (models.MAX_TOKENS + 1,)}, "prompt_tokens"), ({"prompt_tokens": ("300",)}, "prompt_tokens")])
def test_bad_measure_arguments_name_the_argument(bad, name, monkeypatch):
    children = _stand_in(monkeypatch)
    args = {"config": TINY, "forms": ("bf16",), "prompt_tokens": (16,), **bad}
    with pytest.raises(ValueError, match=f"^{name}: expected .*got "):
        first_token.measure(**args)
    assert not children.calls


# --- the real processes -------------------------------------------------------------------------

def test_real_processes_time_the_first_token_and_the_warm_says_the_cpu_has_no_cache():
    result = first_token.measure(TINY, ("bf16", "w8a8"), (8, 12))
    warm = result.warm
    assert warm["backend"] == "cpu" and warm["built"] == 0 and warm["counts"] is None and warm["rows"] == 12
    assert warm["layers"] == 14 and 0 <= warm["build_s"] < warm["process_s"]
    assert result.mlx_first["first_token_s"] > 0
    for c in result.cells:
        assert 0 < c.first_token_s < c.process_s and c.load_s > 0, c
        assert c.kernels is None  # no kernel cache on the CPU
    by = {(c.form, c.prompt_tokens): c for c in result.cells}
    assert by[("w8a8", 8)].check.endswith("ulp") and by[("bf16", 8)].check.endswith("rel")
    assert by[("w8a8", 8)].backend == "cpu" and "W8A8Linear" in by[("w8a8", 8)].detail
    assert by[("w8a8", 12)].minus_bf16 == pytest.approx(by[("w8a8", 12)].first_token_s - by[("bf16", 12)].first_token_s)


def test_run_child_reports_a_crash_and_a_timeout():
    assert run_child_of("import sys; print('{\"a\": 1}'); sys.exit(1)") == {"a": 1, "exit": 1}
    got = run_child_of("raise SystemExit('boom')")
    assert got == {"failed": "the process failed (exit 1): boom"}
    assert run_child_of("import time; time.sleep(5)", timeout=0.5) == {"failed": "the process took more than 0.5 s"}


def run_child_of(code: str, timeout: float = 60) -> dict:
    """run_child on `python -m <a module holding code>`, process_s left out."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "snippet_first_token.py").write_text(code)
        got = first_token.run_child(["snippet_first_token"], {"PYTHONPATH": folder}, timeout=timeout)
    got.pop("process_s", None)
    return got


def test_the_warm_command_prints_one_json_line(capsys):
    path = model_folder.folder(TINY)
    assert cli.main(["warm", "--model", str(path), "--max-tokens", "16", "--batch", "2", "--json"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1
    got = json.loads(out[0])
    assert {k: got[k] for k in ("model", "layers", "rows", "backend", "built", "counts", "kernels")} == {
        "model": str(path), "layers": 14, "rows": 32, "backend": "cpu", "built": 0, "counts": None, "kernels": None}
    assert got["seconds"] >= got["load_s"] + got["quantize_s"] and got["build_s"] >= 0


# --- the command --------------------------------------------------------------------------------

def _cli(capsys, *argv):
    try:
        rc = cli.main(["compare", "--progress", "none", *argv])
    except SystemExit as exc:
        rc = exc.code
    return rc, capsys.readouterr()


def test_compare_first_token_prints_the_table_and_the_first_run_and_writes_json(monkeypatch, tmp_path, capsys):
    _stand_in(monkeypatch)
    out_json = tmp_path / "first.json"
    rc, got = _cli(capsys, "--generate", "--first-token", "--model", TINY.name, "--prompt-tokens", "300,777",
                   "--layers", "2", "--vocab", "256", "--json", str(out_json), "--markdown")
    assert rc == 0, got.err
    lines = got.out.splitlines()
    header = lines.index("| prompt tokens | bf16 | w8a8 | w8a8 - bf16 |")
    assert lines[header + 2:header + 4] == ["| 300 | 0.30 | 0.40 | +0.10 |", "| 777 | 0.78 | 0.88 | +0.10 |"]
    assert "### tiny-first (2 layers, vocab 256): seconds to the first token" in got.out
    assert ("- first run on a new machine: `int8nax warm --max-tokens 777` took 44.0 s in its process (load 5.0 s, "
            "quantize 20.0 s, kernels 15.0 s): 26 kernels built for 14 W8A8 layers on the cuda backend; 26 ready") in lines
    assert "- w8a8: kernels its processes built: 0 (14 loaded from the cache, 0 left to MLX)" in lines
    assert ("- files added to the kernel cache: the warm 2, MLX's first process 0; then none by the table's 4 "
            "processes (nothing compiled)") in lines
    assert any(line.startswith("- MLX's own kernels: the first bf16 process (300 tokens)") for line in lines)
    assert "- w8a8: checked after its first token (every projection on 16 prompt tokens against float64, worst): " \
           "0.5 ulp" in lines
    data = json.loads(out_json.read_text())
    assert data["meta"]["settings"]["prompt_tokens"] == [300, 777] and data["meta"]["settings"]["first_token"]
    assert {"date", "mlx", "mlx_lm", "driver", "backend", "command"} <= set(data["meta"])
    (result,) = data["first_token"]
    assert result["warm"]["built"] == 26 and len(result["cells"]) == 4
    assert set(result["cells"][1]) >= {"form", "prompt_tokens", "first_token_s", "minus_bf16", "load_s", "convert_s",
                                       "process_s", "kernels", "check"}
    rc, again = _cli(capsys, "--generate", "--render", str(out_json), "--markdown")
    assert rc == 0, again.err
    shown = [line for line in lines if line.startswith(("| ", "- ", "### "))]
    assert shown and [line for line in again.out.splitlines() if line.startswith(("| ", "- ", "### "))] == shown


def test_compare_first_token_takes_the_profiles_defaults(monkeypatch, capsys):
    seen = []

    def measure(config, forms, prompt_tokens, layers, vocab, progress=None, on_step=None):
        seen.append((config, tuple(forms), tuple(prompt_tokens), layers, vocab))
        result = first_token.Result(config, layers or 28, vocab or 152064, list(forms), list(prompt_tokens))
        result.cells = [first_token.Cell(f, p) for p in prompt_tokens for f in forms]
        return result

    monkeypatch.setattr(first_token, "measure", measure)
    assert _cli(capsys, "--generate", "--first-token")[0] == 0
    monkeypatch.setenv("INT8NAX_BENCH_PROFILE", "full")
    assert _cli(capsys, "--generate", "--first-token", "--forms", "bf16,mlx-q8,w8a8")[0] == 0
    assert seen == [("qwen2.5-0.5b", ("bf16", "w8a8"), (16, 64), 2, 1024),
                    ("qwen2.5-7b", ("bf16", "mlx-q8", "w8a8"), (300, 777, 1500, 4096), None, None)]


def test_an_interrupted_run_prints_what_it_measured_and_exits_130(monkeypatch, tmp_path, capsys):
    def answer(argv):
        if argv[2:4] == ["w8a8", "64"]:
            raise KeyboardInterrupt
        return None

    _stand_in(monkeypatch, answer)
    out_json = tmp_path / "cut.json"
    rc, got = _cli(capsys, "--generate", "--first-token", "--model", TINY.name, "--prompt-tokens", "16,64",
                   "--json", str(out_json))
    assert rc == 130 and "interrupted after" in got.out
    assert re.search(r"^ *64 +0\.06 +not run *$", got.out, re.M), got.out
    cells = json.loads(out_json.read_text())["first_token"][0]["cells"]
    assert [c["first_token_s"] is not None for c in cells] == [True, True, True, False]


@pytest.mark.parametrize("argv, words", [
    (("--first-token",), "--first-token needs --generate"),
    (("--generate", "--first-token", "--prompt-tokens", "0"), "--prompt-tokens"),
    (("--generate", "--first-token", "--prompt-tokens", "300,x"), "--prompt-tokens"),
    (("--generate", "--first-token", "--prompt-tokens", "99999"), "--prompt-tokens"),
    (("--generate", "--first-token", "--forms", "bf16,q3"), "--forms"),
    (("--generate", "--first-token", "--trials", "2"), "--first-token (one request a process) does not take --trials"),
    (("--generate", "--first-token", "--generation-tokens", "4"), "does not take --generation-tokens"),
    (("--generate", "--first-token", "--batch", "1,8"), "does not take --batch other than 1"),
    (("--generate", "--first-token", "--tokens", "16"), "--generate does not take --tokens"),
    (("--generate", "--first-token", "--breakdown"), "does not take --first-token"),
])
def test_bad_first_token_options_exit_2_with_one_line_naming_the_option(argv, words, capsys, monkeypatch):
    children = _stand_in(monkeypatch)
    rc, got = _cli(capsys, *argv)
    assert rc == 2 and got.err.count("\n") == 1 and words in got.err, got.err
    assert not children.calls


# --- the asv suite ------------------------------------------------------------------------------

def test_the_suite_declares_every_profiles_cells():
    assert first_token.profile_cases("full") == {f"qwen2.5-7b p{p}": ("qwen2.5-7b", p) for p in (300, 777, 1500, 4096)}
    cpu = first_token.PROFILES["cpu"]
    assert cpu.configs == ("qwen2.5-0.5b",) and cpu.layers == 2 and cpu.vocab == models.VOCAB
    assert max(cpu.prompt_tokens) <= 64  # the README's `asv run` stays within its time
    assert bench_first_token.FirstTokenFigures.params == [list(first_token.ALL_CASES), ["bf16", "w8a8"]]
    assert bench_first_token.FirstTokenVsBf16.params == [list(first_token.ALL_CASES)]
    assert bench_first_token.FirstTokenWarm.params == [["qwen2.5-7b", "qwen2.5-0.5b"]]
    assert set(first_token.ALL_CASES) == {*first_token.profile_cases("cpu"), *first_token.profile_cases("full")}
    classes = (bench_first_token.FirstTokenFigures, bench_first_token.FirstTokenVsBf16, bench_first_token.FirstTokenWarm)
    for cls in classes:  # one measurement for all: asv keys setup_cache by the function's source line
        assert cls.setup_cache is bench_first_token.FirstTokenFigures.setup_cache and cls.version == "1"
    assert {getattr(cls, n).unit for cls in classes for n in vars(cls) if n.startswith("track_")} == {"seconds", "s"}
    assert bench_first_token.FirstTokenVsBf16.track_w8a8_minus_bf16_s.unit == "s"  # may be negative


def test_the_suite_reads_each_cell_and_says_why_one_is_not_measured():
    case = "qwen2.5-0.5b p16"
    figures = {(case, "bf16"): {"first_token_s": 0.2, "minus_bf16": 0.0},
               (case, "w8a8"): {"first_token_s": 0.5, "minus_bf16": 0.30000000000000004},
               ("qwen2.5-0.5b p64", "w8a8"): {"mismatch": "off by 3 ulp"},
               ("qwen2.5-0.5b p64", "bf16"): {"first_token_s": 0.4, "minus_bf16": 0.0},
               ("qwen2.5-0.5b", "warm"): {"seconds": 3.5, "built": 0}}
    bench = bench_first_token.FirstTokenFigures()
    bench.setup(figures, case, "w8a8")
    assert bench.track_first_token_s(figures, case, "w8a8") == 0.5
    diff = bench_first_token.FirstTokenVsBf16()
    diff.setup(figures, case)
    assert diff.track_w8a8_minus_bf16_s(figures, case) == 0.3
    warm = bench_first_token.FirstTokenWarm()
    warm.setup(figures, "qwen2.5-0.5b")
    assert warm.track_w8a8_warm_s(figures, "qwen2.5-0.5b") == 3.5
    with pytest.raises(MismatchError, match="3 ulp"):
        diff.setup(figures, "qwen2.5-0.5b p64")
    with pytest.raises(NotImplementedError, match="not in the 'cpu' profile"):
        bench.setup(figures, "qwen2.5-7b p300", "bf16")
    with pytest.raises(NotImplementedError, match="not in the 'cpu' profile"):
        warm.setup(figures, "qwen2.5-7b")
    with pytest.raises(NotImplementedError, match="INT8NAX_BENCH_PROFILE"):
        bench.setup({"profile": "INT8NAX_BENCH_PROFILE: expected one of full, cpu, got 'x'"}, case, "bf16")


def test_the_suites_measurement_keys_every_cell_and_the_warm(monkeypatch):
    _stand_in(monkeypatch, lambda argv: {"n/a": "no", "process_s": 1.0} if argv[2:4] == ["w8a8", "64"] else None)
    figures = first_token.profile_figures("cpu")
    assert figures[("qwen2.5-0.5b p16", "w8a8")] == {"first_token_s": pytest.approx(0.116),
                                                     "minus_bf16": pytest.approx(0.1)}
    assert figures[("qwen2.5-0.5b p64", "w8a8")] == {"skip": "no"}
    assert figures[("qwen2.5-0.5b", "warm")] == {"seconds": 44.0, "built": 26}
    assert len(figures) == 5


def test_the_suites_measurement_saves_its_whole_result_where_asked(monkeypatch, tmp_path):
    _stand_in(monkeypatch, lambda argv: None)
    monkeypatch.setenv(saved.SAVE_ENV, str(tmp_path / "out"))
    figures = first_token.profile_figures("cpu")
    got = json.loads((tmp_path / "out" / "first-token-qwen2.5-0.5b.json").read_text())
    cells = {(c["form"], c["prompt_tokens"]): c for c in got["first_token"][0]["cells"]}
    assert len(cells) == 4 and got["meta"]["profile"] == "cpu"
    assert cells["w8a8", 16]["first_token_s"] == figures[("qwen2.5-0.5b p16", "w8a8")]["first_token_s"]
    assert got["first_token"][0]["warm"]["process_s"] == figures[("qwen2.5-0.5b", "warm")]["seconds"]
    assert not list((tmp_path / "out").glob("*.part"))


def test_the_suites_measurement_saves_nothing_unless_asked(monkeypatch, tmp_path):
    _stand_in(monkeypatch, lambda argv: None)
    monkeypatch.delenv(saved.SAVE_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    first_token.profile_figures("cpu")
    assert saved.writer("x") is None and not list(tmp_path.rglob("*.json"))


def test_a_bogus_profile_makes_every_cell_na(monkeypatch):
    monkeypatch.setenv("INT8NAX_BENCH_PROFILE", "bogus")
    bench_first_token.first_token_profile.cache_clear()
    from benchmarks import common

    common.profile.cache_clear()
    try:
        figures = bench_first_token.FirstTokenFigures().setup_cache()
        assert "profile" in figures
        with pytest.raises(NotImplementedError, match="bogus"):
            bench_first_token.FirstTokenFigures().setup(figures, "qwen2.5-0.5b p16", "bf16")
    finally:
        bench_first_token.first_token_profile.cache_clear()
        common.profile.cache_clear()


def gpu_script_regex(bench: str, **env) -> str:
    """tools/asv_offline_gpu.sh's -b regex for BENCH=`bench` (its Python part, run as the script
    runs it, on the full profile), to match against the names asv gives parameterised benchmarks:
    "<name>(<param reprs>, ...)"."""
    script = (ROOT / "tools" / "asv_offline_gpu.sh").read_text()
    code = script.split("""regex=$("$py" - "$BENCH" "$METHODS" <<'PY'\n""", 1)[1].split("\nPY\n", 1)[0]
    env = dict(os.environ, INT8NAX_BENCH_PROFILE="full", PYTHONPATH=f"{ROOT / 'src'}{os.pathsep}{ROOT}", **env)
    done = subprocess.run([sys.executable, "-", bench, r"\w+"], input=code, capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def test_the_gpu_script_selects_the_suites_cells_at_its_profile(monkeypatch):
    regex = gpu_script_regex("FirstToken")
    wanted = ["bench_first_token.FirstTokenFigures.track_first_token_s('qwen2.5-7b p300', 'bf16')",
              "bench_first_token.FirstTokenFigures.track_first_token_s('qwen2.5-7b p4096', 'w8a8')",
              "bench_first_token.FirstTokenVsBf16.track_w8a8_minus_bf16_s('qwen2.5-7b p1500')",
              "bench_first_token.FirstTokenWarm.track_w8a8_warm_s('qwen2.5-7b')"]
    assert all(re.search(regex, name) for name in wanted), regex
    unwanted = ["bench_first_token.FirstTokenFigures.track_first_token_s('qwen2.5-0.5b p16', 'bf16')",
                "bench_first_token.FirstTokenWarm.track_w8a8_warm_s('qwen2.5-0.5b')",
                "bench_gemm.Int8naxGemm.time_int8nax_gemm((512, 4096, 4096))"]
    assert not any(re.search(regex, name) for name in unwanted), regex


def test_the_gpu_script_records_host_work_at_every_parameter():
    # the record's default selection (hopper_verify.sh record) takes bench_host's classes whole
    default = re.search(r'RECORD_BENCH:-(.*?)}"', (ROOT / "tools" / "hopper_verify.sh").read_text()).group(1)
    regex = gpu_script_regex(default)
    from int8nax.bench import host_work

    wanted = [f"bench_host.HostWork.track_{form}_host_us({shape!r}, {m})"
              for form in ("linear", "q8", "w8a8") for shape in host_work.SHAPES for m in host_work.TOKENS]
    wanted += [f"bench_host.DecoderLayerHostWork.track_{form}_layer_host_us({m})"
               for form in ("bf16", "q8", "w8a8") for m in host_work.TOKENS]
    wanted += [f"bench_host.CachedDecoderLayerHostWork.track_{form}_cached_layer_host_us"
               for form in host_work.CACHED_FORMS]
    wanted += [f"bench_host.LaunchHostWork.track_{kind}_launch_us({shape!r})"
               for kind in host_work.LAUNCH_LAYERS for shape in host_work.SHAPES]
    assert all(re.search(regex, name) for name in wanted), regex
    assert not re.search(regex, "bench_first_token.FirstTokenWarm.track_w8a8_warm_s('qwen2.5-7b')")
    assert not re.search(regex, "bench_generate.GenerateRatio.track_w8a8_prompt_vs_bf16('qwen2.5-7b p512 g128 b1')")


def test_the_gpu_script_records_the_generation_benchmarks_chosen_models_and_forms():
    some = gpu_script_regex("Generate", INT8NAX_GENERATE_CONFIGS="qwen2.5-7b", INT8NAX_GENERATE_FORMS="bf16,w8a8,mlx-q8")
    fig = "bench_generate.GenerateFigures.track_prompt_tps"
    assert re.search(some, f"{fig}('qwen2.5-7b p512 g128 b1', 'mlx-q8')")
    assert re.search(some, f"{fig}('qwen2.5-7b p4096 g128 b8', 'w8a8')")
    assert re.search(some, "bench_generate.GenerateRatio.track_w8a8_generation_vs_bf16('qwen2.5-7b p2048 g128 b8')")
    for name in (f"{fig}('qwen2.5-7b p512 g128 b1', 'fp16')", f"{fig}('qwen3-8b p512 g128 b1', 'bf16')",
                 f"{fig}('qwen2.5-0.5b p64 g16 b1', 'bf16')", "bench_host.HostWork.track_q8_host_us((3584, 3584, True), 1)"):
        assert not re.search(some, name), name
    # the forms of a second call: no ratio without bf16 and W8A8 in it
    rest = gpu_script_regex("Generate", INT8NAX_GENERATE_CONFIGS="qwen2.5-7b", INT8NAX_GENERATE_FORMS="fp16,mlx-q4")
    assert re.search(rest, f"{fig}('qwen2.5-7b p512 g128 b1', 'mlx-q4')") and "GenerateRatio" not in rest
    assert not re.search(rest, f"{fig}('qwen2.5-7b p512 g128 b1', 'bf16')")


def test_a_suite_case_name_reads_back():
    assert first_token.parse_case(first_token.case_name("qwen2.5-7b", 300)) == ("qwen2.5-7b", 300)
    assert all(first_token.parse_case(c) for c in first_token.ALL_CASES)
    for bad in ("qwen2.5-7b", "qwen2.5-7b 300", "qwen2.5-7b p300 g1", "qwen2.5-7b px"):
        assert first_token.parse_case(bad) is None, bad
