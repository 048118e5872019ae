"""The Metal-source lint (tests/metal_lint.py): the kernels pass it, and every rule fires on a
planted bad snippet (and not on its corrected form), so the lint can fail."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import metal_lint as lint  # noqa: E402


def rules(text: str, params=frozenset()) -> list[tuple[int, str]]:
    return [(f.line, f.rule) for f in lint.lint_source(text, "snippet.metal", params)]


def test_the_kernels_pass_the_lint():
    findings = lint.lint_kernels()
    assert findings == [], "\n".join(map(str, findings))


def test_every_rule_is_classified():
    assert set(lint.RULES.values()) == {lint.ERROR, lint.WARNING}
    assert {r for r, sev in lint.RULES.items() if sev == lint.ERROR} == {
        "static-outside-constant", "bare-param-decltype", "member-without-addrspace", "non-ascii"}


# Review finding 1 (nax_gemm.metal:68-72 at a965579): static constexpr data members.
STATIC_BAD = """template <int SM, int FM>
struct NaxSubtile {
  static constexpr int TM = SM / FM;
  static const int TN = 2;
  int acc[TM];
};
constexpr int PROGRAM_SCOPE = 3;
"""
STATIC_GOOD = """template <int SM, int FM>
struct NaxSubtile {
  static constant constexpr const int TM = SM / FM;
  enum { TN = 2 };
  int acc[TM];
  static_assert(TM > 0, "whole fragments");
};
constant constexpr int PROGRAM_SCOPE = 3;
inline int f() { constexpr int local = 3; return local; }
"""


def test_static_data_outside_constant():
    assert rules(STATIC_BAD) == [(3, "static-outside-constant"), (4, "static-outside-constant"),
                                 (7, "static-outside-constant")]
    assert rules(STATIC_GOOD) == []


# Review finding 2 (w8a8_gemm.metal:77): kernel-parameter decltypes as template arguments.
DECLTYPE_BAD = """// ==== kernel body ====
const Store<OutT, decltype(s_x), decltype(bias)> epilogue{s_x, bias};
auto ct_c = mma.template get_destination_cooperative_tensor<decltype(ct_a), decltype(ct_b), int32_t>();
"""
DECLTYPE_GOOD = """// ==== kernel body ====
const Store<OutT, metal::remove_addrspace_t<decltype(s_x)>, metal::remove_addrspace_t< decltype( bias )>> e{s_x, bias};
auto ct_c = mma.template get_destination_cooperative_tensor<
    remove_addrspace_t<decltype(ct_a)>, remove_addrspace_t<decltype(ct_b)>, int32_t>();
const int n = decltype(x + 0)(3);
"""


def test_bare_kernel_parameter_decltype():
    params = {"s_x", "bias", "y"}
    assert rules(DECLTYPE_BAD, params) == [(2, "bare-param-decltype"), (2, "bare-param-decltype"),
                                           (3, "bare-decltype"), (3, "bare-decltype")]
    assert rules(DECLTYPE_GOOD, params) == []


# Review finding 3 (nax_gemm.metal:84, 102, 142; int8_gemm.metal:16; w8a8_gemm.metal:65).
MEMBER_BAD = """struct StoreInt32 {
  device int* c;
  void operator()(const int m, const int acc) const {
    c[m] = acc;
  }
  template <bool MASK_K>
  void k_step(const int k0) {
  }
  void declared_only(int x) const;
};
"""
MEMBER_GOOD = """struct StoreInt32 {
  device int* c;
  void operator()(const int m, const int acc) const thread {
    c[m] = acc;
  }
  template <bool MASK_K>
  void k_step(const int k0) thread {
  }
  void declared_only(int x) const thread;
  static void helper(thread int* p) { p[0] = 0; }
};
inline void free_function(int x) { }
"""


def test_member_functions_need_an_address_space():
    assert rules(MEMBER_BAD) == [(3, "member-without-addrspace"), (6, "member-without-addrspace"),
                                 (9, "member-without-addrspace")]
    assert rules(MEMBER_GOOD) == []


def test_non_ascii_bytes():
    assert rules("// r\u00e9sum\u00e9 of the walk\ninline int x() { return 1; }\n// fine\n") == [(1, "non-ascii")]
    assert rules("// plain ASCII\n") == []


LOOPS = """#include <MetalPerformancePrimitives/MetalPerformancePrimitives.h>
inline void f(thread int* acc) {
  mpp::tensor_ops::matmul2d_descriptor d;
  for (int i = 0; i < 8; ++i) acc[i] = 0;
  INT8NAX_UNROLL
  for (int i = 0; i < 8; ++i) acc[i] = 0;
  _Pragma("clang loop unroll(disable)")
  for (int k = 0; k < 9; ++k) acc[0] += k;
}
"""


def test_loops_without_pragma_warn_in_mpp_files():
    found = lint.lint_source(LOOPS, "loops.metal")
    assert [(f.line, f.rule, f.severity) for f in found] == [(4, "loop-without-unroll-pragma", lint.WARNING)]
    assert lint.lint_source(LOOPS.replace("mpp::", "plain_"), "no_mpp.metal") == []


def test_comments_and_strings_are_not_code():
    text = '// static constexpr int X = 1; void f() {}\n/* decltype(s_x) */\nconstant char* s = "static int y;";\n'
    assert rules(text, {"s_x"}) == []


@pytest.mark.parametrize("snippet", [STATIC_BAD, DECLTYPE_BAD, MEMBER_BAD])
def test_the_command_line_fails_on_errors(tmp_path, monkeypatch, capsys, snippet):
    monkeypatch.setattr(lint, "lint_kernels", lambda: lint.lint_source(snippet, "planted.metal", {"s_x", "bias"}))
    assert lint.main() == 1
    assert "planted.metal" in capsys.readouterr().out
