"""Deployment configurations: an architecture and its knobs, as YAML files.

A config is what `hastune tune` writes as best_config.yaml, what `hastune evaluate --config`
takes, and what the engine in runners/ runs. Each architecture's config model lives in its
module under hastune/archs/; this module parses and writes any of them through the registry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter, ValidationError

from hastune import archs
from hastune.archs.base import ConfigBase
from hastune.errors import InputError, from_pydantic
from hastune.yamlio import read_yaml_mapping

AnyConfig = ConfigBase  # any architecture's config (for annotations)
TARGET_KEY = "target"  # best_config.yaml's block of what the deployment is for
_ADAPTERS: dict[tuple[str, ...], TypeAdapter[Any]] = {}


def _adapter() -> TypeAdapter[Any]:
    """The discriminated union of the registered architectures' config models."""
    if archs.NAMES not in _ADAPTERS:
        models = tuple(a.config for a in archs.ARCHITECTURES.values())
        union = Annotated[Union[models], Field(discriminator="architecture")]  # type: ignore
        _ADAPTERS[archs.NAMES] = TypeAdapter(union)
    return _ADAPTERS[archs.NAMES]


def parse_config(data: dict, file: str | Path | None = None) -> ConfigBase:
    if TARGET_KEY in data:  # what it was tuned for (hastune.export.target), not a knob
        data = {k: v for k, v in data.items() if k != TARGET_KEY}
    if "architecture" not in data:
        raise InputError(file, "architecture", "missing",
                         f"add architecture: one of {', '.join(archs.NAMES)}")
    arch = archs.get(data["architecture"], file)
    try:
        return _adapter().validate_python(data)
    except ValidationError as exc:
        err = from_pydantic(file, exc, model=arch.config)
        # drop pydantic's union tag ('<architecture>.n_E' → 'n_E')
        if err.field and err.field.split(".")[0] in archs.NAMES:
            err = InputError(file, err.field.split(".", 1)[-1] if "." in err.field else None,
                             err.problem, err.fix)
        raise err from None


def load_config(path: str | Path) -> ConfigBase:
    return parse_config(read_yaml_mapping(path, "deployment config"), path)


def config_dict(cfg: ConfigBase) -> dict:
    """A configuration's knobs as plain data, every field included: `null` is a value
    (e.g. a chunk budget or a gap cap that is off), so it is never dropped and
    `parse_config(config_dict(c)) == c`."""
    return cfg.model_dump(exclude={"kind", "name"})


def trial_key(cfg: ConfigBase) -> str:
    """A configuration's identity as canonical JSON (sorted keys): the key its trial carries
    in a study, the same in every process and after a restart."""
    return json.dumps(config_dict(cfg), sort_keys=True)


def knob_items(cfg: ConfigBase) -> tuple:
    """A configuration's identity as a hashable tuple of its knobs: de-duplication in memory,
    cheaper than `trial_key`."""
    return tuple(sorted(config_dict(cfg).items()))


def dump_config(cfg: ConfigBase) -> dict:
    """What a config file holds (kind and architecture first); parses back to `cfg`."""
    d = cfg.model_dump(exclude={"name"} if cfg.name is None else set())
    return {"kind": d.pop("kind"), "architecture": d.pop("architecture"), **d}

