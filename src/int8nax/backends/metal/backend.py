"""Metal NAX backend (Apple M5), the runtime: detection, the layout probe, the first-use
self-test and the selection of a kernel variant, and the launches (int8 GEMM, activation
quantization, the W8A8 GEMM with fused dequantization; M <= tiling.METAL_MV_MAX_M takes the
small-M kernel). The sources and the catalogue of builds are metal_source.py's.

NOT YET RUN ON M5 HARDWARE. docs/metal.md says what is verified without it and how (emulator,
g++ stand-in with a flushing-GPU mode, clang address-space check, lint, launch recorder).

Detection (nax_support): Metal present, an Apple GPU of generation >= 17 (M5; phones 'p' need
18), macOS >= 26.4 (int8 tensor ops). Then, the first time anything asks whether this backend
can run (the first int8nax call on the GPU, or int8nax.info()), the selection runs once:
  1. the layout probe (nax_layout.metal) reports where the int8 cooperative tensors keep each
     lane's elements (it asks get_multidimensional_index of the *input* tensors, which no code
     run on an M5 is known to do);
  2. the MLX-layout load path (cider's layout, bit-exact on an M5 Pro) is built whatever the
     probe said: matching, failing to build or run, or reporting another layout;
  3. the bit-exact first-use self-test (exactness.first_use_check) decides: if the MLX-layout
     path fails it, the generic path (coordinates asked of the tensors) is tried;
  4. a variant that passes serves the process, and the probe's reason (int8nax.info()) names
     it and says what the probe said and what the self-test decided; if none passes, NAX is
     refused for the rest of the process with the reason, so auto mode falls back and an
     explicit backend="nax" raises instead of returning wrong numbers.

Threadgroups within the pipeline's limit: MLX refuses (ValueError, at evaluation) a launch
whose threadgroup exceeds the compiled pipeline's maxTotalThreadsPerThreadgroup, which depends
on the kernel's register use. KernelSet evaluates the first launch of every build, catches that
refusal, and serves the call (and every later one of that build) in a tile of at most that many
threads with the same 32 x 32 sub-tile (tiling.metal_fallback_config: 256 threads, then 128;
the quantizer falls back to one simdgroup); no call raises for it.

API for reports (int8nax selftest; docs/metal.md, "API for the selftest report"): variants(),
variant_named(), KernelVariant, BACKEND.hardware(), BACKEND.layout(), BACKEND.variant_ops(v)
(.int8_matmul/.quantize_activations/.w8a8_linear/.self_test()), BACKEND.selection(),
choose_variant(), layout_result(), probe_layout().
"""

from __future__ import annotations

import functools
import os
import platform
import re
import time
import warnings
from dataclasses import dataclass, replace

import mlx.core as mx
import numpy as np

from ... import exactness, nax_emulator, quant, tiling
from . import source as metal_source, tiles as metal_tiles
from ..base import Backend, Probe, refused_by_trace
from .source import LOAD_GENERIC, LOAD_MLX_LAYOUT, KernelVariant, variant_named, variants


# ---------------------------------------------------------------------------------------------
# Detection
# ---------------------------------------------------------------------------------------------

ARCH_PATTERN = re.compile(r"applegpu_g(\d+)([a-z])")
NAX_MIN_GENERATION = 17
"""M5 family (applegpu_g17*): the first Macs with neural accelerators in the GPU."""
NAX_MIN_GENERATION_PHONE = 18
"""Phone GPUs (class letter 'p') get them one generation later (A19)."""
NAX_MIN_MACOS = (26, 4)
"""8-bit integer tensor operations arrived in macOS 26.4."""


def _parse_version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts = re.findall(r"\d+", text)
    return tuple(int(p) for p in parts) if parts else None


def nax_support(metal_available: bool, architecture: str | None, macos: str | None) -> Probe:
    """Whether NAX int8 can run, from what the machine reports (a pure function, so that it can
    be tested anywhere). `architecture` is mx.device_info()["architecture"] (e.g.
    "applegpu_g17s"); `macos` is platform.mac_ver()[0] (e.g. "26.4.1"; "" off macOS)."""
    if not metal_available:
        return Probe(False, "Metal is not available (not macOS, or an MLX build without Metal)")
    match = ARCH_PATTERN.fullmatch(architecture or "")
    if match is None:
        return Probe(
            False, f"GPU architecture {architecture!r} is not an Apple GPU name like 'applegpu_g17s'"
        )
    generation, klass = int(match.group(1)), match.group(2)
    needed = NAX_MIN_GENERATION_PHONE if klass == "p" else NAX_MIN_GENERATION
    if generation < needed:
        return Probe(
            False,
            f"Apple GPU generation {generation} ({architecture}) has no neural accelerators; "
            f"NAX needs generation >= {needed} (M5 or newer)",
        )
    version = _parse_version(macos)
    want = ".".join(map(str, NAX_MIN_MACOS))
    if version is None:
        return Probe(False, f"macOS version unknown ({macos!r}); NAX int8 needs macOS >= {want}")
    if version[:2] < NAX_MIN_MACOS:
        return Probe(
            False, f"macOS {macos} lacks int8 tensor operations; NAX int8 needs macOS >= {want}"
        )
    return Probe(True, f"{architecture} on macOS {macos}")


