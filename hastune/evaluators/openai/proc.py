"""Starting a deployment's processes and taking every one of them down again.

A deployment runs under a watchdog (`python -m hastune.evaluators.openai.proc PARENT -- CMD…`) that
leads a session of its own (start_new_session), so the servers, their workers and anything
they start share its process group. It ends that group (SIGTERM, then SIGKILL after a grace
period), and every descendant it can find in /proc that left the group, when

- hastune stops it (`Launched.stop`: on a normal end, an exception, Ctrl-C, SIGTERM, exit),
- hastune dies without a word (kill -9): the watchdog sees its parent go,
- the command itself exits (a server that crashed takes the rest with it).

Standard library only; Linux (/proc) for the descendant scan, the group kill everywhere.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from hastune.procs import pid_alive

GRACE_S = 10.0
_LIVE: set[Launched] = set()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, theirs, …), read from /proc."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _signal_all(pgid: int, pids: list[int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_group(pgid: int, grace_s: float = GRACE_S, also: list[int] | None = None,
              member: bool = False) -> None:
    """SIGTERM to the group and the listed pids, SIGKILL to whatever is left after
    `grace_s`. `member`: the caller is in the group (the watchdog), so it waits for the
    listed pids only."""
    pids = list(also or [])
    _signal_all(pgid, pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not any(pid_alive(p) for p in pids) and (member or not _group_alive(pgid)):
            return
        time.sleep(0.05)
    _signal_all(pgid, pids, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Launched:
    """One deployment's command under a watchdog; `stop()` ends all of it (idempotent)."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None,
                 cwd: str | Path | None = None, log: str | Path | None = None,
                 grace_s: float = GRACE_S):
        self.log_path = Path(log) if log else None
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        self.grace_s = grace_s
        cmd = [sys.executable, "-m", "hastune.evaluators.openai.proc", str(os.getpid()),
               str(grace_s), "--", *argv]
        try:
            self.proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, cwd=cwd,
                                         stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # type: ignore[union-attr]
        self.pgid = self.proc.pid  # the session leader's group
        _LIVE.add(self)
        _install_handlers()

    def exited(self) -> int | None:
        return self.proc.poll()

    def log_tail(self, n: int = 20) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def stop(self) -> None:
        if self not in _LIVE:
            return
        _LIVE.discard(self)
        below = descendants(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the watchdog ends its group
            try:
                self.proc.wait(self.grace_s + 5)
            except subprocess.TimeoutExpired:
                pass
        end_group(self.pgid, 0.5, [p for p in below if pid_alive(p)])  # whatever is left
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def stop_all() -> None:
    for launched in list(_LIVE):
        launched.stop()


_HANDLED = False


def _install_handlers() -> None:
    """atexit and SIGTERM/SIGHUP (main thread only): end what is running first. SIGINT
    arrives as KeyboardInterrupt, whose unwinding stops it (the evaluator's finally)."""
    global _HANDLED
    if _HANDLED:
        return
    _HANDLED = True
    atexit.register(stop_all)
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        prev = signal.getsignal(sig)

        def handler(signum: int, frame: object, prev: object = prev) -> None:
            stop_all()
            if callable(prev):
                prev(signum, frame)
            else:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)

        signal.signal(sig, handler)


def _watch(parent: int, grace_s: float, argv: list[str]) -> int:
    """The watchdog: run argv in this session; end the group when told to, when the parent
    is gone, or when argv exits."""
    stop = False

    def on_term(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, on_term)
    child = subprocess.Popen(argv)
    code = None
    while not stop and code is None and os.getppid() == parent:
        time.sleep(0.2)
        code = child.poll()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group kill reaches us too
    below = descendants(os.getpid())
    end_group(os.getpgrp(), grace_s, below, member=True)
    child.wait()
    return code if code is not None else 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sep = a.index("--")
    sys.exit(_watch(int(a[0]), float(a[1]), a[sep + 1:]))
