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


def _no_work(monkeypatch):
    """A run that got past the options fails the test at once instead of soaking."""
    def ran(*_args, **_kwargs):
        raise AssertionError("the options were taken and the run started")
    monkeypatch.setattr(soak, "run_threads", ran)
    monkeypatch.setattr(soak, "distinct_m", ran)


def test_an_unbounded_max_dim_or_thread_count_is_a_usage_error_naming_the_bound(monkeypatch, capsys):
    _no_work(monkeypatch)
    err = _usage_error(capsys, "--max-dim", "140000")
    assert "argument --max-dim: expected a whole number from 1 to" in err and "'140000'" in err
    err = _usage_error(capsys, "--distinct-m", "1000000000")
    assert "argument --distinct-m: expected a whole number from 1 to" in err and "'1000000000'" in err
    err = _usage_error(capsys, "--threads", "100000")
    assert "argument --threads: expected a whole number from 1 to" in err and "'100000'" in err
    bound = int(err.split(" to ")[1].split(",")[0])
    try:
        cli.main(["soak", "--help"])
    except SystemExit:
        pass
    assert f"1 to {bound}" in capsys.readouterr().out  # the help states the bound too


def test_distinct_m_refuses_the_options_it_does_not_read(monkeypatch, capsys):
    _no_work(monkeypatch)
    for argv, named in ((["--threads", "2"], "--threads"), (["--max-dim", "5"], "--max-dim"),
                        (["--threads", "8", "--max-dim", "96"], "--threads or --max-dim")):
        assert cli.main(["soak", "--distinct-m", "3", *argv]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--distinct-m" in err and f"does not take {named}" in err
