"""JSON for machines, as every command's `--json` and the tuner's summary.json write it."""

from __future__ import annotations

import json
import math
from pathlib import Path


def _clean(x: object) -> object:
    if isinstance(x, float):
        if math.isinf(x) or math.isnan(x):
            return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
        return round(x, 6)
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def dumps(obj: dict) -> str:
    """JSON for machines: no NaN (null), infinity as the string 'inf', floats to 6 places."""
    return json.dumps(_clean(obj), indent=2)


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file beside it: a half-written file never
    replaces a whole one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
