"""The simulator's compiled core (hastune/sim/_core.pyx, Cython, built by `pip install -e .`
through setup.py): EPD runs (hastune.sim.epd), open-loop fudg runs (hastune.sim.fudg),
open-loop nodg runs without batch waiting (hastune.sim.nodg.paged; reserved-KV ones,
hastune.sim.nodg.run, event by event) and the stop rule's watcher
(hastune.sim.stoprule) in C, the same results as their Python reference paths, which run where
it was not built (no C compiler) or where HASTUNE_SIM_CORE=python asks for them
(tests/sim/test_core.py compares the two)."""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path
from types import ModuleType

SOURCE = Path(__file__).with_name("_core.pyx")


def _load() -> ModuleType | None:
    """The compiled module, or None: not built (no C compiler), or built from another
    _core.pyx than the one beside it (a checkout changed since its last build: a stale core
    would not be the simulation the Python path is; `pip install -e .` rebuilds it)."""
    try:
        from hastune.sim import _core
    except ImportError:
        return None
    if SOURCE.exists() and _core.BUILT_FROM != hashlib.sha256(SOURCE.read_bytes()).hexdigest():
        warnings.warn("hastune/sim/_core.pyx changed since the compiled core was built: "
                      "running the Python path (several times slower); rebuild it with "
                      "pip install -e .", RuntimeWarning, stacklevel=2)
        return None
    return _core


core: ModuleType | None = _load()


def core_name(choice: str | None = None) -> str:
    """Which path runs: "compiled" or "python" — `choice` where given (a simulator's own,
    EPDSimulator.core), else HASTUNE_SIM_CORE=python, else the compiled one where built."""
    want = choice or os.environ.get("HASTUNE_SIM_CORE", "").strip().lower()
    return "python" if want == "python" or core is None else "compiled"
