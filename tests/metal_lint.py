"""A lint for int8nax's Metal sources: the rules Apple's Metal compiler enforces (or is about to,
with Metal 4.1 on macOS 27) that the g++ stand-in (tests/metal_shim) cannot see, because g++ has
no address spaces. Run by tests/test_metal_lint.py (so in CI) on every kernel as
mx.fast.metal_kernel receives it, and by hand: `python tests/metal_lint.py`.

Rules (docs/metal.md, "What is verified here"), with the review finding each one comes from:

errors (the build fails on Metal, certain or likely)
- static-outside-constant (#1): a static data member, or a program-scope variable, declared
  without the `constant` address space ("program scope variable must reside in constant
  address space"); MLX writes `static constant constexpr const`.
- bare-param-decltype (#2): `decltype(p)` of a kernel parameter `p` without
  `remove_addrspace_t<...>` around it; on Metal 4.1 it carries the parameter's address space.
- member-without-addrspace (#3): a non-static member function whose `this` has no address
  space (`thread`, `const thread`, `device`, ...); Metal 4.1 makes it `__metal_generic`. MLX
  qualifies every one (PR 3963). The review calls this a risk, not a certain error; the lint
  still fails on it because the fix costs nothing and the sources have none left.
- non-ascii (#12): any byte above 127; MLX hands the source to Metal as NS::ASCIIStringEncoding.

warnings (slow or unproven, not wrong)
- bare-decltype: `decltype(x)` of anything else used as a template argument without
  `remove_addrspace_t` (MLX wraps even its cooperative tensors' decltypes).
- loop-without-unroll-pragma (#8): a `for` loop in a file that uses MPP with no loop pragma
  (INT8NAX_UNROLL / INT8NAX_NO_UNROLL / _Pragma) on the line above: fragment loops must be
  unrolled to stay in registers, K loops must not be.

The parser is small and made for these files: comments, strings and preprocessor lines are
blanked (line numbers kept), then braces are walked with a scope stack (namespace, class,
function/block, enum, initializer) and statements are split on `;` and `{`.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ERROR, WARNING = "error", "warning"
RULES = {
    "static-outside-constant": ERROR,
    "bare-param-decltype": ERROR,
    "member-without-addrspace": ERROR,
    "non-ascii": ERROR,
    "bare-decltype": WARNING,
    "loop-without-unroll-pragma": WARNING,
}
BODY_MARKER = "// ==== kernel body ===="
"""As in int8nax.backends.metal: the line above which a file is metal_kernel's `header`."""
ADDRESS_SPACES = {"thread", "device", "constant", "threadgroup", "threadgroup_imageblock", "ray_data", "object_data"}
LOOP_PRAGMAS = ("INT8NAX_UNROLL", "INT8NAX_NO_UNROLL", "STEEL_PRAGMA_UNROLL", "STEEL_PRAGMA_NO_UNROLL", "_Pragma",
                "#pragma")


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    rule: str
    message: str

    @property
    def severity(self) -> str:
        return RULES[self.rule]

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.severity} [{self.rule}] {self.message}"


