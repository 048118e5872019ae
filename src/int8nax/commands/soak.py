"""`int8nax soak`: the load a model server puts on int8nax, every result checked.

Threads make mixed calls on random shapes: int8_matmul, w8a8_linear with and without a bias,
quantize_activations, a shared W8A8Linear's forward and its input gradient. Each result is
compared with the exact reference (int8nax.exactness: integer outputs bit for bit, W8A8 within
1 ulp of the float64 model, the gradient against float64 dy @ (w * s)). One thread also passes
a bad input now and then and must get its clear TypeError back, naming the argument, while
the others go on unaffected.

    int8nax soak --calls 4 --threads 8     fixed work, exit status 0 iff nothing failed
                                           (tests/test_threads.py runs it 20 times)
    int8nax soak --minutes 3               a soak: memory at start and end, calls, failures,
                                           and the first-call cost at a new M (eager and,
                                           where the backend stays in MLX's graph, under
                                           mx.compile) against warm calls

Memory: the process's resident set (RSS, from /proc) and, on a GPU, mx.get_active_memory().
Exit status: 0 no failure, 1 a failure (each printed), 2 the backend cannot run here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

import mlx.core as mx
import mlx.nn as nn
import numpy as np

from .. import api, backends
from ..bench import argtypes
from ..exactness import check_int8_matmul, check_quantize, check_w8a8, special_rows
from ..nn import W8A8Linear
from ..quant import quantize_weight_np
from ..reference import to_numpy

KINDS = ("int8_matmul", "w8a8_linear", "w8a8_linear_bias", "quantize_activations", "layer_forward",
         "layer_grad")
DTYPES = (mx.float16, mx.bfloat16, mx.float32)
LAYER_DIMS = ((48, 40), (200, 96), (130, 257))
"""(input_dims, output_dims) of the shared layers every thread calls."""

MAX_DIM = 4096
"""Largest --max-dim. Every call draws M, K and N up to it and checks the result against a float64
numpy product on the host, holding M x K float64 copies: at 4096 a call takes seconds (0.5 s at
2048 cubed on 2 CPU cores, 8x that a doubling) and 128 MiB a thread, so a larger one is a run that
ends only when killed, not a soak; K stays far below int8nax's MAX_K. It is also the selftest's
largest grid size (4097) less one."""
MAX_THREADS = 1024
"""Largest --threads: each is an OS thread that evaluates with MLX (which keeps a stream thread of
its own for each) and holds its own arrays; thousands of them only wait on each other, and 100000
of them exhaust the process's threads and memory rather than soak int8nax."""
DEFAULT_THREADS, DEFAULT_MAX_DIM = 8, 96
MAX_DISTINCT_M = 65536
"""Largest --distinct-m: M runs over 1..COUNT, each call checked against a float64 product on the
host, so the run grows with COUNT squared (500 Ms in 0.6 s here; 65536, an 8-chunk 8192-token
prompt's every length, about half an hour). A larger count only runs until it is killed."""


def rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def gpu_active_bytes() -> int | None:
    """mx.get_active_memory() when MLX's default device is a GPU, else None."""
    return mx.get_active_memory() if mx.default_device() == mx.gpu else None


