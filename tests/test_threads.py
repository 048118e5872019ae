"""Calls from several threads, and state that does not grow with the shapes seen.

The concurrency test runs `int8nax soak --calls` in fresh processes: the abort it guards
against (MLX freeing a compiled trace's Python object in a C++ thread-exit destructor while the
interpreter finalizes, int8nax.per_thread) happens at process exit, in about 1 run of 5 before
the fix, so only many short processes show it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import subprocess
import sys
import threading
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import int8nax
from int8nax import per_thread
from int8nax.api import tracing
from int8nax.commands import soak
from int8nax.backends.cpu import backend as cpu, engines as cpu_engines

SRC = Path(__file__).resolve().parents[1] / "src"
RUNS = 20
"""Enough that a failure in 1 run of 5 shows with probability 1 - 0.8**20 = 99%."""


def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _engines() -> list[str]:
    """The CPU GEMM engines that can run here (both, where the `cpu` extra is installed)."""
    return [e for e in cpu_engines.ENGINE_NAMES if cpu_engines.engine_status(e).engine is not None]


def test_eight_threads_mixed_calls_exit_cleanly_every_run():
    # 8 threads: int8_matmul, w8a8_linear with and without a bias, quantize_activations and a
    # shared W8A8Linear's forward and input gradient, every result checked by the command, and
    # thread 0 passing a bad input (its TypeError checked there). On the CPU backend the runs
    # alternate between the CPU GEMM engines; on a GPU machine they run on the GPU backend,
    # several processes at a time where there are cores for it (each process compiles its
    # kernels anew: MLX keeps no disk cache of custom kernels).
    engines = _engines()
    jobs = max(1, (os.cpu_count() or 2) // 2)
    bad = []
    for first in range(0, RUNS, jobs):
        wave = []
        for run in range(first, min(RUNS, first + jobs)):
            env = _env(INT8NAX_CPU_GEMM=engines[run % len(engines)])
            wave.append((run, env["INT8NAX_CPU_GEMM"], subprocess.Popen(
                [sys.executable, "-m", "int8nax", "soak", "--calls", "2", "--threads", "8", "--max-dim", "48",
                 "--seed", str(run)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
        for run, engine, proc in wave:
            out, err = proc.communicate(timeout=600)
            if proc.returncode != 0 or "failures 0" not in out:
                bad.append(f"run {run} ({engine}): exit {proc.returncode}\n{out[-2000:]}{err[-2000:]}")
    assert not bad, f"{len(bad)} of {RUNS} runs failed:\n" + "\n".join(bad)


def test_compiled_objects_are_released_when_their_thread_ends():
    def f(x):
        return x * 2 + 1

    alone = sys.getrefcount(f)
    fn = per_thread.compile_per_thread(f)
    held = sys.getrefcount(f) - alone  # by fn; each thread's compiled object holds one more
    results = []

    def work():
        results.append(np.array(fn(mx.arange(4))).tolist())

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [[1, 3, 5, 7]] * 3
    assert fn.threads() == 0  # each thread's object went with its thread, before join() returned
    assert sys.getrefcount(f) - alone == held  # the compiled objects themselves, not only fn's record
    assert np.array(fn(mx.arange(2))).tolist() == [1, 3]
    assert fn.threads() == 1  # the calling (main) thread's, released at interpreter exit
    assert sys.getrefcount(f) - alone == held + 1
    # a thread's object lives while its thread does
    started, finish = threading.Event(), threading.Event()
    worker = threading.Thread(target=lambda: (fn(mx.arange(2)), started.set(), finish.wait()))
    worker.start()
    started.wait()
    assert fn.threads() == 2 and sys.getrefcount(f) - alone == held + 2
    finish.set()
    worker.join()
    assert fn.threads() == 1 and sys.getrefcount(f) - alone == held + 1


def test_max_signatures_bounds_the_traces_kept_per_thread():
    traced = []

    def f(x):
        traced.append(x.shape)
        return x + 1

    fn = per_thread.compile_per_thread(f, max_signatures=3)
    for m in [1, 2, 3, 1, 4, 5, 4, 6, 7, 8, 1]:
        assert np.array(fn(mx.zeros((m, 2)))).tolist() == [[1.0, 1.0]] * m
        assert fn.signatures() <= 3
    # a shape seen again while its trace is kept is replayed, not traced (4); one whose trace
    # was dropped with its compiled object is traced anew (1: first, and again at the end)
    assert traced.count((4, 2)) == 1 and traced.count((1, 2)) == 2
    with pytest.raises(ValueError, match="max_signatures"):
        per_thread.compile_per_thread(f, shapeless=True, max_signatures=3)


def test_the_tracer_check_keeps_no_object_of_an_ended_thread():
    a = mx.array(np.ones((3, 4), np.int8))

    def work():
        int8nax.int8_matmul(a, a)

    for _ in range(4):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    assert tracing._mark_if_traced.threads() <= 1  # at most the main thread's


def test_a_bad_input_raises_on_its_thread_and_leaves_the_others_right():
    rng = np.random.default_rng(7)
    a = rng.integers(-128, 128, (37, 50), dtype=np.int8)
    b = rng.integers(-128, 128, (29, 50), dtype=np.int8)
    want = a.astype(np.int64) @ b.astype(np.int64).T
    outcome = {}
    barrier = threading.Barrier(4)

    def good(i):
        barrier.wait()
        outcome[i] = [np.array_equal(np.array(int8nax.int8_matmul(mx.array(a), mx.array(b))), want)
                      for _ in range(5)]

    def bad():
        barrier.wait()
        try:
            int8nax.int8_matmul(mx.array(a.astype(np.float32)), mx.array(b))
        except TypeError as exc:
            outcome["bad"] = str(exc)

    threads = [threading.Thread(target=good, args=(i,)) for i in range(3)] + [threading.Thread(target=bad)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcome["bad"].startswith("int8_matmul: 'a'") and "float32" in outcome["bad"]
    assert [outcome[i] for i in range(3)] == [[True] * 5] * 3


# --- bounded state ------------------------------------------------------------------------------

def _with_submodules(package) -> list:
    """`package` and, where it is a package, the modules in it."""
    inside = pkgutil.iter_modules(getattr(package, "__path__", []))
    return [package] + [importlib.import_module(f"{package.__name__}.{m.name}") for m in inside]


def _caches() -> dict:
    """Every functools cache in the library modules that serve the CPU path."""
    import int8nax.api as api
    import int8nax.backends as registry
    import int8nax.nn as layers

    found = {}
    for module in (*_with_submodules(api), registry, cpu, cpu_engines, *_with_submodules(layers)):
        for name, obj in vars(module).items():
            if hasattr(obj, "cache_info") and obj.__module__ == module.__name__:  # where it is defined
                found[f"{module.__name__}.{name}"] = obj
    return found


def test_no_cache_grows_with_the_token_count():
    # Distinct M values through int8_matmul and w8a8_linear: after the first few, no cache of
    # api, the backend registry, nn or the CPU backend gains an entry (none is keyed by shape).
    soak.distinct_m(20, seed=1)
    before = {name: c.cache_info().currsize for name, c in _caches().items()}
    prepared = cpu.PREPARED.prepared_count()
    rows, failures = soak.distinct_m(200, seed=2)
    assert not failures
    after = {name: c.cache_info().currsize for name, c in _caches().items()}
    assert after == before
    assert cpu.PREPARED.prepared_count() <= prepared + 1  # distinct_m's one weight, while it lives
    assert tracing._mark_if_traced.threads() <= 1


def test_memory_levels_off_over_distinct_token_counts():
    # The command (`int8nax soak --distinct-m 5000`), shortened: between the middle and the end
    # the resident set, less MLX's buffer cache (freed buffers kept for reuse, bounded by
    # mx.set_cache_limit), may not grow by what retaining anything per M would add: the
    # outputs alone are 150 Ms x ~225 M x 256 x 6 bytes, ~50 MB; allocator noise stays far below.
    rows, failures = soak.distinct_m(300, n=256, k=16, samples=4, seed=5)
    assert not failures
    held = [r["rss"] - r["mlx_cache"] for r in rows]
    assert held[-1] - held[1] < 4 * 2**20, [h >> 20 for h in held]


def test_cuda_kernels_built_never_grow_with_m():
    if int8nax.info()["backend"] != "cuda":
        pytest.skip("needs the CUDA backend (an NVIDIA GPU with mlx-cuda); int8nax runs on "
                    f"{int8nax.info()['backend']} here")
    from int8nax.backends.cuda import kernels as cuda_kernels

    if not hasattr(cuda_kernels, "kernels_built"):
        pytest.fail("int8nax.backends.cuda.kernels has no kernels_built(): the count this test needs")
    # First the shape classes: M from 1 to 4096 in steps of 1 to 2**9 (powers of two and their
    # neighbours), which builds every kernel instance these (N, K) use; then 600 other M values in
    # the same range, which may build nothing more.
    seen = sorted({v for p in range(13) for v in (2**p - 1, 2**p, 2**p + 1) if 1 <= v <= 4096})
    soak.distinct_m(0, n=256, k=512, seed=3, ms=seen)
    built = cuda_kernels.kernels_built()
    rng = np.random.default_rng(4)
    others = rng.choice(np.setdiff1d(np.arange(1, 4097), seen), 600, replace=False)
    rows, failures = soak.distinct_m(0, n=256, k=512, samples=6, seed=4, ms=others)
    assert not failures
    assert [r["kernels_built"] for r in rows] == [built] * len(rows), (built, rows)


def test_an_unevaluated_array_from_another_thread_is_named():
    # MLX evaluates a graph only on the thread that built it; the CPU backend evaluates its
    # inputs during the call, and says which argument came lazy from another thread.
    if int8nax.info()["backend"] != "cpu":
        pytest.skip("the GPU backends leave evaluation to the caller (MLX's own error there)")
    lazy_w = mx.array(np.ones((2, 4), np.int8)) + 0  # built, not evaluated, on this thread
    x = mx.array(np.ones((3, 4), np.float32))
    s = mx.array(np.ones(2, np.float32))
    raised = {}

    def work():
        try:
            int8nax.w8a8_linear(x, lazy_w, s)
        except RuntimeError as exc:
            raised["error"] = str(exc)
        raised["fine"] = np.array(int8nax.w8a8_linear(x, mx.array(np.ones((2, 4), np.int8)), s)).tolist()

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert raised["error"].startswith("w8a8_linear: 'w_int8' is an unevaluated mx.array made on another thread")
    assert raised["fine"] == [[4.0, 4.0]] * 3


def test_after_the_exit_hook_calls_run_uncompiled_and_stay_right():
    # per_thread.release_all runs at interpreter exit, before daemon threads stop: calls made
    # after it (int8nax's tracer check included) run the plain function, with the same results.
    script = (
        "import numpy as np, mlx.core as mx, int8nax\n"
        "from int8nax import per_thread\n"
        "a = np.arange(-12, 12, dtype=np.int8).reshape(4, 6)\n"
        "want = a.astype(np.int64) @ a.astype(np.int64).T\n"
        "assert np.array_equal(np.array(int8nax.int8_matmul(mx.array(a), mx.array(a))), want)\n"
        "per_thread.release_all()\n"
        "assert np.array_equal(np.array(int8nax.int8_matmul(mx.array(a), mx.array(a))), want)\n"
        "g = mx.grad(lambda x: int8nax.w8a8_linear(x, mx.array(a), mx.ones((4,))).sum())(mx.ones((2, 6)))\n"
        "assert np.allclose(np.array(g), a.sum(axis=0)), g\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", script], env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_idle_daemon_threads_that_used_int8nax_let_the_process_exit():
    # Daemon threads outlive the interpreter's finalization, which ends them with pthread_exit;
    # their thread-exit destructors then run while the interpreter is gone. int8nax's part of
    # their state is released by its exit hook first (before the fix: an abort in every run).
    # A daemon thread still inside an MLX evaluation at exit aborts with MLX alone
    # (docs/serving.md): that one is the caller's to join.
    script = (
        "import threading, time, numpy as np, mlx.core as mx, int8nax\n"
        "a = mx.array(np.ones((16, 32), np.int8))\n"
        "int8nax.int8_matmul(a, a)\n"
        "def idle():\n"
        "    int8nax.int8_matmul(a, a)\n"
        "    while True:\n"
        "        time.sleep(0.0005)\n"
        "for _ in range(3):\n"
        "    threading.Thread(target=idle, daemon=True).start()\n"
        "time.sleep(0.3)\n")
    codes = [subprocess.run([sys.executable, "-c", script], env=_env(), capture_output=True, timeout=120).returncode
             for _ in range(3)]
    assert codes == [0, 0, 0]


def test_first_call_costs_on_the_cpu_leave_the_compiled_path_out_with_the_reason():
    # the CPU backend's mx.compile path is exact but runs MLX's CPU float32 GEMM (seconds a call
    # at the soak's 4096 x 4096): the soak's first-call table says so instead of timing it
    rows = soak.first_call_costs(64, 64, new_ms=(7,), warm=1, backend="cpu")
    assert [(r["mode"], r.get("m")) for r in rows] == [("eager", 64), ("eager", 7), ("mx.compile", None)]
    assert all(r["first_s"] > 0 and r["warm_s"] > 0 for r in rows[:2])
    assert "MLX-operations path" in rows[2]["skipped"]


def test_slot_table_gives_each_thread_its_own_compiled_object():
    mx = pytest.importorskip("mlx.core")
    from int8nax.per_thread import SlotTable, compile_per_thread

    made = []

    def factory(key):
        made.append(key)
        return compile_per_thread(lambda x: x * key)

    table = SlotTable(factory, limit=2)
    x = mx.array([1.0, 2.0])
    first = table.get(3)
    assert table.get(3) is first and made == [3]  # kept: one factory call a key
    assert mx.array_equal(first(x), x * 3).item()
    other = []
    thread = threading.Thread(target=lambda: other.append(table.get(3)))
    thread.start()
    thread.join()
    assert other[0] is not first and made == [3, 3]  # another thread: its own table, its own compiled object
    table.get(4)
    table.get(5)  # over the limit: this thread's keys start again
    assert table.get(3) is not first and made.count(3) == 3
