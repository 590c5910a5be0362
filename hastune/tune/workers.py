"""How a tune runs its workers: stage 1 here, then the search here (one worker) or in
`workers` spawned processes on the same study. A worker that dies, or a storage that stops
accepting writes, is a failure named in one line; Ctrl-C, also inside a storage write, is an
interrupt. Finished trials are in the study either way."""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from typing import Any

from hastune.tune.progress import Progress


def storage_errors() -> tuple[type[BaseException], ...]:
    from hastune.tune import storage

    return (storage.TuneError, *storage.storage_errors())


def run_workers(tuner: Any, st: Any, recipe: str, progress: Progress) -> tuple[bool, list[str]]:
    """Prepare, then work. Returns (interrupted, what failed)."""
    failures: list[str] = []
    procs: list = []
    try:
        tuner.prepare(st, on_trial=progress.trial)
        if tuner.opts.workers == 1:
            tuner.work(st, 0, on_trial=progress.trial)
        else:
            procs, errors, _start = _spawn(tuner, recipe)  # held: the workers unpickle it
            while any(p.is_alive() for p in procs):
                time.sleep(0.5)
                try:
                    progress.refresh()
                except storage_errors():
                    pass  # the workers see it too, and say so
            failures = _deaths(tuner, st, procs, errors)
    except (KeyboardInterrupt, *storage_errors()) as exc:
        from hastune.tune.storage import TuneError, interrupted, root_cause

        if interrupted(exc):  # Ctrl-C, also inside a storage write: an interrupt, not a failure
            for p in procs:
                p.join(timeout=30)
            return True, failures
        failures.append(str(exc) if isinstance(exc, TuneError) else
                        f"the study's storage failed ({root_cause(exc)}); the trials finished "
                        "before it are kept in it: fix it and run the same command to resume")
    return False, failures


def _spawn(tuner: Any, recipe: str) -> tuple[list, Any, Any]:
    """The worker processes, started; the queue a failing one says why on; and their start
    barrier, which the caller must keep alive while they start (collected, its semaphore
    goes, and a worker still unpickling it dies with FileNotFoundError)."""
    from hastune.tune.runner import options_dict, worker_main

    workers = tuner.opts.workers
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(workers)  # all begin together, whatever their import time
    errors = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker_main, args=(recipe, options_dict(tuner.opts), w, start,
                                                   errors)) for w in range(workers)]
    for p in procs:
        p.start()
    return procs, errors, start


def _deaths(tuner: Any, st: Any, procs: list, errors: Any) -> list[str]:
    """Each worker that died, with why; their trials failed (the others finished the study)."""
    for p in procs:
        p.join()
    said = {}
    while not errors.empty():
        w, msg = errors.get()
        said[w] = msg
    failures = [f"worker {w} (pid {p.pid}) " + death(p.exitcode, said.get(w))
                for w, p in enumerate(procs) if p.exitcode]
    if failures:
        tuner.reaper.reap(st)
    return failures


def death(exitcode: int, said: str | None) -> str:
    """How a worker process ended, in words."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}" + (f": {said}" if said else "")
