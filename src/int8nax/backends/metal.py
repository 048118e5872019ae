"""Metal NAX backend (Apple M5): int8 GEMM, activation quantization and the W8A8 GEMM with
fused dequantization, compiled at run time with mx.fast.metal_kernel from the .metal files in
int8nax/kernels, plus NAX detection and a first-use self-test.

NOT YET RUN ON M5 HARDWARE. What is verified without it: the tile walk (nax_emulator), the
launch arguments built here (tests/test_metal_dispatch.py), the detection logic and the
self-test's refusal path (tests/test_metal_backend.py). See docs/metal.md.

Detection (nax_support): Metal present, an Apple GPU of generation >= 17 (M5; phones 'p' need
18), macOS >= 26.4 (int8 tensor ops). Then, the first time anything asks whether this backend
can run (the first int8nax call on the GPU, or int8nax.info()), a bit-exact self-test runs on
awkward shapes (exactness.first_use_check); a mismatch, or kernels that fail to build, refuse
NAX for the rest of the process with the reason, so auto mode falls back to the next backend
and an explicit backend="nax" raises with that reason instead of returning wrong numbers.
"""

from __future__ import annotations

import platform
import re
import warnings
from dataclasses import dataclass
from importlib import resources

import mlx.core as mx

from .. import exactness, tiling
from .base import Backend, Probe

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
# Kernel sources and objects
# ---------------------------------------------------------------------------------------------

BODY_MARKER = "// ==== kernel body ===="
"""Splits a .metal file into global-scope code (metal_kernel's `header`) and the kernel body."""

GEMM_CORE = "nax_gemm.metal"


@dataclass(frozen=True)
class KernelSpec:
    """One mx.fast.metal_kernel: its .metal file, argument names and whether it needs the core."""

    name: str
    file: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    uses_gemm_core: bool


KERNELS = {
    spec.name: spec
    for spec in (
        KernelSpec("int8nax_int8_gemm", "int8_gemm.metal", ("a", "b", "params"), ("c",), True),
        KernelSpec(
            "int8nax_w8a8_gemm",
            "w8a8_gemm.metal",
            ("q", "w", "s_x", "s_w", "bias", "params"),
            ("y",),
            True,
        ),
        KernelSpec("int8nax_quantize_rows", "quantize_rows.metal", ("x",), ("q", "s"), False),
        KernelSpec("int8nax_nax_layout", "nax_layout.metal", ("dummy",), ("out",), True),
    )
}


def read_kernel_file(file: str) -> str:
    return (resources.files("int8nax") / "kernels" / file).read_text()


def split_source(text: str) -> tuple[str, str]:
    """(global part, body) of a kernel file; a file without the marker is all global."""
    if BODY_MARKER not in text:
        return text, ""
    head, body = text.split(BODY_MARKER, 1)
    return head, body.strip("\n") + "\n"


def kernel_source(spec: KernelSpec) -> tuple[str, str]:
    """(header, source) for mx.fast.metal_kernel."""
    head, body = split_source(read_kernel_file(spec.file))
    if not body.strip():
        raise RuntimeError(f"{spec.file}: no '{BODY_MARKER}' section")
    if spec.uses_gemm_core:
        core, _ = split_source(read_kernel_file(GEMM_CORE))
        head = core + "\n" + head
    return head, body


class KernelSet:
    """The backend's compiled-on-demand kernels. `factory` is mx.fast.metal_kernel; tests pass
    a recorder to check the launch arguments without Metal."""

    def __init__(self, factory=None):
        self._factory = factory
        self._built = {}

    def __getitem__(self, name: str):
        if name not in self._built:
            spec = KERNELS[name]
            header, source = kernel_source(spec)
            factory = self._factory or mx.fast.metal_kernel
            self._built[name] = factory(
                name=spec.name,
                input_names=list(spec.inputs),
                output_names=list(spec.outputs),
                source=source,
                header=header,
                ensure_row_contiguous=True,
                # safe: the dequantization's error-free transformations and the quantization's
                # isfinite() must not be reassociated or assumed away.
                compile_options={"math_mode": "safe"},
            )
        return self._built[name]


# ---------------------------------------------------------------------------------------------
# Launches (pure Python around the kernel objects)
# ---------------------------------------------------------------------------------------------


def _params(dispatch: tiling.MetalGemmDispatch) -> mx.array:
    return mx.array(dispatch.params, dtype=mx.int32)


def run_int8_gemm(kernels: KernelSet, a: mx.array, b: mx.array) -> mx.array:
    """int32 [M, N] = a [M, K] @ b [N, K]^T on NAX."""
    m, k = a.shape
    n = b.shape[0]
    d = tiling.metal_gemm_dispatch(m, n, k)
    (c,) = kernels["int8nax_int8_gemm"](
        inputs=[a, b, _params(d)],
        output_shapes=[(m, n)],
        output_dtypes=[mx.int32],
        grid=d.grid,
        threadgroup=d.threadgroup,
        template=d.template,
        stream=mx.gpu,
    )
    return c


