"""Where the time of an int8nax call goes on an NVIDIA GPU: profile evidence for docs/cuda-notes.md.

    python tools/cuda_profile.py --out DIR [--sections timeline,w8a8,host] [--shapes MxKxN,...]

Three sections, each a JSON file and a markdown table in DIR:

  timeline  one call + mx.eval and a dependent chain of calls (int8nax.bench.timing's "call" and
            "chain"), traced by CUPTI through torch.profiler: the GPU's kernels, the CUDA API calls
            MLX makes (graph instantiate / update / launch, the wait), and user ranges around
            the Python build and the eval. Per call: the host's build, what the eval spends before
            the GPU starts, the kernels, the gap between them, and the wake-up after the last.
            Contenders: int8_matmul, w8a8_linear, the MLX floor and MLX's fp16 matmul
            (int8nax.bench.contenders), and a spin floor: one do-nothing kernel as long as
            int8_matmul's (one call + eval only), i.e. what MLX costs around a kernel that long. CUPTI's API tracing adds its own cost to every API call:
            the untraced figures are `int8nax compare`'s.
  w8a8      per-kernel CUPTI durations of w8a8_linear's pipeline (quantize, GEMM, reduction) and
            of the raw GEMM on the same plan: what the pipeline costs beyond the GEMM, kernel by
            kernel.
            Inputs rotate through copies covering 3x the L2 (cold L2, as tools/tma_gemm_trial.py).
  host      the host's time to build one lazy call, layer by layer (MLX primitives, the floor
            kernel, the compiled int8nax graph, the backend, the public function), median of
            several batches of independent calls, nothing evaluated.
  outputs   untraced: one call + eval and the chain of the MLX floor kernel with a 1-element
            output, with int8_matmul's [M, N] int32 output, and with that plus its tensor-map
            buffer, next to int8_matmul itself (not in the default sections).
  ncu-target  (run under Nsight Compute, not in the default sections) two launches each of
            W8A8's fused GEMM and the raw GEMM on the same plan at --w8a8-shapes, between
            cudaProfilerStart/Stop, e.g.
              ncu --profile-from-start off --kernel-name regex:int8nax_tma_simple --section
              WarpStateStats ... python tools/cuda_profile.py --out D --sections ncu-target
              --w8a8-shapes 1024x4096x4096

Needs MLX's CUDA backend and torch with CUDA (the profiler); elsewhere it writes why and exits 3.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

TOOLS = Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))

SHAPES = [(16, 4096, 4096), (512, 4096, 4096), (512, 3584, 18944)]
TIMELINE_CONTENDERS = ("nax-gemm", "nax-full", "mlx-floor", "mlx-fp16")
W8A8_SHAPES = [(m, 4096, 4096) for m in (16, 64, 128, 256, 512, 1024, 2048)] + [
    (128, 3584, 18944), (512, 3584, 18944), (128, 18944, 3584), (512, 18944, 3584)]


def log(*args):
    print(*args, flush=True)


# ---- trace reading (pure: tested on synthetic traces) ------------------------------------------

def events(trace: dict) -> dict[str, list[dict]]:
    """A chrome trace's complete events by kind: kernel, api (CUDA runtime and driver calls),
    range (user annotations), sorted by start."""
    out = {"kernel": [], "api": [], "range": []}
    for e in trace.get("traceEvents", []):
        if e.get("ph") != "X" or "ts" not in e:
            continue
        cat = e.get("cat", "")
        # gpu_user_annotation is the GPU's copy of a user range: the host's is the one kept
        kind = ("kernel" if cat in ("kernel", "gpu_memset", "gpu_memcpy") else
                "api" if cat in ("cuda_runtime", "cuda_driver") else
                "range" if cat == "user_annotation" else None)
        if kind:
            out[kind].append({"name": e.get("name", "?"), "ts": float(e["ts"]), "dur": float(e.get("dur", 0.0))})
    for v in out.values():
        v.sort(key=lambda e: e["ts"])
    return out


def inside(items: list[dict], start: float, end: float) -> list[dict]:
    return [e for e in items if start <= e["ts"] < end]


def busy(kernels: list[dict]) -> float:
    """µs during which at least one of the kernels ran (the union of their intervals)."""
    total, reach = 0.0, None
    for e in sorted(kernels, key=lambda e: e["ts"]):
        s, t = e["ts"], e["ts"] + e["dur"]
        if reach is None or s >= reach:
            total += t - s
            reach = t
        elif t > reach:
            total += t - reach
            reach = t
    return total


def api_totals(api: list[dict], top: int = 6) -> dict[str, float]:
    """µs per CUDA API name, the `top` largest."""
    sums: dict[str, float] = {}
    for e in api:
        sums[e["name"]] = sums.get(e["name"], 0.0) + e["dur"]
    return dict(sorted(sums.items(), key=lambda kv: -kv[1])[:top])


def call_breakdown(ev: dict, build: dict, ev_range: dict) -> dict:
    """One call + eval: the build range, then the eval range and what happened during it."""
    start, end = ev_range["ts"], ev_range["ts"] + ev_range["dur"]
    kernels = [k for k in ev["kernel"] if start <= k["ts"] < end]
    api = inside(ev["api"], start, end)
    row = {"build_us": build["dur"], "eval_us": ev_range["dur"], "kernels": len(kernels),
           "api": api_totals(api)}
    if kernels:
        first, last = kernels[0]["ts"], max(k["ts"] + k["dur"] for k in kernels)
        row.update({"to_first_kernel_us": first - start, "kernel_us": sum(k["dur"] for k in kernels),
                    "kernel_span_us": last - first, "after_last_kernel_us": end - last})
        launches = [a for a in api if "GraphLaunch" in a["name"] or "LaunchKernel" in a["name"]]
        if launches:
            row["launch_to_kernel_us"] = first - launches[0]["ts"]
            row["eval_to_launch_us"] = launches[0]["ts"] - start
    return row


def chain_breakdown(ev: dict, chain_range: dict, builds: list[dict], calls: int) -> dict:
    """A chain of `calls` calls and one eval: per-call figures over the whole range."""
    start, end = chain_range["ts"], chain_range["ts"] + chain_range["dur"]
    kernels = [k for k in ev["kernel"] if start <= k["ts"] < end]
    api = inside(ev["api"], start, end)
    row = {"calls": calls, "wall_per_call_us": chain_range["dur"] / calls,
           "build_per_call_us": sum(b["dur"] for b in builds) / calls,
           "graph_launches": sum("GraphLaunch" in a["name"] for a in api),
           "kernels_per_call": len(kernels) / calls, "api_per_call": {k: v / calls for k, v in api_totals(api).items()}}
    if kernels:
        first, last = kernels[0]["ts"], max(k["ts"] + k["dur"] for k in kernels)
        b = busy(kernels)
        row.update({"gpu_busy_per_call_us": b / calls, "kernel_sum_per_call_us": sum(k["dur"] for k in kernels) / calls,
                    "gpu_idle_before_first_kernel_us": first - start,
                    "gpu_gaps_per_call_us": (last - first - b) / calls, "after_last_kernel_us": end - last})
        names: dict[str, float] = {}
        for k in kernels:
            short = short_name(k["name"])
            names[short] = names.get(short, 0.0) + k["dur"] / calls
        row["kernel_us_per_call_by_name"] = names
    return row


def short_name(name: str) -> str:
    """A kernel's name without MLX's namespace, template arguments and parameter list."""
    name = name.split("(")[0]
    for prefix in ("mlx::core::cu::", "void "):
        name = name.replace(prefix, "")
    return name[:60]


# ---- the device parts ------------------------------------------------------------------------

def traced(torch, fn):
    """(result of fn(), events of its trace): CUPTI kernels and API calls, user ranges."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        result = fn()
        torch.cuda.synchronize()
    path = Path(f"/tmp/cuda_profile_{os.getpid()}.json")
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    path.unlink(missing_ok=True)
    return result, events(trace)