def machine_report() -> tuple[bool, str | None, str | None]:
    """(Metal available, GPU architecture, macOS version) of this machine."""
    available = bool(mx.metal.is_available())
    architecture = None
    if available:
        try:
            architecture = mx.device_info(mx.gpu).get("architecture")
        except Exception:  # an MLX without device_info(device): ask the default device
            architecture = mx.device_info().get("architecture")
    return available, architecture, platform.mac_ver()[0]


# ---------------------------------------------------------------------------------------------
# Kernel objects (the sources: metal_source.py)
# ---------------------------------------------------------------------------------------------


THREADGROUP_LIMIT = re.compile(
    r"Thread group size \((\d+)\) is greater than\s+the maximum allowed threads per threadgroup \((\d+)\)")
"""MLX's refusal of a launch whose threadgroup exceeds the pipeline's maxTotalThreadsPerThreadgroup
(a ValueError from CustomKernel::eval_gpu, mlx/backend/metal/custom_kernel.cpp, raised when the
graph is evaluated; MLX writes two spaces after "than")."""


def threadgroup_limit(exc: BaseException) -> int | None:
    """The pipeline's maxTotalThreadsPerThreadgroup named by MLX's refusal, or None for any other error."""
    match = THREADGROUP_LIMIT.search(str(exc)) if isinstance(exc, ValueError) else None
    return int(match.group(2)) if match else None


class ThreadgroupLimitError(RuntimeError):
    """A kernel whose pipeline allows fewer threads than every form int8nax can launch it in."""


class KernelSet:
    """The backend's compiled-on-demand kernels. `factory` is mx.fast.metal_kernel; tests pass
    a recorder (or the g++ stand-in) to check the launches without Metal.

    Every launch goes through launch(), which records each distinct instantiation it asks for:
    MLX builds one Metal library per (kernel, template arguments, input dtypes, inputs in the
    `constant` address space), so builds() is this process's list of library builds.

    The first launch of each build is evaluated at once (with time_builds set, as int8nax
    selftest does, timed: the build and one run, in seconds). That is where MLX checks the
    threadgroup against the pipeline's maxTotalThreadsPerThreadgroup, which depends on the
    compiled kernel's register use: a refusal is caught there, the limit remembered for that
    build, and the call relaunched in the smaller form `refit(limit)` gives (a 256-thread tile
    of the same sub-tile for a GEMM), so that no call raises for it. Later launches of a refused
    build go straight to the smaller form."""

    def __init__(self, factory=None, evaluate=None):
        self._factory = factory
        self._evaluate = evaluate or mx.eval
        """mx.eval; tests pass one that raises for some outputs, as MLX's eval_gpu does."""
        self._built = {}
        self._builds: dict = {}
        self._checked: set = set()
        self._limits: dict = {}
        self.time_builds = False

    def __getitem__(self, name: str):
        if name not in self._built:
            spec = metal_source.kernel_spec(name)
            factory = self._factory or mx.fast.metal_kernel
            self._built[name] = factory(
                name=spec.name,
                input_names=list(spec.input_names),
                output_names=list(spec.output_names),
                source=spec.source,
                header=spec.header,
                ensure_row_contiguous=True,
                # safe: the dequantization's error-free transformations and the quantization's
                # isfinite() must not be reassociated or assumed away.
                compile_options={"math_mode": "safe"},
            )
        return self._built[name]

    @staticmethod
    def instantiation(name: str, call: dict) -> metal_source.Instantiation:
        """The build a launch of kernel `name` with `call` (metal_kernel's arguments) asks for."""
        spec = metal_source.KERNELS[name]
        return metal_source.Instantiation(
            name, metal_source.template_key(call.get("template", ())),
            tuple((n, metal_source.dtype_name(a.dtype)) for n, a in zip(spec.inputs, call["inputs"])),
            tuple((n, metal_source.dtype_name(d)) for n, d in zip(spec.outputs, call["output_dtypes"])),
            metal_source.constant_inputs((n, a.size) for n, a in zip(spec.inputs, call["inputs"])))

    def launch(self, name: str, refit=None, **call) -> list:
        """kernels[name](**call), its first launch per build evaluated (see the class).
        `refit(max_threads)` gives the call in a form of at most max_threads threads per
        threadgroup, or None when there is none."""
        inst = self.instantiation(name, call)
        key = inst.key
        threads = int(np.prod(call["threadgroup"]))
        limit = self._limits.get(key)
        if limit is not None and threads > limit:
            return self._refit(name, refit, inst, limit)
        if key not in self._builds:
            self._builds[key] = [inst, None]
        if key in self._checked:
            return self[name](**call)
        start = time.perf_counter()
        try:
            # MLX 0.32 checks the threadgroup when the graph is evaluated; the call is inside
            # the try too, for an MLX that checks it at once.
            outs = self[name](**call)
            self._evaluate(outs)
        except ValueError as exc:
            limit = threadgroup_limit(exc)
            if limit is None:
                if refused_by_trace(exc):  # inside mx.compile / mx.vmap: checked at a later launch
                    return outs
                raise
            self._limits[key] = limit
            return self._refit(name, refit, inst, limit)
        if self.time_builds and self._builds[key][1] is None:
            self._builds[key][1] = time.perf_counter() - start
        self._checked.add(key)
        return outs

    def _refit(self, name: str, refit, inst, limit: int) -> list:
        smaller = refit(limit) if refit else None
        if smaller is None:
            raise ThreadgroupLimitError(
                f"{inst.label()}: the Metal pipeline allows {limit} threads per threadgroup, fewer than any "
                "form int8nax can launch this kernel in")
        return self.launch(name, refit, **smaller)

    def builds(self) -> list[tuple]:
        """[(Instantiation, seconds of its first launch or None when untimed)], in build order."""
        return [tuple(entry) for entry in self._builds.values()]

    def thread_limits(self) -> dict[str, int]:
        """{build label: the pipeline's maxTotalThreadsPerThreadgroup} for every build whose
        launch MLX refused for its threadgroup size (each served in a smaller form since)."""
        return {self._builds[key][0].label(): limit for key, limit in self._limits.items()}


