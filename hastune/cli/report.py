"""How a command ends badly: one line on stderr and, with `--json`, one JSON object on stdout.

CI reads either: the exit code (hastune.errors.EXIT_CODES), the stderr line, or — with
`--json` — `{"error", "file", "field", "fix", "message", "exit_code"}` on stdout, the only
thing there.
"""

from __future__ import annotations

import sys

from hastune.errors import InputError
from hastune.jsonio import dumps


def json_mode(argv: list[str] | None = None) -> bool:
    """Whether the command line asked for JSON output."""
    return "--json" in (sys.argv[1:] if argv is None else argv)


def emit_error(code: int, problem: str, *, file: str | None = None, field: str | None = None,
               fix: str | None = None, message: str | None = None,
               line: str | None = None) -> None:
    """Report an error that ends the command with `code` (the caller exits): `line` (default
    `message`, default `problem`) on stderr, and with --json the object on stdout."""
    from rich.console import Console
    from rich.markup import escape

    message = message or problem
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]error:[/] {escape(line or message)}", markup=True)  # keeps '[ray]' etc.
    if json_mode():
        print(dumps({"error": problem, "file": file, "field": field, "fix": fix,
                     "message": message, "exit_code": code}), flush=True)


def emit_input_error(exc: InputError) -> None:
    d = exc.as_dict()
    emit_error(d["exit_code"], d["error"], file=d["file"], field=d["field"], fix=d["fix"],
               message=d["message"])


def fail(failures: list[str], json_said: bool = False) -> None:
    """A run failed (a dead worker, a storage that stopped accepting writes): one line per
    cause on stderr (and with --json, unless the summary saying so was printed already, one
    JSON error object on stdout), exit 1."""
    from rich.console import Console
    from rich.markup import escape

    from hastune.errors import EXIT_FAILED

    con = Console(stderr=True, highlight=False, soft_wrap=True)
    for f in failures[:-1] if not json_said else failures:
        con.print(f"[bold red]error:[/] {escape(f)}")
    if not json_said:  # the last cause's line, and the JSON object naming all of them
        emit_error(EXIT_FAILED, failures[-1], fix="fix the cause and run the same command "
                   "again: finished trials are kept in the study",
                   message="; ".join(failures), line=failures[-1])
    sys.exit(EXIT_FAILED)


# What the options many commands share take, beyond their type (the commands check these).
_TAKES = {"--rate": "a number > 0 and ≤ 1,000,000",
          "--requests": "a whole number in 1..10,000,000",
          "--seed": "a whole number ≥ 0",
          "--trials": "a whole number ≥ 1",
          "--workers": "a whole number ≥ 1"}
_KINDS = {"float": "a number", "int": "a whole number", "bool": "true or false",
          "Path": "a path", "str": "a value"}
_RANGES = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}


def _option(param) -> str:
    """An option's longest name (--rate, not -r), or an argument's name in capitals."""
    opts = [o for o in getattr(param, "opts", ()) if o.startswith("--")]
    if opts:
        return max(opts, key=len)
    if getattr(param, "param_type_name", "") == "argument":
        return (param.name or "argument").upper()
    return (getattr(param, "opts", None) or [param.name])[0]


def _kind(param) -> str:
    """The type `param` takes, in words (a number, a whole number, ...)."""
    desc = getattr(param, "type_descriptor", None)
    return _KINDS.get(getattr(getattr(desc, "annotation", None), "__name__", ""), "a value")


def _takes(param, name: str, ctx: dict) -> str:
    """What `param` takes: its shared domain, else its type and the range the parser saw."""
    if name in _TAKES:
        return _TAKES[name]
    what = _kind(param)
    bounds = [f"{_RANGES[k]} {v:g}" if isinstance(v, float) else f"{_RANGES[k]} {v}"
              for k, v in ctx.items() if k in _RANGES]
    return " ".join([what, " and ".join(bounds)]).strip()


def _describe(param) -> str:
    """The first clause of an option's help: what it is."""
    text = " ".join((getattr(param, "help", None) or "").split())
    text = text.split(";")[0].split(" (")[0].strip().rstrip(".")
    return f" ({text})" if text and len(text) <= 80 else ""


def usage_error(exc) -> InputError:
    """A parser (click) error as an InputError: the option or argument as its field, what it
    takes as its fix — not only "see --help"."""
    ctx = getattr(exc, "ctx", None)
    where = f"`{ctx.command_path} --help`" if getattr(ctx, "command_path", None) else "--help"
    param = getattr(exc, "param", None)
    text = " ".join(exc.format_message().split()).rstrip(".")
    if param is None:
        return _unplaced(exc, ctx, text, where)
    name = _option(param)
    cause = getattr(exc, "__cause__", None)
    errs = cause.errors() if hasattr(cause, "errors") else []
    first = errs[0] if errs else {}
    takes = _takes(param, name, first.get("ctx") or {})
    fix = f"give {name} {takes}{_describe(param)}"
    if not first:  # missing, or a callback's own message
        problem = text.removeprefix("Invalid value for ").split(": ", 1)[-1] or "missing"
        return InputError(None, name, problem[0].lower() + problem[1:], fix)
    got = first.get("input")
    shown = repr(got) if len(repr(got)) <= 40 else repr(got)[:37] + "..."
    kind = str(first.get("type", ""))
    if kind.endswith(("_parsing", "_type", "_from_float")):
        return InputError(None, name, f"{shown} is not {_kind(param)}", fix)
    msg = str(first.get("msg", "invalid value")).replace("Input should be", "should be")
    return InputError(None, name, f"{msg} (got {shown})", fix)


def _unplaced(exc, ctx, text: str, where: str) -> InputError:
    """A usage error of no one parameter: an unknown option or command, an option with no
    value."""
    name = getattr(exc, "option_name", None)
    problem = text[0].lower() + text[1:] if text else "bad usage"
    if name and "requires an argument" in text:
        return InputError(None, name, problem, f"give a value after {name}; see {where}")
    if name:
        near = sorted(getattr(exc, "possibilities", None) or [])
        return InputError(None, name, problem.split(" (Possible")[0], (
            f"use {' or '.join(near)}, or " if near else "use ") + f"an option of {where}")
    group = getattr(ctx, "command", None)
    if text.startswith("No such command") and hasattr(group, "list_commands"):
        return InputError(None, "COMMAND", problem, "use one of "
                          + ", ".join(group.list_commands(ctx)))
    return InputError(None, None, problem, f"see {where}")