def run_quantize_rows(kernels: KernelSet, x: mx.array) -> tuple[mx.array, mx.array]:
    """(int8 [M, K], float32 [M]) per-token quantization of float x [M, K]."""
    rows, k = x.shape
    d = tiling.metal_quant_dispatch(rows)
    q, s = kernels["int8nax_quantize_rows"](
        inputs=[x],
        output_shapes=[(rows, k), (rows,)],
        output_dtypes=[mx.int8, mx.float32],
        grid=d.grid,
        threadgroup=d.threadgroup,
        template=d.template,
        stream=mx.gpu,
    )
    return q, s


def run_w8a8(kernels: KernelSet, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
    """x's dtype [M, N]: quantize x per token, then the GEMM with the dequantizing epilogue."""
    q, s_x = run_quantize_rows(kernels, x)
    m, k = x.shape
    n = w.shape[0]
    d = tiling.metal_gemm_dispatch(m, n, k)
    has_bias = bias is not None
    # float32 bias: widening is exact and one kernel variant serves every bias dtype.
    bias_arg = bias.astype(mx.float32) if has_bias else mx.zeros((1,), dtype=mx.float32)
    (y,) = kernels["int8nax_w8a8_gemm"](
        inputs=[q, w, s_x, scale_w, bias_arg, _params(d)],
        output_shapes=[(m, n)],
        output_dtypes=[x.dtype],
        grid=d.grid,
        threadgroup=d.threadgroup,
        template=d.template + [("OutT", x.dtype), ("HAS_BIAS", has_bias)],
        stream=mx.gpu,
    )
    return y


LAYOUT_CAPACITY = max(
    tiling.NAX_FRAG_M * tiling.NAX_FRAG_K,
    tiling.NAX_FRAG_N * tiling.NAX_FRAG_K,
    tiling.NAX_FRAG_M * tiling.NAX_FRAG_N,
) // tiling.SIMD_WIDTH
"""Elements per lane the layout probe records: the largest fragment's share of a simdgroup."""


def run_layout_probe(kernels: KernelSet) -> mx.array:
    """int32 [3, SIMD, 1 + 3 * CAP]: the cooperative tensors' layout (see nax_layout.metal)."""
    simd = tiling.SIMD_WIDTH
    (out,) = kernels["int8nax_nax_layout"](
        inputs=[mx.zeros((1,), dtype=mx.int32)],
        output_shapes=[(3, simd, 1 + 3 * LAYOUT_CAPACITY)],
        output_dtypes=[mx.int32],
        grid=(simd, 1, 1),
        threadgroup=(simd, 1, 1),
        template=[
            ("FM", tiling.NAX_FRAG_M),
            ("FN", tiling.NAX_FRAG_N),
            ("FK", tiling.NAX_FRAG_K),
            ("SIMD", simd),
            ("CAP", LAYOUT_CAPACITY),
        ],
        stream=mx.gpu,
    )
    return out


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------


class MetalBackend(Backend):
    name = "metal"

    def __init__(self, kernels: KernelSet | None = None, machine=machine_report):
        self.kernels = kernels or KernelSet()
        self._machine = machine
        self._probe: Probe | None = None

    # Raw launches, used by the public methods and by the self-test.
    def raw_int8_matmul(self, a, b):
        return run_int8_gemm(self.kernels, a, b)

    def raw_quantize_activations(self, x):
        return run_quantize_rows(self.kernels, x)

    def raw_w8a8_linear(self, x, w, scale_w, bias):
        return run_w8a8(self.kernels, x, w, scale_w, bias)

    def probe(self) -> Probe:
        if self._probe is None:
            hardware = nax_support(*self._machine())
            self._probe = self._self_test(hardware) if hardware.available else hardware
        return self._probe

    def _self_test(self, hardware: Probe) -> Probe:
        try:
            failures = exactness.first_use_check(
                self.raw_int8_matmul, self.raw_quantize_activations, self.raw_w8a8_linear
            )
        except Exception as exc:  # e.g. "Unable to build metal library from source"
            failures = [f"the kernels failed to build or run: {type(exc).__name__}: {exc}"]
        if failures:
            reason = (
                f"NAX refused for this process ({hardware.reason}): the first-use self-test "
                f"failed, so int8nax will not return its numbers: {failures[0]}"
                + (f" (+{len(failures) - 1} more)" if len(failures) > 1 else "")
            )
            warnings.warn(reason, RuntimeWarning, stacklevel=3)
            return Probe(False, reason)
        return Probe(
            True,
            f"NAX int8 on {hardware.reason}; first-use self-test passed "
            f"({exactness.FIRST_USE_CHECKS} bit-exact/1-ulp checks)",
        )

    def _ready(self) -> None:
        p = self.probe()
        if not p.available:
            raise RuntimeError(f"backend 'metal' cannot run here: {p.reason}")

    def int8_matmul(self, a: mx.array, b: mx.array) -> mx.array:
        self._ready()
        return self.raw_int8_matmul(a, b)

    def quantize_activations(self, x: mx.array) -> tuple[mx.array, mx.array]:
        self._ready()
        return self.raw_quantize_activations(x)

    def w8a8_linear(self, x: mx.array, w: mx.array, scale_w: mx.array, bias) -> mx.array:
        self._ready()
        return self.raw_w8a8_linear(x, w, scale_w, bias)


BACKEND = MetalBackend()
