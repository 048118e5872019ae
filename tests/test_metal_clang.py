"""Every Metal kernel instantiation the runtime can build, assembled the way
mx.fast.metal_kernel assembles it and compiled by clang's C++-for-OpenCL front end with Metal's
address spaces (tests/metal_shim/clang_check.py): the Metal 4.1 rules that g++ and the stand-in
cannot see, plus MetalPerformancePrimitives' shape, element-type and operand-type rules (a stub).
Planted errors show that the check fails when it should. Not Apple's compiler: what it passes may
still fail there for other reasons (docs/metal.md says what only an M5 can verify)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from int8nax.backends.metal import source as metal_source

sys.path.insert(0, str(Path(__file__).parent / "metal_shim"))
import clang_check  # noqa: E402

IN_CI = os.environ.get("CI", "").lower() == "true"
pytestmark = pytest.mark.skipif(clang_check.CLANG is None and not IN_CI,
                                reason="clang-16 is not installed: the address-space check cannot run")


def source_of(inst: metal_source.Instantiation) -> str:
    spec = metal_source.kernel_spec(inst.kernel)
    return clang_check.assemble(inst.kernel, spec.header, spec.source, inst.inputs, inst.outputs, inst.template,
                                inst.constant)


def test_every_instantiation_compiles_under_metal_address_spaces():
    insts = metal_source.instantiations() + metal_source.instantiations_tiny()
    assert {i.kernel for i in insts} == set(metal_source.KERNELS)
    errors = clang_check.check({i.label(): source_of(i) for i in insts})
    failed = {label: errs for label, errs in errors.items() if errs}
    assert not failed, "\n".join(f"{label}:\n  " + "\n  ".join(errs[:3]) for label, errs in list(failed.items())[:5])


def first(kernel: str, **match) -> metal_source.Instantiation:
    return next(i for i in metal_source.instantiations() if i.kernel == kernel
                and all(dict(i.template).get(k) == v for k, v in match.items()))


# Errors put into the real sources: each must fail the check, for its reason.
PLANTS = {
    "static data outside constant": (
        "int8nax_int8_gemm", {"MLX_LAYOUT": True},
        "static constant constexpr const int TM = SM / FM;", "static constexpr int TM = SM / FM;",
        "program scope variable must reside in constant address space"),
    "bare decltype in the destination getter": (
        "int8nax_int8_gemm", {"MLX_LAYOUT": False},
        "remove_addrspace_t<decltype(ct_a)>, remove_addrspace_t<decltype(ct_b)>", "decltype(ct_a), decltype(ct_b)",
        "wrap a decltype in remove_addrspace_t"),
    "a kernel parameter's decltype as a field": (
        "int8nax_w8a8_gemm", {"HAS_BIAS": True},
        "metal::remove_addrspace_t<decltype(s_x)>", "decltype(s_x)", "field may not be qualified with an address space"),
    "a device pointer where constant arrives": (
        "int8nax_int8_gemm", {"MLX_LAYOUT": True, "BM": 32},
        "  PtrA a_row[TM][PIECES];", "  const device int8_t* a_row[TM][PIECES];", "changes address space of pointer"),
    "char operands": (
        "int8nax_int8_gemm", {"MLX_LAYOUT": False},
        "get_left_input_cooperative_tensor<int8_t, int8_t, int32_t>", "get_left_input_cooperative_tensor<char, char, int32_t>",
        "element types not in MPP's table"),
    "a 16 x 16 x 16 descriptor": (
        "int8nax_nax_layout", {},
        "FM, FN, FK, false, true, RELAXED", "FM, FK, FK, false, true, RELAXED", "m, n, k must each be 16 or 32, one of them 32"),
}


def test_planted_errors_fail_the_check():
    sources, reasons = {}, {}
    for name, (kernel, match, old, new, reason) in PLANTS.items():
        inst = first(kernel, **match)
        if name == "a device pointer where constant arrives":
            inst = next(i for i in metal_source.instantiations_tiny() if i.key[:2] == inst.key[:2])
        text = source_of(inst)
        assert old in text, f"plant {name!r} no longer applies"
        sources[name] = text.replace(old, new)
        reasons[name] = reason
    sources["clean"] = source_of(first("int8nax_int8_gemm", MLX_LAYOUT=True))
    errors = clang_check.check(sources)
    assert errors.pop("clean") == []
    for name, errs in errors.items():
        assert any(reasons[name] in e for e in errs), f"{name}: {errs[:3]}"
