"""What the fidelity benchmarks share: the measurements file they read by default (issue 13;
run as `python benchmarks/NAME.py`, which puts this folder on the import path)."""

import sys
from pathlib import Path

from hastune.data import SILICON_LLAMA31

ROOT = Path(__file__).resolve().parent.parent
CSV = SILICON_LLAMA31


def group_rows(csv: Path, engine: str, gpu: str | None = None) -> list:
    """The measured rows of `engine` (on `gpu`, if given) in `csv`; an error line on stderr and
    exit code 2 where there are none."""
    from hastune.fidelity.rows import read_cases

    cases = [c for c in read_cases(csv) if c.engine == engine and gpu in (None, c.gpu)]
    if not cases:
        print(f"error: {csv}: no rows of {engine}" + (f" on {gpu}" if gpu else ""),
              file=sys.stderr)
        sys.exit(2)
    return cases