def make_layers(seed: int, backend: str | None) -> list[W8A8Linear]:
    """The shared layers, built (and evaluated) on the calling thread."""
    rng = np.random.default_rng(seed)
    layers = []
    for k, n in LAYER_DIMS:
        linear = nn.Linear(k, n)
        linear.weight = mx.array(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
        linear.bias = mx.array(rng.standard_normal(n).astype(np.float32))
        layer = W8A8Linear.from_linear(linear, backend=backend)
        mx.eval(layer.parameters())
        layers.append(layer)
    return layers


def _grad_problem(layer: W8A8Linear, x: mx.array, dy: np.ndarray) -> str | None:
    """The input gradient of sum(layer(x) * dy) against float64 dy @ (w * s), normwise."""
    g = mx.grad(lambda v: (layer(v).astype(mx.float32) * mx.array(dy)).sum())(x)
    want = dy.astype(np.float64) @ (np.array(layer.weight).astype(np.float64)
                                    * np.array(layer.scales).astype(np.float64)[:, None])
    got = to_numpy(g, np.float64)
    if got.shape != want.shape:
        return f"gradient shape {got.shape}, expected {want.shape}"
    # x's dtype bounds the agreement: float16/bfloat16 rounding to 2**-8; float32 to ~1e-6 where
    # MLX multiplies on the CPU, but on a GPU it multiplies float32 in TF32 (10-bit mantissa:
    # ~3e-4 normwise, measured on the H200), so there 2**-9.
    if x.dtype != mx.float32:
        tol = 2.0 ** -7
    else:
        tol = 1e-5 if mx.default_device() == mx.cpu else 2.0 ** -9
    err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
    return None if err <= tol else f"gradient off by {err:.3g} (normwise, {tol:.3g} allowed)"


def one_call(kind: str, rng: np.random.Generator, max_dim: int, layers, backend: str | None) -> str | None:
    """One call of `kind` on random shapes up to max_dim, checked; None or what was wrong."""
    m, k, n = (int(v) for v in rng.integers(1, max_dim + 1, 3))
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    where = f"{kind} (M, K, N) = {(m, k, n)}"
    if kind == "int8_matmul":
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        b = rng.integers(-128, 128, (n, k), dtype=np.int8)
        problem = check_int8_matmul(lambda x, y: api.int8_matmul(x, y, backend=backend), a, b)
    elif kind == "quantize_activations":
        x = mx.array(special_rows(rng, m, k)).astype(dtype)
        problem = check_quantize(lambda v: api.quantize_activations(v, backend=backend), x)
    elif kind in ("w8a8_linear", "w8a8_linear_bias"):
        x = mx.array(special_rows(rng, m, k)).astype(dtype)
        w, s = quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
        bias = rng.standard_normal(n).astype(np.float32) if kind == "w8a8_linear_bias" else None
        problem = check_w8a8(lambda *args: api.w8a8_linear(*args, backend=backend), x, w, s, bias)
    else:
        layer = layers[int(rng.integers(len(layers)))]
        k, n = layer.input_dims, layer.output_dims
        where = f"{kind} (M, K, N) = {(m, k, n)}"
        x = mx.array(rng.standard_normal((m, k)).astype(np.float32)).astype(dtype)
        if kind == "layer_forward":
            bias = np.array(layer.bias)
            problem = check_w8a8(lambda v, *_: layer(v), x, np.array(layer.weight), np.array(layer.scales), bias)
        else:
            problem = _grad_problem(layer, x, rng.standard_normal((m, n)).astype(np.float32))
    return None if problem is None else f"{where} {str(dtype).replace('mlx.core.', '')}: {problem}"


def bad_call(rng: np.random.Generator, backend: str | None) -> str | None:
    """A call with a float32 'a': must raise int8nax's TypeError naming 'a'; None if it did."""
    a = mx.array(rng.standard_normal((3, 5)).astype(np.float32))
    b = mx.zeros((4, 5), dtype=mx.int8)
    try:
        api.int8_matmul(a, b, backend=backend)
    except TypeError as exc:
        return None if "'a'" in str(exc) and "int8" in str(exc) else f"bad input: unclear error {exc!r}"
    except Exception as exc:  # noqa: BLE001 - any other outcome is the failure reported
        return f"bad input: {type(exc).__name__} instead of TypeError: {exc}"
    return "bad input: a float32 'a' was accepted"


class Tally:
    """Calls and failures, counted across threads: `calls` the checked calls (what --calls
    counts per thread), `bad_inputs` thread 0's deliberately bad calls besides them."""

    def __init__(self):
        self.calls = 0
        self.bad_inputs = 0
        self.failures: list[str] = []
        self.samples: list[dict] = []
        self._lock = threading.Lock()

    def add(self, problem: str | None, bad_input: bool = False) -> None:
        with self._lock:
            if bad_input:
                self.bad_inputs += 1
            else:
                self.calls += 1
            if problem is not None:
                self.failures.append(problem)


def worker(index: int, seed: int, tally: Tally, layers, backend, max_dim: int, calls: int | None,
           deadline: float | None) -> None:
    """One thread's mixed calls: `calls` of them, or until `deadline` (time.monotonic())."""
    rng = np.random.default_rng([seed, index])
    done = 0
    while (calls is None or done < calls) and (deadline is None or time.monotonic() < deadline):
        kind = KINDS[(index + done) % len(KINDS)]
        try:
            tally.add(one_call(kind, rng, max_dim, layers, backend))
            if index == 0 and done % 3 == 0:
                tally.add(bad_call(rng, backend), bad_input=True)
        except Exception as exc:  # noqa: BLE001 - a raise where none was due is a failure
            tally.add(f"{kind}: raised {type(exc).__name__}: {exc}")
        done += 1


def run_threads(threads: int, seed: int, max_dim: int, backend: str | None = None, calls: int | None = None,
                seconds: float | None = None, sample_every: float | None = None) -> Tally:
    """`threads` workers on shared layers; each makes `calls` calls or runs for `seconds`; with
    sample_every, memory is sampled that often (seconds) into tally.samples."""
    layers = make_layers(seed, backend)
    tally = Tally()
    deadline = None if seconds is None else time.monotonic() + seconds
    pool = [threading.Thread(target=worker, args=(i, seed, tally, layers, backend, max_dim, calls, deadline),
                             name=f"soak-{i}") for i in range(threads)]
    for t in pool:
        t.start()
    next_sample = time.monotonic() + (sample_every or 0)
    while sample_every:
        alive = [t for t in pool if t.is_alive()]
        if not alive:
            break
        alive[0].join(max(0.0, next_sample - time.monotonic()))
        if time.monotonic() >= next_sample:
            tally.samples.append(_memory_sample(tally.calls))
            next_sample += sample_every
    for t in pool:
        t.join()
    return tally


# --- first-call cost -----------------------------------------------------------------------------

def _timed(fn) -> float:
    start = time.perf_counter()
    mx.eval(fn())
    return time.perf_counter() - start


def first_call_costs(n: int, k: int, new_ms=(7, 333, 1000), warm: int = 5, backend: str | None = None) -> list[dict]:
    """Seconds of the first w8a8_linear call (float16, with a bias) of a fresh function at M = 64
    and then at each new M, each next to the median warm call at that M; eager, and under
    mx.compile (where a backend refuses it, that mode's row says why). The CPU backend's
    compiled mode is left out with its reason: it runs the MLX-operations path (exact, on MLX's
    CPU float32 GEMM, seconds a call at 4096 x 4096), which no CPU server should take."""
    rng = np.random.default_rng(0)
    w, s = quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
    w, s = mx.array(w), mx.array(s)
    bias = mx.array(rng.standard_normal(n).astype(np.float32))
    eager = lambda x: api.w8a8_linear(x, w, s, bias, backend=backend)  # noqa: E731
    cpu = backends.resolve(backend).name == "cpu"
    modes = {"eager": eager} if cpu else {"eager": eager, "mx.compile": mx.compile(eager)}
    rows = []
    for mode, fn in modes.items():
        for i, m in enumerate((64, *new_ms)):
            x = mx.array(rng.standard_normal((m, k)).astype(np.float16))
            try:
                first = _timed(lambda: fn(x))
                warm_s = statistics.median(_timed(lambda: fn(x)) for _ in range(warm))
            except ValueError as exc:
                if i:  # only the function's first call may find the mode unsupported
                    raise
                rows.append({"mode": mode, "skipped": str(exc)})
                break
            rows.append({"mode": mode, "m": m, "n": n, "k": k, "first_s": first, "warm_s": warm_s,
                         "what": "first call at a new M" if i else
                         "first call of this function (may build kernels)"})
    if cpu:
        rows.append({"mode": "mx.compile", "skipped": "the cpu backend under mx.compile runs its MLX-operations path "
                     "(exact, on MLX's CPU float32 GEMM: several times slower than eager), not a server's path"})
    return rows


# --- distinct M values ----------------------------------------------------------------------------

def kernels_built() -> int | None:
    """Distinct CUDA kernel objects built in this process (int8nax.backends.cuda.kernels.kernels_built),
    or None where that backend does not say (not loaded, or no such count)."""
    cuda = sys.modules.get("int8nax.backends.cuda.kernels")
    count = getattr(cuda, "kernels_built", None)
    return None if count is None else count()


def distinct_m(count: int, n: int = 32, k: int = 64, samples: int = 10, backend: str | None = None,
               seed: int = 0, ms=None) -> tuple[list[dict], list[str]]:
    """int8_matmul and w8a8_linear (float16, with a bias) at `count` distinct M values (1..count,
    or the values `ms`, shuffled), every result checked; returns (memory samples taken `samples` times along the way,
    failures). Each sample: Ms so far, RSS, MLX's buffer cache (mx.get_cache_memory, bounded by
    mx.set_cache_limit) and (on a GPU) active memory in bytes, and CUDA kernels built."""
    rng = np.random.default_rng(seed)
    w, s = quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
    bias = rng.standard_normal(n).astype(np.float32)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    w_mx, s_mx, bias_mx, b_mx = mx.array(w), mx.array(s), mx.array(bias), mx.array(b)
    order = rng.permutation(np.arange(1, count + 1) if ms is None else np.asarray(ms))
    count = len(order)
    failures, rows = [], []
    every = max(1, count // samples)
    for i, m in enumerate(order.tolist()):
        a = rng.integers(-128, 128, (m, k), dtype=np.int8)
        problem = check_int8_matmul(lambda x, _y: api.int8_matmul(x, b_mx, backend=backend), a, b)
        if problem:
            failures.append(f"int8_matmul M={m}: {problem}")
        x = mx.array(rng.standard_normal((m, k)).astype(np.float16))
        problem = check_w8a8(lambda v, *_: api.w8a8_linear(v, w_mx, s_mx, bias_mx, backend=backend), x, w, s, bias)
        if problem:
            failures.append(f"w8a8_linear M={m}: {problem}")
        if (i + 1) % every == 0 or i + 1 == count:
            rows.append({"ms": i + 1, "rss": rss_bytes(), "mlx_cache": mx.get_cache_memory(),
                         "gpu_active": gpu_active_bytes(), "kernels_built": kernels_built()})
    return rows, failures


# --- the command ---------------------------------------------------------------------------------

def add_parser(sub) -> None:
    """Register `int8nax soak` on the CLI's subparsers."""

    p = sub.add_parser("soak", help="threads of mixed, checked calls; memory, failures, first-call cost",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--minutes", type=argtypes.positive(float), help="run this long (default 1), then measure first calls")
    what.add_argument("--calls", type=argtypes.positive(int), help="calls per thread, then stop (no first-call measurement)")
    what.add_argument("--distinct-m", type=argtypes.count(1, MAX_DISTINCT_M), metavar="COUNT",
                      help=f"instead: int8_matmul and w8a8_linear at COUNT distinct M values (1 to {MAX_DISTINCT_M}) "
                           "on one thread, memory sampled along the way (exit 1 on a failure)")
    # default None: --distinct-m (one thread, fixed N and K) refuses them when given
    p.add_argument("--threads", type=argtypes.count(1, MAX_THREADS),
                   help=f"threads, 1 to {MAX_THREADS} ({DEFAULT_THREADS}); not with --distinct-m")
    p.add_argument("--max-dim", type=argtypes.count(1, MAX_DIM),
                   help=f"largest random M, K and N, 1 to {MAX_DIM} ({DEFAULT_MAX_DIM}); not with --distinct-m")
    p.add_argument("--seed", type=argtypes.count(0), default=0, help="random seed (0)")
    p.add_argument("--backend", default=None, type=argtypes.backend, help="backend (default: int8nax's choice)")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.set_defaults(func=main)


def main(args) -> int:
    given = [f"--{name.replace('_', '-')}" for name in ("threads", "max_dim") if getattr(args, name) is not None]
    if args.distinct_m is not None and given:
        print(f"int8nax soak: error: --distinct-m runs on one thread at a fixed N and K: it does not take "
              f"{' or '.join(given)} (see int8nax soak --help)", file=sys.stderr)
        return 2
    if args.threads is None:
        args.threads = DEFAULT_THREADS
    if args.max_dim is None:
        args.max_dim = DEFAULT_MAX_DIM
    backend = args.backend
    try:
        impl = backends.resolve(backend)
    except RuntimeError as exc:  # a named backend that cannot run here
        print(f"int8nax soak: {exc}", file=sys.stderr)
        return 2
    if args.distinct_m is not None:
        return _main_distinct_m(args, impl.name)
    warm = run_threads(args.threads, args.seed + 1, args.max_dim, backend, calls=2)  # engines loaded, kernels built
    start_rss, start_gpu = rss_bytes(), gpu_active_bytes()
    t0 = time.monotonic()
    if args.calls is not None:
        tally = run_threads(args.threads, args.seed, args.max_dim, backend, calls=args.calls)
    else:
        # The same threads throughout, as a server's pool: MLX 0.32 keeps a CPU stream thread
        # (an OS thread, ~20 KB resident) for every thread that ever evaluated, so threads made
        # and ended during the soak would show MLX's growth rather than int8nax's.
        seconds = 60 * (args.minutes or 1)
        tally = run_threads(args.threads, args.seed, args.max_dim, backend, seconds=seconds,
                            sample_every=seconds / SOAK_SAMPLES)
    samples = tally.samples
    elapsed = time.monotonic() - t0
    # "calls" are the checked calls of the run itself, as --calls counts them (per thread, so
    # threads x --calls); the warm-up's and the bad inputs are counted on their own. A failure
    # in the warm-up is still a failure.
    failures = warm.failures + tally.failures
    end_rss, end_gpu = rss_bytes(), gpu_active_bytes()
    report = {"backend": impl.name, "threads": args.threads, "max_dim": args.max_dim, "seconds": round(elapsed, 1),
              "calls": tally.calls, "warmup_calls": warm.calls, "bad_input_calls": warm.bad_inputs + tally.bad_inputs,
              "failures": len(failures), "rss_start_mb": round(start_rss / 2**20, 1),
              "rss_end_mb": round(end_rss / 2**20, 1)}
    if start_gpu is not None:
        report["gpu_active_start_mb"] = round(start_gpu / 2**20, 1)
        report["gpu_active_end_mb"] = round(end_gpu / 2**20, 1)
    if samples:
        report["samples"] = samples
    if args.calls is None:
        report["first_calls"] = first_call_costs(4096, 4096, backend=backend)
    if args.json:
        print(json.dumps({**report, "failure_list": failures}, indent=2))
    else:
        _print(report, failures)
    return 1 if failures else 0


SOAK_SAMPLES = 10


def _memory_sample(calls: int) -> dict:
    gpu = gpu_active_bytes()
    row = {"calls": calls, "rss_mb": round(rss_bytes() / 2**20, 1),
           "mlx_cache_mb": round(mx.get_cache_memory() / 2**20, 1)}
    if gpu is not None:
        row["gpu_active_mb"] = round(gpu / 2**20, 1)
    return row


def _print(report: dict, failures: list[str]) -> None:
    head = {k: v for k, v in report.items() if k not in ("first_calls", "samples")}
    print("int8nax soak: " + ", ".join(f"{k} {v}" for k, v in head.items()))
    for row in report.get("samples", []):
        print("  after " + ", ".join(f"{k} {v}" for k, v in row.items()))
    for row in report.get("first_calls", []):
        if "skipped" in row:
            print(f"  first call {row['mode']}: skipped ({row['skipped']})")
        else:
            print(f"  {row['mode']}, {row['what']}, M={row['m']} N=K={row['k']}: {row['first_s'] * 1e3:.2f} ms, "
                  f"warm {row['warm_s'] * 1e3:.2f} ms ({row['first_s'] / row['warm_s']:.1f}x)")
    for problem in failures:
        print(f"FAILED {problem}")


def _main_distinct_m(args, backend_name: str) -> int:
    rows, failures = distinct_m(args.distinct_m, backend=args.backend, seed=args.seed)
    if args.json:
        print(json.dumps({"backend": backend_name, "samples": rows, "failures": failures}, indent=2))
    else:
        print(f"int8nax soak --distinct-m {args.distinct_m}: backend {backend_name}, failures {len(failures)}")
        for row in rows:
            gpu = "" if row["gpu_active"] is None else f", gpu active {row['gpu_active'] / 2**20:.1f} MB"
            kernels = "" if row["kernels_built"] is None else f", cuda kernels built {row['kernels_built']}"
            print(f"  after {row['ms']:5d} Ms: rss {row['rss'] / 2**20:.1f} MB (MLX buffer cache "
                  f"{row['mlx_cache'] / 2**20:.1f} MB){gpu}{kernels}")
        for problem in failures:
            print(f"FAILED {problem}")
    return 1 if failures else 0
