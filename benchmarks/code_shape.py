"""Advice on the code's shape: the modules of hastune/ and runners/ over 400 lines and the
functions over 80 (the simulator's are gated by tests/sim/test_core_shape.py; the rest is
advice: split a module by concept, not to stay under a count).

    python benchmarks/code_shape.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.sim.test_core_shape import long_functions  # noqa: E402

MODULE_LINES, FUNCTION_LINES = 400, 80


def main() -> None:
    files = sorted(p for top in ("hastune", "runners") for p in (ROOT / top).rglob("*.py"))
    long_mods = [(len(p.read_text().splitlines()), p.relative_to(ROOT)) for p in files]
    long_mods = sorted((n, p) for n, p in long_mods if n > MODULE_LINES)
    print(f"{len(files)} modules; over {MODULE_LINES} lines: {len(long_mods)}")
    for n, p in reversed(long_mods):
        print(f"  {n:5d}  {p}")
    funcs = [(n, f"{p.relative_to(ROOT)}:{line} {name}") for p in files
             for name, line, n in long_functions(p.read_text(), FUNCTION_LINES)]
    print(f"functions over {FUNCTION_LINES} lines: {len(funcs)}")
    for n, where in sorted(funcs, reverse=True):
        print(f"  {n:5d}  {where}")


if __name__ == "__main__":
    main()
