"""`int8nax selftest`: the report an M5 owner runs first and pastes into an issue.

Exactness over a shape grid (M, K, N each in 1, 7, 33, 513, 4097 by default) through the
checks of int8nax.exactness, the int8 cooperative-tensor layout (Metal), and timings of
int8nax next to cider through the measuring layer (int8nax.bench: every output checked before
it is timed), printed as markdown.
"""

from __future__ import annotations

import hashlib
import platform
import sys
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from . import quant
from .bench import timing
from .exactness import DTYPES, check_int8_matmul, check_quantize, check_w8a8, special_rows

# ---------------------------------------------------------------------------------------------
# `int8nax selftest`
# ---------------------------------------------------------------------------------------------

DEFAULT_SIZES = (1, 7, 33, 513, 4097)
QUICK_SIZES = (1, 7, 33)
TIMING_SHAPES = [(1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (512, 4096, 4096),
                 (2048, 4096, 4096), (512, 3584, 18944)]
QUICK_TIMING_SHAPES = [(33, 513, 257)]


@dataclass
class Tally:
    what: str
    shapes: int = 0
    failed: int = 0
    first_failure: str = ""

    def add(self, label: str, problem: str | None) -> None:
        self.shapes += 1
        if problem:
            self.failed += 1
            self.first_failure = self.first_failure or f"{label}: {problem}"


def exactness_grid(backend: str, sizes, seed: int = 0, log=None) -> list[Tally]:
    """Every (M, K, N) in sizes^3 for int8_matmul; every (M, K) for quantization; W8A8 on the
    shapes whose K and N are at most 513 (dtype and bias taking turns)."""
    import int8nax

    rng = np.random.default_rng(seed)
    gemm = Tally("int8_matmul: bit-exact vs exact int product")
    quantize = Tally("quantize_activations: bit-exact vs int8nax.quant")
    w8a8 = Tally("w8a8_linear: within 1 ulp of float64 model")

    def api_gemm(a, b):
        return int8nax.int8_matmul(a, b, backend=backend)

    def api_quant(x):
        return int8nax.quantize_activations(x, backend=backend)

    def api_w8a8(x, w, s, b):
        return int8nax.w8a8_linear(x, w, s, b, backend=backend)

    dtypes = list(DTYPES)
    turn = 0
    for m in sizes:
        for k in sizes:
            for n in sizes:
                if log:
                    log(f"int8_matmul {(m, k, n)}")
                a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
                b = rng.integers(-128, 128, size=(n, k), dtype=np.int8)
                gemm.add(f"{(m, k, n)}", check_int8_matmul(api_gemm, a, b))
                if k <= 513 and n <= 513:
                    dtype, with_bias = dtypes[turn % 3], turn % 2 == 1
                    turn += 1
                    x = mx.array(special_rows(rng, m, k)).astype(DTYPES[dtype])
                    w, s_w = quant.quantize_weight_np(rng.standard_normal((n, k)).astype(np.float32))
                    bias = rng.standard_normal(n).astype(np.float32) if with_bias else None
                    label = f"{dtype}{' +bias' if with_bias else ''} {(m, k, n)}"
                    w8a8.add(label, check_w8a8(api_w8a8, x, w, s_w, bias))
            dtype = dtypes[(m + k) % 3]
            x = mx.array(special_rows(rng, m, k)).astype(DTYPES[dtype])
            quantize.add(f"{dtype} {(m, k)}", check_quantize(api_quant, x))
    return [gemm, quantize, w8a8]


TIMED = (("int8nax int8_matmul", "nax-gemm"), ("cider int8_matmul_int32", "cider-raw"),
         ("int8nax w8a8_linear", "nax-full"), ("cider linear (w8a8)", "cider-full"),
         ("mx.matmul fp16", "mlx-fp16"))
"""(column, contender): each output is checked (int8nax.bench.checks) before it is timed."""


def timing_table(backend: str, shapes, warmup: int, repeat: int) -> tuple[list[str], list[str]]:
    """Markdown rows of median ms (and TOPS) per call + mx.eval, and the notes: why a cell is
    n/a, or MISMATCH with the reason (a wrong output is never timed)."""
    columns = [title for title, _ in TIMED]
    lines = ["| M, K, N | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    notes: dict[str, str] = {}
    for shape in shapes:
        cells = []
        for title, name in TIMED:
            cell = timing.measure(shape, name, "call", repeat, backend=backend, warmup=warmup)
            if cell.seconds is not None:
                cells.append(f"{cell.seconds * 1e3:.3f} ms ({timing.tops(shape, cell.seconds):.3g} TOPS)")
                notes.setdefault(f"{title} ran", cell.detail)
            else:
                cells.append(cell.text())
                why = cell.mismatch or cell.error or cell.unavailable
                notes.setdefault(title, f"{cell.text()} at {shape}: {why}")
        lines.append(f"| {', '.join(map(str, shape))} | " + " | ".join(cells) + " |")
    return lines, [f"{k}: {v}" for k, v in notes.items()]


def layout_report(dump: np.ndarray) -> list[str]:
    """Metal only: the int8 cooperative tensors' lane layout (nax_layout.metal's dump), checked
    for what the kernels need and compared with the float layout MLX hardcodes."""
    from . import nax_emulator

    found = nax_emulator.layout_from_probe(dump)
    problems = nax_emulator.layout_problems(found, capacities=dump[:, :, 0])
    mlx_layout = nax_emulator.mlx_float_layout()
    same = {part: bool(np.array_equal(getattr(found, part), getattr(mlx_layout, part)))
            for part in ("left", "right", "dest")}
    fingerprint = hashlib.sha256(dump.astype("<i4").tobytes()).hexdigest()[:16]
    return [
        "- int8 cooperative-tensor layout: "
        + ("every fragment cell held exactly once (what the kernels need)" if not problems
           else "; ".join(problems)),
        "- equal to MLX's float layout: " + ", ".join(f"{p} {'yes' if v else 'no'}" for p, v in same.items()),
        f"- layout fingerprint sha256:{fingerprint} (full dump: --layout-out FILE.npy)",
    ]


def run_selftest(backend: str, sizes, timing_shapes, warmup: int, repeat: int, out=print,
                 layout_out: str | None = None, progress=None) -> int:
    """Print the report; exit status 0 all exact, 1 a check failed, 2 backend unavailable."""
    import int8nax
    from . import backends

    out("## int8nax selftest\n")
    out(f"- int8nax {int8nax.__version__}, mlx {mx.__version__}, Python {platform.python_version()}, "
        f"{platform.platform()}")
    try:
        gpu = mx.device_info(mx.gpu) if mx.metal.is_available() else mx.device_info()
    except Exception as exc:
        gpu = {"error": str(exc)}
    out(f"- device: {gpu.get('device_name', '?')}, architecture {gpu.get('architecture', '?')}")
    name = backends.canonical(backend)
    for n in backends.NAMES:
        p = backends.probe(n)
        out(f"- backend {n}: {'available' if p.available else 'unavailable'}: {p.reason}")
    if name == "auto":
        name, _ = backends.choose(None)
    probe = backends.probe(name)
    if not probe.available:
        label = "NAX" if name == "metal" else f"backend {name!r}"
        out(f"\n**{label} unavailable here: {probe.reason}.** Nothing was run. "
            "(`int8nax selftest --backend cpu` exercises the command on any machine.)")
        return 2
    out(f"- under test: **{name}**\n")

    if name == "metal":
        from .backends import metal

        try:
            dump = np.array(metal.run_layout_probe(metal.BACKEND.kernels))
            lines = layout_report(dump)
            if layout_out:
                np.save(layout_out, dump)
                lines.append(f"- full layout dump written to {layout_out}")
        except Exception as exc:
            lines = [f"- layout probe failed: {type(exc).__name__}: {exc}"]
        out("\n".join(lines) + "\n")

    out(f"### Exactness (sizes {', '.join(map(str, sizes))} in M, K, N)\n")
    out("| check | shapes | failed | first failure |\n|---|---|---|---|")
    with np.errstate(invalid="ignore"):  # NaN/inf rows are part of the grid
        tallies = exactness_grid(name, sizes, log=progress)
    for t in tallies:
        out(f"| {t.what} | {t.shapes} | {t.failed} | {t.first_failure or '-'} |")
    out("")
    if timing_shapes:
        lines, timing_notes = timing_table(name, timing_shapes, warmup, repeat)
        out(f"### Timings (median of {repeat} after {warmup} warm-up calls, call + mx.eval, "
            "each output checked first, TOPS = 2MNK / time)\n")
        out("\n".join(lines) + "\n")
        out("\n".join(f"- {note}" for note in timing_notes))
    failed = sum(t.failed for t in tallies)
    out(f"\n**{'ALL EXACT' if not failed else f'{failed} CHECKS FAILED'}**")
    return 1 if failed else 0


def main(args) -> int:
    if args.sizes:
        sizes = args.sizes
    else:
        sizes = QUICK_SIZES if args.quick else DEFAULT_SIZES
    if args.no_timing:
        shapes = []
    else:
        shapes = QUICK_TIMING_SHAPES if args.quick else TIMING_SHAPES
    progress = (lambda msg: print(msg, file=sys.stderr)) if args.verbose else None
    return run_selftest(args.backend, sizes, shapes, args.warmup, args.repeat,
                        layout_out=args.layout_out, progress=progress)
