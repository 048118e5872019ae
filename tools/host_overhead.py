"""Host time to build one lazy call of the public API, and where it goes, on any machine.

On the GPU backends a call only builds MLX graph nodes, so its host cost is the API layer
(int8nax.api) plus the backend's few µs. The CPU backend computes eagerly in numpy, which
hides the API's cost; this script therefore installs a *fake lazy backend* in place of the one
auto mode picks (a Backend whose methods return one or two cheap lazy MLX ops of the right
shape and dtype, never evaluated) and times, as the benchmarks' host mode does
(int8nax.bench.contenders.Prepared.build), `--calls` independent lazy calls per sample, the
median of `--repeat` samples, in µs per call. The steps are timed interleaved (one sample of
each in turn), so that drift on a busy machine hits all of them alike; the garbage collector
runs as it would (a gc.collect() before each sample made every figure slower and noisier:
the next sample's memory came back cold).

    python tools/host_overhead.py [--calls 200] [--repeat 21] [--only int8_matmul|w8a8_linear] [--real]

--real times the backend auto mode picks instead of the fake (on a GPU host: the whole call as
a model sees it; on the CPU box the CPU backend computes, so the figures are its compute).

Rows: the bare backend call; the pieces the API layer is or was made of, each alone on the
same inputs: "[MLX]" rows are one MLX construct (what a custom function, a stop_gradient or a
reshape costs), "api." rows int8nax.api's helpers, "validation" the _checks calls that the
checked path makes (the common call checks inline); then the public call (common call: no
`backend=`, INT8NAX_BACKEND unset) and "API layer" = public call - bare backend call. The
pieces overlap (Python call frames) and not all of them are on every path, so they need not
sum to the API layer.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import mlx.core as mx  # noqa: E402

import int8nax  # noqa: E402
from int8nax import _checks, api, backends  # noqa: E402
from int8nax.backends.base import Backend, Probe  # noqa: E402

# M = N and K = 4N: the fake int8_matmul can then be two int32 views of the int8 inputs.
M, N, K = 64, 64, 256
LEAD = (2, 32)  # x [2, 32, K] for the case with leading dims (2 * 32 = M rows)


class FakeLazyBackend(Backend):
    """Cheap lazy MLX ops with the right output shapes and dtypes (values meaningless)."""

    name = "fake-lazy"

    def probe(self) -> Probe:
        return Probe(True, "tools/host_overhead.py's fake lazy backend")

    def int8_matmul(self, a, b):
        return a.view(mx.int32) + b.view(mx.int32)  # [M, K/4] + [N, K/4] = [M, N] when M = N

    def quantize_activations(self, x):
        return x.astype(mx.int8), x.max(axis=1).astype(mx.float32)

    def w8a8_linear(self, x, w, scale_w, bias):
        y = x @ x.T  # [M, M] = [M, N] in x's dtype
        return y if bias is None else y + bias


FAKE = FakeLazyBackend()
IMPL: Backend = FAKE  # the backend timed: FAKE, or with --real the one auto mode picks


def install_fake() -> str:
    """Make the registry hand out FAKE where auto mode picks a backend here; returns its name."""
    os.environ.pop(backends.ENV_VAR, None)
    name = backends._auto_name()
    module = types.ModuleType("int8nax_host_overhead_fake")
    module.BACKEND = FAKE
    sys.modules[module.__name__] = module
    backends._MODULES[name] = module.__name__
    backends.get.cache_clear()
    backends.probe.cache_clear()
    assert backends.resolve(None) is FAKE
    return name


def time_steps(steps: dict, calls: int, repeat: int) -> dict:
    """{name: median µs per call}: `calls` calls of each step per sample, steps interleaved."""
    samples = {name: [] for name in steps}
    for r in range(repeat + 1):  # the first round warms up and is dropped
        for name, step in steps.items():
            t0 = time.perf_counter()
            out = [step() for _ in range(calls)]
            dt = time.perf_counter() - t0
            del out  # freeing the graphs is not part of a call
            if r:
                samples[name].append(dt / calls * 1e6)
    return {name: statistics.median(v) for name, v in samples.items()}


def _inputs():
    a = mx.ones((M, K), mx.int8)
    b = mx.ones((N, K), mx.int8)
    x = mx.ones((M, K), mx.float16)
    x3 = mx.ones((*LEAD, K), mx.float16)
    s = mx.ones((N,), mx.float32)
    bias = mx.zeros((N,), mx.float16)
    mx.eval(a, b, x, x3, s, bias)
    return a, b, x, x3, s, bias


def _refusal(body=lambda a, b: a.view(mx.int32)) -> mx.custom_function:
    """A custom function with a refusing vjp and jvp around a trivial body: MLX's own cost."""
    def refuse(*_):
        raise ValueError("no gradient")

    f = mx.custom_function(body)
    f.vjp(refuse)
    f.jvp(refuse)
    return f


