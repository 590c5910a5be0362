"""One error type for bad input: it names the file, the field and the fix.

The CLI prints `InputError` as one line and exits with code 2; no traceback reaches the user.
"""

from __future__ import annotations

import difflib
import re
import types as types_mod
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

# One exit-code table for every command (README "Exit codes"; `hastune --help` epilog).
EXIT_OK = 0
EXIT_FAILED = 1          # the run failed, not the input: a worker died, the storage refused a write
EXIT_INPUT_ERROR = 2     # bad input: the message names the file, the field and the fix
EXIT_NO_CONFIG = 3       # no configuration meets the SLOs (tune, grid, prune, evaluate, simulate)
EXIT_GATE = 4            # a quality gate failed: tune --baseline, profile check, fidelity
EXIT_REQUESTS_LOST = 5   # serve: requests were rejected at arrival or failed
EXIT_INTERRUPTED = 130   # Ctrl-C; re-run the same command to resume where that applies

EXIT_BRIEF = {  # the --help epilog's form
    EXIT_OK: "ok", EXIT_FAILED: "the run failed (re-run to resume)", EXIT_INPUT_ERROR: "bad input",
    EXIT_NO_CONFIG: "no configuration meets the SLOs",
    EXIT_GATE: "a gate failed (--baseline regression, profile check, fidelity's bar)",
    EXIT_REQUESTS_LOST: "serve lost requests (rejected or failed)",
    EXIT_INTERRUPTED: "interrupted",
}
EXIT_CODES = {
    EXIT_OK: "success",
    EXIT_FAILED: "the run failed (a worker died, the storage refused a write); finished work "
                 "is kept, re-run to resume",
    EXIT_INPUT_ERROR: "bad input: a file, field or option is wrong (the message names the fix)",
    EXIT_NO_CONFIG: "no configuration meets the SLOs (the message names the rule or probe "
                    "that excluded them)",
    EXIT_GATE: "a quality gate failed: tune's best is worse than --baseline by more than "
               "--max-regression; profile check's held-out error is above its gate; "
               "fidelity: an engine with 40 rows or more misses the bar",
    EXIT_REQUESTS_LOST: "serve: requests were rejected at arrival or failed (counts printed)",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C); re-run the same command to resume",
}