# ---------------------------------------------------------------------------------------------
# Launches (pure Python around the kernel objects)
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def _params_array(params: tuple) -> mx.array:
    return mx.array(params, dtype=mx.int32)


def _params(dispatch) -> mx.array:
    """The `params` input, made once per shape (an inference loop repeats its shapes)."""
    return _params_array(dispatch.params)


@functools.lru_cache(maxsize=1)
def _no_bias() -> mx.array:
    """The [1] placeholder passed for `bias` when there is none (never read), made once."""
    return mx.zeros((1,), dtype=mx.float32)


def gemm_dispatch(m: int, n: int, k: int, variant: KernelVariant, gpu: str | None = None,
                  large: tiling.NaxTileConfig | None = None):
    """(kernel suffix, dispatch, template arguments) of one GEMM launch of `variant` on GPU class
    `gpu`: "gemv" (the small-M kernel, the same for every variant) for M <= METAL_MV_MAX_M, else
    "gemm" (the NAX tile walk of tiling.metal_gemm_dispatch; `large`, the tile chosen on the
    device, replaces METAL_LARGE for M > METAL_SMALL_MAX_M)."""
    if tiling.metal_uses_gemv(m):
        d = tiling.metal_gemv_dispatch(m, n, k)
        return "gemv", d, list(d.template)
    config = large if large is not None and m > tiling.METAL_SMALL_MAX_M else None
    if config is not None and config.relaxed_precision != variant.relaxed_precision:
        config = replace(config, relaxed_precision=variant.relaxed_precision)
    d = tiling.metal_gemm_dispatch(m, n, k, gpu, variant.relaxed_precision, config)
    return "gemm", d, d.template + variant.template()


def _gemm_launch(kernels: KernelSet, kernel: str, m: int, n: int, k: int, variant: KernelVariant, gpu,
                 large, inputs, out_dtype, extra_template=()) -> mx.array:
    """One GEMM launch (int8 or W8A8) whose tile falls back to a smaller one of the same sub-tile
    (tiling.metal_fallback_config) when MLX refuses the threadgroup for the pipeline's limit."""
    schedule, d, template = gemm_dispatch(m, n, k, variant, gpu, large)

    def call_for(dispatch, tmpl) -> dict:
        return dict(inputs=inputs[:-1] + [_params(dispatch)], output_shapes=[(m, n)], output_dtypes=[out_dtype],
                    grid=dispatch.grid, threadgroup=dispatch.threadgroup, template=tmpl + list(extra_template),
                    stream=mx.gpu)

    def refit(max_threads: int):
        if schedule != "gemm":
            return None
        smaller = tiling.metal_fallback_config(d.config, max_threads)
        if smaller is None:
            return None
        fit = tiling.metal_gemm_dispatch(m, n, k, gpu, variant.relaxed_precision, smaller)
        return call_for(fit, fit.template + variant.template())

    (out,) = kernels.launch(f"{kernel}_{schedule}", refit, **call_for(d, template))
    return out


def run_int8_gemm(kernels: KernelSet, a: mx.array, b: mx.array, variant: KernelVariant = KernelVariant(),
                  gpu: str | None = None, large: tiling.NaxTileConfig | None = None) -> mx.array:
    """int32 [M, N] = a [M, K] @ b [N, K]^T on NAX (or the small-M kernel)."""
    m, k = a.shape
    return _gemm_launch(kernels, "int8nax_int8", m, b.shape[0], k, variant, gpu, large, [a, b, None], mx.int32)


def run_quantize_rows(kernels: KernelSet, x: mx.array) -> tuple[mx.array, mx.array]:
    """(int8 [M, K], float32 [max(M, 8)]) per-token quantization of float x [M, K]: scales
    past row M are not written. Padded so that the W8A8 GEMM always receives s_x in the device
    address space: an M < 8 would otherwise make MLX build another GEMM library."""
    rows, k = x.shape

    def call_for(threads: int) -> dict:
        d = tiling.metal_quant_dispatch(rows, threads)
        return dict(inputs=[x], output_shapes=[(rows, k), (max(rows, metal_source.MLX_CONSTANT_MAX_ELEMENTS),)],
                    output_dtypes=[mx.int8, mx.float32], grid=d.grid, threadgroup=d.threadgroup,
                    template=d.template, stream=mx.gpu)

    def refit(max_threads: int):
        fallback = tiling.METAL_QUANT_FALLBACK_THREADS
        return call_for(fallback) if fallback <= max_threads else None

    q, s = kernels.launch("int8nax_quantize_rows", refit, **call_for(tiling.METAL_QUANT_THREADS))
    return q, s


