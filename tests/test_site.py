"""`int8nax site`: the comparison page, generated from small synthetic asv result files.

The expected numbers are computed here from the synthetic inputs, not taken from the
generator; the page is read back with an HTML parser, and `assert_page` is shown to fail on
a page with one wrong ratio, one dropped series, or a missing contender drawn as zero.
The same page in a real browser, against asv's graph files: tools/asv_site.py check.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import math
import os
import re
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from int8nax.commands import cli, site
from int8nax.commands.site import comparison, model_section, vendor
from int8nax.bench import contenders, machines

REPO = Path(__file__).resolve().parents[1]
NAN = float("nan")
COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
           "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]
S16, S64 = "(16, 4096, 4096)", "(64, 4096, 4096)"
SHAPES = [S16, S64, "(16, 512, 512)"]


def bench_entry(values, started=1000):
    return [values, [SHAPES], "1", started, 1.0] + [None] * 8


def write_result(folder: Path, commit: str, date: int, results: dict, env="existing-py", started=1000):
    folder.mkdir(parents=True, exist_ok=True)
    data = {"commit_hash": commit, "date": date, "env_name": env, "params": {"machine": folder.name},
            "python": "3.11", "requirements": {}, "env_vars": {}, "result_columns": COLUMNS,
            "results": {b: bench_entry(v, started) for b, v in results.items()},
            "durations": {}, "version": 2}
    # asv writes NaN as a bare token, as json.dumps does by default
    (folder / f"{commit[:8]}-{env}.json").write_text(json.dumps(data))


# The newest commit on h200: int8nax-gemm and cublaslt-int8 in both modes, mlx-fp16 one call only,
# int8nax-gemm skipped (NaN) in call mode and failed (null) chained at M = 64, torch-int8 not run.
H200_NEW = {
    "bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, NAN, NAN],
    "bench_gemm.Int8naxGemm.time_int8nax_gemm_chain": [1e-4, None, NAN],
    "bench_gemm.CublasLtInt8.time_cublaslt_int8": [1e-4, 5e-5, NAN],
    "bench_gemm.CublasLtInt8.time_cublaslt_int8_chain": [2.5e-5, 4e-5, NAN],
    "bench_linear.MlxFp16.time_mlx_fp16_matmul": [4e-4, 8e-4, NAN],
    "bench_gemm.Int8naxGemm.track_int8nax_gemm_tops": [1.0, 2.0, NAN],  # not a time: not shown
}


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    h200 = root / "h200"
    write_result(h200, "a" * 40, 1_000, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [9.0, 9.0, NAN]})  # older commit
    write_result(h200, "b" * 40, 2_000, H200_NEW)
    (h200 / "machine.json").write_text(json.dumps({"machine": "h200", "gpu": "NVIDIA H200", "version": 1}))
    # A machine with no declared ceilings, results at the CPU shape only, and a contender
    # the page does not know (shown under its stem).
    write_result(root / "mystery", "c" * 40, 3_000, {
        "bench_gemm.Int8naxGemm.time_int8nax_gemm": [NAN, NAN, 1e-3],
        "bench_x.Other.time_other_kernel": [NAN, NAN, 4e-3],
    })
    # A machine whose only file holds nothing but skips: no section at all.
    write_result(root / "empty", "d" * 40, 4_000, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [NAN, NAN, NAN]})
    return root


@pytest.fixture
def html_dir(tmp_path):
    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text(ASV_INDEX)
    return html


ASV_INDEX = """<html><head><script>
      function js_load_failure() {
        window.location = "error.html";
      }