_STE = []


def _ste() -> mx.custom_function:
    """A custom function with a vjp and jvp around a trivial body (the first input)."""
    if not _STE:
        f = mx.custom_function(lambda *args: args[0])
        f.vjp(lambda primals, cotangent, _out: tuple(mx.zeros_like(p) for p in primals))
        f.jvp(lambda primals, tangents: (tangents[0],))
        _STE.append(f)
    return _STE[0]


def int8_matmul_steps() -> dict:
    a, b, *_ = _inputs()
    func = "int8_matmul"
    refusal = _refusal()
    plain = mx.custom_function(lambda a, b: a.view(mx.int32))
    # the custom function replayed by mx.compile (identity body, the backend's output passed in)
    compiled_refusal = mx.compile(_refusal(lambda a, b, y: y))
    y0 = IMPL.int8_matmul(a, b)

    def validation():
        _checks.check_backend(None, func)
        a2 = _checks.as_mx(a, "a", func, (mx.int8,))
        b2 = _checks.as_mx(b, "b", func, (mx.int8,))
        _checks.check_ndim(a2, "a", func, 2, "[M, K]")
        _checks.check_ndim(b2, "b", func, 2, "[N, K]")
        m, k = a2.shape
        _checks.check_same_k(k, "a", b2.shape[1], "b", func)
        _checks.check_k(k, func)

    impl = backends.resolve(None)
    steps = {
        "backend call (bare)": lambda: IMPL.int8_matmul(a, b),
        "validation, the _checks calls of the slow path": validation,
        "os.environ.get(INT8NAX_BACKEND) (unset)": lambda: os.environ.get(backends.ENV_VAR),
        "backends.resolve(None)": lambda: backends.resolve(None),
        "[MLX] mx.stop_gradient": lambda: mx.stop_gradient(a),
        "[MLX] custom_function, vjp+jvp, 2 in": lambda: refusal(a, b),
        "[MLX] custom_function, no transforms": lambda: plain(a, b),
        "[MLX] mx.compile(custom_function, vjp+jvp), 3 in": lambda: compiled_refusal(a, b, y0),
    }
    if hasattr(api, "_untraced"):
        steps["api._untraced(a, b) (the tracer check)"] = lambda: api._untraced(a, b)
    if hasattr(api, "_int8_matmul_fn"):
        steps["api._int8_matmul_fn(impl)(a, b)"] = lambda: api._int8_matmul_fn(impl)(a, b)
    steps["int8nax.int8_matmul(a, b)"] = lambda: int8nax.int8_matmul(a, b)
    return steps