def run_w8a8(kernels: KernelSet, x: mx.array, w: mx.array, scale_w: mx.array, bias,
             variant: KernelVariant = KernelVariant(), gpu: str | None = None,
             large: tiling.NaxTileConfig | None = None) -> mx.array:
    """x's dtype [M, N]: quantize x per token, then the GEMM with the dequantizing epilogue; for
    M <= METAL_MV_MAX_M one launch (w8a8_decode.metal) that quantizes x in registers, with the
    same numbers bit for bit."""
    m, k = x.shape
    has_bias = bias is not None
    if tiling.metal_uses_gemv(m):
        d = tiling.metal_decode_dispatch(m, w.shape[0], k)
        (y,) = kernels.launch(
            "int8nax_w8a8_decode",
            inputs=[x, w, scale_w, bias if has_bias else _no_bias(), _params(d)],
            output_shapes=[(m, w.shape[0])],
            output_dtypes=[x.dtype],
            grid=d.grid,
            threadgroup=d.threadgroup,
            template=[("OutT", x.dtype), ("HAS_BIAS", has_bias)] + d.template,
            stream=mx.gpu,
        )
        return y
    q, s_x = run_quantize_rows(kernels, x)
    # The bias in its own dtype (the kernel widens it to float32, exactly): no extra cast kernel.
    return _gemm_launch(kernels, "int8nax_w8a8", m, w.shape[0], k, variant, gpu, large,
                        [q, w, s_x, scale_w, bias if has_bias else _no_bias(), None], x.dtype,
                        [("OutT", x.dtype), ("HAS_BIAS", has_bias)])


LAYOUT_CAPACITY = metal_source.LAYOUT_CAPACITY


def run_layout_probe(kernels: KernelSet, relaxed_precision: bool = True) -> mx.array:
    """int32 [3, SIMD, 1 + 3 * CAP]: the cooperative tensors' layout (see nax_layout.metal)."""
    simd = tiling.SIMD_WIDTH
    (out,) = kernels.launch(
        "int8nax_nax_layout",
        inputs=[mx.zeros((1,), dtype=mx.int32)],
        output_shapes=[(3, simd, 1 + 3 * LAYOUT_CAPACITY)],
        output_dtypes=[mx.int32],
        grid=(simd, 1, 1),
        threadgroup=(simd, 1, 1),
        template=list(metal_source.layout_template(relaxed_precision)),
        stream=mx.gpu,
    )
    return out


SUBNORMAL_PROBE_OPS = ("s * 1", "s + 0", "fma(s, 1, 0)", "FLT_MIN * 0.5", "max(s, 0)", "precise::divide(s, 1)")
"""What subnormal_probe.metal computes, in its output order (s a float32 subnormal)."""
SUBNORMAL = np.float32(1e-39)


def run_subnormal_probe(kernels: KernelSet) -> mx.array:
    """float32 [6]: the subnormal probe's results (see subnormal_probe.metal)."""
    tiny = np.finfo(np.float32).tiny
    x = mx.array(np.array([SUBNORMAL, tiny, 0.5, 1, 0, 0, 0, 0], np.float32))
    (out,) = kernels.launch("int8nax_subnormal_probe", inputs=[x], output_shapes=[(len(SUBNORMAL_PROBE_OPS),)],
                            output_dtypes=[mx.float32], grid=(tiling.SIMD_WIDTH, 1, 1),
                            threadgroup=(tiling.SIMD_WIDTH, 1, 1), stream=mx.gpu)
    return out


def subnormal_verdict(out) -> dict:
    """{op: "kept" | "flushed" | "other: <value>"} from the probe's output, and a "summary"."""
    want = np.array([SUBNORMAL] * 3 + [np.finfo(np.float32).tiny / 2] + [SUBNORMAL] * 2, np.float32)
    got = np.asarray(out, np.float32)
    verdict = {}
    for op, g, w in zip(SUBNORMAL_PROBE_OPS, got, want):
        verdict[op] = "kept" if g.view(np.int32) == w.view(np.int32) else "flushed" if g == 0 else f"other: {g!r}"
    kinds = set(verdict.values())
    verdict["summary"] = ("keeps float32 subnormals" if kinds == {"kept"} else
                          "flushes float32 subnormals" if kinds == {"flushed"} else
                          "mixed: " + ", ".join(f"{op} {v}" for op, v in verdict.items()))
    return verdict


def probe_subnormals(kernels: KernelSet) -> dict:
    """Run the subnormal probe on the GPU: subnormal_verdict, or {"summary": why it failed}."""
    try:
        return subnormal_verdict(np.array(run_subnormal_probe(kernels)))
    except Exception as exc:
        return {"summary": f"the subnormal probe failed ({type(exc).__name__}: {exc})"}


SMALL_M_W8A8 = [(1, 300, 37, "float16"), (tiling.METAL_MV_MAX_M, 129, 9, "bfloat16")]
"""(M, K, N, dtype) of the first-use check's extra W8A8 cases, on the small-M kernel."""


