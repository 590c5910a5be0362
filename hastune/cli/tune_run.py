"""How `hastune tune` runs its workers and reports a failed run (a dead worker, a storage
that stopped accepting writes): one line per cause, exit 1."""

from __future__ import annotations

import multiprocessing as mp
import sys
import time

from rich.console import Console
from rich.live import Live

from hastune.errors import EXIT_FAILED


def storage_errors() -> tuple[type[BaseException], ...]:
    from hastune.tune import storage

    return (storage.TuneError, *storage.storage_errors())


def one_line(exc: BaseException) -> str:
    from hastune.tune.storage import root_cause

    return root_cause(exc)


def fail(failures: list[str], json_said: bool = False) -> None:
    """The run failed: one line per cause on stderr (and with --json, unless the summary
    saying so was printed already, one JSON error object on stdout), exit 1."""
    from rich.markup import escape

    from hastune.cli.report import emit_error

    con = Console(stderr=True, highlight=False, soft_wrap=True)
    for f in failures[:-1] if not json_said else failures:
        con.print(f"[bold red]error:[/] {escape(f)}")
    if not json_said:  # the last cause's line, and the JSON object naming all of them
        emit_error(EXIT_FAILED, failures[-1], fix="fix the cause and run the same command "
                   "again: finished trials are kept in the study",
                   message="; ".join(failures), line=failures[-1])
    sys.exit(EXIT_FAILED)


def run_workers(tuner, st, recipe: str, mon, live: Live | None) -> tuple[bool, list[str]]:
    """Prepare, then work (here, or in `--workers` processes). Returns (interrupted, what
    failed): a worker that died, named with why; a storage that refused a write."""
    from hastune.tune.runner import options_dict, worker_main

    workers = tuner.opts.workers
    failures: list[str] = []
    procs: list = []
    try:
        if live:
            live.start()
        tuner.prepare(st, on_trial=mon.line)
        if workers == 1:
            def cb(t):
                mon.line(t)
                if live:
                    live.update(mon.render())
            tuner.work(st, 0, on_trial=cb)
        else:
            ctx = mp.get_context("spawn")
            start = ctx.Barrier(workers)  # all begin together, whatever their import time
            errors = ctx.SimpleQueue()
            procs = [ctx.Process(target=worker_main, args=(
                recipe, options_dict(tuner.opts), w, start, errors)) for w in range(workers)]
            for p in procs:
                p.start()
            while any(p.is_alive() for p in procs):
                time.sleep(0.5)
                if live:
                    try:
                        live.update(mon.render())
                    except storage_errors():
                        pass  # the workers see it too, and say so
            for p in procs:
                p.join()
            said = {}
            while not errors.empty():
                w, msg = errors.get()
                said[w] = msg
            for w, p in enumerate(procs):
                if p.exitcode:
                    failures.append(f"worker {w} (pid {p.pid}) " + _death(p.exitcode, said.get(w)))
            if failures:  # its trial is failed; the others finished the study
                tuner.reaper.reap(st)
    except (KeyboardInterrupt, *storage_errors()) as exc:
        from hastune.tune.storage import TuneError, interrupted

        if interrupted(exc):  # Ctrl-C, also inside a storage write: an interrupt, not a failure
            for p in procs:
                p.join(timeout=30)
            return True, failures
        failures.append(str(exc) if isinstance(exc, TuneError) else
                        f"the study's storage failed ({one_line(exc)}); the trials finished "
                        "before it are kept in it: fix it and run the same command to resume")
    finally:
        if live:
            try:
                live.update(mon.render())
            except storage_errors():
                pass
            live.stop()
    return False, failures


def _death(exitcode: int, said: str | None) -> str:
    import signal

    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}" + (f": {said}" if said else "")