SPIN_SOURCE = """
  // Spins until dur[0] nanoseconds of the GPU's global timer have passed, then copies dur[0]:
  // a kernel of a chosen length that does nothing else (the floor of a call of that length).
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < static_cast<unsigned long long>(dur[0]));
  out[0] = dur[0];
"""


def spin_call(mx, microseconds: float):
    """(call, sync) of one MLX custom kernel that spins for `microseconds` on one thread."""
    kernel = mx.fast.cuda_kernel(name="int8nax_profile_spin", input_names=["dur"], output_names=["out"],
                                 source=SPIN_SOURCE)
    dur = mx.array([int(microseconds * 1000)], dtype=mx.int32)
    mx.eval(dur)

    def call(_prev):
        return kernel(inputs=[dur], output_shapes=[(1,)], output_dtypes=[mx.int32], grid=(1, 1, 1),
                      threadgroup=(1, 1, 1))[0]

    return call, mx.eval


def profile_calls(torch, call, sync, repeat: int) -> list[dict]:
    """call_breakdown of `repeat` traced calls of call(None), each followed by sync(out)."""
    from torch.profiler import record_function

    def calls():
        for i in range(repeat):
            with record_function(f"build{i}"):
                out = call(None)
            with record_function(f"eval{i}"):
                sync(out)
            del out

    _, ev = traced(torch, calls)
    per = []
    for i in range(repeat):
        b = [r for r in ev["range"] if r["name"] == f"build{i}"]
        e = [r for r in ev["range"] if r["name"] == f"eval{i}"]
        if b and e:
            per.append(call_breakdown(ev, b[0], e[0]))
    return per


