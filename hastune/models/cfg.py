"""Typed reads of a Hugging Face config mapping: every bad or unsupported value is one
InputError naming the file and the key's dotted path (e.g. `text_config.num_hidden_layers`)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hastune.errors import InputError

_MISSING = object()
# The largest whole number a config key may hold (published ones stay far below: vocabularies
# of 10^6, context lengths of 10^7, pixel counts of 10^8), and the most layers of one stack.
MAX_INT = 2**31 - 1
MAX_LAYERS = 10_000


class Cfg:
    """A view of one (sub-)mapping of a config file, `prefix` its dotted path."""

    def __init__(self, data: dict, file: Path | str | None, prefix: str = ""):
        self.data, self.file, self.prefix = data, file, prefix

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def error(self, name: str, problem: str, fix: str) -> InputError:
        return InputError(self.file, self.key(name), problem, fix)

    def has(self, name: str) -> bool:
        return self.data.get(name) is not None

    def raw(self, name: str, default: Any = _MISSING) -> Any:
        v = self.data.get(name)
        if v is None:
            if default is _MISSING:
                raise self.error(name, "missing", f"add {name} (see the model's published "
                                 "config.json)")
            return default
        return v

    def int(self, name: str, default: Any = _MISSING, minimum: int = 1,
            maximum: int = MAX_INT) -> int:
        v = self.raw(name, default)
        if v is None:
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (
                isinstance(v, float) and (not math.isfinite(v) or v != int(v))):
            raise self.error(name, f"{_short(v)} is not a whole number", "use a whole number")
        if v < minimum:
            raise self.error(name, f"{_short(v)} is below {minimum}", f"use a value ≥ {minimum}")
        if v > maximum:
            raise self.error(name, f"{_short(v)} is above {maximum:,}",
                             f"use a value ≤ {maximum:,} (the published config's)")
        return int(v)

    def bool(self, name: str, default: bool) -> bool:
        v = self.raw(name, default)
        if not isinstance(v, bool):
            raise self.error(name, f"{v!r} is not true or false", "use true or false")
        return v

    def str(self, name: str, default: Any = _MISSING) -> str:
        v = self.raw(name, default)
        if v is not None and not isinstance(v, str):
            raise self.error(name, f"{v!r} is not a string", "use a string")
        return v

    def int_list(self, name: str, default: Any = _MISSING, minimum: int = 0) -> list[int]:
        v = self.raw(name, default)
        if v is None:
            return v
        if not isinstance(v, list):
            raise self.error(name, f"{v!r} is not a list", "use a list of whole numbers")
        out = []
        for i, x in enumerate(v):
            item = f"{name}[{i}]"
            out.append(Cfg({item: x}, self.file, self.prefix).int(item, minimum=minimum))
        return out

    def sub(self, name: str, default: Any = _MISSING) -> Cfg:
        v = self.raw(name, default)
        if v is None:
            return v
        if not isinstance(v, dict):
            raise self.error(name, f"{_short(v)} is not a mapping", "use a JSON object")
        return Cfg(v, self.file, self.key(name))

    def choice(self, name: str, allowed: dict[str, Any], what: str,
               default: Any = _MISSING) -> Any:
        """`allowed[value]`, or an InputError listing the supported values."""
        v = self.str(name, default)
        if v not in allowed:
            raise self.error(name, f"{what} {v!r} is not supported",
                             f"use one of {', '.join(sorted(allowed))} (docs/models.md)")
        return allowed[v]


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def non_finite(obj: Any, path: str = "") -> Iterator[str]:
    """Dotted paths of NaN / ±Infinity numbers anywhere in a parsed JSON value."""
    if isinstance(obj, float) and not math.isfinite(obj):
        yield path or "<top level>"
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from non_finite(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from non_finite(v, f"{path}[{i}]")
