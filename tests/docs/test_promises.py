"""docs/promises.md names, for each promise the docs make, the check that shows it.

Every reference on that page must exist: a test as ``path::name`` (or
``path::Class::method``) must be defined in that file, and a scoreboard row
(``| broker | ... |``, the first cells of the row) must be a row of
docs/scoreboard.md. Every promise above the "Not yet shown by a test" section
names at least one check.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "promises.md"
SCOREBOARD = ROOT / "docs" / "scoreboard.md"
GAPS = "## Not yet shown by a test"

_SPAN = re.compile(r"`([^`]+)`")


def named_tests(text: str) -> list[str]:
    """``path::name`` spans of *text*."""
    return [s for s in _SPAN.findall(text) if "::" in s and s.split("::", 1)[0].endswith(".py")]


def row_references(text: str) -> list[str]:
    """``| broker | ... |`` spans of *text*."""
    return [s for s in _SPAN.findall(text) if s.startswith("| ") and s.endswith(" |")]


@cache
def _defined(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _child(scope: ast.AST, name: str) -> ast.AST | None:
    for node in getattr(scope, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return node
    return None


def missing_test(reference: str, root: Path = ROOT) -> str:
    """Why *reference* names no test ("" when it does)."""
    path, *names = reference.split("::")
    file = root / path
    if not file.is_file():
        return f"{reference}: no file {path}"
    scope: ast.AST | None = _defined(file)
    for name in names:
        scope = _child(scope, name) if scope is not None else None
        if scope is None:
            return f"{reference}: {name} is not defined in {path}"
    return ""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def missing_row(reference: str, scoreboard: str) -> str:
    """Why *reference* names no row of *scoreboard* ("" when it does)."""
    want = _cells(reference)
    for line in scoreboard.splitlines():
        if line.startswith("|") and _cells(line)[:len(want)] == want:
            return ""
    return f"{reference}: no such row in docs/scoreboard.md"


def problems(page: str, scoreboard: str, root: Path = ROOT) -> list[str]:
    """Every reference of *page* that does not exist, and every promise without one."""
    found = [missing_test(r, root) for r in named_tests(page)]
    found += [missing_row(r, scoreboard) for r in row_references(page)]
    shown = page.split(GAPS, 1)[0]
    for line in shown.splitlines():
        if line.startswith("- ") and not (named_tests(line) or row_references(line)):
            found.append(f"a promise names no check: {line[:100]}")
    return [p for p in found if p]


def test_every_reference_on_the_promises_page_exists() -> None:
    page = PAGE.read_text(encoding="utf-8")
    assert GAPS in page, "the page keeps its honest-gaps section"
    assert len(named_tests(page)) >= 50 and len(row_references(page)) >= 10  # the parser found the page's checks
    assert problems(page, SCOREBOARD.read_text(encoding="utf-8")) == []


def test_the_check_fails_on_a_missing_test_file_or_row() -> None:
    """The checker itself can fail: each kind of broken reference is reported."""
    scoreboard = "| broker | fault |\n|---|---|\n| embedded | paused-consumer | 20 |\n"
    page = (
        "## Settlement\n\n"
        "- exists: `tests/docs/test_promises.py::test_every_reference_on_the_promises_page_exists`, "
        "`| embedded | paused-consumer |`\n"
        "- a test that is not there: `tests/docs/test_promises.py::test_no_such_test`\n"
        "- a method that is not there: `ackbridge/testing/conformance.py::ConformanceSuite::test_no_such_method`\n"
        "- a file that is not there: `tests/no_such_file.py::test_x`\n"
        "- a row that is not there: `| embedded | no-such-fault |`\n"
        "- a promise with no check\n\n"
        f"{GAPS}\n\n- a gap names no check, and may not\n")
    assert problems(page, scoreboard) == [
        "tests/docs/test_promises.py::test_no_such_test: test_no_such_test is not defined in "
        "tests/docs/test_promises.py",
        "ackbridge/testing/conformance.py::ConformanceSuite::test_no_such_method: test_no_such_method is not "
        "defined in ackbridge/testing/conformance.py",
        "tests/no_such_file.py::test_x: no file tests/no_such_file.py",
        "| embedded | no-such-fault |: no such row in docs/scoreboard.md",
        "a promise names no check: - a promise with no check",
    ]