</script></head><body><ul class="nav">
\t<li id="nav-li-regressions"><a href="#/regressions">Regressions</a></li>
</ul></body></html>"""


# --- reading the page back --------------------------------------------------------------------

class PageReader(HTMLParser):
    """{(machine, shape): {"rows": {contender: row}, "bars": [(contender, mode, tops)]}}, where a
    row is {"kind", "seconds": {mode: float|None}, "ratios": {peer: {mode: float}}, "text"}."""

    def __init__(self):
        super().__init__()
        self.blocks, self.block, self.row, self.cell = {}, None, None, None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        if tag == "div" and cls == "shape":
            self.block = self.blocks.setdefault((a["data-machine"], a["data-shape"]), {"rows": {}, "bars": []})
        elif self.block is None:
            return
        elif tag == "tr" and "data-contender" in a:
            self.row = {"kind": cls, "seconds": {}, "ratios": {}, "text": ""}
            assert a["data-contender"] not in self.block["rows"], "two rows for one contender"
            self.block["rows"][a["data-contender"]] = self.row
        elif tag == "td" and "seconds" in cls.split():
            s = a["data-seconds"]
            self.row["seconds"][a["data-mode"]] = None if s == "None" else float(s)
        elif tag == "td" and "ratio" in cls.split() and "self" not in cls.split():
            self.row["ratios"][a["data-peer"]] = {m: float(a[f"data-{m}"]) for m in comparison.MODES if f"data-{m}" in a}
        elif tag == "rect" and "bar" in cls.split():
            self.block["bars"].append((a["data-contender"], a["data-mode"], float(a["data-tops"])))

    def handle_data(self, data):
        if self.row is not None:
            self.row["text"] += data

    def handle_endtag(self, tag):
        if tag == "tr":
            self.row = None
        elif tag == "div" and self.row is None:
            pass


def read_page(text: str) -> dict:
    reader = PageReader()
    reader.feed(text)
    return reader.blocks


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-12)


# What the page must say, computed from the synthetic inputs above.
def expected_h200() -> dict:
    ops16 = 2 * 16 * 4096 * 4096
    ops64 = 2 * 64 * 4096 * 4096
    return {
        S16: {"int8nax-gemm": {"call": 2e-4, "chain": 1e-4}, "cublaslt-int8": {"call": 1e-4, "chain": 2.5e-5},
              "mlx-fp16": {"call": 4e-4, "chain": None}, "_ops": ops16},
        S64: {"cublaslt-int8": {"call": 5e-5, "chain": 4e-5}, "mlx-fp16": {"call": 8e-4, "chain": None},
              "_ops": ops64},
    }


def assert_page(blocks: dict, machine: str, expected: dict, peers_of: set[str]) -> None:
    """Every contender with a time has a row with exactly its times, one bar per timed mode with
    TOPS = ops / time, and ratio cells = peer time / own time; every other contender is a
    'missing' row with no bar. Raises AssertionError naming the first difference."""
    for shape, want in expected.items():
        block = blocks.get((machine, shape))
        assert block is not None, f"no block for {machine} {shape}"
        ops = want["_ops"]
        timed = {c: t for c, t in want.items() if c != "_ops"}
        for contender, row in block["rows"].items():
            if contender not in timed:
                assert row["kind"] == "missing", f"{contender} at {shape} shown with results"
                assert not [b for b in block["bars"] if b[0] == contender], f"{contender} drawn though missing"
        for contender, times in timed.items():
            row = block["rows"].get(contender)
            assert row is not None and row["kind"] == "result", f"{contender} at {shape}: no result row"
            bars = {(b[1]): b[2] for b in block["bars"] if b[0] == contender}
            for mode, t in times.items():
                if t is None:
                    assert row["seconds"][mode] is None and mode not in bars, f"{contender} {mode} not missing"
                    assert "missing" in row["text"]
                    continue
                assert close(row["seconds"][mode], t), f"{contender} {mode}: {row['seconds'][mode]} != {t}"
                assert mode in bars, f"{contender} at {shape}: no {mode} bar"
                assert close(bars[mode], ops / t / 1e12), f"{contender} {mode} bar"
            for peer in peers_of:
                if peer == contender or peer not in timed:
                    continue
                cell = row["ratios"].get(peer)
                assert cell is not None, f"{contender}: no ratio to {peer}"
                for mode in comparison.MODES:
                    mine, theirs = times.get(mode), timed[peer].get(mode)
                    if mine is None or theirs is None:
                        assert mode not in cell, f"{contender} vs {peer} {mode}: a ratio without two times"
                    else:
                        assert close(cell[mode], theirs / mine), \
                            f"{contender} vs {peer} {mode}: {cell[mode]} != {theirs / mine}"
            extra = set(row["ratios"]) - (peers_of & set(timed)) - {contender}
            assert not extra, f"{contender}: ratios to {extra}, which have no time here"


PEERS = {c.name for c in comparison.CONTENDERS if c.peer}


# --- the tests --------------------------------------------------------------------------------

def test_page_shows_the_latest_commit_with_exact_times_ratios_and_missing_rows(results, html_dir):
    site.publish(html_dir, results)
    page = (html_dir / "compare.html").read_text()
    blocks = read_page(page)
    assert_page(blocks, "h200", expected_h200(), PEERS)
    # the older commit's 9-second int8nax-gemm is not shown; the newer commit is named
    assert 'data-commit="' + "b" * 40 + '"' in page and "a" * 8 not in page
    # int8nax-gemm at M = 64: skipped one call, failed chained: a missing row saying both
    row = blocks[("h200", S64)]["rows"]["int8nax-gemm"]
    assert row["kind"] == "missing" and "n/a (skipped)" in row["text"] and "failed" in row["text"]
    # torch-int8 never ran at that commit; cider-raw neither: no rows at each shape (never a
    # zero), but listed once above the shapes, with what is known of the reason
    assert "torch-int8" not in blocks[("h200", S16)]["rows"]
    # cider, which runs only on an M5 and which no machine has reported: a row at every shape
    # saying so, with the command an M5 owner runs
    cider = blocks[("h200", S64)]["rows"]["cider-raw"]
    assert cider["kind"] == "missing" and f"{model_section.M5_ONLY}: an M5 owner runs {model_section.M5_COMMAND}" in cider["text"]
    absent = re.search(r'<details class="absent".*?</details>', page.split('data-machine="h200"')[1], re.S).group(0)
    assert "cider-raw, cublaslt-int8" not in absent  # cuBLASLt has results on h200
    assert re.search(r"<b>[^<]*cider-raw[^<]*torch-int8[^<]*</b>: no result at this commit here", absent)
    assert "12 of 14 declared shapes</b> have no result here" in absent
    # the shape without any result on h200 gets no block; the machine with only skips no section
    assert ("h200", "(16, 512, 512)") not in blocks
    assert 'data-machine="empty"' not in page
    # no script, nothing from outside
    assert "<script" not in page and not re.search(r'(src|href)="(https?:)?//', page)


def test_every_contender_of_the_suite_is_listed_on_every_machine(results, html_dir):
    site.publish(html_dir, results)
    page = (html_dir / "compare.html").read_text()
    blocks = read_page(page)
    # the suite's contenders in order, then an unknown benchmark stem under its own name: at
    # each shape those with a result somewhere on the machine (missing where they have none);
    # the rest once, in the machine's "not measured" list
    names = [c.name for c in comparison.CONTENDERS] + ["other_kernel"]
    h200 = ["int8nax-gemm", "cublaslt-int8", "mlx-fp16"]
    assert list(blocks[("h200", S16)]["rows"]) == list(blocks[("h200", S64)]["rows"]) == h200 + list(comparison.CIDER)
    assert blocks[("h200", S64)]["rows"]["int8nax-gemm"]["kind"] == "missing"
    data = json.loads((html_dir / "compare.json").read_text())["machines"]
    assert list(data["h200"]["absent"]) == [n for n in names if n not in h200]
    mystery = blocks[("mystery", "(16, 512, 512)")]
    assert list(mystery["rows"]) == ["int8nax-gemm", "other_kernel", *comparison.CIDER] and mystery["rows"]["other_kernel"]["kind"] == "result"
    assert close(mystery["rows"]["int8nax-gemm"]["ratios"]["other_kernel"]["call"], 4e-3 / 1e-3)


def test_tops_and_roofline_fraction_against_the_declared_ceilings(results, html_dir):
    site.publish(html_dir, results)
    data = json.loads((html_dir / "compare.json").read_text())
    entries = {(e["shape"], e["contender"]): e for e in data["machines"]["h200"]["entries"]}
    m, k, n = 16, 4096, 4096
    ops = 2 * m * k * n
    # int8 GEMM: A int8, B int8, C int32, each once; the H200 reads HBM at 4.56 TB/s
    bytes_raw = m * k + n * k + 4 * m * n
    ceiling = min(1979.0, 4.56 * ops / bytes_raw)
    assert ceiling < 1979.0  # M = 16 is memory-bound on the H200
    e = entries[(S16, "int8nax-gemm")]
    assert e["bound"] == "memory" and close(e["ceiling_tops"], ceiling)
    assert close(e["tops"]["call"], ops / 2e-4 / 1e12)
    assert close(e["roofline"]["chain"], ops / 1e-4 / 1e12 / ceiling)
    # float16 matmul: A, B and C float16, against the fp16 peak
    f = entries[(S16, "mlx-fp16")]
    assert close(f["ceiling_tops"], min(989.5, 4.56 * ops / (2 * m * k + 2 * n * k + 2 * m * n)))
    assert f["roofline"]["chain"] is None and f["status"]["chain"] == "absent"
    # no ceilings declared for machine "mystery": no fraction, and the page says why
    mystery = [x for x in data["machines"]["mystery"]["entries"] if x["has_result"]]
    assert mystery and all(x["roofline"]["call"] is None for x in mystery)
    assert "no ceilings declared" in (results.parent / "html" / "compare.html").read_text()


@pytest.mark.parametrize("damage", ["wrong ratio", "dropped series", "missing drawn as zero", "wrong time"])
def test_the_page_check_catches_a_damaged_page(results, html_dir, damage):
    site.publish(html_dir, results)
    page = (html_dir / "compare.html").read_text()
    if damage == "wrong ratio":
        bad = re.sub(r'(data-peer="cublaslt-int8" data-call=")([^"]+)"',
                     lambda mt: f'{mt.group(1)}{float(mt.group(2)) * 1.01!r}"', page, count=1)
    elif damage == "dropped series":
        bad = re.sub(r'<rect class="bar chain" data-contender="int8nax-gemm".*?</rect>', "", page, count=1)
    elif damage == "missing drawn as zero":
        bad = page.replace('<tr class="missing" data-contender="int8nax-gemm">',
                           '<tr class="result" data-contender="int8nax-gemm">', 1)
    else:
        bad = page.replace('data-seconds="0.0002"', 'data-seconds="0.0003"', 1)
    assert bad != page
    assert_page(read_page(page), "h200", expected_h200(), PEERS)
    with pytest.raises(AssertionError):
        assert_page(read_page(bad), "h200", expected_h200(), PEERS)


def test_a_wrong_generator_is_caught(results, html_dir, monkeypatch):
    """The same check against the generator itself: a ratio computed upside down fails it."""
    real = comparison.compare_machine

    def upside_down(*args, **kwargs):
        block = real(*args, **kwargs)
        for sb in block.shapes:
            for e in sb.entries:
                for peer, modes in e.ratios.items():
                    e.ratios[peer] = {m: (1 / r if r else r) for m, r in modes.items()}
        return block

    monkeypatch.setattr(comparison, "compare_machine", upside_down)
    site.publish(html_dir, results)
    with pytest.raises(AssertionError, match="vs"):
        assert_page(read_page((html_dir / "compare.html").read_text()), "h200", expected_h200(), PEERS)


def test_envs_of_one_commit_merge_a_number_over_a_skip(tmp_path, html_dir):
    root = tmp_path / "results"
    write_result(root / "h200", "e" * 40, 5, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [NAN, 3e-4, NAN]},
                 env="env-a", started=10)
    write_result(root / "h200", "e" * 40, 5, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, NAN, NAN]},
                 env="env-b", started=20)
    site.publish(html_dir, root)
    data = json.loads((html_dir / "compare.json").read_text())["machines"]["h200"]
    got = {e["shape"]: e["seconds"]["call"] for e in data["entries"] if e["contender"] == "int8nax-gemm"}
    assert got == {S16: 2e-4, S64: 3e-4}
    assert sorted(data["envs"]) == ["env-a", "env-b"]


def test_only_commits_on_the_published_site_are_compared(results, html_dir):
    # asv publish left the newest h200 commit out (not on asv's branches, e.g. a PR's results)
    (html_dir / "index.json").write_text(json.dumps({"revision_to_hash": {"1": "a" * 40, "3": "c" * 40}}))
    site.publish(html_dir, results)
    data = json.loads((html_dir / "compare.json").read_text())["machines"]
    assert data["h200"]["commit"] == "a" * 40 and data["mystery"]["commit"] == "c" * 40
    got = {e["shape"]: e["seconds"]["call"] for e in data["h200"]["entries"] if e["has_result"]}
    assert got == {S16: 9.0, S64: 9.0}


def test_index_gets_one_link_and_the_offline_fallback(results, html_dir):
    site.publish(html_dir, results)
    site.publish(html_dir, results)  # twice: still one link
    text = (html_dir / "index.html").read_text()
    assert text.count('href="compare.html"') == 1
    assert 'window.location = "compare.html#offline"' in text and '"error.html"' not in text
    assert 'id="offline"' in (html_dir / "compare.html").read_text()


def test_the_real_asv_index_is_linked(tmp_path):
    spec = importlib.util.find_spec("asv")
    if spec is None:
        pytest.skip("asv is not installed (the bench or test extra)")
    tmp = tmp_path / "index.html"
    tmp.write_text((Path(spec.origin).parent / "www" / "index.html").read_text())
    assert site.link_index(tmp) == ["link", "offline fallback"]
    linked = tmp.read_text()
    assert linked.count('id="nav-li-compare"') == 1 and "compare.html#offline" in linked


def test_command_line(results, html_dir, tmp_path, capsys):
    assert cli.main(["site", str(html_dir), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "h200: 5" in out and (html_dir / "compare.json").is_file()  # 3 at M=16, 2 at M=64
    empty = tmp_path / "nothing"
    empty.mkdir()
    # a path that is not what its argument takes: one usage line naming it (exit 2), as other commands do
    for argv, words in (([str(empty), "--results", str(results)], ["html_dir", "run `asv publish` first", "nothing"]),
                        ([str(tmp_path / "absent-html"), "--results", str(results)], ["html_dir", "absent-html"]),
                        ([str(html_dir), "--results", str(tmp_path / "absent")], ["--results", "absent"])):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["site", *argv])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and all(w in err for w in words), err
    site_dir = tmp_path / "site" / "html"  # --results left out: 'results' beside html_dir, absent
    site_dir.mkdir(parents=True)
    (site_dir / "index.html").write_text((html_dir / "index.html").read_text())
    assert cli.main(["site", str(site_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--results" in err and "asv run" in err


def test_a_broken_result_file_is_reported(tmp_path, html_dir):
    root = tmp_path / "results" / "h200"
    root.mkdir(parents=True)
    (root / "x.json").write_text('{"commit_hash": "f"}')
    with pytest.raises(site.SiteError, match="not an asv result file"):
        site.publish(html_dir, root.parent)


# --- the roster and the ceilings agree with the rest of the package ---------------------------

def test_roster_matches_the_asv_suite_and_the_contenders():
    sys.path.insert(0, str(REPO))
    from benchmarks import bench_gemm, bench_linear, common

    classes = [c for mod in (bench_gemm, bench_linear) for _, c in inspect.getmembers(mod, inspect.isclass)
               if issubclass(c, common.ContenderBenchmark) and c is not common.ContenderBenchmark]
    by_name = {c.name: c for c in comparison.CONTENDERS}
    assert sorted(by_name) == sorted(contenders.SUITE)
    for cls in classes:
        info = by_name[cls.contender]
        names = {n for n in vars(cls) if n.startswith(("time_", "track_"))}
        assert names == {f"time_{info.stem}", f"time_{info.stem}_chain", f"track_{info.stem}_tops"}, cls
        # raw contenders move int8 A and B and an int32 output; full ones float activations in and out
        if contenders.CONTENDERS[cls.contender].kind == "raw":
            assert (info.fmt.arithmetic, info.fmt.a, info.fmt.b, info.fmt.out) == ("int8", 1, 1, 4), cls
        else:
            assert info.fmt.a in (2, 4) and info.fmt.out in (2, 4), cls
    assert not by_name["int8nax-gemm"].peer and not by_name["int8nax-full"].peer
    assert all(c.peer for c in comparison.CONTENDERS if not c.name.startswith("int8nax-"))


def test_ceilings_are_not_used_for_other_hardware_under_a_declared_name(results, html_dir):
    (results / "h200" / "machine.json").write_text(json.dumps({"machine": "h200", "gpu": "NVIDIA A100"}))
    site.publish(html_dir, results)
    entries = json.loads((html_dir / "compare.json").read_text())["machines"]["h200"]["entries"]
    assert all(e["roofline"]["call"] is None for e in entries)
    assert "for other hardware: machine.json says gpu &#x27;NVIDIA A100&#x27;" in (html_dir / "compare.html").read_text()
    assert machines.match("h200", {"gpu": "NVIDIA H200"})[0] is machines.H200
    assert machines.match("cpu-2core", {"cpu": "Intel(R) Xeon(R)", "num_cpu": "2"})[0] is None


def test_ceilings_lookup_and_roofline():
    assert machines.lookup("h200") is machines.H200 and machines.lookup("int8nax-cuda") is machines.H200
    assert machines.lookup("no-such-box") is None
    # GPU machines are named by card: one history per card, the ceilings of that card
    assert machines.card_machine("NVIDIA H100 80GB HBM3") == "h100" and machines.card_machine("NVIDIA H200") == "h200"
    assert machines.card_machine("NVIDIA H100 PCIe") is None and machines.card_machine("NVIDIA A100-SXM4-80GB") is None
    assert machines.match("h100", {"gpu": "NVIDIA H100 80GB HBM3"})[0] is machines.H100
    assert machines.match("h100", {"gpu": "NVIDIA H200"})[0] is None
    c = machines.H200.device
    assert c.compute_tops["int8"] == 1979.0 and c.memory_tbps == 4.56
    # compute-bound at 8192^3 (int8), memory-bound at M = 1
    big = machines.attainable_tops(c, "int8", 2 * 8192 ** 3, 3 * 8192 ** 2)
    assert big == (1979.0, "compute")
    small = machines.attainable_tops(c, "int8", 2 * 4096 * 4096, 4096 * 4096 + 2 * 4096 + 4 * 4096)
    assert small[1] == "memory" and close(small[0], 4.56 * 2 * 4096 * 4096 / (4096 * 4096 + 6 * 4096))
    # no bandwidth declared (the M5 estimate): compute only; no fp32 on the H200's device
    assert machines.attainable_tops(machines.M5_MAX.device, "int8", 1.0, 1e9) == (130.0, "compute")
    assert machines.attainable_tops(c, "fp32", 1.0, 1.0) is None
    with pytest.raises(ValueError, match="attainable_tops: fmt"):
        machines.attainable_tops(c, "int4", 1.0, 1.0)
    for m in machines.MACHINES.values():
        for ceilings in (m.device, m.host):
            if ceilings is None:
                continue
            assert set(ceilings.compute_tops) <= set(machines.FORMATS)
            assert set(ceilings.compute_tops) | {"memory"} <= set(ceilings.sources), m.name
    assert machines.M5_MAX.device.estimate and "ESTIMATE" in machines.M5_MAX.description


# --- offline, in a real browser ----------------------------------------------------------------

def test_offline_without_its_libraries_the_site_falls_back_to_the_comparison_page(results, tmp_path):
    """asv's real index.html after int8nax site, its vendor/ folder gone, opened where no host
    resolves: it must land on compare.html#offline with the notice shown and the tables there
    (headless Chromium). The vendored site's own offline check: test_browser_check_... below."""
    asv_site = _browser_or_skip()
    html = tmp_path / "site"
    shutil.copytree(Path(importlib.util.find_spec("asv").origin).parent / "www", html)
    site.publish(html, results)
    shutil.rmtree(html / vendor.VENDOR)
    report = asv_site.check_offline(html)
    assert report == {"vendored": False, "page": "compare", "hash": "#offline", "notice": True, "rows": 7}  # h200 3 + 2, mystery 2


