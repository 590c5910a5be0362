"""Safe YAML reading with errors that name the file (never `yaml.load` on user input)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hastune.errors import InputError


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys instead of silently keeping the last one."""


def _construct_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False):
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping
)


def read_yaml_mapping(path: str | Path, what: str) -> dict[str, Any]:
    """Read a YAML file whose top level must be a mapping; `what` names the kind of file."""
    p = Path(path)
    if not p.exists():
        raise InputError(p, None, f"{what} file not found", "check the path")
    if p.is_dir():
        raise InputError(p, None, f"expected a {what} file, got a directory", "give a .yaml file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(p, None, "not a UTF-8 text file", f"give a YAML {what} file") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown place"
        problem = exc.problem or exc.context or "invalid YAML"
        fix = "correct the YAML syntax there"
        if problem.startswith("duplicate key"):
            fix = "keep only one of the two entries for that key"
        raise InputError(p, None, f"invalid YAML at {where}: {problem}", fix) from None
    except yaml.YAMLError as exc:
        raise InputError(p, None, f"invalid YAML: {exc}", "correct the YAML syntax") from None
    if data is None:
        raise InputError(p, None, f"the {what} file is empty", f"write a {what} in it")
    if not isinstance(data, dict):
        raise InputError(
            p, None, f"a {what} must be a YAML mapping, got a {type(data).__name__}",
            "write key: value lines at the top level",
        )
    return data