def w8a8_steps(bias: bool, lead: bool) -> dict:
    _, _, x, x3, s, b = _inputs()
    w = mx.ones((N, K), mx.int8)
    mx.eval(w)
    xin = x3 if lead else x
    bias_in = b if bias else None
    func = "w8a8_linear"
    impl = backends.resolve(None)
    y0 = IMPL.w8a8_linear(x, w, s, bias_in)

    def validation():
        _checks.check_backend(None, func)
        x2 = _checks.as_mx(xin, "x", func, _checks.FLOAT_DTYPES)
        w2 = _checks.as_mx(w, "w_int8", func, (mx.int8,))
        s2 = _checks.as_mx(s, "scale_w", func, (mx.float32,))
        _checks.check_ndim(w2, "w_int8", func, 2, "[N, K]")
        n, k = w2.shape
        _checks.check_same_k(x2.shape[-1], "x", k, "w_int8", func)
        _checks.check_k(k, func)
        _checks.check_vector(s2, "scale_w", func, n, "one scale per output channel")
        if bias_in is not None:
            b2 = _checks.as_mx(bias_in, "bias", func, _checks.FLOAT_DTYPES, float64_to_float32=True)
            _checks.check_vector(b2, "bias", func, n, "one value per output channel")

    primals = (x, w, s, b) if bias else (x, w, s)
    steps = {
        "backend call (bare)": lambda: IMPL.w8a8_linear(x, w, s, bias_in),
        "validation, the _checks calls of the slow path": validation,
        "backends.resolve(None)": lambda: backends.resolve(None),
        "[MLX] mx.stop_gradient": lambda: mx.stop_gradient(y0),
        f"[MLX] custom_function, vjp+jvp, {len(primals)} in": lambda: _ste()(*primals),
        f"[MLX] custom_function, vjp+jvp, {len(primals) + 1} in": lambda: _ste()(*primals, y0),
    }
    if hasattr(api, "_untraced"):
        steps[f"api._untraced({', '.join(['x', 'w', 's', 'b'][:len(primals)])}) (the tracer check)"] = (
            lambda: api._untraced(*primals))
    if hasattr(api, "_forward_inputs"):
        steps["api._forward_inputs (stop_gradients)"] = lambda: api._forward_inputs(impl, x, w, s, bias_in)
    if hasattr(api, "_w8a8_grad"):
        grad = api._w8a8_grad(bias)
        steps["api._w8a8_grad(...)(*primals, y)"] = lambda: grad(*primals, y0)
    if lead:
        steps["[MLX] x.reshape(rows, K)"] = lambda: x3.reshape(M, K)
        steps["[MLX] y.reshape(*lead, N)"] = lambda: y0.reshape(*LEAD, N)
    steps["int8nax.w8a8_linear(...)"] = lambda: int8nax.w8a8_linear(xin, w, s, bias_in)
    return steps


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200, help="lazy calls per sample (default 200)")
    parser.add_argument("--repeat", type=int, default=21, help="samples per step (default 21)")
    parser.add_argument("--only", choices=("int8_matmul", "w8a8_linear"))
    parser.add_argument("--real", action="store_true", help="time the backend auto mode picks, not the fake")
    args = parser.parse_args(argv)
    global IMPL
    if args.real:
        os.environ.pop(backends.ENV_VAR, None)
        IMPL = backends.resolve(None)
        what = f"the real {IMPL.name!r} backend"
    else:
        what = f"the fake lazy backend in place of {install_fake()!r}"
    sections = {}
    if args.only in (None, "int8_matmul"):
        sections[f"int8_matmul  a int8 [{M}, {K}], b int8 [{N}, {K}]"] = int8_matmul_steps()
    if args.only in (None, "w8a8_linear"):
        for bias, lead in ((False, False), (True, False), (True, True)):
            shape = f"[{', '.join(map(str, LEAD))}, {K}]" if lead else f"[{M}, {K}]"
            title = f"w8a8_linear  x float16 {shape}, w int8 [{N}, {K}], scale_w [{N}]" + (", bias [N]" if bias else "")
            sections[title] = w8a8_steps(bias, lead)
    # every step of every section in one interleaved run: drift hits all rows alike
    times = time_steps({(t, n): f for t, steps in sections.items() for n, f in steps.items()}, args.calls, args.repeat)
    print(f"int8nax {int8nax.__version__} from {Path(int8nax.__file__).parent}, mlx {mx.__version__}, "
          f"default device {mx.default_device()}; {what}; "
          f"{args.calls} calls per sample, median of {args.repeat} samples, µs per call")
    for title, steps in sections.items():
        print(f"\n{title}")
        for name in steps:
            print(f"  {name:<50} {times[title, name]:7.2f} µs")
        public, bare = times[title, list(steps)[-1]], times[title, "backend call (bare)"]
        print(f"  {'API layer (public - bare)':<50} {public - bare:7.2f} µs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