def _blank(text: str) -> str:
    """Comments, string/char literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = list(text)

    def wipe(a: int, b: int) -> None:
        for j in range(a, b):
            if out[j] != "\n":
                out[j] = " "

    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
            continue
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if not c.isspace():
            at_line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            wipe(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _strip_templates(head: str) -> str:
    """`template <...>` parameter lists removed (they may say `class`/`typename`)."""
    while True:
        m = re.search(r"\btemplate\s*<", head)
        if not m:
            return head
        depth, j = 0, m.end() - 1
        while j < len(head):
            depth += {"<": 1, ">": -1}.get(head[j], 0)
            if depth == 0:
                break
            j += 1
        head = head[: m.start()] + " " + head[j + 1:]


def _top_level(text: str, chars: str) -> list[int]:
    """Positions of `chars` outside parentheses, brackets and angle-free nesting."""
    depth, hits = 0, []
    for j, c in enumerate(text):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0 and c in chars:
            hits.append(j)
    return hits


def _is_function(stmt: str) -> bool:
    """A declaration whose first top-level '(' comes before any top-level '='."""
    s = re.sub(r"\boperator\s*\(\s*\)", "operator_call", stmt)
    paren = s.find("(")
    eq = _top_level(s, "=")
    return paren >= 0 and (not eq or paren < eq[0])


def _this_qualifiers(stmt: str) -> set[str]:
    """Words between a member function's parameter list and its body / init list / `;`."""
    s = re.sub(r"\boperator\s*\(\s*\)", "operator_call", stmt)
    start = s.find("(")
    depth = 0
    for j in range(start, len(s)):
        depth += {"(": 1, ")": -1}.get(s[j], 0)
        if depth == 0:
            tail = s[j + 1:]
            tail = re.split(r"[:=]|->", tail, maxsplit=1)[0]
            return set(re.findall(r"[A-Za-z_]\w*", tail))
    return set()


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def lint_source(text: str, name: str = "<source>", kernel_params=frozenset(), line_offset: int = 0) -> list[Finding]:
    """Findings for one Metal source. kernel_params: names mx.fast.metal_kernel declares as the
    kernel's parameters (inputs, outputs, their _shape, _strides and _ndim, attributes), for bare-param-decltype."""
    findings = []

    def add(pos_or_line, rule, message, is_line=False):
        line = pos_or_line if is_line else _line_of(code, pos_or_line)
        findings.append(Finding(name, line + line_offset, rule, message))

    for no, raw in enumerate(text.encode("utf-8", "surrogateescape").split(b"\n"), 1):
        if any(byte > 127 for byte in raw):
            add(no, "non-ascii", "non-ASCII bytes (MLX hands the source to Metal as ASCII)", is_line=True)

    # The kernel body (below the marker) is a function body once metal_kernel has wrapped it.
    if BODY_MARKER in text:
        head, body = text.split(BODY_MARKER, 1)
        text_for_code = head + "void kernel_body_() {" + body + "\n}"
    else:
        text_for_code = text
    code = _blank(text_for_code)

    # Scopes and statements.
    stack = ["namespace"]
    stmt_start = 0
    i = 0
    while i < len(code):
        c = code[i]
        if c == "(":  # skip a parenthesised group whole (for-headers hold ';')
            depth = 0
            while i < len(code):
                depth += {"(": 1, ")": -1}.get(code[i], 0)
                if depth == 0:
                    break
                i += 1
        elif c == "{":
            head = code[stmt_start:i]
            scope = stack[-1]
            kind = "block"
            if scope in ("namespace", "class"):
                bare = _strip_templates(head)
                if re.search(r"\bnamespace\b", bare):
                    kind = "namespace"
                elif re.search(r"\benum\b", bare):
                    kind = "enum"
                elif _top_level(bare, "=") or not bare.strip():
                    kind = "init" if _top_level(bare, "=") else "block"
                    if kind == "init":  # `int x[2] = {..};`: the statement goes on to the ';'
                        _check_data(bare, scope, stmt_start, add)
                elif re.search(r"\b(struct|class|union)\b", bare) and "(" not in bare:
                    kind = "class"
                elif "(" in bare:
                    kind = "function"
                    if scope == "class":
                        _check_member_function(bare, stmt_start, add)
            stack.append(kind)
            stmt_start = i + 1
        elif c == "}":
            kind = stack.pop() if len(stack) > 1 else "namespace"
            # after an initializer the declaration runs on to its ';', already checked: skip it
            stmt_start = -1 if kind == "init" else i + 1
        elif c == ";":
            if stmt_start >= 0:
                stmt = code[stmt_start:i]
                scope = stack[-1]
                if scope in ("namespace", "class") and stmt.strip():
                    bare = _strip_templates(stmt)
                    if scope == "class" and _is_function(bare):
                        _check_member_function(bare, stmt_start, add)
                    else:
                        _check_data(bare, scope, stmt_start, add)
            stmt_start = i + 1
        i += 1

    # decltype without remove_addrspace_t.
    for m in re.finditer(r"\bdecltype\s*\(\s*([^()]*?)\s*\)", code):
        before = code[: m.start()].rstrip()
        if re.search(r"remove_addrspace_t\s*<$", before):
            continue
        inner = m.group(1)
        if inner in kernel_params:
            add(m.start(), "bare-param-decltype",
                f"decltype({inner}) of a kernel parameter needs metal::remove_addrspace_t<...> (Metal 4.1)")
        elif before.endswith(("<", ",")):
            add(m.start(), "bare-decltype", f"decltype({inner}) as a template argument without remove_addrspace_t")

    # for loops without a pragma above, in files that use MPP.
    if "mpp::" in code or "cooperative_tensor" in code:
        lines = code.split("\n")
        src_lines = text_for_code.split("\n")
        for m in re.finditer(r"\bfor\s*\(", code):
            no = _line_of(code, m.start())
            prev = next((src_lines[j] for j in range(no - 2, -1, -1) if lines[j].strip() or
                         src_lines[j].lstrip().startswith("#pragma")), "")
            if not any(p in prev for p in LOOP_PRAGMAS):
                add(m.start(), "loop-without-unroll-pragma", "for loop without an unroll / no-unroll pragma above it")
    return sorted(findings, key=lambda f: (f.line, f.rule))


