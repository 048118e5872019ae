"""`int8nax soak --calls`: the report counts calls as the option does (per thread, the run
itself), the warm-up and the bad-input calls on their own; tests/test_threads.py runs the
command in fresh processes for its exit status."""

from __future__ import annotations

import json

from int8nax.commands import cli, soak


def _report(capsys, *argv) -> tuple[int, dict]:
    rc = cli.main(["soak", "--backend", "cpu", "--max-dim", "8", "--json", *argv])
    return rc, json.loads(capsys.readouterr().out)


def test_calls_are_the_options_calls_per_thread(capsys):
    rc, report = _report(capsys, "--calls", "1", "--threads", "1")
    assert rc == 0 and report["failures"] == 0
    # the warm-up makes 2 checked calls per thread; thread 0 adds a bad input every third call
    assert (report["calls"], report["warmup_calls"], report["bad_input_calls"]) == (1, 2, 2)
    rc, report = _report(capsys, "--calls", "4", "--threads", "3")
    assert rc == 0 and (report["calls"], report["warmup_calls"], report["bad_input_calls"]) == (12, 6, 1 + 2)


def test_a_failure_in_the_warm_up_still_fails_the_run(monkeypatch, capsys):
    monkeypatch.setattr(soak, "one_call", lambda *_args: "wrong")
    rc, report = _report(capsys, "--calls", "1", "--threads", "2")
    assert rc == 1 and report["calls"] == 2 and report["warmup_calls"] == 4
    assert report["failures"] == len(report["failure_list"]) == 2 + 4


def _usage_error(capsys, *argv) -> str:
    """The one stderr line of a usage error (exit status 2), raised before any call is made."""
    try:
        cli.main(["soak", *argv])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError(f"soak {' '.join(argv)} was not refused")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


def test_an_infinite_duration_is_a_usage_error(capsys):
    assert "argument --minutes: expected a positive number, got 'inf'" in _usage_error(capsys, "--minutes", "inf")


def test_a_negative_seed_is_a_usage_error(capsys):
    assert "argument --seed: expected a whole number >= 0, got '-1'" in _usage_error(capsys, "--seed", "-1")