def timeline(torch, shapes, calls: int, repeat: int) -> list[dict]:
    """Per shape: each contender's one call + eval and chain, then the spin floor (a do-nothing
    kernel as long as int8_matmul's kernel measured here) in one call + eval."""
    import mlx.core as mx
    from torch.profiler import record_function

    from int8nax.bench import contenders

    rows = []
    for shape in shapes:
        gemm_us = None
        for name in TIMELINE_CONTENDERS:
            try:
                prepared = contenders.get(name).ready(*shape)
            except Exception as exc:  # noqa: BLE001  (a contender that cannot run here says why)
                rows.append({"shape": list(shape), "contender": name, "error": f"{type(exc).__name__}: {exc}"})
                continue
            for _ in range(3):
                prepared.run()
                prepared.chain(10)
            per = profile_calls(torch, prepared.call, prepared.sync, repeat)
            rows.append({"shape": list(shape), "contender": name, "mode": "call", "samples": per,
                         "median": median_row(per), "detail": prepared.detail})
            if name == "nax-gemm":
                gemm_us = rows[-1]["median"].get("kernel_us")

            def a_chain():
                with record_function("chain"):
                    out = None
                    for i in range(calls):
                        with record_function("link_build"):
                            out = prepared.call(out)
                    prepared.sync(out)

            _, ev = traced(torch, a_chain)
            ch = [r for r in ev["range"] if r["name"] == "chain"]
            builds = [r for r in ev["range"] if r["name"] == "link_build"]
            if ch:
                rows.append({"shape": list(shape), "contender": name, "mode": "chain",
                             "result": chain_breakdown(ev, ch[0], builds, calls), "detail": prepared.detail})
            log(f"[timeline] {shape} {name}: " + " | ".join(
                json.dumps(r.get("median") or r.get("result"))[:300] for r in rows[-2:] if r.get("contender") == name))
        if gemm_us:
            call, sync = spin_call(mx, gemm_us)
            for _ in range(3):
                sync(call(None))
            per = profile_calls(torch, call, sync, repeat)
            rows.append({"shape": list(shape), "contender": f"spin floor ({gemm_us:.1f} us)", "mode": "call",
                         "samples": per, "median": median_row(per),
                         "detail": "one custom kernel spinning on the global timer as long as int8_matmul's kernel"})
            log(f"[timeline] {shape} spin floor: {json.dumps(rows[-1]['median'])[:300]}")
    return rows