def test_site_vendors_the_shipped_libraries_into_asvs_index(results, tmp_path):
    html = tmp_path / "site"
    shutil.copytree(Path(importlib.util.find_spec("asv").origin).parent / "www", html)
    before = (html / "index.html").read_text()
    assert len(vendor.unlinked(before)) == len(vendor.CDN_FILES)  # asv 0.6.6's own links
    site.publish(html, results)
    after = (html / "index.html").read_text()
    assert vendor.unlinked(after) == []
    for pkg, path in vendor.CDN_FILES.values():
        kind = "css" if path.endswith(".css") else "js"
        copy = html / vendor.VENDOR / kind / Path(path).name
        assert f'"{vendor.VENDOR}/{kind}/{copy.name}"' in after
        assert copy.read_bytes() == (vendor.assets() / pkg / path).read_bytes()
    assert sorted(p.name for p in (html / vendor.VENDOR / "fonts").iterdir()) == sorted(vendor.FONT_FILES)
    assert len(list((html / vendor.VENDOR / "licenses").iterdir())) == len(vendor.LICENSES)
    site.publish(html, results)  # again: nothing left to replace, same page
    assert (html / "index.html").read_text() == after
    (html / "index.html").write_text(before.replace("</head>", '<script src="https://cdn.example/x.js"></script></head>'))
    with pytest.raises(site.SiteError, match="cdn.example/x.js"):
        site.publish(html, results)


