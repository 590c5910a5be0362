"""A Ctrl-C that is never lost.

Python's own SIGINT handler raises KeyboardInterrupt in whatever the main thread is running.
When that is a weakref callback or a `__del__` (SQLAlchemy runs some whenever the garbage
collector frees a session), Python prints "Exception ignored in …" and drops the exception:
the run goes on to its end and exits 0 as if no one had pressed Ctrl-C. `install()` replaces
the handler with one that also records the signal; `check()`, called between evaluations,
raises the interrupt again if the first one was swallowed. Nothing else changes: the handler
still raises KeyboardInterrupt where the signal lands, as Python's does.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_pending = False


def _handler(signum: int, frame: FrameType | None) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


def install() -> bool:
    """Take over SIGINT (the main thread only; elsewhere Python allows no handler). Returns
    whether it did. A handler someone else installed (not Python's default) is left alone."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGINT) not in (signal.default_int_handler, _handler):
        return False
    signal.signal(signal.SIGINT, _handler)
    return True


def pending() -> bool:
    """Whether a Ctrl-C has arrived since install() (or the last clear())."""
    return _pending


def check() -> None:
    """Raise KeyboardInterrupt if a Ctrl-C arrived: a no-op unless one did, so it is cheap to
    call at every safe point of a long loop."""
    if _pending:
        raise KeyboardInterrupt


def clear() -> None:
    global _pending
    _pending = False
