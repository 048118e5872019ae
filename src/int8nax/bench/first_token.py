"""Time to the first token in a fresh process, at several prompt lengths: what the first user of a
newly started server waits, W8A8 against bf16 (`int8nax compare --generate --first-token`,
benchmarks/bench_first_token.py).

    measure(config, forms=("bf16", "w8a8"), prompt_tokens=(300, 777, 1500, 4096)) -> Result

The model is generate's saved mlx-lm folder (bench.model_folder). Every step is a new Python
process (run_child), and every process of one measurement reads and writes one new, empty kernel
cache folder (MLX_PTX_CACHE_DIR, where MLX and int8nax's CUDA binary cache keep compiled kernels)
and one new int8nax folder (INT8NAX_CACHE_DIR: the tape extension): a new machine. In order:

1. The first run on a new machine (where w8a8 is among the forms): `int8nax warm --model FOLDER
   --max-tokens <the longest prompt>`, what a server's owner runs once after installing int8nax:
   every kernel W8A8's layers launch for 1 .. that many rows, compiled into the folder. Its wall
   time, and its load, quantization and build times, are reported apart (`warm`). On the CPU
   backend nothing is compiled and the command says so.
2. MLX's own kernels: one bf16 request of the shortest prompt (`mlx_first`), so that MLX's own
   compiled kernels (gather, fused element-wise) are on disk as on any machine that has run MLX
   once; reported, not in the table, so that no form's first process pays for what the other's
   left behind.
3. Per prompt length, per form (FORMS order): a process that loads the folder, converts it
   (models.convert), answers one request of that many tokens (stream_generate, one token) and
   reports the seconds to its first token (the figure), its load and conversion before it, its
   process's wall time and, on CUDA, how many kernels it found in the cache and how many it built
   (0 after step 1). The parent counts the files each process added to the kernel cache folder
   (any kernel compiled, MLX's own included: 0 where nothing was). The first process of each form
   then checks every projection of one forward on generate.CHECK_TOKENS prompt tokens against
   float64 (models.check_projections): a failure is MISMATCH, and that form's figures are dropped.

Each cell also carries its first token minus bf16's at the same length (`minus_bf16`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..backends import cache as backend_cache
from ..backends.cuda import binary_cache as cuda_binary_cache
from . import generate, model_folder, models, saved
from .checks import MismatchError
from .peers import Unavailable

FORMS = generate.FORMS
DEFAULT_FORMS = ("bf16", "w8a8")
"""What `measure` and `compare --generate --first-token` measure unless asked (mlx-q8 on request)."""
SUITE_FORMS = ("bf16", "w8a8")
"""The forms the asv suite tracks (benchmarks/bench_first_token.py)."""
CHILD_TIMEOUT_S = 600
"""Longest a child process may take (a 7B folder's load and W8A8 conversion take about 70 s on an H100)."""
KERNEL_CACHE_ENV = cuda_binary_cache.CACHE_ENV
"""Where MLX (and int8nax's CUDA binary cache) keep compiled kernels."""
OWN_CACHE_ENV = backend_cache.CACHE_ENV
"""Where int8nax keeps what it builds once per machine besides kernels (the tape extension)."""

PROFILES: dict[str, generate.Profile] = {
    # Qwen2.5-7B at its real depth and vocabulary, the prompt lengths issue 47 names (generate's
    # profiles otherwise: only configs, layers, vocab and prompt_tokens are read here).
    "full": replace(generate.PROFILES["full"], configs=("qwen2.5-7b",), prompt_tokens=(300, 777, 1500, 4096)),
    # generate's cut CPU model (the same folder): 2 layers, models.VOCAB ids; about 1 s a process.
    "cpu": replace(generate.PROFILES["cpu"], prompt_tokens=(16, 64)),
}


def case_name(config: str, prompt_tokens: int) -> str:
    """One cell's name in the asv suite: "qwen2.5-7b p300"."""
    return f"{config} p{prompt_tokens}"


def parse_case(name: str) -> tuple[str, int] | None:
    """case_name's (config, prompt tokens), or None for another string."""
    parts = name.split(" ")
    if len(parts) != 2 or not parts[1].startswith("p") or not parts[1][1:].isdigit():
        return None
    return parts[0], int(parts[1][1:])


def profile_cases(profile: str) -> dict[str, tuple[str, int]]:
    """{case name: (config, prompt tokens)} of every cell `profile` measures."""
    prof = PROFILES[profile]
    return {case_name(c, p): (c, p) for c in prof.configs for p in prof.prompt_tokens}


ALL_CASES: tuple[str, ...] = tuple(dict.fromkeys(name for p in PROFILES for name in profile_cases(p)))
"""Every profile's cells: the asv suite declares all of them, so every machine's results publish
into one site."""
ALL_CONFIGS: tuple[str, ...] = tuple(dict.fromkeys(c for p in PROFILES.values() for c in p.configs))


@dataclass
class Cell:
    """One (form, prompt tokens): a fresh process's figures, or why there are none."""

    form: str
    prompt_tokens: int
    first_token_s: float | None = None
    """Seconds from the request's start to its first token (the figure)."""
    load_s: float | None = None
    convert_s: float | None = None
    process_s: float | None = None
    """The whole process: Python's start, imports, load, conversion, the request (and the check)."""
    minus_bf16: float | None = None
    """first_token_s minus bf16's at the same prompt length."""
    backend: str | None = None
    """The backend int8nax ran on in that process (w8a8)."""
    kernels: dict | None = None
    """CUDA: {"found", "built", "failed"} of that process's binary cache; None elsewhere."""
    cache_added: int | None = None
    """Files the process added to the kernel cache folder: MLX's or int8nax's kernels it compiled."""
    check: str | None = None
    detail: str | None = None
    unavailable: str | None = None
    mismatch: str | None = None
    error: str | None = None

    def status(self) -> str:
        return "MISMATCH" if self.mismatch else "failed" if self.error else "n/a" if self.unavailable else "not run"


@dataclass
class Result:
    """`measure`'s result: the first run on a new machine, MLX's first process, every cell."""

    config: str
    layers: int
    vocab: int
    forms: list[str]
    prompt_tokens: list[int]
    kernel_cache: str = ""
    """The folder every process read and wrote (new and empty at the start)."""
    warm: dict | None = None
    """`int8nax warm --json`'s figures with "process_s" (its wall time), or {"n/a" | "failed": why};
    None where w8a8 is not among the forms."""
    mlx_first: dict | None = None
    """MLX's own kernels: the first bf16 process's figures ("prompt_tokens" its length), or why not."""
    cells: list[Cell] = field(default_factory=list)
    folder: str = ""


def to_dict(result: Result) -> dict:
    return asdict(result)


def from_dict(data: dict) -> Result:
    """The Result that to_dict gave `data` (a saved run read back: compare --generate --render)."""
    return Result(**{**data, "cells": [Cell(**c) for c in data.get("cells", [])]})


# --- the processes ----------------------------------------------------------------------------

def run_child(argv: list[str], env: dict[str, str], timeout: float = CHILD_TIMEOUT_S) -> dict:
    """Run `python -m <argv>` in a new process with `env` over this process's environment and this
    int8nax first on its path. Returns its last printed JSON object with "process_s" (the
    process's wall seconds) and "exit" where its status is not 0; {"failed": why} where it
    printed none or ran past `timeout` seconds."""
    src = str(Path(__file__).resolve().parents[2])  # the int8nax this process runs
    merged = dict(os.environ, **env)
    merged["PYTHONPATH"] = os.pathsep.join(p for p in (src, merged.get("PYTHONPATH")) if p)
    t0 = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, env=merged,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"failed": f"the process took more than {timeout:g} s"}
    took = time.perf_counter() - t0
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"failed": f"the process failed (exit {done.returncode}): {tail}"}
    out = json.loads(lines[-1])
    out["process_s"] = took
    if done.returncode:
        out["exit"] = done.returncode
    return out