def _clip(text: str, limit: int = 2000) -> str:
    """`text` at most about `limit` characters: a hostile value (a 100,000-character string)
    quoted in a message is cut in the middle, so the one line stays readable."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = limit // 2
    return f"{text[:keep]}…[{len(text) - 2 * keep:,} characters]…{text[-keep:]}"


class InputError(Exception):
    """A user-supplied file or value is wrong. `str()` is the whole message."""

    def __init__(self, file: str | Path | None, field: str | None, problem: str, fix: str):
        self.file = str(file) if file is not None else None
        self.field = _clip(field, 300) if field is not None else None
        self.problem = _clip(problem)
        self.fix = _clip(fix)
        super().__init__(self.message)

    def __reduce__(self):  # raised in a worker process, re-raised whole in the parent
        return (type(self), (self.file, self.field, self.problem, self.fix))

    def as_dict(self) -> dict[str, Any]:
        """The `--json` form of the error (one object on stdout)."""
        return {"error": self.problem, "file": self.file, "field": self.field, "fix": self.fix,
                "message": self.message, "exit_code": EXIT_INPUT_ERROR}

    @property
    def message(self) -> str:
        where = ": ".join(x for x in (self.file, self.field) if x) or "<input>"
        end = "" if self.problem.endswith(("?", ".", "!")) else "."
        return f"{where}: {self.problem}{end} Fix: {self.fix}"


# the names pydantic gives a union's members in an error's path ('list[any]',
# 'function-after[_ordered(), IntRange]'): not the file's keys
_UNION_TAG = re.compile(r"^[\w-]+\[.*\]$")


def _loc_to_field(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        else:
            # pydantic puts the union tag (the architecture's name) in the path of
            # discriminated unions
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _members(types: list[Any]) -> list[Any]:
    """The types a list of annotations may hold: unions, Optional and Annotated unwrapped."""
    out: list[Any] = []
    for t in types:
        origin = typing.get_origin(t)
        if origin in (typing.Union, types_mod.UnionType):
            out += _members(list(typing.get_args(t)))
        elif origin is typing.Annotated:
            out += _members([typing.get_args(t)[0]])
        else:
            out.append(t)
    return out


def _step(t: Any, item: Any) -> list[Any]:
    """What the key or index `item` of a value of type `t` holds (empty: not a path of `t`)."""
    if isinstance(t, type) and issubclass(t, BaseModel):
        f = t.model_fields.get(item) if isinstance(item, str) else None
        return [f.annotation] if f is not None else []
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is dict and len(args) == 2:
        return [args[1]]
    if origin in (list, set, frozenset) and args and isinstance(item, int):
        return [args[0]]
    if origin is tuple and args and isinstance(item, int):
        return [args[0] if args[-1] is Ellipsis else args[min(item, len(args) - 1)]]
    return []


def _tagged(types: list[Any]) -> bool:
    """Whether pydantic names the member in an error's path below a value of these types
    (a union of several, or the root of a discriminated one: a model)."""
    members = [t for t in _members(types) if t is not type(None)]
    return len(members) > 1 or any(isinstance(t, type) and issubclass(t, BaseModel)
                                   for t in members)


def _walk(model: Any, loc: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[str] | None]:
    """`loc` without pydantic's union tags, and the keys the model allows at its end (None if
    unknown). Without a model, tags are told by their form."""
    if model is None:
        return tuple(x for x in loc if not (isinstance(x, str) and _UNION_TAG.match(x))), None
    types, kept = [model], []
    for item in loc:
        nxt = [s for t in _members(types) for s in _step(t, item)]
        if nxt:
            types = nxt
            kept.append(item)
        elif not isinstance(item, str) or not (_UNION_TAG.match(item) or _tagged(types)):
            kept.append(item)  # a key the model does not describe: kept as the file says it
        # else a union tag (a member's or an architecture's name): not in the file
    keys = [k for t in _members(types) if isinstance(t, type) and issubclass(t, BaseModel)
            for k in t.model_fields if k != "path" and not t.model_fields[k].exclude]
    return tuple(kept), list(dict.fromkeys(keys)) or None


_FIX_BY_TYPE = {
    "missing": "add the field",
    "extra_forbidden": "remove the field or check its spelling",
    "greater_than": "use a value > {gt}",
    "greater_than_equal": "use a value ≥ {ge}",
    "less_than": "use a value < {lt}",
    "less_than_equal": "use a value ≤ {le}",
    "int_type": "use a whole number",
    "int_parsing": "use a whole number",
    "int_from_float": "use a whole number",
    "float_type": "use a number",
    "float_parsing": "use a number",
    "finite_number": "use a finite number (not .nan or .inf)",
    "bool_type": "use true or false",
    "string_type": "use a string",
    "string_too_long": "use at most {max_length} characters",
    "string_too_short": "use at least {min_length} characters",
    "literal_error": "use {expected}",
    "enum": "use {expected}",
    "union_tag_invalid": "use one of {expected_tags}",
    "union_tag_not_found": "add the field that selects the kind",
    "dict_type": "use a mapping (key: value lines)",
    "list_type": "use a list",
    "model_type": "use a mapping (key: value lines)",
}

# pydantic messages that say less than they could
_MSG_BY_TYPE = {"extra_forbidden": "unknown field"}


def _fix_for(kind: str, ctx: dict[str, Any]) -> str:
    template = _FIX_BY_TYPE.get(kind, "correct the value")
    shown = {k: f"{v:g}" if isinstance(v, float) else v for k, v in ctx.items()}
    try:
        return template.format(**shown)
    except (KeyError, IndexError, ValueError):
        return "use one of the allowed values" if "{expected" in template else "correct the value"


def _unknown_key(loc: tuple[Any, ...], model: Any) -> tuple[str, str, str, str | None]:
    """(field, problem, fix, closest valid key) for an extra_forbidden error at `loc`."""
    parent, keys = _walk(model, loc[:-1])
    key = str(loc[-1])
    field = _loc_to_field((*parent, key))
    lower = {k.lower(): k for k in reversed(keys or [])}
    close = [lower[k] for k in difflib.get_close_matches(key.lower(), lower, n=1, cutoff=0.6)]
    if close:
        return field, f"unknown key {field}; did you mean {close[0]}?", \
            f"rename {key} to {close[0]}", close[0]
    fix = "remove it or check its spelling"
    if keys:
        where = _loc_to_field(parent) or "the top level"
        fix = f"remove it; the keys of {where} are {', '.join(keys)}"
    return field, f"unknown key {field}", fix, None


def _others(errors: list[dict], first: dict, meant: str | None) -> int:
    """Problems besides `first`; a key missing because `first` misspells it is the same one."""
    parent = tuple(first.get("loc", ()))[:-1]
    return sum(1 for e in errors if e is not first and not (
        meant and e["type"] == "missing" and tuple(e.get("loc", ())) == (*parent, meant)))


def from_pydantic(file: str | Path | None, err: Any, prefix: str = "",
                  model: Any = None) -> InputError:
    """Turn a pydantic ValidationError into one InputError about its first problem, an unknown
    key first (a misspelt key also makes the key it meant missing). `model`: the model (class)
    validated, for the valid keys an unknown one is matched against (a did-you-mean) and to
    tell union tags in the error's path from the file's keys."""
    errors = err.errors()
    first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
    kind = first["type"]
    ctx = first.get("ctx") if isinstance(first.get("ctx"), dict) else {}
    loc = tuple(first.get("loc", ()))
    meant = None
    if kind == "extra_forbidden" and loc:
        field, msg, fix, meant = _unknown_key(loc, model)
    else:
        kept, keys = _walk(model, loc)
        msg, fix = _problem(first, kind, ctx)
        # a check of the whole mapping ("n_upper (1) < n_lower (2)") names the key it begins with
        lead = re.match(r"[A-Za-z_]\w*", msg)
        if keys and kind in ("value_error", "assertion_error") and lead and lead[0] in keys:
            kept = (*kept, lead[0])
        field = _loc_to_field(kept)
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
    more = _others(errors, first, meant)
    if more:
        msg += f" (and {more} more problem{'s' if more > 1 else ''})"
    return InputError(file, field or None, msg, fix)


def _problem(first: dict, kind: str, ctx: dict[str, Any]) -> tuple[str, str]:
    """(problem, fix) of one pydantic error."""
    msg = _MSG_BY_TYPE.get(kind) or first.get("msg", "invalid value")
    # pydantic's "Value error, ..." prefix adds nothing for the reader
    msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    # validators write "problem. Fix: fix" in one string; split it before adding anything
    fix = ctx.get("fix")
    if " Fix: " in msg:
        msg, inline_fix = msg.split(" Fix: ", 1)
        fix = fix or inline_fix.rstrip(". ")
    if fix is None:
        fix = _fix_for(kind, ctx)
    msg = msg.rstrip(". ")
    if "input" in first and kind != "missing":
        value = first["input"]
        shown = repr(value)
        if len(shown) <= 60 and not isinstance(value, dict) and shown not in msg:
            msg += f" (got {shown})"
    return msg, fix


def named_by(exc: InputError, file: str | Path | None, field: str) -> InputError:
    """An error about a file that `file` names in its `field` (a recipe's profile, trace or
    search space): it keeps that file and the file's own field where one is wrong, else
    `field`, and says which file named it. An error about `file` itself is returned as is."""
    if exc.file is None or file is None or exc.file == str(file):
        return exc
    return InputError(exc.file, exc.field or field,
                      f"{exc.problem} (the file that {file} names in its {field} field)", exc.fix)


def accepts(check, *args) -> bool:
    """Whether `check(*args)` passes (raises no InputError): a check's yes/no form."""
    try:
        check(*args)
    except InputError:
        return False
    return True
