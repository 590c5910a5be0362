"""Stage 2 of Hybrid Auto Selection and its study. From Python: `hastune.tune.run(recipe,
**options) -> TuneResult` (hastune/tune/api.py, docs/api.md)."""

from __future__ import annotations

from typing import Any

__all__ = ["Progress", "TuneOptions", "TuneResult", "run"]


def __getattr__(name: str) -> Any:  # lazily: `import hastune.tune.storage` loads no optuna
    if name in ("run", "TuneResult"):
        from hastune.tune import api

        return getattr(api, name)
    if name == "Progress":
        from hastune.tune.progress import Progress

        return Progress
    if name == "TuneOptions":
        from hastune.tune.runner import TuneOptions

        return TuneOptions
    raise AttributeError(f"module 'hastune.tune' has no attribute {name!r}")
