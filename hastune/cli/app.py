"""The `hastune` Typer application: its name, help and --version. Each command module
(hastune/cli/<command>.py) registers itself on `app`; hastune/cli/__init__.py imports them
and runs it (`main`)."""

from __future__ import annotations

import typer

from hastune import __version__
from hastune.errors import EXIT_BRIEF

_EPILOG = "Exit codes: " + "; ".join(f"{k} {v}" for k, v in EXIT_BRIEF.items()) + "."

app = typer.Typer(
    name="hastune",
    help="Find the Encode/Prefill/Decode deployment of a multimodal LLM with the most P90 goodput.",
    epilog=_EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: [kernels] stays, paragraphs rewrap, no <bool>
)


def _version(value: bool) -> None:
    if value:
        print(f"hastune {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """Find the Encode/Prefill/Decode deployment of a multimodal LLM with the most P90 goodput."""
