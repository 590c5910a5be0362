"""The pinned engines' command-line flags, and the check every emitted command passes.

Each flags_<program>.json beside this module was written by scripts/dump_engine_flags.py from
the engine's own argument parser at a pinned release (its wheel named, with its sha256): every
flag's dest, the kind of value it takes (flag: none, int, float, json, str, probed on the
parser's type function), its choices and nargs, and the source file that defines it. Two small
sets were read by hand from the projects' sources, and say so in their `source`: the EPD
proxy that vLLM ships as an example (not in the wheel) and Dynamo's own worker flags. The
hastune gateway's (`hastune gateway`, this repository's own) are its typer command's options,
and a test keeps the two equal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
FILES = {
    "vllm": "flags_vllm.json",
    "sglang": "flags_sglang.json",
    "sglang-router": "flags_sglang_router.json",
    "vllm-router": "flags_vllm_router.json",
    "dynamo-vllm": "flags_dynamo_vllm.json",
    "dynamo-sglang": "flags_dynamo_sglang.json",
    "hastune-gateway": "flags_hastune_gateway.json",
}
# Dynamo's workers take the engine's own flags besides theirs
BASE = {"dynamo-vllm": "vllm", "dynamo-sglang": "sglang"}


@dataclass
class Command:
    """One process of a deployment: its program (a key of FILES), the words that start it
    (`vllm serve "$MODEL"`), its flags with their values, environment, and where it runs."""

    program: str
    words: list[str]
    flags: list[tuple[str, list[str]]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    name: str = ""
    node: int = 0
    port: int | None = None

    def add(self, flag: str, *values: Any) -> Command:
        self.flags.append((flag, [_word(v) for v in values]))
        return self

    def argv(self) -> list[str]:
        out = list(self.words)
        for f, vals in self.flags:
            out += [f, *vals]
        return out


def _word(v: Any) -> str:
    if isinstance(v, bool):
        raise TypeError("a boolean is a flag without a value")
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


@cache
def load(program: str) -> dict[str, Any]:
    data = json.loads((HERE / FILES[program]).read_text())
    if program in BASE:
        base = load(BASE[program])
        data = {**data, "flags": {**base["flags"], **data["flags"]},
                "json_fields": {**base.get("json_fields", {}), **data.get("json_fields", {})},
                "registered": {**base.get("registered", {}), **data.get("registered", {})}}
    return data


def pinned(program: str) -> str:
    d = load(program)
    return f"{d['engine']} {d['version']}"


def _value_problem(spec: dict, value: str, flag: str, data: dict) -> str | None:
    kind = spec["kind"]
    if value.startswith("$") or value.startswith('"$'):
        return None if kind == "str" else f"{flag} takes a {kind}; got the variable {value}"
    if spec.get("choices") and value not in spec["choices"]:
        return f"{flag} {value!r} is not one of {', '.join(spec['choices'])}"
    try:
        if kind == "int":
            int(value)
        elif kind == "float":
            float(value)
        elif kind == "json":
            obj = json.loads(value)
            known = data.get("json_fields", {}).get(flag)
            if known is not None:
                if not isinstance(obj, dict):
                    return f"{flag} takes a JSON object"
                extra = sorted(set(obj) - set(known))
                if extra:
                    return f"{flag} has no field(s) {', '.join(extra)}"
                for key, reg in (("kv_connector", "kv_connector"),
                                 ("ec_connector", "ec_connector")):
                    names = data.get("registered", {}).get(reg)
                    if key in obj and names and obj[key] not in names:
                        return f"{flag}: {key} {obj[key]!r} is not a registered connector"
    except ValueError:
        return f"{flag} takes a {kind}; got {value!r}"
    return None


def problems(cmd: Command) -> list[str]:
    """What in `cmd` the pinned version does not accept: an unknown flag, a value where the
    flag takes none (or none where it takes one), a value of the wrong kind or choice."""
    data = load(cmd.program)
    out = []
    for flag, values in cmd.flags:
        spec = data["flags"].get(flag)
        if spec is None:
            out.append(f"{flag} is not a flag of {pinned(cmd.program)}")
            continue
        n = spec.get("nargs")
        if spec["kind"] == "flag":
            if values:
                out.append(f"{flag} takes no value")
            continue
        if not values:
            out.append(f"{flag} needs a value")
        elif len(values) > 1 and n in (None, 1, "?"):
            out.append(f"{flag} takes one value, got {len(values)}")
        for v in values:
            p = _value_problem(spec, v, flag, data)
            if p:
                out.append(p)
    return out
