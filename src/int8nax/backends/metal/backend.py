"""Metal NAX backend (Apple M5), the runtime: detection, the layout probe, the first-use
self-test and the selection of a kernel variant, and the launches (int8 GEMM, activation
quantization, the W8A8 GEMM with fused dequantization; M <= tiling.METAL_MV_MAX_M takes the
small-M kernel). The sources and the catalogue of builds are source.py's; detection device.py's,
the kernel objects kernel_set.py's, the launches and probes launch.py's, the layout probe's result
and the choice of a variant selection.py's, the tile timing timing.py's.

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

API for reports (int8nax selftest; docs/metal.md, "API for reports"): source.variants(),
variant_named(), KernelVariant, BACKEND.hardware(), BACKEND.layout(), BACKEND.variant_ops(v)
(.int8_matmul/.quantize_activations/.w8a8_linear/.self_test()), BACKEND.selection(),
selection.choose_variant(), layout_result(), probe_layout().
"""

from __future__ import annotations

import os
import warnings

import mlx.core as mx

from ... import tiling
from . import source as metal_source, tiles as metal_tiles
from .. import entries
from ..base import Backend, Probe
from .source import LOAD_MLX_LAYOUT, KernelVariant, variant_named
from . import device, kernel_set, launch, selection, timing


COMPILE = True
"""The layers' calls through compiled entry points (w8a8_linear_marked); False: each call builds
its launches in Python (a host-work measurement's baseline, or a fallback)."""

ENTRY_CACHE_SIZE = 4096
"""Compiled entry points kept per thread (x shape, N, bias or not); all dropped when full."""


# ---------------------------------------------------------------------------------------------
# The backend
# ---------------------------------------------------------------------------------------------


def _launch_key(x, w, bias) -> tuple:
    """What an eager first call settles for later compiled or recorded ones: x's shape and dtype,
    N, and the bias's dtype (None: no bias)."""
    return (x.shape, w.shape[0], x.dtype, None if bias is None else bias.dtype)