def test_the_shipped_libraries_are_the_pinned_versions_files():
    """site_assets holds exactly the files its manifest lists, with those SHA-256s, of the
    versions tools/asv-site/package-lock.json pins; and where npm has installed them, the same
    bytes as npm's (so a changed pin without `python tools/asv_site.py ship` fails)."""
    data = vendor.manifest()
    lock = json.loads((REPO / "tools/asv-site/package-lock.json").read_text())["packages"]
    assert data["packages"] == {p: lock[f"node_modules/{p}"]["version"] for p in data["packages"]}
    assert set(data["packages"]) == {p for p, _ in vendor.CDN_FILES.values()}
    root = vendor.assets()
    shipped = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != vendor.MANIFEST)
    assert shipped == sorted(data["sha256"]) == vendor.shipped_paths()
    assert {rel: vendor.sha256(root / rel) for rel in shipped} == data["sha256"]
    for pkg, path in vendor.CDN_FILES.values():  # licence headers or files travel with the code
        head = (root / pkg / path).read_text(errors="replace")[:400]
        assert "MIT" in head or "license" in head.lower() or pkg in vendor.LICENSES, (pkg, path)
    node_modules = REPO / "tools/asv-site/node_modules"
    if not node_modules.is_dir():
        pytest.skip("npm's copies are not installed (npm ci --prefix tools/asv-site); checked against the manifest only")
    for pkg, version in data["packages"].items():
        assert json.loads((node_modules / pkg / "package.json").read_text())["version"] == version
    assert [rel for rel in shipped if (node_modules / rel).read_bytes() != (root / rel).read_bytes()] == []


