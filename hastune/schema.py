"""What the schemas (recipes' configs, profiles) share."""

from __future__ import annotations

from typing import Any


def drop_new_defaults(model: Any, data: Any, names: tuple[str, ...]) -> Any:
    """`data`, a pydantic dump of `model`, without the fields `names` (added since the
    schema's first release) while they hold their default: a file that does not use them
    dumps, keys and hashes (hastune.tune.identity) as before they existed."""
    if not isinstance(data, dict):
        return data
    fields = type(model).model_fields
    for name in names:
        if name in data and getattr(model, name) == fields[name].get_default(
                call_default_factory=True):
            del data[name]
    return data
