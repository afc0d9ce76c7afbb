"""The house rules of ARCHITECTURE.md, checked: layers import only downwards, kernel/ areas
form no cycle, modules stay small and say what they export, and the architecture page names
every folder there is."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "ovm_offline"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "pb" not in p.relative_to(PACKAGE).parts)


def _name(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    """Absolute names of the ovm_offline modules `path` imports (also inside functions)."""
    mod = _name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out |= {target} | {f"{target}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("ovm_offline")}


#: layer -> the layers it must not import (ARCHITECTURE.md's table, bottom to top)
FORBIDDEN = {
    "ovm_offline.sources": ("ovm_offline.kernel", "ovm_offline.extract", "ovm_offline.criu", "ovm_offline.filekinds"),
    "ovm_offline.kernel": ("ovm_offline.extract", "ovm_offline.criu", "ovm_offline.filekinds", "ovm_offline.dump"),
    "ovm_offline.extract": ("ovm_offline.criu", "ovm_offline.filekinds", "ovm_offline.dump"),
    "ovm_offline.state": ("ovm_offline.kernel", "ovm_offline.extract", "ovm_offline.criu", "ovm_offline.sources"),
    "ovm_offline.criu": ("ovm_offline.kernel", "ovm_offline.extract", "ovm_offline.filekinds", "ovm_offline.sources"),
}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_layers_import_only_downwards(path):
    mod = _name(path)
    for layer, forbidden in FORBIDDEN.items():
        if mod == layer or mod.startswith(layer + "."):
            bad = sorted(i for i in _imports(path) if i.startswith(forbidden))
            assert not bad, f"{mod} ({layer}) imports {bad}"


def test_kernel_areas_form_no_cycle():
    areas = sorted(p.name for p in (PACKAGE / "kernel").iterdir() if (p / "__init__.py").exists())
    edges: dict[str, set[str]] = {a: set() for a in areas}
    for area in areas:
        assert ast.get_docstring(ast.parse((PACKAGE / "kernel" / area / "__init__.py").read_text())), area
        for path in (PACKAGE / "kernel" / area).glob("*.py"):
            for imp in _imports(path):
                m = re.match(r"ovm_offline\.kernel\.(\w+)", imp)
                if m and m.group(1) in edges and m.group(1) != area:
                    edges[area].add(m.group(1))

    def reaches(a: str, target: str, seen: set[str]) -> bool:
        return any(b == target or (b not in seen and reaches(b, target, seen | {b})) for b in edges[a])

    assert not [a for a in areas if reaches(a, a, set())], edges


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_are_small_and_say_what_they_export(path):
    text = path.read_text()
    tree = ast.parse(text)
    assert len(text.splitlines()) <= 500, f"{path.name}: over 500 lines"
    long = [
        f"{n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.end_lineno - n.lineno + 1 > 60
    ]
    assert not long, f"{path.name}: functions over 60 lines: {long}"
    exports = any(
        isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
        for n in tree.body
    )
    defines = any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body)
    assert exports or not defines, f"{path.name}: no __all__"


def test_architecture_names_every_folder():
    text = (REPO / "ARCHITECTURE.md").read_text()
    folders = [p for p in PACKAGE.rglob("*") if p.is_dir() and (p / "__init__.py").exists() and p.name != "pb"]
    missing = [str(p.relative_to(REPO)) for p in folders if f"{p.name}/" not in text]
    assert not missing, f"ARCHITECTURE.md does not say where these are: {missing}"
