"""int8nax.bench.first_call's stalls step on the CPU: the CUDA W8A8 call stood in by the API's CPU
backend (its timings mean nothing here; what is checked is what it meets and reports)."""

from __future__ import annotations

import json

import pytest


def test_stalls_meets_each_seeded_length_once_and_reports_the_worst(monkeypatch, capsys):
    mx = pytest.importorskip("mlx.core")
    import int8nax
    from int8nax.backends.cuda import backend as cuda
    from int8nax.bench import first_call

    met = []

    def stand_in(x, w, scale_w, bias):
        met.append(x.shape[0])
        return int8nax.w8a8_linear(x, w, scale_w, bias, backend="cpu")

    monkeypatch.setattr(cuda, "w8a8", stand_in)
    assert first_call.main(["stalls", "--model", "qwen2.5-0.5b", "--lengths", "3", "--max-tokens", "9"]) == 0
    out = json.loads(capsys.readouterr().out)
    lengths = sorted(int(m) for m in out["by_tokens"])
    assert len(lengths) == 3 and all(1 <= m <= 9 for m in lengths)
    per_length = len(first_call.layers_of(first_call.CONFIGS["qwen2.5-0.5b"]))
    assert met == [m for m in lengths for _ in range(2 * per_length)]  # first, then again
    rows = out["by_tokens"]
    assert out["worst_stall_s"] == max(r["stall"] for r in rows.values()) == rows[str(out["worst_tokens"])]["stall"]
    for r in rows.values():
        want = (r["w8a8_first"] - r["w8a8_again"]) - (r["bf16_first"] - r["bf16_again"])
        assert r["stall"] == pytest.approx(want, abs=2e-4)  # each figure rounded to 0.1 ms
    # the same seed meets the same lengths; another seed others
    first_call.main(["stalls", "--model", "qwen2.5-0.5b", "--lengths", "3", "--max-tokens", "9"])
    assert sorted(json.loads(capsys.readouterr().out)["by_tokens"]) == sorted(rows)
    first_call.main(["stalls", "--model", "qwen2.5-0.5b", "--lengths", "3", "--max-tokens", "9", "--seed", "5"])
    assert sorted(json.loads(capsys.readouterr().out)["by_tokens"]) != sorted(rows)


def test_stalls_rejects_a_count_below_one(capsys):
    from int8nax.bench import first_call

    with pytest.raises(SystemExit) as exc:
        first_call.main(["stalls", "--lengths", "0"])
    assert exc.value.code == 2 and "--lengths" in capsys.readouterr().err