def _check_data(stmt: str, scope: str, pos: int, add) -> None:
    words = re.findall(r"[A-Za-z_]\w*", stmt)
    if not words or words[0] in ("using", "typedef", "friend", "template", "namespace", "extern", "return",
                                 "static_assert"):
        return
    if scope == "namespace" and words[0] in ("struct", "class", "union", "enum"):
        return
    if scope == "class" and "static" not in words:
        return  # an ordinary data member lives in the object
    if _is_function(stmt):
        return
    if "constant" not in words:
        where = "static data member" if scope == "class" else "program-scope variable"
        name = re.findall(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=|$)", stmt.strip())
        add(pos + len(stmt) - len(stmt.lstrip()), "static-outside-constant",
            f"{where} {name[0] if name else ''} must be in the `constant` address space "
            "(e.g. static constant constexpr const int X = ...)")


def _check_member_function(stmt: str, pos: int, add) -> None:
    words = set(re.findall(r"[A-Za-z_]\w*", stmt))
    if {"static", "friend", "using", "typedef", "static_assert"} & words:
        return
    if not _this_qualifiers(stmt) & ADDRESS_SPACES:
        sig = " ".join(stmt.split())
        add(pos + len(stmt) - len(stmt.lstrip()), "member-without-addrspace",
            f"member function without an address space on `this` (add `thread` / `const thread`): {sig[:80]}")


def kernel_params(spec) -> set[str]:
    """What mx.fast.metal_kernel declares for a KernelSpec: inputs (+ _shape, _strides, _ndim), outputs,
    and the attributes it adds by name."""
    attrs = {"thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
             "threads_per_threadgroup", "threadgroups_per_grid", "threads_per_grid", "simdgroup_index_in_threadgroup",
             "thread_index_in_simdgroup", "thread_index_in_threadgroup", "simdgroups_per_threadgroup",
             "threads_per_simdgroup", "thread_execution_width", "quadgroup_index_in_threadgroup",
             "thread_index_in_quadgroup", "quadgroups_per_threadgroup"}
    names = set(spec.inputs) | set(spec.outputs) | attrs
    return names | {f"{n}_{arg}" for n in spec.inputs for arg in ("shape", "strides", "ndim")}


def lint_kernels() -> list[Finding]:
    """Every kernel file, and every kernel as metal_kernel receives it (header + body)."""
    from int8nax.backends.metal import source as metal_source

    findings = []
    bodies = {spec.file for spec in metal_source.KERNELS.values()}
    for spec in metal_source.KERNELS.values():
        text = metal_source.read_kernel_file(spec.file)
        findings += lint_source(text, spec.file, kernel_params(spec))
    for file in metal_source.kernel_files():  # the headers-only files (tile walks, float bits)
        if file not in bodies:
            findings += lint_source(metal_source.read_kernel_file(file), file)
    return findings


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    findings = lint_kernels()
    for f in findings:
        print(f)
    errors = [f for f in findings if f.severity == ERROR]
    print(f"{len(errors)} error(s), {len(findings) - len(errors)} warning(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