def child_argv(path: Path, form: str, prompt_tokens: int, vocab: int, check: bool = False) -> list[str]:
    """The arguments of one first-token process (after `python -m`)."""
    return ["int8nax.bench.first_token", str(path), form, str(prompt_tokens), str(vocab)] + (["--check"] if check else [])


def warm_argv(path: Path, max_tokens: int) -> list[str]:
    """The arguments of the one-time warm (after `python -m`): the `int8nax warm` command itself."""
    return ["int8nax", "warm", "--model", str(path), "--max-tokens", str(max_tokens), "--json"]


def _kernel_counts(backend: str | None) -> dict | None:
    """This process's CUDA binary cache counts (found, built, failed); None off CUDA or with it off."""
    if backend != "cuda":
        return None
    from ..backends.cuda import kernels as cuda_kernels

    cache = cuda_kernels.binary_cache()
    return None if cache is None else asdict(cache.counts)


def _child_main(argv: list[str]) -> int:
    """A first-token process: prints one JSON line (the module doc, step 3)."""
    import mlx.core as mx

    check = "--check" in argv
    argv = [a for a in argv if a != "--check"]
    path, form, prompt_tokens, vocab = Path(argv[0]), argv[1], int(argv[2]), int(argv[3])
    t0 = time.perf_counter()
    try:
        model, tokenizer = generate.front_end().load(str(path))
        mx.eval(model.parameters())
        t1 = time.perf_counter()
        detail = models.convert(model, form)
        mx.eval(model.parameters())
        t2 = time.perf_counter()
    except Unavailable as exc:
        print(json.dumps({"n/a": str(exc)}))
        return 0
    tokenizer._eos_token_ids = set()
    seconds = generate.first_token(model, tokenizer, generate.prompts(prompt_tokens, 1, vocab)[0])
    backend = None
    if form == "w8a8":
        from .. import backends

        backend = backends.choose(None)[0]
    out = {"first_token_s": seconds, "load_s": t1 - t0, "convert_s": t2 - t1, "detail": detail,
           "backend": backend, "kernels": _kernel_counts(backend)}
    if check:
        try:
            ids = mx.array(generate.prompts(generate.CHECK_TOKENS, 1, vocab))
            out["check"] = models.check_projections(model, ids, f"{path.name} {form}")
        except MismatchError as exc:
            out = {"mismatch": str(exc)}
    print(json.dumps(out))
    return 0