@pytest.mark.parametrize("index", [None, "{not json", "[]", '{"benchmarks": 1, "params": {}}'])
def test_asv_site_check_without_asvs_index_is_one_line_like_vendor(tmp_path, capsys, index):
    """No browser needed: the index is read before one starts."""
    sys.path.insert(0, str(REPO / "tools"))
    import asv_site

    if index is not None:
        (tmp_path / "index.json").write_text(index)
    for command, names in ((["check", str(tmp_path)], "index.json"),
                           (["vendor", str(tmp_path / "absent")], "index.html")):
        assert asv_site.main(command) == 1
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("asv_site: ") and "asv publish" in err
        assert names in err


def _browser_or_skip():
    sys.path.insert(0, str(REPO / "tools"))
    import asv_site

    missing = [m for m in ("asv", "selenium") if importlib.util.find_spec(m) is None]
    try:
        asv_site.find_browser()
    except asv_site.SiteError as exc:
        missing.append(str(exc))
    if shutil.which("git") is None:
        missing.append("git")
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"missing, and CI=true requires it: {missing}")
        pytest.skip(f"missing: {missing}")
    return asv_site


@pytest.fixture
def published(tmp_path):
    """A real `asv publish` of synthetic results (a one-commit git repository), then int8nax site."""
    asv_site = _browser_or_skip()
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q", "-b", "main"], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "one"], check=True)
    commit = subprocess.run(git[:3] + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    (repo / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": "x", "project_url": "", "repo": ".", "branches": ["main"], "dvcs": "git",
        "environment_type": "virtualenv", "results_dir": "results", "html_dir": "html"}))
    template = {"code": "", "min_run_count": 2, "number": 0, "param_names": ["(M, K, N)"], "params": [SHAPES],
                "repeat": 0, "rounds": 2, "sample_time": 0.01, "timeout": 600, "type": "time",
                "unit": "seconds", "version": "1", "warmup_time": -1}
    benches = {b: {**template, "name": b} for b in H200_NEW if ".time_" in b}
    (repo / "results").mkdir()
    (repo / "results" / "benchmarks.json").write_text(json.dumps({**benches, "version": 2}))
    write_result(repo / "results" / "h200", commit, 1_000, {b: v for b, v in H200_NEW.items() if b in benches})
    (repo / "results" / "h200" / "machine.json").write_text(json.dumps({"machine": "h200", "version": 1}))
    subprocess.run([sys.executable, "-m", "asv", "publish"], cwd=repo, check=True, capture_output=True)
    html = repo / "html"
    site.publish(html, repo / "results")
    return asv_site, html


def _check_compare(asv_site, html):
    server, url = asv_site.serve(html)
    driver = asv_site.browser()
    problems = []
    try:
        index = json.loads((html / "index.json").read_text())
        report = asv_site.check_compare(html, index, driver, url, None, problems)
    finally:
        driver.quit()
        server.shutdown()
    return report, problems


def test_browser_check_of_the_page_against_asvs_graphs(published):
    asv_site, html = published
    report, problems = _check_compare(asv_site, html)
    assert problems == [] and report["entries"] == 5 and report["bars"] == 8  # 3 + 2 rows; chain: 2 + 2 bars

    page = (html / "compare.html").read_text()
    data = (html / "compare.json").read_text()
    # a ratio off by 1 %, and a dropped row, on the page
    bad = re.sub(r'(data-peer="cublaslt-int8" data-call=")([^"]+)"',
                 lambda mt: f'{mt.group(1)}{float(mt.group(2)) * 1.01!r}"', page, count=1)
    bad = re.sub(r'<tr class="result" data-contender="mlx-fp16">.*?</tr>', "", bad, count=1)
    (html / "compare.html").write_text(bad)
    _, problems = _check_compare(asv_site, html)
    assert any("vs cublaslt-int8 (call)" in p for p in problems), problems
    assert any("no row for mlx-fp16" in p for p in problems), problems
    # a series asv published that compare.json (and so the page) lacks
    (html / "compare.html").write_text(page)
    broken = json.loads(data)
    broken["machines"]["h200"]["entries"] = [e for e in broken["machines"]["h200"]["entries"]
                                             if not (e["contender"] == "cublaslt-int8" and e["shape"] == S64)]
    (html / "compare.json").write_text(json.dumps(broken))
    _, problems = _check_compare(asv_site, html)
    assert any("time_cublaslt_int8 at (64, 4096, 4096)" in p and "no entry" in p for p in problems), problems
    # a whole machine left out
    broken["machines"].pop("h200")
    (html / "compare.json").write_text(json.dumps(broken))
    _, problems = _check_compare(asv_site, html)
    assert any("no section for it" in p for p in problems), problems


