"""One error type for bad input: it names the file, the field and the fix.

The CLI prints `InputError` as one line and exits with code 2; no traceback reaches the user.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


class InputError(Exception):
    """A user-supplied file or value is wrong. `str()` is the whole message."""

    def __init__(self, file: str | Path | None, field: str | None, problem: str, fix: str):
        self.file = str(file) if file is not None else None
        self.field = field
        self.problem = problem
        self.fix = fix
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
        return f"{where}: {self.problem}. Fix: {self.fix}"


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


def from_pydantic(file: str | Path | None, err: Any, prefix: str = "") -> InputError:
    """Turn a pydantic ValidationError into one InputError about its first problem."""
    errors = err.errors()
    first = errors[0]
    kind = first["type"]
    ctx = first.get("ctx") if isinstance(first.get("ctx"), dict) else {}
    field = _loc_to_field(tuple(first.get("loc", ())))
    if prefix:
        field = f"{prefix}.{field}" if field else prefix
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
    if len(errors) > 1:
        msg += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return InputError(file, field or None, msg, fix)


def accepts(check, *args) -> bool:
    """Whether `check(*args)` passes (raises no InputError): a check's yes/no form."""
    try:
        check(*args)
    except InputError:
        return False
    return True