# --- a whole measurement ------------------------------------------------------------------------

def _validate(config, forms, prompt_tokens) -> models.Config:
    if isinstance(config, str) and config not in models.CONFIGS:
        raise ValueError(f"config: expected one of {', '.join(models.CONFIGS)}, got {config!r}")
    if not forms or any(f not in FORMS for f in forms) or len(set(forms)) != len(forms):
        raise ValueError(f"forms: expected some of {', '.join(FORMS)}, each once, got {forms!r}")
    if not prompt_tokens or not all(isinstance(p, int) and not isinstance(p, bool) and 1 <= p <= models.MAX_TOKENS
                                    for p in prompt_tokens):
        raise ValueError(f"prompt_tokens: expected whole numbers from 1 to {models.MAX_TOKENS}, got {prompt_tokens!r}")
    return models.CONFIGS[config] if isinstance(config, str) else config


def measure(config: str | models.Config, forms=DEFAULT_FORMS, prompt_tokens=(64,), layers: int | None = None,
            vocab: int | None = None, cache: Path | None = None, kernel_cache: Path | None = None, progress=None,
            on_step=None) -> Result:
    """The module doc's steps for `config` (layers and vocab: the real ones where None) as a
    Result. `kernel_cache`: the folder the processes share (default: a new temporary one, removed
    at the end). Never raises for a form or a process: each cell says why it has no figure.
    on_step(result), if given, hears after every process (a caller can save: a run cut short keeps
    what it had)."""
    cfg = _validate(config, forms, prompt_tokens)
    layers = cfg.depth if layers is None else layers
    vocab = cfg.vocab if vocab is None else vocab
    forms = sorted(forms, key=FORMS.index)
    prompt_tokens = list(dict.fromkeys(prompt_tokens))
    say = progress or (lambda text: None)
    heard = on_step or (lambda result: None)
    result = Result(cfg.name, layers, vocab, forms, prompt_tokens)
    result.cells = [Cell(f, p) for p in prompt_tokens for f in forms]
    try:
        generate.front_end()
        path = model_folder.folder(cfg, layers, vocab, cache=cache, progress=say)
    except Unavailable as exc:
        for c in result.cells:
            c.unavailable = str(exc)
        return result
    generate._free()  # the folder's weights were made here: nothing of them stays for the children
    result.folder = str(path)
    with (tempfile.TemporaryDirectory(prefix="int8nax-kernels-") as scratch,
          tempfile.TemporaryDirectory(prefix="int8nax-cache-") as own):
        folder = Path(kernel_cache) if kernel_cache is not None else Path(scratch)
        result.kernel_cache = str(folder)
        # int8nax's own folder new as well: the tape extension is built once per machine too
        env = {KERNEL_CACHE_ENV: str(folder), OWN_CACHE_ENV: own}
        if "w8a8" in forms:
            say(f"{cfg.name}: the first run on a new machine: int8nax warm to {max(prompt_tokens)} tokens")
            result.warm = _counted(warm_argv(path, max(prompt_tokens)), env)
            heard(result)
        say(f"{cfg.name}: MLX's own kernels: a first bf16 process of {min(prompt_tokens)} tokens")
        result.mlx_first = {"prompt_tokens": min(prompt_tokens),
                            **_counted(child_argv(path, "bf16", min(prompt_tokens), vocab), env)}
        heard(result)
        _cells(result, path, env, say, heard)
    return result


