"""The `hastune` command line: thin typer commands over the library."""

from __future__ import annotations

import sys

import typer

from hastune.errors import EXIT_INPUT_ERROR, InputError

app = typer.Typer(
    name="hastune",
    help="Find the Encode/Prefill/Decode deployment of a multimodal LLM with the most P90 goodput.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register() -> None:
    from hastune.cli import evaluate, profile, serve, simulate, tune, validate  # noqa: F401  (commands register)
    from hastune.cli import model  # noqa: F401  (hastune model inspect)


def main() -> None:
    _register()
    try:
        app()
    except InputError as exc:
        from rich.console import Console
        from rich.markup import escape

        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[bold red]error:[/] {escape(exc.message)}", markup=True)  # keeps '[ray]' etc.
        sys.exit(EXIT_INPUT_ERROR)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
