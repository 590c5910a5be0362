"""Shape limits of the code (issue 10): no simulator function longer than 80 lines (its
packages included). One test per file, so a file over the limit fails on its own; a file that
is over it and being split is listed below with why, as a strict xfail — its owner removes the
entry when the file fits (a strict xfail that passes fails).

Module length is advice, not a gate (issue 33: a module splits by concept, not to stay under
a count): `python benchmarks/code_shape.py` lists the modules over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 80  # hastune/sim/**/*.py

# path (from the repository root) → why it is still over the limit
FUNCTION_EXEMPT: dict[str, str] = {}


def _files(*patterns: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for pat in patterns for p in ROOT.glob(pat))


def _params(files: list[str], exempt: dict[str, str]) -> list:
    return [pytest.param(f, id=f, marks=pytest.mark.xfail(strict=True, reason=exempt[f]))
            if f in exempt else pytest.param(f, id=f) for f in files]


def long_functions(source: str, limit: int) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function or method, nested ones included, longer
    than `limit` lines (from its `def` to its last line, decorators not counted)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if n > limit:
                out.append((node.name, node.lineno, n))
    return out


SIM = _files("hastune/sim/**/*.py")


def test_the_files_are_found():
    assert "hastune/sim/padg/run.py" in SIM and "hastune/sim/fudg.py" in SIM
    for f in FUNCTION_EXEMPT:
        assert (ROOT / f).exists(), f"exempt file {f} is gone: drop its entry"


@pytest.mark.parametrize("path", _params(SIM, FUNCTION_EXEMPT))
def test_simulator_functions_are_short(path):
    long = long_functions((ROOT / path).read_text(), MAX_FUNCTION_LINES)
    assert not long, f"{path}: functions over {MAX_FUNCTION_LINES} lines (name, line, " \
                     f"length): {long}"


def test_long_functions_counts_nested_and_methods():
    src = """\
@decorator
def f():
    a = 1
    def g():
        b = 2
        return b
    return a + g()


class C:
    def m(self):
        return 1
"""
    assert long_functions(src, 2) == [("f", 2, 6), ("g", 4, 3)]  # f: its def to its return
    assert long_functions(src, 6) == []