def _files(folder: Path) -> int:
    return sum(1 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def _counted(argv: list[str], env: dict) -> dict:
    """run_child, with "cache_added": how many files the process added to the kernel cache folder
    (each compiled kernel is one or two): 0 where it compiled nothing."""
    folder = Path(env[KERNEL_CACHE_ENV])
    before = _files(folder)
    got = run_child(argv, env)
    got["cache_added"] = _files(folder) - before
    return got


def _cells(result: Result, path: Path, env: dict, say, heard) -> None:
    checked: set[str] = set()
    dropped: dict[str, Cell] = {}  # form -> the cell whose process said it cannot run, or ran wrong
    for cell in result.cells:
        gone = dropped.get(cell.form)
        if gone is not None:
            cell.unavailable, cell.mismatch = gone.unavailable, gone.mismatch and f"{gone.mismatch} (at {gone.prompt_tokens} tokens)"
            continue
        say(f"{result.config} {cell.form}: {cell.prompt_tokens} prompt tokens in a fresh process")
        got = _counted(child_argv(path, cell.form, cell.prompt_tokens, result.vocab, cell.form not in checked), env)
        checked.add(cell.form)
        _fill(cell, got)
        if cell.unavailable or cell.mismatch:
            dropped[cell.form] = cell
        _differences(result.cells)
        heard(result)


def _fill(cell: Cell, got: dict) -> None:
    if "n/a" in got:
        cell.unavailable = got["n/a"]
    elif "mismatch" in got:
        cell.mismatch = got["mismatch"]
        cell.process_s = got.get("process_s")
    elif "failed" in got or "first_token_s" not in got:
        cell.error = got.get("failed", f"the process printed no first token: {got}")
    else:
        for key in ("first_token_s", "load_s", "convert_s", "process_s", "backend", "kernels", "check", "detail",
                    "cache_added"):
            setattr(cell, key, got.get(key))


def _differences(cells: list[Cell]) -> None:
    bf16 = {c.prompt_tokens: c.first_token_s for c in cells if c.form == "bf16" and c.first_token_s is not None}
    for c in cells:
        ref = bf16.get(c.prompt_tokens)
        c.minus_bf16 = None if ref is None or c.first_token_s is None else c.first_token_s - ref


def failed(results: list[Result]) -> bool:
    """A wrong output anywhere, or int8nax's W8A8 (or its warm) failing."""
    return any(c.mismatch or (c.form == "w8a8" and c.error) for r in results for c in r.cells) or any(
        r.warm is not None and ("failed" in r.warm or r.warm.get("exit")) for r in results)


# --- the asv suite --------------------------------------------------------------------------------

def _saver(profile: str, config: str):
    """on_step for profile_figures: the result so far into bench.saved's folder (first-token-<config>.json,
    compare --generate --first-token --json's form), or None where no folder is named."""
    write = saved.writer(f"first-token-{config}")
    if write is None:
        return None
    meta = generate.suite_meta(profile, "benchmarks/bench_first_token.py")
    return lambda result: write({"meta": meta, "first_token": [to_dict(result)]})


def profile_figures(profile: str) -> dict:
    """{(case name, form): {"first_token_s", "minus_bf16"}} of every cell `profile` measures
    (profile_cases, SUITE_FORMS), and {(config, "warm"): {"seconds", "built"}}; a cell not
    measured holds {"skip": why} / {"mismatch": what} / {"error": what}. Never raises: the asv
    suite calls it from setup_cache, where an exception fails every benchmark of the class."""
    prof = PROFILES[profile]
    out: dict = {}
    for config in prof.configs:
        cases = [case_name(config, p) for p in prof.prompt_tokens]
        try:
            result = measure(config, SUITE_FORMS, prof.prompt_tokens, prof.layers, prof.vocab,
                             on_step=_saver(profile, config))
        except Exception as exc:  # noqa: BLE001 - e.g. the folder cannot be written: every cell says why
            why = {"error": f"{type(exc).__name__}: {exc}"}
            out.update({(c, f): why for c in cases for f in SUITE_FORMS})
            out[(config, "warm")] = why
            continue
        for c in result.cells:
            key = (case_name(config, c.prompt_tokens), c.form)
            if c.unavailable:
                out[key] = {"skip": c.unavailable}
            elif c.mismatch:
                out[key] = {"mismatch": c.mismatch}
            elif c.error:
                out[key] = {"error": c.error}
            else:
                out[key] = {"first_token_s": c.first_token_s, "minus_bf16": c.minus_bf16}
        warm = result.warm or {"failed": "no warm ran"}
        out[(config, "warm")] = ({"error": warm["failed"]} if "failed" in warm else {"skip": warm["n/a"]}
                                 if "n/a" in warm else {"seconds": warm["process_s"], "built": warm.get("built")})
    return out


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
