"""Rules for the .metal sources: tile constants reach the kernels only as template arguments
from tiling.py, so the kernels and the emulator cannot drift apart on them."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from int8nax import tiling
from int8nax.backends.metal import source as metal_source

KERNEL_DIR = resources.files("int8nax").joinpath(*metal_source.KERNEL_DIR)
METAL_FILES = sorted(p.name for p in KERNEL_DIR.iterdir() if p.name.endswith(".metal"))


def code_of(text: str) -> str:
    """The source without comments, string literals and #include lines."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r'"[^"\n]*"', '""', text)
    return re.sub(r"#include[^\n]*", " ", text)


def integer_literals(code: str) -> list[int]:
    """Values of the numeric literals in C code (1u, 0.0f, 0x10 ... all count)."""
    values = []
    for lit in re.findall(r"(?<![\w.])(0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][-+]?\d+)?)[uUlLfFhH]*", code):
        values.append(float(int(lit, 16)) if lit.lower().startswith("0x") else float(lit))
    return values


def test_every_kernel_file_is_used():
    used = {f for spec in metal_source.KERNELS.values() for f in spec.files}
    assert set(METAL_FILES) == used


@pytest.mark.parametrize("name", METAL_FILES)
def test_no_tile_numbers_in_the_sources(name):
    # Every tile, fragment, simdgroup, thread-count or QMAX constant is >= 16; the code may use
    # 0 and 1 (and 2, 3 for the layout probe's record format), nothing else.
    code = code_of((KERNEL_DIR / name).read_text())
    assert max(integer_literals(code), default=0) <= 3, sorted(set(integer_literals(code)))


def test_literal_scan_would_catch_a_tile_number():
    assert max(integer_literals(code_of("constexpr int BM = 128; // 512 in a comment is fine"))) == 128
    assert integer_literals(code_of("x = 0.0f; y = 1u; z = 0x20;")) == [0.0, 1.0, 32.0]


def test_every_constant_the_tiles_hold_is_a_template_parameter():
    core = code_of((KERNEL_DIR / metal_source.GEMM_CORE).read_text())
    declared = set(re.findall(r"template\s*<([^>]*)>", core, flags=re.S))
    params = {p.split()[-1] for group in declared for p in group.split(",") if p.strip()}
    assert {name for name, _ in tiling.METAL_LARGE.template()} <= params


def test_gemm_core_needs_metal4_headers():
    text = (KERNEL_DIR / metal_source.GEMM_CORE).read_text()
    assert "#include <metal_tensor>" in text
    assert "#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>" in text
    assert metal_source.BODY_MARKER not in text  # global code only


def test_params_order_matches_the_dispatch():
    core = code_of((KERNEL_DIR / metal_source.GEMM_CORE).read_text())
    enum = re.search(r"enum\s+GemmParam\s*\{([^}]*)\}", core).group(1)
    assert [e.strip() for e in enum.split(",")] == ["PARAM_" + p for p in tiling.METAL_GEMM_PARAMS]
    d = tiling.metal_gemm_dispatch(70, 33, 300)
    assert d.params == (70, 33, 300, d.launch.swizzle_log, d.launch.tiles_m)