def median_row(rows: list[dict]) -> dict:
    """Median of every numeric field over the samples (api: of each name's total)."""
    if not rows:
        return {}
    out = {}
    for key in rows[0]:
        if key == "api":
            names = {n for r in rows for n in r["api"]}
            out["api"] = {n: statistics.median(r["api"].get(n, 0.0) for r in rows) for n in names}
        elif all(isinstance(r.get(key), (int, float)) for r in rows):
            out[key] = statistics.median(r[key] for r in rows)
    return out


def per_kernel(torch, mx, launch, launches: int) -> dict[str, float]:
    """Median µs per kernel name over `launches` calls of launch(i) + mx.eval."""
    def run():
        for i in range(launches):
            mx.eval(launch(i))

    _, ev = traced(torch, run)
    kernels = ev["kernel"]
    if not kernels or len(kernels) % launches:
        return {"error": f"{len(kernels)} kernels for {launches} launches"}
    per = len(kernels) // launches
    out: dict[str, list[float]] = {}
    for i in range(launches):
        for j, k in enumerate(kernels[i * per:(i + 1) * per]):
            out.setdefault(f"{j}:{short_name(k['name'])}", []).append(k["dur"])
    med = {name: statistics.median(v) for name, v in out.items()}
    med["total"] = statistics.median(sum(k["dur"] for k in kernels[i * per:(i + 1) * per]) for i in range(launches))
    return med


def w8a8_problem(mx, cuda, m: int, k: int, n: int):
    """(x float16 [M, K], w int8 [N, K], s float32 [N], q, sx = x's codes and scales, plan, kernel):
    one W8A8 problem on the device, evaluated, and the plan and kernel w8a8_linear runs it on."""
    rng = np.random.default_rng(m + k + n)
    x = mx.array(rng.standard_normal((m, k)).astype(np.float16))
    w = mx.array(rng.integers(-128, 128, (n, k), dtype=np.int8))
    s = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
    q, sx = cuda.quantize(x)
    mx.eval(x, w, s, q, sx)
    chosen = cuda.choice(m, n, k, w8a8=True)
    return (x, w, s, q, sx, chosen.plan, chosen.variant)


def w8a8(torch, shapes, launches: int) -> list[dict]:
    import mlx.core as mx

    from int8nax.backends import cuda
    from tma_gemm_trial import operand_sets

    rows = []
    for m, k, n in shapes:
        x, w, s, q, sx, plan, kernel = w8a8_problem(mx, cuda, m, k, n)
        sets = operand_sets(mx, (x, w, s, q, sx), 2 * m * k + n * k + 6 * m * n)

        def full(i):
            xi, wi, si = sets[i % len(sets)][:3]
            return cuda.w8a8_graph(xi, wi, si, cuda._no_bias(), kernel, plan, False)

        def raw(i):
            qi, wi = sets[i % len(sets)][3], sets[i % len(sets)][1]
            return cuda.gemm_graph(qi, wi, kernel, plan)

        for _ in range(3):
            mx.eval(full(0), raw(0))
        row = {"shape": [m, k, n], "kernel": kernel,
               "dispatch": {"plan": plan.name, "w8a8": per_kernel(torch, mx, full, launches),
                            "raw": per_kernel(torch, mx, raw, launches)}}
        rows.append(row)
        log(f"[w8a8] {m}x{k}x{n}: {json.dumps(row)[:400]}")
        sets = None
    return rows


