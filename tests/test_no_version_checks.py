"""Every layout is decided from what the ISF says (a member's presence and type, an enumerator's
value), never from the kernel's version: a distribution's 5.14 may carry 6.x's structures, and
a real-time build of 6.1 changes its locks. The banner and release are read only to find the
ISF that matches the guest. This reads the code under ovm_offline/ for a version check."""

from __future__ import annotations

import ast
import re

from tests.support.paths import REPO

PACKAGE = REPO / "ovm_offline"
# names that hold a kernel's version (a kdump header's header_version or a counter named
# since_release are none)
VERSIONISH = re.compile(r"^(kernel_?|linux_?|os_?)?(version|release)$|^osrelease$|uname|^kver|version_code$", re.I)
# "5.10", "6.1.0", "v6.8": a kernel version written into the code
VERSION_LITERAL = re.compile(r"^v?[2-9]\.\d{1,2}(\.\d+)?$")
ORDERING = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)
STRING_TESTS = {"startswith", "endswith", "match", "fullmatch", "search"}


def _is_version_tuple(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Tuple)
        and 2 <= len(node.elts) <= 3
        and all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in node.elts)
        and isinstance(node.elts[0], ast.Constant)
        and node.elts[0].value in range(2, 10)
    )


def _is_version_literal(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(VERSION_LITERAL.match(node.value))


def _names(node: ast.AST) -> set[str]:
    """The variable, attribute and function names in an expression."""
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            names.add(n.attr)
    return names


def _versionish(node: ast.AST) -> bool:
    return any(VERSIONISH.search(name) for name in _names(node))


def version_checks(source: str) -> list[tuple[int, str]]:
    """(line, code) of each comparison that chooses by a kernel version."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            ordered = any(isinstance(op, ORDERING) for op in node.ops)
            if (
                (ordered and (_versionish(node) or any(_is_version_tuple(o) for o in operands)))
                or any(_is_version_literal(o) for o in operands)
                or (_versionish(node) and any(isinstance(o, ast.Constant) and o.value is not None for o in operands))
            ):
                found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in STRING_TESTS:
            if any(_is_version_literal(a) for a in node.args) and _versionish(node.func.value):
                found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_code_under_ovm_offline_chooses_by_kernel_version():
    offenders = [
        f"{path.relative_to(REPO)}:{line}: {code}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, code in version_checks(path.read_text())
    ]
    assert not offenders, "layouts come from the ISF, not from versions:\n" + "\n".join(offenders)


def test_the_check_sees_the_forms_a_version_check_takes():
    checks = [
        "if kernel_version >= (5, 13): pass",
        "if release < '6.1': pass",
        "x = osrelease.startswith('5.10')",
        "if prog.kernel_version() > 6: pass",
        "ok = (major, minor) >= (6, 9)",
        "if uname == '6.12.117': pass",
    ]
    for code in checks:
        assert version_checks(code), code
    # identifying the ISF by the banner, and comparisons that are no versions, pass
    for code in (
        "ok = banner_release(text) == release",
        "if major == TTYAUX_MAJOR and minor == 1: pass",
        "n = a < b",
        "if h.header_version >= 6: pass",  # a kdump header's own format
        "if levels not in (4, 5): pass",
    ):
        assert not version_checks(code), code
