"""The time to the first token of a fresh process, W8A8 against bf16 (int8nax.bench.first_token):
what the first user of a newly started server waits, on a machine where `int8nax warm` ran once.

Parameters: a case "<model> p<prompt tokens>" (first_token.ALL_CASES; the suite declares every
profile's, so that all machines publish into one site) and a form (bf16, w8a8). A machine measures
its profile's (first_token.PROFILES: on a GPU Qwen2.5-7B at its real depth, prompts of 300, 777,
1500 and 4096 tokens; on a CPU box the 0.5B shape cut to 2 layers and a 1024-id vocabulary, prompts
of 16 and 64).

    FirstTokenFigures  track_first_token_s: seconds from the request's start to its first token,
                       in a new process that loaded and converted the model (one process a cell)
    FirstTokenVsBf16   track_w8a8_minus_bf16_s: W8A8's first token minus bf16's, same prompt length
                       (seconds to 0.1 ms, unit "s": asv's "seconds" display garbles a negative one)
    FirstTokenWarm     track_w8a8_warm_s: the first run on a new machine, `int8nax warm` to the
                       longest prompt in its own process, into an empty kernel cache (seconds)

Every figure comes from one measurement in setup_cache, which the classes share (asv keys a
cache by the function's source line, and each class inherits it): the model folder is built (or
found in its cache) once, then every process runs in turn (first_token's module doc). The figures
are for display; the regression gate does not read them.
"""

from __future__ import annotations

from functools import lru_cache

from int8nax.bench import first_token

from .common import measured, profile


@lru_cache(maxsize=None)
def first_token_profile() -> str:
    return profile()[0]


def _entry(figures: dict, key: tuple, cases: dict) -> dict:
    """The measured entry at `key`, or the exception asv reports for it: NotImplementedError (n/a)
    with the reason where it is not measured here, MismatchError where its check failed."""
    if "profile" in figures:
        raise NotImplementedError(figures["profile"])
    name = first_token_profile()
    if key[0] not in cases(name):
        raise NotImplementedError(f"{key[0]} is not in the {name!r} profile ({', '.join(cases(name))})")
    return measured(figures.get(key, {"skip": "not measured"}))


def _cell(figures: dict, case: str, form: str) -> dict:
    return _entry(figures, (case, form), first_token.profile_cases)


def seconds(func):
    func.unit = "seconds"
    return func


def signed_seconds(func):
    """A difference of seconds, possibly negative: asv's "seconds" display reads only positive times."""
    func.unit = "s"
    return func


class _FirstToken:
    """Base class: the shared setup_cache (module doc)."""

    timeout = 1800  # setup_cache: the folder on a first run, the warm, a process per cell (~9 min for the 7B)
    version = "1"  # pinned: editing a comment must not hide the history (bump on purpose)
    rounds = 1

    def setup_cache(self):
        try:
            name = first_token_profile()
        except NotImplementedError as exc:  # a bogus INT8NAX_BENCH_PROFILE: every cell n/a
            return {"profile": str(exc)}
        return first_token.profile_figures(name)


class FirstTokenFigures(_FirstToken):
    """Each form's seconds to the first token in a fresh process."""

    params = [list(first_token.ALL_CASES), list(first_token.SUITE_FORMS)]
    param_names = ["model, prompt", "form"]

    def setup(self, figures, case, form):
        self.entry = _cell(figures, case, form)

    @seconds
    def track_first_token_s(self, figures, case, form):
        return self.entry["first_token_s"]


class FirstTokenVsBf16(_FirstToken):
    """W8A8's first token minus bf16's, at the same prompt length (above 0: W8A8 slower)."""

    params = [list(first_token.ALL_CASES)]
    param_names = ["model, prompt"]

    def setup(self, figures, case):
        _cell(figures, case, "bf16")
        self.entry = _cell(figures, case, "w8a8")

    @signed_seconds
    def track_w8a8_minus_bf16_s(self, figures, case):
        return round(self.entry["minus_bf16"], 4)


class FirstTokenWarm(_FirstToken):
    """The first run on a new machine: `int8nax warm` to the longest prompt, in its own process."""

    params = [list(first_token.ALL_CONFIGS)]
    param_names = ["model"]

    def setup(self, figures, model):
        self.entry = _entry(figures, (model, "warm"), lambda name: first_token.PROFILES[name].configs)

    @seconds
    def track_w8a8_warm_s(self, figures, model):
        return self.entry["seconds"]
