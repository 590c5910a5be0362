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
