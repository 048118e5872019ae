"""tools/gemv_rule_ab.py: mlx-lm's loop under W8A8's two decode-GEMV rules in one process. On the
CPU box the two rules run the same code, so these check the tool's mechanics: every arm timed
every trial, the rule switched (and the backend's caches cleared) between W8A8's arms, the rule
restored after, and bad options refused."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("transformers", reason="mlx-lm's generation front end needs transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import gemv_rule_ab as ab  # noqa: E402

TINY = ["--model", "qwen2.5-0.5b", "--layers", "1", "--vocab", "200", "--prompt-tokens", "8",
        "--generation-tokens", "3", "--trials", "3"]


def test_each_arm_is_timed_each_trial_under_its_rule(tmp_path, monkeypatch, capsys):
    from int8nax.backends.cuda import backend as cuda
    from int8nax.backends.cuda.plans import gemv as rule
    from int8nax.bench import generate_breakdown

    monkeypatch.setenv("INT8NAX_MODEL_CACHE", str(tmp_path / "models"))
    seen, cleared = [], []
    real = generate_breakdown.decode_call
    def decode_call(model, tok, prompt, n):
        seen.append((n, rule.GEMV_QUANTIZE_INSIDE))
        return real(model, tok, prompt, n)

    monkeypatch.setattr(generate_breakdown, "decode_call", decode_call)
    monkeypatch.setattr(cuda, "clear_caches", lambda: cleared.append(rule.GEMV_QUANTIZE_INSIDE))
    out = tmp_path / "ab.json"
    assert ab.main(TINY + ["--peers", "bf16", "--json", str(out)]) == 0
    got = json.loads(out.read_text())
    assert {arm: len(v) for arm, v in got["ms"].items()} == {"bf16": 3, ab.APART: 3, ab.INSIDE: 3}
    assert all(v > 0 for arms in got["ms"].values() for v in arms)
    # timed requests: 3 arms x 3 trials, each after its untimed warm request; W8A8's under its own rule
    timed = [inside for n, inside in seen if n == 3]
    assert len(timed) == 9 and timed.count(True) == 3
    # the rule changes only between W8A8's arms (trial order reverses: apart, inside | inside, apart | ...),
    # then the GPU figures' pass (bf16, apart, inside), then back to the default
    assert cleared == [True, False, True, False, True, False] and rule.GEMV_QUANTIZE_INSIDE is False
    assert set(got["gpu"]) == {"bf16", ab.APART, ab.INSIDE} and all(v[0] is None and v[1] for v in got["gpu"].values())
    text = capsys.readouterr().out
    assert "inside / apart, trial by trial" in text and "w8a8 inside" in text
    assert "no interval under 5 trials" in text  # generate.median_interval's, from 5 paired trials
    # W8A8 over the peer, tok/s (the peer's ms over W8A8's), per rule
    apart = sorted(b / a for a, b in zip(got["ms"][ab.APART], got["ms"]["bf16"]))[1]
    assert f"tok/s over bf16, trial by trial: w8a8 apart {apart:.3f} (no interval" in text


def test_the_report_gives_w8a8_over_each_peer_with_its_interval():
    ms = {"mlx-q8": [10.0, 10.0, 10.0, 10.0, 12.0], ab.APART: [8.0, 9.0, 10.0, 10.0, 10.0],
          ab.INSIDE: [10.0] * 5}
    text = ab.report({"ms": ms, "gpu": {arm: (None, "no GPU") for arm in ms}})
    # mlx-q8 / apart trial by trial: 1.25, 1.111, 1.0, 1.0, 1.2 -> median 1.111, 5 trials: min-max (94 %)
    assert "tok/s over mlx-q8, trial by trial: w8a8 apart 1.111 (94% interval 1.000-1.250), " \
           "w8a8 inside 1.000 (94% interval 1.000-1.200)" in text


@pytest.mark.parametrize("args, want", [
    (["--trials", "0"], "--trials: expected a whole number from 1 to 100"),
    (["--peers", "bf16,bf16"], "--peers: expected none or some of bf16,mlx-q8"),
    (["--peers", "w8a8"], "--peers: expected none or some of bf16,mlx-q8"),
    (["--generation-tokens", "1"], "--generation-tokens: expected a whole number >= 2"),
    (["--model", "llama"], "--model: invalid choice"),
    (["--json", "/no/such/folder/ab.json"], "--json: expected a file in an existing folder"),
])
def test_bad_options_are_refused_by_name(args, want, capsys):
    with pytest.raises(SystemExit) as exc:
        ab.main(args)
    assert exc.value.code == 2 and want in capsys.readouterr().err