def outputs(shapes, calls: int, repeat: int) -> list[dict]:
    """Untraced: one call + eval and the chain (int8nax.bench.timing) of the MLX floor kernel
    with one int32 output, with int8_matmul's [M, N] int32 result, and with that plus the TMA
    kernel's tensor-map buffer, next to int8_matmul: what MLX's allocation and bookkeeping of
    MB-sized outputs cost per call, apart from any kernel work."""
    import mlx.core as mx

    from int8nax.backends import cuda, cuda_plans
    from int8nax.bench import contenders, timing

    kernel = mx.fast.cuda_kernel(name="int8nax_profile_floor_out", input_names=["a"], output_names=["out", "maps"],
                                 source="if (threadIdx.x == 0 && blockIdx.x == 0) { out[0] = a[0]; maps[0] = 0; }")
    one = mx.fast.cuda_kernel(name="int8nax_profile_floor_one", input_names=["a"], output_names=["out"],
                              source="if (threadIdx.x == 0 && blockIdx.x == 0) { out[0] = a[0]; }")
    rows = []
    for m, k, n in shapes:
        a = mx.array(np.random.default_rng(0).integers(-128, 128, (m, k), dtype=np.int8))
        mx.eval(a)
        maps = cuda_plans.tma_plan(m, n, k, cuda.sm_count()).map_bytes(m, n)
        ops = {
            "1 int32": lambda a_: one(inputs=[a_], output_shapes=[(1, 1)], output_dtypes=[mx.int32], grid=(32, 1, 1),
                                      threadgroup=(32, 1, 1))[0],
            "[M, N] int32": lambda a_: one(inputs=[a_], output_shapes=[(m, n)], output_dtypes=[mx.int32],
                                           grid=(32, 1, 1), threadgroup=(32, 1, 1))[0],
            "[M, N] int32 + maps": lambda a_: kernel(inputs=[a_], output_shapes=[(m, n), (maps,)],
                                                     output_dtypes=[mx.int32, mx.uint8], grid=(32, 1, 1),
                                                     threadgroup=(32, 1, 1))[0],
        }
        row = {"shape": [m, k, n], "maps_bytes": maps, "us": {}}
        for label, op in ops.items():
            prepared = contenders._mlx(op, a, lambda out: None, f"floor kernel, outputs {label}")
            row["us"][label] = {mode: timing.seconds_per_call(prepared, mode, repeat, 1, calls) * 1e6
                                for mode in ("call", "chain")}
        gemm = contenders.get("nax-gemm").ready(m, k, n)
        row["us"]["int8_matmul"] = {mode: timing.seconds_per_call(gemm, mode, repeat, 1, calls) * 1e6
                                    for mode in ("call", "chain")}
        rows.append(row)
        log(f"[outputs] {m}x{k}x{n}: {json.dumps(row['us'])}")
    return rows


def ncu_target(torch, shapes) -> list[dict]:
    """The process Nsight Compute profiles (--profile-from-start off): per shape, after a warm-up,
    two launches each of w8a8_linear's fused GEMM and of the raw GEMM on the same plan, between
    cudaProfilerStart and cudaProfilerStop; nothing else is traced (ncu owns CUPTI here)."""
    import mlx.core as mx

    from int8nax.backends import cuda

    rows = []
    for m, k, n in shapes:
        _, w, s, q, sx, plan, kernel = w8a8_problem(mx, cuda, m, k, n)
        fused = lambda: cuda.dequant_graph(q, sx, w, s, cuda._no_bias(), mx.float16, kernel, plan, False)  # noqa: E731
        raw = lambda: cuda.gemm_graph(q, w, kernel, plan)  # noqa: E731
        for _ in range(2):
            mx.eval(fused(), raw())
        torch.cuda.profiler.start()
        for _ in range(2):
            mx.eval(fused())
            mx.eval(raw())
        torch.cuda.profiler.stop()
        rows.append({"shape": [m, k, n], "plan": plan.name, "kernel": kernel})
        log(f"[ncu-target] {m}x{k}x{n} {plan.name}")
    return rows


