"""`int8nax compare`: its table, its markdown, its n/a reasons and its mismatch verdict."""

from __future__ import annotations

import sys

import pytest

from int8nax import cli, compare

from fakes import fake_cider, pypi_cider

SHAPE = "8x64x48"


def run_cli(capsys, *args):
    rc = cli.main(["compare", "--shapes", SHAPE, "--repeat", "1", *args])
    out = capsys.readouterr()
    return rc, out.out, out.err


def row_of(text: str) -> list[str]:
    line = next(l for l in text.splitlines() if l.split()[:3] == ["8", "64", "48"])
    return line.split()


def test_table_without_peers(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cider", None)  # import fails: "not installed"
    monkeypatch.setitem(sys.modules, "torch", None)
    rc, out, _ = run_cli(capsys)
    assert rc == 0
    header = next(l for l in out.splitlines() if l.split()[:3] == ["M", "K", "N"]).split()
    row = dict(zip(header, row_of(out)))
    assert float(row["NAX"]) > 0 and float(row["nax-full"]) > 0 and float(row["mlx-fp16"]) > 0
    assert row["cider-full"] == row["cider-raw"] == row["full/raw"] == row["raw/NAX"] == "n/a"
    assert abs(float(row["nax-full/NAX"]) - float(row["nax-full"]) / float(row["NAX"])) < 0.05 * float(row["nax-full/NAX"]) + 0.02
    assert "cider-raw: n/a: cider is not installed" in out
    assert "torch-int8: n/a: torch is not installed" in out


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
    full, raw, nax = float(row["cider-full"]), float(row["cider-raw"]), float(row["NAX"])
    # ratios come from unrounded times; the printed ms are rounded to 3 decimals
    assert abs(float(row["full/raw"]) - full / raw) < 0.05 * full / raw + 0.02
    assert abs(float(row["raw/NAX"]) - raw / nax) < 0.05 * raw / nax + 0.02


def test_wrong_peer_is_a_mismatch_not_a_time(capsys, monkeypatch):
    pkg, ops = fake_cider(wrong="transposed")
    monkeypatch.setitem(sys.modules, "cider", pkg)
    monkeypatch.setitem(sys.modules, "cider.ops", ops)
    rc = cli.main(["compare", "--shapes", "8x64x64", "--repeat", "1"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "MISMATCH" in out and "cider-raw: MISMATCH at (8, 64, 64)" in out


def test_progress_bar_on_request(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "cider", None)
    _, _, err = run_cli(capsys, "--progress")
    assert f"] {len(compare.TIMED)}/{len(compare.TIMED)} " in err


@pytest.mark.parametrize("bad", ["8x64", "8x0x4", "axbxc"])
def test_bad_shapes_are_named(bad):
    with pytest.raises(ValueError, match="--shapes: expected MxKxN"):
        compare.parse_shapes(bad)