class VariantOps:
    """The three raw operations of one kernel variant (no self-test, no readiness check):
    what the first-use check runs, and what `int8nax selftest` can run for every variant."""

    def __init__(self, kernels: KernelSet, variant: KernelVariant, gpu: str | None = None,
                 large: tiling.NaxTileConfig | None = None):
        self.kernels, self.variant, self.gpu = kernels, variant, gpu
        self.large = large
        """The tile for M > METAL_SMALL_MAX_M (the one chosen on the device); None: METAL_LARGE."""

    def int8_matmul(self, a, b):
        return run_int8_gemm(self.kernels, a, b, self.variant, self.gpu, self.large)

    def quantize_activations(self, x):
        q, s = run_quantize_rows(self.kernels, x)
        return q, s[: x.shape[0]]

    def w8a8_linear(self, x, w, scale_w, bias):
        return run_w8a8(self.kernels, x, w, scale_w, bias, self.variant, self.gpu, self.large)

    COMPILE_SHAPES = {"small M": (2, 64, 40), "small tile": (33, 64, 40), "large tile": (65, 64, 40)}
    """(M, K, N) that build each GEMM kernel in each default tile configuration."""

    def compile_report(self) -> dict[str, str | None]:
        """Build and run every kernel of this variant once, in both default tile
        configurations: {"<kernel> (<tile>)": None if it built and ran, else the error text
        (MLX raises "Unable to build metal library from source" with the compiler's log)}."""
        report = {}

        def attempt(label, fn):
            try:
                mx.eval(fn())
                report[label] = None
            except Exception as exc:
                report[label] = f"{type(exc).__name__}: {exc}"

        for tile, (m, k, n) in self.COMPILE_SHAPES.items():
            schedule = gemm_dispatch(m, n, k, self.variant, self.gpu)[0]
            a = mx.zeros((m, k), dtype=mx.int8)
            b = mx.zeros((n, k), dtype=mx.int8)
            attempt(f"int8nax_int8_{schedule} ({tile})", lambda: self.int8_matmul(a, b))
            x = mx.ones((m, k), dtype=mx.float16)
            attempt(f"int8nax_w8a8_{'decode' if schedule == 'gemv' else schedule} ({tile})",
                    lambda: self.w8a8_linear(x, b, mx.ones((n,), dtype=mx.float32), mx.zeros((n,), dtype=mx.float16)))
        attempt("int8nax_quantize_rows", lambda: self.quantize_activations(mx.ones((3, 64), dtype=mx.float16)))
        return report

    def self_test(self) -> list[str]:
        """exactness.first_use_check on this variant: [] when exact, else the failures (a
        kernel that fails to build or run is one failure carrying the compiler's message)."""
        try:
            failures = exactness.first_use_check(self.int8_matmul, self.quantize_activations, self.w8a8_linear)
            # The small-M W8A8 kernel, which first_use_check's W8A8 shapes (M >= 5) do not reach.
            rng = np.random.default_rng(17)
            for m, k, n, dtype in SMALL_M_W8A8:
                x = mx.array(exactness.special_rows(rng, m, k)).astype(exactness.DTYPES[dtype])
                w, s_w = quant.quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32) * 0.05)
                bias = rng.standard_normal(n).astype(np.float32)
                problem = exactness.check_w8a8(self.w8a8_linear, x, w, s_w, bias)
                if problem:
                    failures.append(f"w8a8_linear {dtype} (M, K, N) = {(m, k, n)}: {problem}")
            return failures
        except Exception as exc:  # e.g. "Unable to build metal library from source"
            return [f"the kernels failed to build or run: {type(exc).__name__}: {exc}"]


# ---------------------------------------------------------------------------------------------
# Selection: the layout probe, then the first-use self-test of the variant built
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutProbeResult:
    """What the layout probe (nax_layout.metal) said about the int8 cooperative tensors."""

    ran: bool
    """The probe kernel built and ran."""
    matches_mlx: bool
    """Every tensor (left, right, destination) reports MLX's BaseNAXFrag layout, capacities too."""
    same: dict
    """{"left"|"right"|"dest": equal to MLX's layout}."""
    problems: tuple
    """What would break the generic path (cells held twice or never, capacities)."""
    dump: object = None
    """The raw int32 [3, SIMD, 1 + 3 * CAP] numpy dump, or None."""
    error: str = ""
    """Why the probe did not run."""
    notes: tuple = ()
    """Remarks of the verdict (e.g. a right operand reporting transposed coordinates)."""

    def summary(self) -> str:
        if not self.ran:
            return f"the layout probe failed ({self.error})"
        if self.matches_mlx:
            return ("the layout probe reports MLX's BaseNAXFrag layout for the left, right and destination tensors"
                    + "".join(f" ({note})" for note in self.notes))
        parts = ", ".join(f"{p} {'matches' if v else 'differs'}" for p, v in self.same.items())
        return f"the layout probe reports another layout than MLX's ({parts})"


def layout_result(dump) -> LayoutProbeResult:
    """Judge a probe dump against MLX's layout (nax_emulator.mlx_layout_verdict)."""
    dump = np.asarray(dump)
    same, problems, notes = nax_emulator.mlx_layout_verdict(dump)
    return LayoutProbeResult(True, all(same.values()) and not problems, same, tuple(problems), dump, "", tuple(notes))


def probe_layout(kernels: KernelSet, relaxed_precision: bool = True) -> LayoutProbeResult:
    """Run the layout probe on the GPU and judge it; a probe that fails says why."""
    try:
        return layout_result(np.array(run_layout_probe(kernels, relaxed_precision)))
    except Exception as exc:
        return LayoutProbeResult(False, False, {}, (), None, f"{type(exc).__name__}: {exc}")


PROBE_MATCHES = "matches"
PROBE_FAILED = "failed"
PROBE_DIFFERS = "differs"