def host(shapes, calls: int, repeat: int) -> list[dict]:
    import mlx.core as mx

    import int8nax
    from int8nax import api, backends
    from int8nax.backends import cuda
    from int8nax.bench import contenders, timing

    def per_call(build) -> float:
        """µs per lazy call, as the measuring layer's host mode times it (never evaluated)."""
        return timing.median_seconds(lambda: [build() for _ in range(calls)], repeat, warmup=1) / calls * 1e6

    rows = []
    for m, k, n in shapes:
        rng = np.random.default_rng(0)
        a = mx.array(rng.integers(-128, 128, (m, k), dtype=np.int8))
        b = mx.array(rng.integers(-128, 128, (n, k), dtype=np.int8))
        x = mx.array(rng.standard_normal((m, k)).astype(np.float16))
        s = mx.array(rng.uniform(1e-3, 1e-2, n).astype(np.float32))
        mx.eval(a, b, x, s)
        floor = contenders.get("mlx-floor").ready(m, k, n)
        gemm = cuda._gemm_for_shape(m, n, k)
        full = cuda._w8a8_for_shape(m, n, k, False)
        impl = backends.resolve("cuda")
        ident = mx.custom_function(lambda u: u)
        mx.eval(int8nax.int8_matmul(a, b), int8nax.w8a8_linear(x, b, s))
        layers = {
            "mx.add (a + a)": lambda: a + a,
            "mx.stop_gradient(a)": lambda: mx.stop_gradient(a),
            "a.reshape(m, k)": lambda: a.reshape(m, k),
            "mx.custom_function identity": lambda: ident(a),
            "floor kernel (mlx-floor)": lambda: floor.call(None),
            "int8_matmul: compiled graph": lambda: gemm(a, b),
            "int8_matmul: backend object": lambda: impl.int8_matmul(a, b),
            "int8_matmul: backend='cuda'": lambda: int8nax.int8_matmul(a, b, backend="cuda"),
            "int8_matmul: public": lambda: int8nax.int8_matmul(a, b),
            "w8a8: compiled graph": lambda: full(x, b, s, cuda._no_bias()),
            "w8a8: backend object": lambda: impl.w8a8_linear(x, b, s, None),
            "w8a8: public": lambda: int8nax.w8a8_linear(x, b, s),
            "quantize_activations: public": lambda: api.quantize_activations(x),
        }
        row = {"shape": [m, k, n], "us": {}}
        for label, build in layers.items():
            try:
                row["us"][label] = per_call(build)
            except Exception as exc:  # noqa: BLE001
                row["us"][label] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
        log(f"[host] {m}x{k}x{n}: {json.dumps(row['us'])}")
    return rows


