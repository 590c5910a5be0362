"""The simulator's compiled core (hastune/sim/_core.pyx, Cython, built by `pip install -e .`
through setup.py): EPD runs (hastune.sim.epd) and the stop rule's watcher
(hastune.sim.stoprule) in C, the same results as their Python reference paths, which run where
it was not built (no C compiler) or where HASTUNE_SIM_CORE=python asks for them
(tests/sim/test_epd_core.py compares the two)."""

from __future__ import annotations

import os
from types import ModuleType

core: ModuleType | None
try:
    from hastune.sim import _core as core
except ImportError:  # built without a C compiler: the Python reference paths
    core = None


def core_name(choice: str | None = None) -> str:
    """Which path runs: "compiled" or "python" — `choice` where given (a simulator's own,
    EPDSimulator.core), else HASTUNE_SIM_CORE=python, else the compiled one where built."""
    want = choice or os.environ.get("HASTUNE_SIM_CORE", "").lower() or "compiled"
    return "compiled" if want == "compiled" and core is not None else "python"