def test_the_gates_ratio_benchmarks_are_not_contenders(tmp_path, html_dir):
    # bench_ratio's values are ratios (int8nax over a reference), not seconds of anything: not
    # contenders (nor is their history's time_ name), shown apart, unitless
    root = tmp_path / "results"
    write_result(root / "h200", "f" * 40, 5, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, NAN, NAN],
                                               "bench_ratio.GemmRatio.time_int8nax_gemm_ratio": [1.3, NAN, NAN],
                                               "bench_ratio.GemmRatio.track_int8nax_gemm_ratio": [1.25, NAN, NAN]})
    site.publish(html_dir, root)
    data = json.loads((html_dir / "compare.json").read_text())["machines"]["h200"]
    assert not any("ratio" in e["contender"] for e in data["entries"])
    assert any(e["contender"] == "int8nax-gemm" for e in data["entries"])
    assert data["ratios"] == {"bench_ratio.GemmRatio.track_int8nax_gemm_ratio": {S16: 1.25}}
    page = (html_dir / "compare.html").read_text()
    assert f'<tr><td class="name">{S16}</td><td data-bench="bench_ratio.GemmRatio.track_int8nax_gemm_ratio">1.25</td></tr>' in page


def test_this_machine_comes_first_with_what_its_run_means_and_its_skip_reasons(results, html_dir, tmp_path,
                                                                               monkeypatch):
    import socket

    machine_file = tmp_path / "asv-machine.json"
    machine_file.write_text(json.dumps({socket.gethostname(): {"machine": "mystery"}, "version": 1}))
    assert site.this_machine(machine_file) == "mystery"
    assert site.this_machine(tmp_path / "none.json") is None
    monkeypatch.setitem(sys.modules, "cider", None)  # not installed: its reason, found again here
    report = site.publish(html_dir, results, here="mystery")
    page = (html_dir / "compare.html").read_text()
    assert report["here"] == "mystery"
    assert page.index('data-machine="mystery"') < page.index('data-machine="h200"')
    assert "<b>Your run:</b> this computer is asv machine <code>mystery</code>" in page
    assert "The other sections (h200) are the results committed with the repository" in page
    absent = json.loads((html_dir / "compare.json").read_text())["machines"]["mystery"]["absent"]
    assert absent["cider-raw"].startswith("cider is not installed")
    assert re.search(r"<b>cider-raw, cider-full</b>: cider is not installed", page)
    # --machine puts another first; without a machine of this computer, no "your run" paragraph
    site.publish(html_dir, results, first="h200")
    page = (html_dir / "compare.html").read_text()
    assert page.index('data-machine="h200"') < page.index('data-machine="mystery"') and "Your run" not in page


def test_w8a8_faster_than_the_raw_gemm_is_explained_where_it_shows(tmp_path, html_dir):
    root = tmp_path / "results"
    write_result(root / "cpu-box", "f" * 40, 5, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [4.68e-3, 1e-3, NAN],
                                                  "bench_linear.Int8naxFull.time_int8nax_full": [1.39e-3, 2e-3, NAN]})
    site.publish(html_dir, root)
    page = (html_dir / "compare.html").read_text()
    note = re.search(r'<p class="small w8a8-note" data-shapes="([^"]*)">(.*?)</p>', page, re.S)
    assert note and note.group(1) == S16  # faster at 16x4096x4096 only, not at M = 64
    assert "prepares a weight once" in note.group(2) and "INT8NAX_CPU_PREPARE=0" in note.group(2)


def test_browser_check_of_the_tuned_graph_page_and_the_regressions_page(published):
    asv_site, html = published  # int8nax site has served asv's libraries with the site
    assert asv_site.check_offline(html) == {"vendored": True, "page": "index", "listed": sum(".time_" in b for b in H200_NEW)}
    index = json.loads((html / "index.json").read_text())
    server, url = asv_site.serve(html)
    driver = asv_site.browser(asv_site.OFFLINE)  # no host resolves but the site's: as offline
    try:
        problems = []
        view = asv_site.check_default_graph(driver, url, "bench_gemm.Int8naxGemm.time_int8nax_gemm", None, problems)
        assert problems == [], problems
        assert view["machines"] == ["h200"] and view["log_scale"] and view["drawn"] == 1 and view["legend_beside"] == 3
        assert asv_site.check_regressions(html, index, driver, url, None, problems)["rows"] == 0 and not problems
        # asv's own graph page: linear axis, legend over the plot
        js = html / "graphdisplay.js"
        js.write_text(js.read_text().replace("container: $('#int8nax-legend'),", "")
                      .replace("$('#log-scale').addClass('active');\n            log_scale = true;", ""))
        asv_site.check_default_graph(driver, url, "bench_gemm.Int8naxGemm.time_int8nax_gemm", None, problems)
        assert any("linear y axis" in p for p in problems) and any("legend over the plot" in p for p in problems)
    finally:
        driver.quit()
        server.shutdown()
    # int8nax site puts the edits back, once each
    site.publish(html, html.parent / "results")
    assert js.read_text().count("container: $('#int8nax-legend')") == 1
    assert js.read_text().count("int8nax: one machine per graph") == 1


