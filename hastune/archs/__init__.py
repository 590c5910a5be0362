"""The architecture registry: one module per architecture, listed once here.

Adding an architecture is one module under hastune/archs/ (its config model and an
`Architecture` subclass, see hastune/archs/base.py), one search space under search_spaces/ and
one line in MODULES. Everything else — config parsing, recipes, search spaces, pruning,
evaluation, the engine and the CLI — reads the registry.
"""

from __future__ import annotations

import importlib

from hastune.archs.base import Architecture, ConfigBase, Parallel, Shape
from hastune.errors import InputError

MODULES = (
    "hastune.archs.epd",
    "hastune.archs.epd_static",
    "hastune.archs.padg",
    "hastune.archs.nodg",
    "hastune.archs.fudg",
)

ARCHITECTURES: dict[str, Architecture] = {}
NAMES: tuple[str, ...] = ()


def register(arch: Architecture) -> None:
    """Add an architecture (what importing a module of MODULES does; a plug-in or a test may
    call it for one of its own)."""
    global NAMES
    if arch.name in ARCHITECTURES and ARCHITECTURES[arch.name] is not arch:
        raise ValueError(f"architecture {arch.name!r} is registered twice")
    ARCHITECTURES[arch.name] = arch
    NAMES = tuple(ARCHITECTURES)


for _m in MODULES:
    register(importlib.import_module(_m).ARCH)


def get(name: str, file: object = None, field: str = "architecture") -> Architecture:
    """The architecture called `name`; an InputError naming the known ones otherwise."""
    try:
        return ARCHITECTURES[name]
    except (KeyError, TypeError):
        raise InputError(file, field, f"unknown architecture {name!r}",
                         f"use one of {', '.join(NAMES)}") from None


def of(cfg: object) -> Architecture:
    """The architecture of a parsed config."""
    return ARCHITECTURES[cfg.architecture]  # type: ignore[attr-defined]


def runnable() -> tuple[str, ...]:
    """The architectures the engine in runners/ can run."""
    return tuple(n for n, a in ARCHITECTURES.items() if a.engine_mode is not None)


__all__ = ["ARCHITECTURES", "NAMES", "Architecture", "ConfigBase", "Parallel", "Shape", "get",
           "of", "register", "runnable"]