def markdown(section: str, rows: list[dict]) -> str:
    lines = [f"## {section}", ""]
    if section == "timeline":
        lines += ["| shape | contender | mode | build | eval | eval->launch | launch->kernel | kernels (us) | "
                  "after last kernel | top API in eval |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            shape = "x".join(map(str, r["shape"]))
            if "error" in r:
                lines.append(f"| {shape} | {r['contender']} | | {r['error'][:80]} |||||||")
            elif r["mode"] == "call":
                md = r["median"]
                api = ", ".join(f"{k} {v:.1f}" for k, v in sorted(md.get("api", {}).items(), key=lambda kv: -kv[1])[:3])
                lines.append(f"| {shape} | {r['contender']} | call | {fmt(md.get('build_us'))} | {fmt(md.get('eval_us'))} | "
                             f"{fmt(md.get('eval_to_launch_us'))} | {fmt(md.get('launch_to_kernel_us'))} | "
                             f"{fmt(md.get('kernel_us'))} ({fmt(md.get('kernels'), '.0f')}) | "
                             f"{fmt(md.get('after_last_kernel_us'))} | {api} |")
            else:
                c = r["result"]
                lines.append(f"| {shape} | {r['contender']} | chain of {c['calls']} | {fmt(c['build_per_call_us'])} | "
                             f"{fmt(c['wall_per_call_us'])} per call | GPU idle first {fmt(c.get('gpu_idle_before_first_kernel_us'))} | "
                             f"graphs {c['graph_launches']} | busy {fmt(c.get('gpu_busy_per_call_us'))}, "
                             f"gaps {fmt(c.get('gpu_gaps_per_call_us'))} per call | {fmt(c.get('after_last_kernel_us'))} | |")
    elif section == "w8a8":
        lines += ["| shape | plan | W8A8 kernels (us) | W8A8 total | raw total | W8A8 / raw |", "|---|---|---|---|---|---|"]
        for r in rows:
            v = r["dispatch"]
            ks = ", ".join(f"{k.split(':', 1)[1][:28]} {u:.1f}" for k, u in v["w8a8"].items() if k not in ("total", "error"))
            wt, rt = v["w8a8"].get("total"), v["raw"].get("total")
            ratio = f"{wt / rt:.2f}" if wt and rt else ""
            lines.append(f"| {'x'.join(map(str, r['shape']))} | {v['plan']} | {ks} | {fmt(wt)} | {fmt(rt)} | {ratio} |")
    elif section == "outputs":
        lines += ["| shape | what | one call + eval (us) | chain, per call (us) |", "|---|---|---|---|"]
        for r in rows:
            for label, v in r["us"].items():
                lines.append(f"| {'x'.join(map(str, r['shape']))} | {label} | {fmt(v['call'])} | {fmt(v['chain'])} |")
    elif section == "ncu-target":
        lines += [f"- {'x'.join(map(str, r['shape']))}: {r['kernel']} {r['plan']}, 2 fused + 2 raw launches profiled"
                  for r in rows]
    else:
        labels = list(rows[0]["us"]) if rows else []
        lines += ["| layer | " + " | ".join("x".join(map(str, r["shape"])) for r in rows) + " |",
                  "|---|" + "---|" * len(rows)]
        for label in labels:
            lines.append(f"| {label} | " + " | ".join(fmt(r["us"][label]) for r in rows) + " |")
    return "\n".join(lines) + "\n"


def fmt(v, spec: str = ".1f") -> str:
    return format(v, spec) if isinstance(v, (int, float)) else ("" if v is None else str(v)[:40])


def skip_reason() -> str | None:
    try:
        import mlx.core as mx
        import torch
    except ImportError as exc:
        return f"needs mlx and torch: {exc}"
    if not (getattr(mx, "cuda", None) and mx.cuda.is_available()) or not torch.cuda.is_available():
        return "needs MLX's CUDA backend and torch with CUDA"
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sections", default="timeline,w8a8,host")
    parser.add_argument("--shapes", help="MxKxN,... for timeline and host (default: 16x4096x4096,512x4096x4096,512x3584x18944)")
    parser.add_argument("--w8a8-shapes", help="MxKxN,... for w8a8 (default: the 11 seed shapes)")
    parser.add_argument("--chain-calls", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parse = lambda text: [tuple(int(v) for v in t.split("x")) for t in text.split(",")]  # noqa: E731
    shapes = parse(args.shapes) if args.shapes else SHAPES
    w8a8_shapes = parse(args.w8a8_shapes) if args.w8a8_shapes else W8A8_SHAPES
    reason = skip_reason()
    if reason:
        (out / "cuda_profile.md").write_text(f"# cuda_profile\n\nSKIPPED: {reason}\n")
        log(f"SKIP: {reason}")
        return 3
    import torch

    torch.zeros(1, device="cuda")  # torch's context and CUPTI first
    report = ["# cuda_profile", ""]
    for section in [s for s in args.sections.split(",") if s]:
        t0 = time.time()
        if section == "timeline":
            rows = timeline(torch, shapes, args.chain_calls, args.repeat)
        elif section == "w8a8":
            rows = w8a8(torch, w8a8_shapes, 20)
        elif section == "host":
            rows = host(shapes, 200, 7)
        elif section == "ncu-target":
            rows = ncu_target(torch, w8a8_shapes)
        elif section == "outputs":
            rows = outputs(shapes, args.chain_calls, 7)
        else:
            parser.error(f"unknown section {section!r}")
        (out / f"{section}.json").write_text(json.dumps(rows, indent=1))
        report.append(markdown(section, rows))
        (out / "cuda_profile.md").write_text("\n".join(report))
        log(f"== {section}: {time.time() - t0:.0f} s")
    log("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