def probe_outcome(layout: LayoutProbeResult) -> str:
    """What the layout probe said, in one word: PROBE_MATCHES (MLX's layout), PROBE_FAILED (it
    did not build or run) or PROBE_DIFFERS (it ran and reported something else)."""
    if not layout.ran:
        return PROBE_FAILED
    return PROBE_MATCHES if layout.matches_mlx else PROBE_DIFFERS


@dataclass(frozen=True)
class Selection:
    """Which variant serves this process, and why."""

    variant: KernelVariant | None
    """None: no variant passed its self-test, NAX is refused."""
    reason: str
    layout: LayoutProbeResult
    self_tests: dict
    """{variant name: failures} for every variant self-tested ([] = passed), in test order."""
    probe: str = PROBE_MATCHES
    """probe_outcome(layout)."""
    decided_by: str = ""
    """Who chose: "probe and self-test" (the probe reported MLX's layout and the fast path
    passed), "self-test" (the probe failed or disagreed, or the fast path failed and the
    generic one passed), "forced" (INT8NAX_METAL_VARIANT) or "refused"."""


VARIANT_ENV = "INT8NAX_METAL_VARIANT"
"""Names one variant (KernelVariant.name) to serve instead of the rule's choice, for A/B
measurements on an M5; it is still self-tested, and refused if it fails."""


def _first(failures: list[str]) -> str:
    return failures[0] + (f" (+{len(failures) - 1} more)" if len(failures) > 1 else "")


def choose_variant(layout: LayoutProbeResult, self_test, relaxed_precision: bool = True,
                   forced: KernelVariant | None = None) -> Selection:
    """The selection rule (pure: `self_test(variant) -> failures` is injected). The MLX-layout
    path (cider's layout, proven bit-exact on an M5 Pro) is self-tested first whatever the
    layout probe said: a probe that fails or disagrees never costs the fast path, because the
    bit-exact first-use self-test decides. If the MLX-layout path fails it, the generic path is
    tried before NAX is refused, so a wrong specialisation never returns numbers. `forced`
    (from INT8NAX_METAL_VARIANT) replaces the rule: only that variant is built and tested."""
    fast = KernelVariant(LOAD_MLX_LAYOUT, relaxed_precision)
    generic = KernelVariant(LOAD_GENERIC, relaxed_precision)
    outcome = probe_outcome(layout)
    candidates = [fast, generic]
    why = layout.summary()
    if forced is not None:
        candidates, fast = [forced], forced
        why = f"forced by {VARIANT_ENV} ({why})"
    passed = (f"; first-use self-test passed ({exactness.FIRST_USE_CHECKS} bit-exact/1-ulp checks)")
    results = {}
    for cand in candidates:
        failures = self_test(cand)
        results[cand.name] = failures
        if failures:
            continue
        if forced is not None:
            reason, decided = f"variant {cand.name}: {why}", "forced"
        elif cand is fast and outcome == PROBE_MATCHES:
            reason, decided = f"variant {cand.name}: {why}", "probe and self-test"
        elif cand is fast:
            reason = (f"variant {cand.name}: {why}; the MLX-layout path (cider's layout) was built anyway "
                      "and the bit-exact self-test decided")
            decided = "self-test"
        else:
            reason = f"variant {cand.name}: {why}; {fast.name} failed its self-test ({_first(results[fast.name])})"
            decided = "self-test"
        return Selection(cand, reason + passed, layout, results, outcome, decided)
    last = results[candidates[-1].name]
    tried = " and ".join(results)
    reason = (f"the first-use self-test failed ({tried}; {why}), so int8nax will not return its "
              f"numbers: {_first(last)}")
    return Selection(None, reason, layout, results, outcome, "refused")


# ---------------------------------------------------------------------------------------------
# The tile chosen on the device (the choice and its cache: metal_tiles.py)
# ---------------------------------------------------------------------------------------------

TUNE_VALUE_RANGE = (-11, 12)
"""int8 values of the timed operands: |a * b| <= 121, so sums over K = 4096 stay below 2^24 and
MLX's float32 CPU matmul is an exact reference for them."""


def time_tiles(kernels: KernelSet, variant: KernelVariant, gpu: str | None, candidates,
               shape=metal_tiles.TUNE_SHAPE, repeat: int = metal_tiles.TUNE_REPEAT,
               budget: float = metal_tiles.TUNE_BUDGET_S) -> dict:
    """{candidate name: median seconds of an int8 GEMM at `shape` (M, K, N), or why it was not
    timed}: each candidate is launched once (its build, and the threadgroup check), checked bit
    for bit against an exact reference, then timed `repeat` times (call + mx.eval); once the
    timed calls of all candidates exceed `budget` seconds the rest are not timed. A candidate
    MLX refuses for its threadgroup size is left out (it would be timed as its fallback)."""
    m, k, n = shape
    lo, hi = TUNE_VALUE_RANGE
    a = mx.random.randint(lo, hi, (m, k), key=mx.random.key(1)).astype(mx.int8)
    b = mx.random.randint(lo, hi, (n, k), key=mx.random.key(2)).astype(mx.int8)
    mx.eval(a, b)
    reference = None
    results, spent = {}, 0.0
    for cfg in candidates:
        if spent > budget:
            results[cfg.name] = f"not timed: the {budget:g} s budget was spent"
            continue
        ops = VariantOps(kernels, variant, gpu, cfg)
        refused = len(kernels.thread_limits())
        try:
            got = np.array(ops.int8_matmul(a, b))
        except Exception as exc:  # a build error of this tile: the others may still serve
            results[cfg.name] = f"failed: {type(exc).__name__}: {str(exc)[:160]}"
            continue
        if len(kernels.thread_limits()) > refused:
            results[cfg.name] = "over the pipeline's threadgroup limit"
            continue
        if reference is None:
            ref = mx.matmul(a.astype(mx.float32), b.astype(mx.float32).T, stream=mx.cpu)
            reference = np.array(ref).astype(np.int64)
        if not np.array_equal(got.astype(np.int64), reference):
            results[cfg.name] = "not exact at the timing shape: left out"
            continue
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            mx.eval(ops.int8_matmul(a, b))
            times.append(time.perf_counter() - start)
        spent += sum(times)
        results[cfg.name] = float(np.median(times))
    return results


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------