def test_the_command_prints_this_machines_skip_reasons_once(results, html_dir, capsys, monkeypatch):
    monkeypatch.setattr(site, "this_machine", lambda: "mystery")
    monkeypatch.setitem(sys.modules, "cider", None)
    assert cli.main(["site", str(html_dir), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    summary = out.split("what asv showed as n/a on this machine (mystery):\n")[1].splitlines()
    assert any(line.startswith("  cider-raw, cider-full: cider is not installed") for line in summary)
    assert sum("cider is not installed" in line for line in summary) == 1
    assert "  13 of the 14 declared shapes: not in this machine's profile" in out


def test_this_machines_skips_by_rule_are_named_once(tmp_path, html_dir, monkeypatch):
    from int8nax.bench import contenders

    root = tmp_path / "results"
    write_result(root / "cpu-box", "f" * 40, 5, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [4.68e-3, 1e-3, NAN],
                                                  "bench_linear.MlxQ8.time_mlx_q8_matmul": [NAN, 2e-3, NAN]})
    monkeypatch.setattr(contenders, "skip_reason",
                        lambda name, shape: "too slow here" if shape[0] == 16 else None)
    site.publish(html_dir, root, here="cpu-box")
    page = (html_dir / "compare.html").read_text()
    assert f"<li><b>mlx-q8</b> at {S16}: skipped by the suite: too slow here</li>" in page


def test_the_kernel_that_ran_is_shown_per_shape_and_a_change_between_commits_is_flagged(tmp_path, html_dir,
                                                                                          monkeypatch):
    # bench_kernel records contenders.kernel_id of Backend.describe per shape; the page names it
    # and flags a shape whose kernel differs at the machine's previous commit with records.
    old, new, same = "cuda tma 128x64 splits=1", "cuda tma-ws-cooperative 128x256 splits=1", "cuda tma 64x32 splits=4"
    kid = contenders.kernel_id
    monkeypatch.setattr(contenders, "describe", lambda name, shape, backend=None: new if shape[0] == 16 else same)
    root = tmp_path / "results"
    write_result(root / "h200", "1" * 40, 1_000, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [3e-4, 3e-4, NAN],
                                                   "bench_kernel.Kernel.track_int8nax_gemm_kernel": [kid(old), kid(same), NAN]})
    write_result(root / "h200", "2" * 40, 2_000, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, 3e-4, NAN],
                                                   "bench_kernel.Kernel.track_int8nax_gemm_kernel": [kid(new), kid(same), NAN]})
    site.publish(html_dir, root)
    data = json.loads((html_dir / "compare.json").read_text())["machines"]["h200"]
    assert data["commit"] == "2" * 40 and data["previous_commit"] == "1" * 40
    got = {e["shape"]: e for e in data["entries"] if e["contender"] == "int8nax-gemm"}
    assert got[S16]["kernel"] == kid(new) and got[S16]["kernel_text"] == new and got[S16]["kernel_changed"]
    assert got[S16]["kernel_before"] == kid(old)
    assert got[S64]["kernel_text"] == same and not got[S64]["kernel_changed"]
    assert all(e["kernel"] is None for e in data["entries"] if e["contender"] != "int8nax-gemm")
    page = (html_dir / "compare.html").read_text()
    cells = re.findall(r'<td class="kernel" data-kernel="(\d+)" data-changed="(\w+)">(.*?)</td>', page)
    assert sorted((int(k), c) for k, c, _ in cells) == sorted([(kid(new), "true"), (kid(same), "false")])
    changed_cell = next(text for k, c, text in cells if c == "true")
    assert new in changed_cell and "changed since 11111111" in changed_cell
    assert f"kernel #{kid(old):08x}" in changed_cell  # not described here: shown as its id
    assert 'data-changed="1"' in page and "int8nax-gemm at (16, 4096, 4096)" in page  # the machine's summary line
    # the records are not contenders and take no row of their own
    assert not any("kernel" in e["contender"] for e in data["entries"])


def test_kernel_records_without_an_earlier_commit_show_without_a_change(tmp_path, html_dir):
    root = tmp_path / "results"
    write_result(root / "cpu-box", "3" * 40, 1_000, {"bench_linear.Int8naxFull.time_int8nax_full": [NAN, NAN, 1e-3],
                                                      "bench_kernel.Kernel.track_int8nax_full_kernel": [NAN, NAN, 7]})
    site.publish(html_dir, root)
    data = json.loads((html_dir / "compare.json").read_text())["machines"]["cpu-box"]
    (entry,) = [e for e in data["entries"] if e["contender"] == "int8nax-full"]
    assert entry["kernel"] == 7 and entry["kernel_before"] is None and not entry["kernel_changed"]
    assert data["previous_commit"] is None
    assert "kernel #00000007" in (html_dir / "compare.html").read_text()


def test_the_kernel_column_says_where_no_id_was_recorded_and_reads_a_run_of_the_records_alone(tmp_path, html_dir):

    root = tmp_path / "results"
    c = "c" * 40
    write_result(root / "h200", c, 5, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, 3e-4, NAN],
                                       "bench_linear.Int8naxFull.time_int8nax_full": [2e-4, 3e-4, NAN],
                                       "bench_gemm.CublasLtInt8.time_cublaslt_int8": [1e-4, 2e-4, NAN]})
    # the kernel records of the same commit in a file of their own (a run of bench_kernel alone)
    write_result(root / "h200", c, 5, {"bench_kernel.Kernel.track_int8nax_gemm_kernel": [11, 12, NAN]},
                 env="kernels-only", started=2000)
    site.publish(html_dir, root)
    entries = {(e["shape"], e["contender"]): e for e in
               json.loads((html_dir / "compare.json").read_text())["machines"]["h200"]["entries"]}
    assert entries[(S16, "int8nax-gemm")]["kernel"] == 11 and entries[(S64, "int8nax-gemm")]["kernel"] == 12
    page = (html_dir / "compare.html").read_text()
    # int8nax-full has no record at this commit: it says so; a peer's kernel is not int8nax's to record
    assert page.count('<td class="kernel none">no kernel id at this commit</td>') == 2  # int8nax-full at 2 shapes
    assert page.count('<td class="kernel peer"') == 2
    assert 'data-kernel="11"' in page  # filled where recorded


@pytest.mark.parametrize("gpu,backend,says,never", [
    (None, "cpu", "INT8NAX_CPU_PREPARE=0", "GEMV"),
    ("NVIDIA H200", "cuda", "GEMV", "onnxruntime"),
])
def test_why_w8a8_beat_the_raw_gemm_is_explained_only_with_its_own_backends_reason(tmp_path, html_dir, gpu,
                                                                                      backend, says, never):
    root = tmp_path / "results"
    write_result(root / "box", "f" * 40, 5, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [4.68e-3, 1e-3, NAN],
                                             "bench_linear.Int8naxFull.time_int8nax_full": [1.39e-3, 2e-3, NAN]})
    if gpu:
        (root / "box" / "machine.json").write_text(json.dumps({"machine": "box", "gpu": gpu, "version": 1}))
    site.publish(html_dir, root)
    page = (html_dir / "compare.html").read_text()
    note = re.search(r'<p class="small w8a8-note" data-shapes="[^"]*">(.*?)</p>', page, re.S).group(1)
    assert says in note and never not in note
    assert json.loads((html_dir / "compare.json").read_text())["machines"]["box"]["backend"] == backend


def test_this_computers_machine_comes_first_in_every_section(tmp_path, html_dir):
    import test_site_models

    root = test_site_models.results(tmp_path / "results")  # h200 with model results, cpu without
    write_result(root / "zz-mine", "d" * 40, 4000, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [1e-3, NAN, NAN]})
    mine = test_site_models.grid(**{"qwen2.5-0.5b@1": 50.0})
    test_site_models.write(root / "zz-mine-models", "e" * 40, 4000,
                           {"bench_model.Bf16ModelFigures.track_bf16_tokens_per_s": mine})
    for here in ("zz-mine", "zz-mine-models"):
        site.publish(html_dir, root, here=here)
        page = (html_dir / "compare.html").read_text()
        sections = re.findall(r'<section class="machine" id="machine-([^"]+)"', page)
        models = re.findall(r'<h3 id="models-([^"]+)"', page)
        assert (sections[0] if here == "zz-mine" else models[0]) == here, (sections, models)
        assert models == sorted(models, key=lambda m: m != here)


