"""The layer rule, read from the source: each module imports only its own layer and those
below it (function-level imports included). The folders are the layers:

    numerics   quant, reference, exactness (a named set: modules of the package's top level)
    library    the rest of int8nax: api/, backends/, nn/, tiling, nax_emulator/, _checks, the package
    measuring  int8nax/bench/ (problems, checks, timing, contenders, peers/, kernel/, models/)
    commands   int8nax/commands/ (cli, compare, selftest, site, gate, soak, ...), __main__
               (python -m int8nax), and the asv suite in benchmarks/
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "int8nax"

LAYERS = {"numerics": 0, "library": 1, "measuring": 2, "commands": 3}
NUMERICS = {"int8nax.quant", "int8nax.reference", "int8nax.exactness"}
"""The numerics: a set, not a folder (they sit beside the public API they serve)."""
COMMANDS = ("int8nax.commands", "benchmarks")
"""The command layer's packages; `python -m int8nax` (int8nax.__main__) is its entry point."""
MEASURING = "int8nax.bench"


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_of(module: str) -> str:
    if module in NUMERICS:
        return "numerics"
    if module == "int8nax.__main__" or any(_in(module, p) for p in COMMANDS):
        return "commands"
    if _in(module, MEASURING):
        return "measuring"
    return "library"


def module_name(path: Path) -> str:
    if path.is_relative_to(PACKAGE):
        parts = ("int8nax",) + path.relative_to(PACKAGE).with_suffix("").parts
    else:
        parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(p for p in parts if p != "__init__")


def imported_modules(path: Path, name: str) -> set[str]:
    """Fully qualified int8nax modules (and submodules named in from-imports) that `path` imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}
    return {m for m in found if m == "int8nax" or m.startswith(("int8nax.", "benchmarks"))}


def real_module(name: str) -> str | None:
    """The module a dotted name refers to (a from-import may name a function, not a module)."""
    while name:
        rel = name.split(".")
        base = (PACKAGE.parent if rel[0] == "int8nax" else ROOT).joinpath(*rel)
        if base.with_suffix(".py").exists() or (base / "__init__.py").exists():
            return name
        name = name.rpartition(".")[0]
    return None


SOURCES = sorted(PACKAGE.rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_a_layer_above_its_own(path):
    name = module_name(path)
    own = LAYERS[layer_of(name)]
    # "int8nax" alone is what `from . import quant` names as its package: not an import of the API.
    used = {real_module(m) for m in imported_modules(path, name)} - {None, "int8nax"}
    bad = sorted(m for m in used if LAYERS[layer_of(m)] > own)
    assert not bad, f"{name} ({layer_of(name)}) imports {bad} from a layer above"


def test_the_rule_catches_a_planted_violation(tmp_path):
    # The scanner must see a function-level import of the measuring layer from a backend.
    fake = PACKAGE / "backends" / "cpu" / "backend.py"
    source = fake.read_text() + "\n\ndef _bad():\n    from ...bench import contenders\n"
    planted = tmp_path / "backend.py"
    planted.write_text(source)
    mods = {real_module(m) for m in imported_modules(planted, "int8nax.backends.cpu.backend")} - {None}
    assert "int8nax.bench.contenders" in mods
    assert any(LAYERS[layer_of(m)] > LAYERS["library"] for m in mods)


def test_importing_the_library_loads_no_measuring_code():
    import subprocess
    import sys

    code = ("import sys, int8nax; int8nax.info(); "
            "print(sorted(m for m in sys.modules if m.startswith(('int8nax.bench', 'int8nax.commands'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
