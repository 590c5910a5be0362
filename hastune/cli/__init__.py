"""The `hastune` command line: thin typer commands over the library."""

from __future__ import annotations

import sys

import typer

from hastune.cli.app import app
from hastune.errors import EXIT_INPUT_ERROR, EXIT_INTERRUPTED, InputError

__all__ = ["app", "main"]


def _register() -> None:
    from hastune.cli import (  # noqa: F401  (commands register)
        calibrate,
        evaluate,
        export,
        fidelity,
        gateway,
        model,
        plan,
        profile,
        prune,
        serve,
        simulate,
        tune,
        validate,
    )


def _click_exceptions():
    """click's exception module (typer ≥ 0.25 vendors its own click)."""
    try:
        from typer._click import exceptions
    except ImportError:  # older typer: click itself
        from click import exceptions
    return exceptions


def _stacks_on_usr1() -> None:
    """`kill -USR1 <pid>` prints every thread's stack to stderr (a run that seems stuck says
    where it is) and the command goes on."""
    import faulthandler
    import io
    import signal

    if not hasattr(signal, "SIGUSR1"):
        return
    try:  # stderr a real file (not when a caller captured it in memory: nothing to write to)
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass


def main() -> None:
    from hastune import interrupt
    from hastune.cli.report import emit_error, emit_input_error, usage_error

    _register()
    _stacks_on_usr1()
    click = _click_exceptions()
    interrupt.install()  # a Ctrl-C swallowed where it landed is raised at the next safe point
    try:
        code = app(standalone_mode=False)  # click's errors come here, to be reported as ours
        if not code:  # a Ctrl-C swallowed after the last safe point is still an interrupt
            interrupt.check()
    except getattr(click, "NoArgsIsHelpError", ()) as exc:  # `hastune`, `hastune profile`
        print(exc.ctx.get_help())
        sys.exit(0)
    except click.UsageError as exc:  # unknown option, missing argument, a value of a wrong type
        err = usage_error(exc)  # one line naming the option and what it takes
        d = err.as_dict()
        emit_error(exc.exit_code, d["error"], field=d["field"], fix=d["fix"],
                   message=d["message"])
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        emit_error(exc.exit_code, exc.format_message(), fix="see the command's --help")
        sys.exit(exc.exit_code)
    except InputError as exc:
        emit_input_error(exc)
        sys.exit(EXIT_INPUT_ERROR)
    except (KeyboardInterrupt, typer.Abort):
        emit_error(EXIT_INTERRUPTED, "interrupted", fix="run the same command again to resume")
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)
