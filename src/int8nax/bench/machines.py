"""The hardware ceilings of each benchmarked machine, declared in one place.

A roofline needs two ceilings per machine: the peak rate of the arithmetic a contender uses
(tera-operations per second, a multiply-add counted as 2, by number format) and the memory
bandwidth (TB/s). `int8nax site` divides a measured throughput by
    attainable(shape) = min(compute peak, bandwidth * ops / bytes moved)
to say how far from the hardware's limit a contender is.

Machines are keyed by their asv machine name (`.asv/results/<name>/machine.json`, see
docs/benchmarking.md), with `aliases` for the names CI's runners use. `host` holds the
ceilings of the CPU next to an accelerator: a contender that computes on the host (numpy's
sgemm) is measured against those, not the GPU's.

Every figure says where it comes from; `estimate=True` marks figures nobody measured on
that machine (a ceiling derived from the ISA or a vendor figure, or a third-party estimate).
This module only declares numbers: it imports nothing of int8nax, so any layer may read it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FORMATS = ("int8", "fp16", "fp32")
"""Number formats of the arithmetic: int8 x int8 -> int32 (the raw GEMM and W8A8),
float16 (MLX's dense and weight-only quantized matmuls compute in it), float32 (numpy sgemm)."""


@dataclass(frozen=True)
class Ceilings:
    """Peak rates of one processor.

    compute_tops   {format: peak tera-operations per second}; a format missing here has no
                   declared ceiling on this processor
    memory_tbps    main-memory read bandwidth in TB/s (None: not declared)
    sources        {"int8"/"fp16"/"fp32"/"memory": how the figure was obtained}
    estimate       True when no figure was measured on the machine itself
    """

    compute_tops: dict[str, float]
    memory_tbps: float | None
    sources: dict[str, str]
    estimate: bool = False


@dataclass(frozen=True)
class Machine:
    """`expects`: {machine.json key: text its value must contain}, so that results filed
    under this name from other hardware (a CI box of another make) get no ceilings."""

    name: str
    description: str
    device: Ceilings
    host: Ceilings | None = None
    aliases: tuple[str, ...] = field(default_factory=tuple)
    expects: dict[str, str] = field(default_factory=dict)


# --- the figures ---------------------------------------------------------------------------

H200 = Machine(
    name="h200",
    description="NVIDIA H200 (132 SMs, 141 GB HBM3e), the lent GPU box; host: 16 vCPUs of an Intel Xeon",
    device=Ceilings(
        compute_tops={"int8": 1979.0, "fp16": 989.5},
        memory_tbps=4.56,
        sources={
            "int8": "NVIDIA's dense int8 tensor-core peak, 1979 TOPS at 1980 MHz on 132 SMs "
                    "(docs/cuda.md, ceilings)",
            "fp16": "half the int8 rate: dense fp16/bf16 tensor-core peak ~990 TFLOPS (NVIDIA's figure)",
            "memory": "measured on this H200: a 2 GB HBM read runs at 4.56 TB/s (docs/cuda.md, ceilings); "
                      "the 4.8 TB/s of the datasheet is not reached",
        },
    ),
    host=None,  # the host's ceilings were not measured: numpy sgemm on it shows no roofline fraction
    aliases=("int8nax-cuda",),
    expects={"gpu": "H200"},
)

H100 = Machine(
    name="h100",
    description="NVIDIA H100 SXM (132 SMs, 80 GB HBM3), a lent GPU box",
    device=Ceilings(
        compute_tops={"int8": 1979.0, "fp16": 989.5},
        memory_tbps=3.35,
        sources={
            "int8": "NVIDIA's dense int8 tensor-core peak for the H100 SXM, 1979 TOPS (the H200's GH100 "
                    "die and clocks: 132 SMs at 1980 MHz)",
            "fp16": "half the int8 rate: dense fp16/bf16 tensor-core peak ~990 TFLOPS (NVIDIA's figure)",
            "memory": "NVIDIA's datasheet: 3.35 TB/s of HBM3 (not measured here; the H200 reaches 0.95 "
                      "of its datasheet figure)",
        },
        estimate=True,
    ),
    host=None,
    expects={"gpu": "H100"},
)

CARDS = {"H100": "h100", "H200": "h200"}
"""GPU model (as in its name: "NVIDIA H100 80GB HBM3") -> the asv machine its results are filed
under. One machine per card: figures of two cards never share a history."""


def card_machine(gpu_name: str) -> str | None:
    """The asv machine name for a GPU named `gpu_name` (nvidia-smi's name, or MLX's
    device_info()["device_name"]): "h100" or "h200"; None for any other card, and for an H100
    other than the SXM part (PCIe and NVL have other ceilings: name their machine yourself)."""
    found = {name for model, name in CARDS.items() if re.search(rf"\b{model}\b", gpu_name)}
    if len(found) != 1 or re.search(r"PCIe|NVL", gpu_name):
        return None
    return found.pop()


# The 2-core CI box: /proc/cpuinfo reports "AMD EPYC", family 25 model 17 (Zen 4), 2 vCPUs
# under KVM at 2596 MHz, with avx512f, avx512_vnni and avx512_bf16 but no amx and no
# avx512_fp16. Zen 4 executes a 512-bit instruction on two 256-bit halves, so per core and
# cycle it retires 2 x 256-bit FMAs (32 float32 flops) and 64 int8 multiply-adds through
# VNNI's vpdpbusd (128 int8 ops). The clock is the hypervisor's nominal one; a boost clock
# would raise both compute ceilings.
_CPU_GHZ = 2.596
_CPU_CORES = 2

CPU_2CORE = Machine(
    name="cpu-2core",
    description="the 2-core CI box: 2 vCPUs of an AMD EPYC (Zen 4) under KVM, 2596 MHz, AVX-512 + VNNI",
    device=Ceilings(
        compute_tops={
            "int8": _CPU_CORES * _CPU_GHZ * 128 / 1e3,   # 0.665 TOPS
            "fp32": _CPU_CORES * _CPU_GHZ * 32 / 1e3,    # 0.166 TFLOPS
            "fp16": _CPU_CORES * _CPU_GHZ * 32 / 1e3,    # no fp16 arithmetic: converted to fp32
        },
        memory_tbps=0.050,
        sources={
            "int8": "derived: 2 cores x 2.596 GHz x 128 int8 ops/cycle (one 512-bit AVX-512 VNNI "
                    "vpdpbusd per cycle on Zen 4's 2 x 256-bit units); /proc/cpuinfo flags and MHz",
            "fp32": "derived: 2 cores x 2.596 GHz x 32 flops/cycle (2 x 256-bit FMA); numpy sgemm "
                    "reached 125 GFLOP/s = 0.75 of it at (512, 4096, 4096)",
            "fp16": "no fp16 arithmetic on this CPU (no avx512_fp16): MLX computes it in float32, "
                    "so the float32 ceiling",
            "memory": "measured: numpy add.reduce of a 1 GiB float64 array split over "
                      "2 threads, best of 5: 50.6 GB/s (1 thread: 28 GB/s); a shared VM, so approximate",
        },
        estimate=True,  # the compute ceilings are derived, not measured; the bandwidth is measured
    ),
    aliases=("ci",),
    expects={"cpu": "AMD EPYC", "num_cpu": "2"},
)

M5_MAX = Machine(
    name="int8nax-m5",
    description="Apple M5 Max GPU with neural accelerators (ESTIMATES: no M5 has run this suite yet)",
    device=Ceilings(
        compute_tops={"int8": 130.0, "fp16": 70.0},
        memory_tbps=None,
        sources={
            "int8": "estimate, third party: ~130 TOPS int8 -> int32 for an M5 Max, scaled from "
                    "A19 tensor-op microbenchmarks (docs/results/m5.md)",
            "fp16": "estimate, third party: ~70 TFLOPS fp16 for an M5 Max (docs/results/m5.md)",
            "memory": "not declared: no measured or cited figure in the project's notes",
        },
        estimate=True,
    ),
    aliases=("m5", "m5-max"),
)

MACHINES: dict[str, Machine] = {m.name: m for m in (H200, H100, CPU_2CORE, M5_MAX)}


def lookup(name: str) -> Machine | None:
    """The machine declared under asv machine name `name` (or one of its aliases); None if none."""
    if name in MACHINES:
        return MACHINES[name]
    return next((m for m in MACHINES.values() if name in m.aliases), None)


def match(name: str, info: dict) -> tuple[Machine | None, str]:
    """(the declared machine for asv machine `name` whose machine.json is `info`, or None; why
    not). A declared machine whose `expects` the machine.json contradicts is not used."""
    machine = lookup(name)
    if machine is None:
        return None, f"no ceilings declared for machine {name!r} in int8nax/bench/machines.py"
    wrong = [f"{key} {info.get(key)!r} (expected {text!r})" for key, text in machine.expects.items()
             if key in info and text not in str(info[key])]
    if wrong:
        return None, (f"the ceilings declared for {machine.name!r} are for other hardware: machine.json says "
                      + ", ".join(wrong))
    return machine, ""


def attainable_tops(ceilings: Ceilings, fmt: str, ops: float, bytes_moved: float) -> tuple[float, str] | None:
    """(roofline ceiling in TOPS for a problem of `ops` operations moving `bytes_moved` bytes,
    which bound applies: "compute" or "memory"), or None when `fmt` has no compute ceiling.
    Without a declared bandwidth only the compute bound applies."""
    if fmt not in FORMATS:
        raise ValueError(f"attainable_tops: fmt expected one of {', '.join(FORMATS)}, got {fmt!r}")
    peak = ceilings.compute_tops.get(fmt)
    if peak is None:
        return None
    if ceilings.memory_tbps is None or bytes_moved <= 0:
        return peak, "compute"
    memory_bound = ceilings.memory_tbps * ops / bytes_moved  # TB/s x ops/byte = Tops/s
    return (memory_bound, "memory") if memory_bound < peak else (peak, "compute")
