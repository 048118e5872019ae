"""W8A8 on every plan the CUDA dispatch could give a shape, in kernel time
(`int8nax compare --mode kernel --plans`, CUDA only): the evidence behind the dispatch rules
(tests/data/cuda_dispatch_evidence.json, docs/cuda.md), reproduced by one command.

Per (M, K, N) (default: the seed shapes, problems.SEED_SHAPES, and the sibling-fused layers of
the GPU model configurations, model_shapes()):

    int8_matmul       the raw GEMM as the dispatch runs it (kernel mode's item: its time, its
                      kernel, bit-exact against the int64 product)
    plans:<dtype_bias> for each W8A8 dtype/bias (x's dtype, with or without a bias; --w8a8,
                      default bfloat16): backends.cuda.w8a8(x, w, scale_w, bias, variant, plan) on
                      every distinct candidate of plan_candidates(), each against int8_matmul's
                      time; the dispatch's own choice is the default
    plans:int8_matmul (--raw-plans) the raw GEMM, backends.cuda.gemm_int32(a, b, variant, plan), on
                      every candidate of plan_candidates(w8a8=False), its default checked
                      bit-exactly against the int64 product

Method and operands are kernel mode's (CUPTI kernel time, median of --launches launches rotating
over input copies covering ROTATE_L2 x the L2, the same x, w, scales and bias as its W8A8 items,
cases; a worker process writing one JSON line per item, worker; --time-limit).
Checks: the default plan's output within 1 ulp of the float64 model on kernel mode's checked
rows, and every other plan's output bit-identical to the default's over the whole output; a plan that differs is MISMATCH and its
time is dropped (all of them where the default itself is off the model).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from functools import partial

from ...backends.cuda import choice as cuda_choice, plans as cuda_plans
from . import cupti
from . import cases as kc
from . import mode as kt
from . import worker as kw
from ..estimate import shape_text
from ..text import table_lines
from ..problems import SEED_SHAPES, Shape

PLANS = "plans:"
"""Subject prefix of an item that times every plan of one W8A8 dtype/bias (or the raw GEMM) at one
shape."""

RAW = "int8_matmul"
"""What plans:<...> names for the raw GEMM (int8_matmul's plans) instead of a W8A8 dtype/bias."""

DEFAULT_W8A8 = ("bfloat16",)
"""The W8A8 dtype/bias swept by default (the models' dtype; --w8a8 picks others)."""

MODEL_TOKENS = (512, 2048, 4096)
"""The M (prefill tokens) of the model layers among the default shapes."""

WORKER_MODULE = "int8nax.bench.kernel.plans"

PROG = "int8nax compare --mode kernel --plans"


# ---- the candidates (pure: no GPU, no MLX) ----------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    """One plan to time: the Choice (kernel variant and plan) and why it is a candidate (names, e.g.
    "default", "raw GEMM's", "tma wg2_128x192"; several where candidates coincide)."""

    names: tuple[str, ...]
    choice: cuda_choice.Choice

    def describe(self) -> str:
        return self.choice.describe()


def plan_candidates(m: int, n: int, k: int, sms: int = cuda_choice.DEFAULT_SMS, w8a8: bool = True, *,
                    bias: bool = False, out_dtype: str | None = None, family: str = "sm90",
                    override: str | None = "auto") -> list[Candidate]:
    """Every (variant, plan) the dispatch knows for an [M, K] x [N, K] GEMM (w8a8: w8a8_linear's,
    with `bias` and the output dtype's name) on a GPU of `family` with `sms` SMs, one per
    Choice.describe(), the first occurrence's order, the dispatch's own choice first (under
    `override`, an INT8NAX_CUDA_KERNEL value):

    - the dispatch's choice ("default"); for W8A8 also the raw GEMM's choice ("raw GEMM's");
    - tma-unspecialized, unsplit, on each tile it is built for ("tma <tile>"), except the
      128-row tiles at M <= 64 (half of every stage would be padding: tma_plan's rule);
    - from M = 65: at long K (cuda_plans.long_k) the TMA kernel's split plan ("tma split") and
      cp.async's plan on it ("tma on cp.async's plan"), as tma_plan gives them there; the
      cooperative kernel's plan ("cooperative"), its 128 x 256 tile unsplit ("cooperative
      128x256 unsplit") and the ping-pong kernel's plan ("ping-pong") (the dispatch takes no
      persistent kernel at M <= 64);
    - at M <= 64: the cp.async kernel's split plan ("cp.async") and, where it takes the shape, the
      GEMV's plan ("gemv"), each of its configs and trial schedules ("gemv <config>",
      cuda_plans.GEMV_CONFIGS and GEMV_TRIALS) and for W8A8 each with x quantized inside ("gemv
      <config> fused"; the rule takes it where cuda_plans.gemv_inside says);
    - for the raw GEMM (not w8a8), right after every candidate that splits K on a variant with an
      atomic kernel, the same plan with its splits added into the zero-filled output
      ("<its names> atomic": reduce="atomic", cuda_plans.REDUCTIONS), timed beside the workspace
      form and checked against the default like every other plan (no rule takes it yet).

    Only variants the family runs and whose supports() takes the problem are listed (K % 16 != 0:
    no TMA kernel). ValueError naming the argument for a non-positive size or SM count, or an
    unknown family or override."""
    for name, value in (("m", m), ("n", n), ("k", k), ("sms", sms)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"plan_candidates: '{name}' must be a positive int, got {value!r}")
    C = cuda_choice
    problem = C.Problem(m, n, k, w8a8, bias, out_dtype, sms)
    found: list[tuple[str, C.Choice]] = [
        ("default", C.choose(m, n, k, w8a8=w8a8, bias=bias, out_dtype=out_dtype, sms=sms, family=family,
                             override=override))]
    if w8a8:
        found.append(("raw GEMM's", C.choose(m, n, k, sms=sms, family=family, override=override)))

    def add(why: str, variant: str, plan=None) -> None:
        row = C.VARIANTS[variant]
        if row.family in C.RUNS[family] and row.supports(problem):
            found.append((why, C.Choice(variant, row.plan(problem) if plan is None else plan)))

    small = m <= 64
    for cfg in C.VARIANTS[C.TMA].configs:
        if not (small and cfg.bm > 64):
            add(f"tma {cfg.name}", C.TMA, cuda_plans.CudaPlan(cfg, 1))
    if small:
        add("cp.async", C.CPASYNC)
        add("gemv", C.GEMV)
        # Each GEMV width and trial schedule, and for W8A8 both of its forms (x quantized by its own
        # kernel first, or inside the GEMV, at any size of x): the evidence behind GEMV_DEFAULT,
        # gemv_plan and GEMV_QUANTIZE_INSIDE.
        for cfg in (*cuda_plans.GEMV_CONFIGS.values(), *cuda_plans.GEMV_TRIALS.values()):
            add(f"gemv {cfg.name}", C.GEMV, cuda_plans.GemvPlan(cfg, False if w8a8 else None))
            if w8a8 and out_dtype in cuda_plans.ITEMSIZE:
                add(f"gemv {cfg.name} fused", C.GEMV, cuda_plans.GemvPlan(cfg, True))
    else:
        if cuda_plans.long_k(k):  # the plans tma_plan gives at long K besides the unsplit tiles
            wave = cuda_plans.wave_tile(m, n, sms)
            add("tma split", C.TMA, cuda_plans.split_plan(m, n, k, wave, sms))
            add("tma on cp.async's plan", C.TMA, cuda_plans.cpasync_plan(m, n, k, sms))
        add("cooperative", C.COOPERATIVE)
        if C.VARIANTS[C.COOPERATIVE].supports(problem):
            large = cuda_plans.COOPERATIVE_CONFIGS["ws_128x256"]
            add("cooperative 128x256 unsplit", C.COOPERATIVE,
                cuda_plans.persistent_plan(m, n, k, large, sms, split=False))
        add("ping-pong", C.PINGPONG)
    if not w8a8:
        found = [entry for why, choice in found for entry in [(why, choice)] + _atomic_twin(why, choice)]
    merged: dict[str, tuple[list[str], C.Choice]] = {}
    for why, choice in found:
        names, _ = merged.setdefault(choice.describe(), ([], choice))
        if why not in names:
            names.append(why)
    return [Candidate(tuple(names), choice) for names, choice in merged.values()]


def _atomic_twin(why: str, choice: cuda_choice.Choice) -> list[tuple[str, cuda_choice.Choice]]:
    """[(why + " atomic", the same plan with reduce="atomic")] for a raw GEMM's candidate that splits
    K on a variant with an atomic kernel (cuda_choice.Specs.int32_atomic), else []."""
    plan = choice.plan
    if getattr(plan, "splits", 1) < 2 or cuda_choice.VARIANTS[choice.variant].specs(plan.cfg).int32_atomic is None:
        return []
    return [(f"{why} atomic", cuda_choice.Choice(choice.variant, replace(plan, reduce=cuda_plans.ATOMIC)))]


# ---- the shapes --------------------------------------------------------------------------------

def layer_shapes(config) -> list[tuple[str, int, int]]:
    """(name, K, N) of a decoder layer's projections as int8nax runs them with sibling fusion
    (nn.quantize_linears: q, k and v one GEMM, gate and up one): q|k|v, o, gate|up, down, from a
    bench.models.Config."""
    q, kv = config.heads * config.head_dim, config.kv_heads * config.head_dim
    return [("q|k|v", config.hidden, q + 2 * kv), ("o", q, config.hidden),
            ("gate|up", config.hidden, 2 * config.intermediate), ("down", config.intermediate, config.hidden)]


def model_shapes(configs=None, tokens=MODEL_TOKENS) -> dict[Shape, list[str]]:
    """{(M, K, N): ["qwen2.5-7b q|k|v", ...]} of each configuration's fused layers at each M;
    `configs` names them (default: the full profile's, models.PROFILE_CONFIGS)."""
    from ..models import CONFIGS, PROFILE_CONFIGS

    out: dict[Shape, list[str]] = {}
    configs = PROFILE_CONFIGS["full"] if configs is None else configs
    for name in configs:
        for m in tokens:
            for layer, k, n in layer_shapes(CONFIGS[name]):
                out.setdefault((m, k, n), []).append(f"{name} {layer}")
    return out


def default_shapes() -> tuple[list[Shape], dict[Shape, list[str]]]:
    """(shapes, labels): the seed shapes, then the model layers' shapes not among them; labels
    name the model layers a shape is."""
    labels = model_shapes()
    return list(dict.fromkeys([*SEED_SHAPES, *labels])), labels


def plan_items(shapes, w8a8=DEFAULT_W8A8, raw: bool = False) -> list[kw.Item]:
    """Shape by shape: the raw GEMM, its plans (raw), then each W8A8 dtype/bias's plans (a budget
    cut keeps whole shapes)."""
    items = []
    for shape in shapes:
        items.append(kw.Item("int8_matmul", tuple(shape)))
        items += [kw.Item(f"{PLANS}{v}", tuple(shape)) for v in ((RAW,) if raw else ()) + tuple(w8a8)]
    return items


# ---- the worker (runs on the GPU) ---------------------------------------------------------------

class CudaDispatch:
    """What the worker asks of the CUDA backend: its choice, its candidates, a call on a plan.
    (Tests stand in another.)"""

    def __init__(self):
        from ...backends.cuda import backend, device, probe, settings

        self.cuda, self.device, self.probe, self.settings = backend, device, probe, settings

    @property
    def sms(self) -> int:
        return self.probe.sm_count()

    def candidates(self, m: int, n: int, k: int, w8a8: bool, bias: bool = False,
                   dtype=None) -> tuple[cuda_choice.Choice, list[Candidate]]:
        """(the dispatch's choice here, plan_candidates on this GPU) for int8_matmul or (w8a8)
        w8a8_linear with x of `dtype`."""
        name = None if dtype is None else str(dtype).split(".")[-1]
        cands = plan_candidates(m, n, k, self.sms, w8a8, bias=bias, out_dtype=name,
                                family=self.device.family_for(self.device.compute_capability()),
                                override=self.settings.kernel_choice())
        return cands[0].choice, cands  # plan_candidates lists the dispatch's choice first

    def call(self, operands, choice: cuda_choice.Choice):
        """The call on one set of operands: (a, b) int8_matmul's, (x, w, scale_w, bias) w8a8_linear's."""
        if len(operands) == 2:
            return self.cuda.gemm_int32(*operands, variant=choice.variant, plan=choice.plan)
        x, w, s, bias = operands
        return self.cuda.w8a8(x, w, s, bias, variant=choice.variant, plan=choice.plan)


def same_bits(mx, got, want) -> str | None:
    """None where `got` and `want` hold the same bits everywhere, else how many outputs differ."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"shape/dtype {got.shape} {got.dtype} differs from the default's {want.shape} {want.dtype}"
    bits = {2: mx.uint16, 4: mx.uint32}[got.dtype.size]
    bad = int(mx.sum(got.view(bits) != want.view(bits)).item())
    return None if bad == 0 else f"{bad} of {got.size} outputs differ in bits from the default plan's"


def measure_plans(item: kw.Item, ctx: dict) -> dict:
    """A plans:<dtype_bias> (or plans:int8_matmul) item's record: the default plan and every
    candidate (candidates: a list of {plan, variant (the kernel's), names, default, us, parts}, or
    {..., mismatch, timed_us} for a wrong output, {..., unchecked, timed_us} where the default's
    output is wrong or missing, {..., error} where the plan raised), each timed, then checked."""
    import mlx.core as mx

    m, k, n = item.shape
    swept = item.subject.removeprefix(PLANS)  # RAW or a W8A8 dtype/bias
    dispatch = ctx.get("dispatch") or CudaDispatch()
    if swept == RAW:
        case = kc.raw_case(item.shape, ctx["l2_bytes"])
        default, cands = dispatch.candidates(m, n, k, False)
    else:
        case = kc.w8a8_case(swept, item.shape, ctx["l2_bytes"])
        default, cands = dispatch.candidates(m, n, k, True, case.bias is not None, case.dtype)
    rec = {"subject": item.subject, "shape": list(item.shape), "default": default.describe(), "sms": dispatch.sms,
           "check": f"the default plan {case.what}; every other plan bit-identical to the default's output"}
    rows = kc.checked_rows(m)
    launches, prof = ctx["launches"], ctx["profiler"]
    want, wrong = None, None
    out = []
    for c in cands:
        entry = {"plan": c.describe(), "variant": c.choice.variant, "names": list(c.names),
                 "default": c.describe() == default.describe()}
        try:
            def launch(i, c=c):
                mx.eval(dispatch.call(case.sets[i % len(case.sets)], c.choice))

            entry["us"], entry["parts"] = kc._timed(launch, prof, launches)
            got = dispatch.call(case.sets[0], c.choice)
            mx.eval(got)
            if entry["default"]:
                want, wrong = got, case.check(got, rows)
            if want is None or (wrong and not entry["default"]):
                entry["unchecked"] = (f"the default plan's output is wrong ({wrong}): nothing to compare with"
                                      if wrong else "the default plan did not run: nothing to compare with")
                entry["timed_us"] = entry.pop("us")
            elif problem := (wrong if entry["default"] else same_bits(mx, got, want)):
                entry["mismatch"] = problem
                entry["timed_us"] = entry.pop("us")
        except Exception as exc:  # noqa: BLE001  (a plan that does not build or launch is recorded)
            entry["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        out.append(entry)
    rec.update({"candidates": out, "copies": case.copies, "launches": launches})
    return rec


def measure(item: kw.Item, ctx: dict) -> dict:
    """The worker's measure: plans items here, the raw GEMM by kernel mode's (cases)."""
    return measure_plans(item, ctx) if item.subject.startswith(PLANS) else kc.measure(item, ctx)


def progress_text(rec: dict) -> str:
    if "candidates" not in rec:
        return kw.progress_text(rec)
    s = shape_summary(rec)
    if not s:
        return "no plan measured"
    return (f"{len(rec['candidates'])} plans; default {s['default_us']:.1f} us, fastest {s['fastest_us']:.1f} us "
            f"({s['fastest']})" if s.get("default_us") else f"{len(rec['candidates'])} plans; default not measured")


# ---- tables and JSON (pure) --------------------------------------------------------------------

def shape_summary(rec: dict, raw: dict | None = None) -> dict:
    """Of a plans record: the default plan and its µs, the fastest measured plan and its µs, the
    gain (default µs / fastest µs), plans measured, and the raw GEMM's µs (from `raw`, its
    int8_matmul record) with each figure's ratio to it; "variant" is the W8A8 dtype/bias swept (or
    int8_matmul). {} where no plan was measured."""
    timed = [c for c in rec.get("candidates", []) if "us" in c]
    if not timed:
        return {}
    best = min(timed, key=lambda c: c["us"])
    out = {"shape": rec["shape"], "variant": rec["subject"].removeprefix(PLANS), "default": rec.get("default"),
           "fastest": best["plan"], "fastest_us": best["us"], "measured": len(timed),
           "of": len(rec["candidates"])}
    dflt = next((c for c in timed if c.get("default")), None)
    if dflt:
        out.update({"default_us": dflt["us"], "gain": dflt["us"] / best["us"]})
    if raw and "us" in raw:
        out["raw_us"] = raw["us"]
        out["fastest_vs_raw"] = best["us"] / raw["us"]
        if dflt:
            out["default_vs_raw"] = dflt["us"] / raw["us"]
    return out


def _raw_by_shape(records) -> dict:
    return {tuple(r["shape"]): r for r in records if r["subject"] == "int8_matmul"}


def summary(records: list[dict]) -> list[dict]:
    raw = _raw_by_shape(records)
    return [s for r in records if r["subject"].startswith(PLANS)
            for s in [shape_summary(r, raw.get(tuple(r["shape"])))] if s]


def _plan_rows(rec: dict, raw_us: float | None, weight_bytes: int | None = None) -> list[list[str]]:
    """One row per candidate: µs, ratio to the raw GEMM, with `weight_bytes` the weight's stream in
    TB/s (those bytes over the time: at M <= 16 a GEMM streams its weight), the plan, marks, why it
    is a candidate; measured ones by time, then the mismatches and errors."""
    cands = rec.get("candidates", [])
    timed = sorted((c for c in cands if "us" in c), key=lambda c: c["us"])
    fastest = timed[0]["plan"] if timed else None
    rows = []
    for c in timed + [c for c in cands if "us" not in c]:
        marks = [w for w, on in (("default", c.get("default")), ("fastest", c["plan"] == fastest)) if on]
        stream = []
        if "us" in c:
            us, ratio = f"{c['us']:.1f}", f"{c['us'] / raw_us:.2f}x" if raw_us else "n/a"
            stream = [f"{weight_bytes / (c['us'] * 1e6):.2f}"] if weight_bytes else []
        else:
            us = "MISMATCH" if "mismatch" in c else "unchecked" if "unchecked" in c else "error"
            ratio = ""
            stream = [""] if weight_bytes else []
            marks.append((c.get("mismatch") or c.get("unchecked") or c.get("error", ""))[:160])
        rows.append([us, ratio, *stream, c["plan"], ", ".join(marks), ", ".join(c.get("names", []))])
    return rows


def render(records: list[dict], labels: dict | None = None, markdown: bool = False) -> str:
    """Per shape: the raw GEMM's default (µs, kernel), then per W8A8 dtype/bias every plan by time
    with its ratio to the raw GEMM, the default and the fastest marked, and a line: default
    against fastest. Then the summary table (one row per shape and dtype/bias, its column titled
    "variant") and what was not measured."""
    labels = labels or {}
    raw = _raw_by_shape(records)
    plans = [r for r in records if r["subject"].startswith(PLANS)]
    out = ["W8A8 on every plan the CUDA dispatch could give (kernel µs; /raw = µs / the raw int8_matmul's µs; "
           "every output checked: the default plan's against the float64 model (W8A8, 1 ulp) or the int64 product, "
           "the others bit-identical to it)"]
    for shape in dict.fromkeys(tuple(r["shape"]) for r in records):
        r0 = raw.get(shape)
        label = f" ({'; '.join(labels[shape])})" if labels.get(shape) else ""
        head = f"{shape_text(shape)} (M x K x N){label}: int8_matmul "
        if r0 and "us" in r0:
            head += f"{r0['us']:.1f} µs on {r0.get('describe', '?')}"
        else:
            head += kt._cell(r0)
        out += ["", ("### " if markdown else "") + head]
        for rec in (p for p in plans if tuple(p["shape"]) == shape):
            swept = rec["subject"].removeprefix(PLANS)
            if "candidates" not in rec:
                continue  # not measured: listed at the end
            out += [""] if markdown else []
            streams = shape[0] <= cuda_plans.GEMV_MAX_M  # a weight stream: its rate is the figure to read
            out += table_lines([swept, "/raw", *(["weight TB/s"] if streams else []), "plan", "", "candidate as"],
                               _plan_rows(rec, r0.get("us") if r0 else None, shape[1] * shape[2] if streams else None),
                               markdown, align_last=False)
            s = shape_summary(rec, r0)
            out.append(f"  {summary_line(s) if s else swept + ': no plan measured'}")
    sums = summary(records)
    if sums:
        rows = [[*map(str, s["shape"]), s["variant"], f"{s['default_us']:.1f}" if "default_us" in s else "n/a",
                 s.get("default") or "?", f"{s['fastest_us']:.1f}", s["fastest"],
                 f"{s['gain']:.2f}x" if "gain" in s else "n/a"] for s in sums]
        out += ["", "", "Default plan against the fastest (gain = default µs / fastest µs)", ""]
        out += table_lines(["M", "K", "N", "variant", "default µs", "default plan", "fastest µs", "fastest plan",
                            "gain"], rows, markdown, align_last=False)
        gains = [s["gain"] for s in sums if "gain" in s]
        if gains:
            best = sum(1 for g in gains if g <= 1.0)
            out += ["", f"the default is the fastest at {best} of {len(gains)}; geometric mean gain "
                        f"{kt.geomean(gains):.3f}x, largest {max(gains):.2f}x"]
    problems = [(r, None) for r in records if any(k in r for k in ("error", "mismatch", "not_run"))]
    problems += [(r, c) for r in plans for c in r.get("candidates", []) if set(c) & set(NOT_MEASURED)]
    if problems:
        out += ["", "Not measured:"]
        for r, c in problems:
            where = kw.Item(r["subject"], tuple(r["shape"])).key + (f" {c['plan']}" if c else "")
            src = c or r
            why = (src.get("mismatch") and f"MISMATCH: {src['mismatch']}"
                   or src.get("unchecked") and f"unchecked: {src['unchecked']}" or src.get("error")
                   or f"not run: {src.get('not_run')}")
            out.append(f"  {where}: {why[:300]}")
    return "\n".join(out)


def summary_line(s: dict) -> str:
    """'bfloat16: default 28.0 µs (tma-unspecialized 128x128 splits=1), fastest 22.2 µs
    (tma-unspecialized 128x144 splits=1): 1.26x' ('the default is the fastest' where it is)."""
    if "default_us" not in s:
        return f"{s['variant']}: the default plan was not measured; fastest {s['fastest_us']:.1f} µs ({s['fastest']})"
    if s["fastest"] == s["default"]:
        return f"{s['variant']}: the default is the fastest, {s['default_us']:.1f} µs ({s['default']})"
    return (f"{s['variant']}: default {s['default_us']:.1f} µs ({s['default']}), fastest {s['fastest_us']:.1f} µs "
            f"({s['fastest']}): {s['gain']:.2f}x")


NOT_MEASURED = ("mismatch", "unchecked", "error")
"""The keys of a plan's entry that has no figure."""


def failed(records: list[dict]) -> bool:
    """A wrong output anywhere, or an item or plan that raised or died."""
    return kt.failed(records) or any(set(c) & set(NOT_MEASURED) for r in records for c in r.get("candidates", []))


def to_json(records: list[dict], meta: dict) -> dict:
    return {"meta": meta, "summary": summary(records), "results": records}


# ---- command line ------------------------------------------------------------------------------

def add_arguments(parser) -> None:
    from ..models import PROFILE_CONFIGS

    parser.add_argument("--plans", action="store_true",
                        help="mode kernel: time W8A8 on every plan the CUDA dispatch could give each shape, "
                             "against the raw GEMM (default shapes: the seed shapes and the sibling-fused layers "
                             f"of {', '.join(PROFILE_CONFIGS['full'])} at M = {', '.join(map(str, MODEL_TOKENS))}; "
                             "reads --shapes, --w8a8, --raw-plans, --time-limit, --launches, --markdown, --json)")
    parser.add_argument("--raw-plans", action="store_true",
                        help="with --plans: also time the raw int8_matmul on every plan the dispatch could give it")


def usage_error(args) -> str | None:
    """Why these options do not go with --plans (None: they do)."""
    if getattr(args, "raw_plans", False) and not getattr(args, "plans", False):
        return "--raw-plans needs --plans"
    if getattr(args, "mode", ("kernel",)) != ("kernel",):
        return "--plans needs --mode kernel"
    if getattr(args, "bf16", False):
        return "--plans does not take --bf16 (that is --mode kernel without --plans)"
    if getattr(args, "w8a8", None) == () and not getattr(args, "raw_plans", False):
        return "--plans needs a W8A8 variant (--w8a8) or --raw-plans"
    return None


def main(args) -> int:
    """`int8nax compare --mode kernel --plans`. Exit status: 0 every plan measured and checked
    (or not reached in the budget), 1 a wrong output or a failed item or plan, 2 a usage error or
    nothing can be measured here."""
    why = usage_error(args)
    if why:
        print(f"int8nax compare: error: {why}", file=sys.stderr)
        return 2
    why = cupti.skip_reason()
    if why:
        print(f"{PROG}: {why}; nothing was measured.", file=sys.stderr)
        return kt.NO_CUDA_EXIT
    budget, launches = getattr(args, "time_limit", kt.BUDGET_S), getattr(args, "launches", kw.LAUNCHES)
    w8a8 = getattr(args, "w8a8", None)
    w8a8 = DEFAULT_W8A8 if w8a8 is None else w8a8
    raw = getattr(args, "raw_plans", False)
    shapes, labels = default_shapes()
    if getattr(args, "shapes", None):
        shapes = [tuple(s) for s in args.shapes]
    items = plan_items(shapes, w8a8, raw)
    meta = kt.environment()
    meta.update({"launches": launches, "budget_s": budget, "command": "int8nax " + " ".join(sys.argv[1:]),
                 "labels": {shape_text(s): labels[s] for s in shapes if s in labels}})
    swept = ", ".join(((RAW,) if raw else ()) + tuple(w8a8))
    print(f"{PROG}: {len(items)} items over {len(shapes)} shapes, plans of {swept}; "
          f"{kt.run_line(meta, budget)}", flush=True)
    t0 = time.time()
    records = kw.run_items(items, budget, launches, spawn=partial(kw.spawn_worker, module=WORKER_MODULE))
    meta["seconds"] = round(time.time() - t0, 1)
    kt.report(render(records, labels, getattr(args, "markdown", False)), to_json(records, meta), meta, launches,
              getattr(args, "json", None))
    return 1 if failed(records) else 0


if __name__ == "__main__":
    sys.exit(kw.worker_main(measure, progress=progress_text))