class MetalBackend(Backend):
    """The Metal NAX backend. Injection points for tests: `kernels` (a kernel_set.KernelSet with a recording
    factory), `machine` (the hardware report), `ops_factory(kernels, variant, gpu)` (stand-ins
    for launch.VariantOps), `layout_probe(kernels, relaxed_precision)` (a fake probe result) and
    `tile_timer(kernels, variant, gpu, candidates)` (timing.time_tiles on the GPU; None, the default
    for tests, keeps METAL_LARGE untimed unless INT8NAX_METAL_TILE names one)."""

    name = "metal"

    def __init__(self, kernels: kernel_set.KernelSet | None = None, machine=device.machine_report, ops_factory=launch.VariantOps,
                 layout_probe=selection.probe_layout, relaxed_precision: bool = True, tile_timer=None):
        self.kernels = kernels or kernel_set.KernelSet()
        self._machine = machine
        self._ops_factory = ops_factory
        self._layout_probe = layout_probe
        self._tile_timer = tile_timer
        self.relaxed_precision = relaxed_precision
        self._probe: Probe | None = None
        self._selection: selection.Selection | None = None
        self._ops = None
        self.gpu: str | None = None
        self.architecture: str | None = None
        self.tiles: metal_tiles.TileChoice | None = None
        """The tile serving M > METAL_SMALL_MAX_M and how it was chosen (after first use)."""
        self._entries = entries.table(self._linear_entry, ENTRY_CACHE_SIZE)
        self._launched: set = set()
        """(x shape, N, x dtype, bias dtype or None) whose launches an eager call has checked."""

    # --- the API for reports (int8nax selftest): see docs/metal.md -------------------------
    def hardware(self) -> Probe:
        """Whether the machine qualifies (device.nax_support), before any kernel is built."""
        available, architecture, macos = self._machine()
        self.gpu = tiling.gpu_class(architecture)
        self.architecture = architecture
        return device.nax_support(available, architecture, macos)

    def variant_ops(self, variant: KernelVariant) -> launch.VariantOps:
        """Raw operations of any variant (built on first call, not self-tested)."""
        return self._ops_factory(self.kernels, variant, self.gpu)

    def layout(self) -> selection.LayoutProbeResult:
        """Run (again) the layout probe for this backend's relaxed_precision; a probe that
        raises is a probe that failed (it never stops the selection)."""
        try:
            return self._layout_probe(self.kernels, self.relaxed_precision)
        except Exception as exc:
            return selection.LayoutProbeResult(False, False, {}, (), None, f"{type(exc).__name__}: {exc}")

    def selection(self) -> selection.Selection | None:
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

        forced = os.environ.get(selection.VARIANT_ENV)
        try:
            forced_variant = variant_named(forced) if forced else None
        except ValueError as exc:
            return Probe(False, f"{selection.VARIANT_ENV}={forced!r}: {exc}")
        # The first-use check evaluates its results anyway: its builds are timed for the report.
        timing, self.kernels.time_builds = self.kernels.time_builds, True
        try:
            sel = selection.choose_variant(self.layout(), self_test, self.relaxed_precision, forced_variant)
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

    def w8a8_linear_marked(self, x: mx.array, w: mx.array, scale_w: mx.array, bias):
        # Backend.w8a8_linear_marked: a compiled entry point per x shape (backends.entries), after one
        # eager call of each shape and dtypes. A compiled step replays its launches without passing
        # through KernelSet.launch again, so every build it holds must have had its first launch
        # evaluated (the threadgroup check) before it is traced: the eager call does that, and
        # KernelSet.deferred_checks tells whether a trace kept it from doing so (x a tracer).
        ops = self._ops
        if ops is None or not COMPILE:  # before first use the API's own path runs the selection
            return None
        key = _launch_key(x, w, bias)
        if key not in self._launched:
            return self._first_call(ops, key, x, w, scale_w, bias)
        entry = self._entries.get((x.shape, w.shape[0], bias is not None))
        # no bias: scale_w fills the argument, unread. Not launch._no_bias(), which the launches use
        # inside the trace as a constant: MLX refuses a graph holding an input's array as a constant.
        return entries.marked(entry, x, w, scale_w, scale_w if bias is None else bias)

    def w8a8_linear_graph(self, x: mx.array, w: mx.array, scale_w: mx.array, bias):
        # Backend.w8a8_linear_graph: the compiled entry's graph built directly, for shapes and dtypes
        # whose eager first call ran (w8a8_linear_marked's: a replay skips KernelSet.launch's checks)
        ops = self._ops
        if ops is None or not COMPILE:
            return None
        if _launch_key(x, w, bias) not in self._launched:
            return None
        return entries.linear_body(x.shape, w.shape[0], ops.w8a8_linear, any_rank=True)(x, w, scale_w, bias)

    def _first_call(self, ops, key, x, w, scale_w, bias):
        """(y, True) of the eager launches on x as it comes (True: the API then tells a traced call
        apart), the key remembered where no check was deferred."""
        deferred = self.kernels.deferred_checks
        y = ops.w8a8_linear(x, w, scale_w, bias)
        if self.kernels.deferred_checks == deferred:
            if len(self._launched) >= ENTRY_CACHE_SIZE:  # bounded as the entries are (their builds stay checked)
                self._launched.clear()
            self._launched.add(key)
        return y, True

    def _linear_entry(self, shape, n, has_bias):
        ops = self._ops  # the serving variant and tile, fixed at first use
        # any_rank: the launches take x [..., K] and write y [..., N] (launch.run_w8a8), so the
        # entry's graph has no reshape before or after them
        return entries.linear(shape, n, lambda x, w, s, bias: ops.w8a8_linear(x, w, s, bias if has_bias else None),
                              any_rank=True)

    def describe(self, op: str, m: int, n: int, k: int, *, bias: bool = False, dtype=None) -> str:
        """e.g. "metal nax mlx_layout/relaxed_precision=true metal_128x128 (128x128x512, swizzle 2)",
        or "metal gemv ..." for small M: the variant serving this process (the rule's first choice
        before first use) and the schedule, tile and grid launch.gemm_dispatch gives; launches nothing."""
        if op not in ("int8_matmul", "w8a8_linear"):
            raise ValueError(f"describe: op must be 'int8_matmul' or 'w8a8_linear', got {op!r}")
        variant = self._selection.variant if self._selection and self._selection.variant else None
        when = "" if variant else " (before first use)"
        variant = variant or KernelVariant(LOAD_MLX_LAYOUT, self.relaxed_precision)
        schedule, d, _ = launch.gemm_dispatch(m, n, k, variant, self.gpu, self.tiles.config if self.tiles else None)
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


BACKEND = MetalBackend(tile_timer=timing.time_tiles)