class MetalBackend(Backend):
    """The Metal NAX backend. Injection points for tests: `kernels` (a KernelSet with a recording
    factory), `machine` (the hardware report), `ops_factory(kernels, variant, gpu)` (stand-ins
    for VariantOps), `layout_probe(kernels, relaxed_precision)` (a fake probe result) and
    `tile_timer(kernels, variant, gpu, candidates)` (time_tiles on the GPU; None, the default
    for tests, keeps METAL_LARGE untimed unless INT8NAX_METAL_TILE names one)."""

    name = "metal"

    def __init__(self, kernels: KernelSet | None = None, machine=machine_report, ops_factory=VariantOps,
                 layout_probe=probe_layout, relaxed_precision: bool = True, tile_timer=None):
        self.kernels = kernels or KernelSet()
        self._machine = machine
        self._ops_factory = ops_factory
        self._layout_probe = layout_probe
        self._tile_timer = tile_timer
        self.relaxed_precision = relaxed_precision
        self._probe: Probe | None = None
        self._selection: Selection | None = None
        self._ops = None
        self.gpu: str | None = None
        self.architecture: str | None = None
        self.tiles: metal_tiles.TileChoice | None = None
        """The tile serving M > METAL_SMALL_MAX_M and how it was chosen (after first use)."""

    # --- the API for reports (int8nax selftest): see docs/metal.md -------------------------
    def hardware(self) -> Probe:
        """Whether the machine qualifies (nax_support), before any kernel is built."""
        available, architecture, macos = self._machine()
        self.gpu = tiling.gpu_class(architecture)
        self.architecture = architecture
        return nax_support(available, architecture, macos)

    def variant_ops(self, variant: KernelVariant) -> VariantOps:
        """Raw operations of any variant (built on first call, not self-tested)."""
        return self._ops_factory(self.kernels, variant, self.gpu)

    def layout(self) -> LayoutProbeResult:
        """Run (again) the layout probe for this backend's relaxed_precision; a probe that
        raises is a probe that failed (it never stops the selection)."""
        try:
            return self._layout_probe(self.kernels, self.relaxed_precision)
        except Exception as exc:
            return LayoutProbeResult(False, False, {}, (), None, f"{type(exc).__name__}: {exc}")

    def selection(self) -> Selection | None:
        """The selection decision of this process (runs the probe and the self-test once);
        None when the hardware does not qualify (then probe().reason says why)."""
        self.probe()
        return self._selection

    # --- the Backend interface ---------------------------------------------------------------
    def probe(self) -> Probe:
        if self._probe is None:
            hardware = self.hardware()
            self._probe = self._select(hardware) if hardware.available else hardware
        return self._probe

    def _select(self, hardware: Probe) -> Probe:
        def self_test(variant: KernelVariant) -> list[str]:
            return self.variant_ops(variant).self_test()

        forced = os.environ.get(VARIANT_ENV)
        try:
            forced_variant = variant_named(forced) if forced else None
        except ValueError as exc:
            return Probe(False, f"{VARIANT_ENV}={forced!r}: {exc}")
        # The first-use check evaluates its results anyway: its builds are timed for the report.
        timing, self.kernels.time_builds = self.kernels.time_builds, True
        try:
            sel = choose_variant(self.layout(), self_test, self.relaxed_precision, forced_variant)
        finally:
            self.kernels.time_builds = timing
        self._selection = sel
        if sel.variant is None:
            reason = f"NAX refused for this process ({hardware.reason}): {sel.reason}"
            warnings.warn(reason, RuntimeWarning, stacklevel=3)
            return Probe(False, reason)
        if len(sel.self_tests) > 1:  # the fast path was refused: worth a word
            warnings.warn(f"int8nax NAX: {sel.reason}", RuntimeWarning, stacklevel=3)
        forced_tile = os.environ.get(metal_tiles.TILE_ENV)
        try:
            self.tiles = self._choose_tiles(sel.variant, forced_tile)
        except ValueError as exc:  # an unknown INT8NAX_METAL_TILE
            return Probe(False, str(exc))
        self._ops = self.variant_ops(sel.variant)
        self._ops.large = self.tiles.config
        return Probe(True, f"NAX int8 on {hardware.reason}; {sel.reason}; {self.tiles.summary()}")

    def _choose_tiles(self, variant: KernelVariant, forced: str | None) -> metal_tiles.TileChoice:
        """The tile for M > METAL_SMALL_MAX_M: forced, cached, or timed now (metal_tiles)."""
        if forced:
            return metal_tiles.choose_tile("", None, forced=forced)
        if self._tile_timer is None:
            return metal_tiles.TileChoice(tiling.METAL_LARGE, "default", notes=("not timed",))
        key = metal_tiles.cache_key(self.architecture, _device_name(), mx.__version__, variant.name,
                                    metal_source.kernel_spec("int8nax_int8_gemm").header)
        timing, self.kernels.time_builds = self.kernels.time_builds, True
        try:
            return metal_tiles.choose_tile(
                key, lambda candidates: self._tile_timer(self.kernels, variant, self.gpu, candidates))
        except Exception as exc:  # timing must never cost NAX: the measured tile serves
            return metal_tiles.TileChoice(tiling.METAL_LARGE, "default",
                                          notes=(f"the tile timing failed ({type(exc).__name__}: {exc})",))
        finally:
            self.kernels.time_builds = timing

    def warm_up(self, layers, max_rows: int, dtype, *, jobs: int | None = None, progress=None) -> int:
        # Metal's kernels do not depend on the layer's shape or M beyond the forms warm() builds.
        return len(self.warm((dtype,)))

    def warm(self, dtypes=(mx.float16, mx.bfloat16, mx.float32)) -> list[str]:
        """Build, and run once, every kernel the serving variant launches for activations of
        `dtypes` (every schedule: decode, the 32-row tile, the chosen large tile; with and
        without a bias in x's dtype; the quantizer; the raw GEMMs), so that no Metal library is
        built inside a later request. Runs the first-use selection first if nothing has yet.
        Returns the labels of the builds made now (none when all were made before); raises
        RuntimeError where NAX cannot run. A shape with an input of fewer than 8 elements can
        still build one more form (MLX passes such inputs in the `constant` address space)."""
        ops = self._ready()
        before = {inst.key for inst, _ in self.kernels.builds()}
        n, k = 40, 64  # every input of 8+ elements: the device-address-space forms
        w = mx.zeros((n, k), dtype=mx.int8)
        s_w = mx.ones((n,), dtype=mx.float32)
        for m in (1, tiling.METAL_SMALL_MAX_M, tiling.METAL_SMALL_MAX_M + 1):  # decode, small tile, large tile
            mx.eval(ops.int8_matmul(mx.zeros((m, k), dtype=mx.int8), w))
            for dtype in dtypes:
                x = mx.ones((m, k), dtype=dtype)
                mx.eval(ops.w8a8_linear(x, w, s_w, None), ops.w8a8_linear(x, w, s_w, mx.zeros((n,), dtype=dtype)))
        return [inst.label() for inst, _ in self.kernels.builds() if inst.key not in before]

    def _ready(self):
        p = self.probe()
        if not p.available:
            raise RuntimeError(f"backend 'metal' cannot run here: {p.reason}")
        return self._ops

    def int8_matmul(self, a: mx.array, b: mx.array) -> mx.array:
        return self._ready().int8_matmul(a, b)

    def quantize_activations(self, x: mx.array) -> tuple[mx.array, mx.array]:
        return self._ready().quantize_activations(x)

    def w8a8_linear(self, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        return self._ready().w8a8_linear(x, w, scale_w, bias)

    def describe(self, op: str, m: int, n: int, k: int, *, bias: bool = False, dtype=None) -> str:
        """e.g. "metal nax mlx_layout/relaxed_precision=true metal_128x128 (128x128x512, swizzle 2)",
        or "metal gemv ..." for small M: the variant serving this process (the rule's first choice
        before first use) and the schedule, tile and grid gemm_dispatch gives; launches nothing."""
        if op not in ("int8_matmul", "w8a8_linear"):
            raise ValueError(f"describe: op must be 'int8_matmul' or 'w8a8_linear', got {op!r}")
        variant = self._selection.variant if self._selection and self._selection.variant else None
        when = "" if variant else " (before first use)"
        variant = variant or KernelVariant(LOAD_MLX_LAYOUT, self.relaxed_precision)
        schedule, d, _ = gemm_dispatch(m, n, k, variant, self.gpu, self.tiles.config if self.tiles else None)
        if schedule == "gemv" and op == "w8a8_linear":
            out = str(dtype).replace("mlx.core.", "") if dtype is not None else "x's dtype"
            return (f"metal w8a8 decode (M <= {tiling.METAL_MV_MAX_M}, x quantized in registers, "
                    f"{tiling.METAL_DECODE_PIECE} weight bytes a lane, {tiling.METAL_MV_SIMDGROUPS}x"
                    f"{tiling.METAL_MV_ROWS} columns per threadgroup), {out} out, {'bias' if bias else 'no bias'}")
        if schedule == "gemv":
            text = (f"metal gemv (M <= {tiling.METAL_MV_MAX_M}, {tiling.METAL_MV_SIMDGROUPS}x{tiling.METAL_MV_ROWS} "
                    "columns per threadgroup)")
        else:
            c = d.config
            text = (f"metal nax {variant.name} {c.name} ({c.bm}x{c.bn}x{c.bk}, swizzle {d.launch.swizzle_log})"
                    + when)
        if op == "w8a8_linear":
            out = str(dtype).replace("mlx.core.", "") if dtype is not None else "x's dtype"
            text += f" + quantize_rows, {out} out, {'bias' if bias else 'no bias'}"
        return text


def _device_name() -> str | None:
    try:
        return mx.device_info(mx.gpu).get("device_name")
    except Exception:  # an MLX without device_info(device)
        return None


BACKEND = MetalBackend(tile_timer=time_tiles)