def test_a_gpu_records_kernel_ids_are_named_on_a_box_without_one(tmp_path, html_dir):
    # A Hopper GPU records kernel_id of what its CUDA dispatch says (132 SMs counted, no "assumed"):
    # the site on this box computes the same words without a GPU and shows them, not the id.
    from int8nax import backends

    cuda = backends.get("cuda")
    ran = {s: cuda.describe("int8_matmul", s[0], s[2], s[1], bias=False, dtype=None, sms=132)
           for s in ((16, 4096, 4096), (64, 4096, 4096))}
    assert all(text.startswith("cuda ") and "assumed" not in text for text in ran.values())
    assert {contenders.hopper_description("int8nax-gemm", s) for s in ran} == set(ran.values())
    kid = contenders.kernel_id
    root = tmp_path / "results"
    write_result(root / "h100", "4" * 40, 1_000, {
        "bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, 3e-4, NAN],
        "bench_kernel.Kernel.track_int8nax_gemm_kernel": [kid(ran[(16, 4096, 4096)]), kid(ran[(64, 4096, 4096)]), NAN]})
    site.publish(html_dir, root)
    data = json.loads((html_dir / "compare.json").read_text())["machines"]["h100"]
    got = {e["shape"]: e["kernel_text"] for e in data["entries"] if e["contender"] == "int8nax-gemm"}
    assert got == {S16: ran[(16, 4096, 4096)], S64: ran[(64, 4096, 4096)]}


def test_the_cuda_description_says_when_it_assumes_the_sm_count():
    from int8nax import backends

    cuda = backends.get("cuda")
    if cuda.probe().available:
        pytest.skip("a CUDA GPU is here: the description uses its own SM count")
    assumed = cuda.describe("w8a8_linear", 512, 4096, 4096, dtype=None)
    given = cuda.describe("w8a8_linear", 512, 4096, 4096, dtype=None, sms=132)
    assert assumed == f"{given} (132 SMs assumed)"
    assert contenders.hopper_description("int8nax-full", (512, 4096, 4096)) == cuda.describe(
        "w8a8_linear", 512, 4096, 4096, dtype=contenders.mx.float16, sms=132)
    with pytest.raises(ValueError, match="not one of int8nax's contenders"):
        contenders.hopper_description("mlx-q8", (16, 16, 16))


def test_decode_time_is_shown_per_layer_against_mlx_own_forms(tmp_path, html_dir):
    # DecodeTime's CUPTI µs: W8A8 against MLX 8-bit and bfloat16 (their time / W8A8's: speed), W8A8's
    # weight stream in TB/s (K x N bytes over its time), geometric means; layers without W8A8 left out.
    root = tmp_path / "results"
    write_result(root / "h100", "7" * 40, 1_000, {
        "bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, 3e-4, NAN],
        "bench_kernel.DecodeTime.track_w8a8_decode_kernel_us": [8.0, 16.0, NAN],
        "bench_kernel.DecodeTime.track_mlx_q8_decode_kernel_us": [10.0, 16.0, 1.0],
        "bench_kernel.DecodeTime.track_bf16_decode_kernel_us": [16.0, NAN, NAN]})
    write_result(root / "cpu-box", "8" * 40, 1_000, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, 3e-4, NAN]})
    site.publish(html_dir, root)
    machines = json.loads((html_dir / "compare.json").read_text())["machines"]
    rows = {r["shape"]: r for r in machines["h100"]["decode_time"]}
    assert sorted(rows) == sorted([S16, S64])
    assert rows[S16]["vs_mlx_q8"] == pytest.approx(1.25) and rows[S16]["vs_bf16"] == pytest.approx(2.0)
    assert rows[S16]["w8a8_tb_per_s"] == pytest.approx(4096 * 4096 / 8e6)
    assert rows[S64]["vs_mlx_q8"] == pytest.approx(1.0) and rows[S64]["vs_bf16"] is None
    assert machines["cpu-box"]["decode_time"] == [] and machines["h100"]["kernel_time"] == []
    page = (html_dir / "compare.html").read_text()
    section = page.split('id="machine-h100"', 1)[1].split("</section>", 1)[0]
    assert f'data-vs-mlx-q8="{1.25 ** 0.5:.3g}" data-vs-bf16="2"' in section and "Decode</b>" in section
    assert "Decode</b>" not in page.split('id="machine-cpu-box"', 1)[1].split("</section>")[0]


def test_kernel_time_is_shown_per_shape_with_the_ratios_compare_reports(tmp_path, html_dir):
    # KernelTime's CUPTI µs: int8nax's GEMM against cuBLASLt (cuBLASLt / int8nax: speed) and W8A8
    # over the raw GEMM, per shape and as geometric means; shapes without int8nax's GEMM left out.
    root = tmp_path / "results"
    write_result(root / "h100", "5" * 40, 1_000, {
        "bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, 3e-4, NAN],
        "bench_kernel.KernelTime.track_int8nax_gemm_kernel_us": [10.0, 40.0, NAN],
        "bench_kernel.KernelTime.track_cublaslt_int8_kernel_us": [9.0, 40.0, 3.0],
        "bench_kernel.KernelTime.track_int8nax_full_kernel_us": [12.5, NAN, NAN]})
    write_result(root / "cpu-box", "6" * 40, 1_000, {"bench_gemm.Int8naxGemm.time_int8nax_gemm": [2e-4, 3e-4, NAN]})
    site.publish(html_dir, root)
    machines = json.loads((html_dir / "compare.json").read_text())["machines"]
    rows = {r["shape"]: r for r in machines["h100"]["kernel_time"]}
    assert sorted(rows) == sorted([S16, S64])
    assert rows[S16]["vs_cublaslt"] == pytest.approx(0.9) and rows[S16]["w8a8_vs_raw"] == pytest.approx(1.25)
    assert rows[S64]["vs_cublaslt"] == pytest.approx(1.0) and rows[S64]["w8a8_vs_raw"] is None
    assert machines["cpu-box"]["kernel_time"] == []
    page = (html_dir / "compare.html").read_text()
    section = page.split('id="machine-h100"', 1)[1].split("</section>", 1)[0]
    assert f'data-vs-cublaslt="{0.9 ** 0.5:.3g}" data-w8a8-vs-raw="1.25"' in section
    assert "Kernel time" in section and "Kernel time" not in page.split('id="machine-cpu-box"', 1)[1].split("</section>")[0]
