"""How a tune runs: stage 1 here, then the search here, its evaluations in this process or in
`workers` spawned ones (hastune.tune.pool). A worker that dies, or a storage that stops
accepting writes, is a failure named in one line; Ctrl-C, also inside a storage write, is an
interrupt. Finished trials are in the study either way."""

from __future__ import annotations

from typing import Any

from hastune.tune.progress import Progress


def storage_errors() -> tuple[type[BaseException], ...]:
    from hastune.tune import storage

    return (storage.TuneError, *storage.storage_errors())


def run_workers(tuner: Any, st: Any, progress: Progress) -> tuple[bool, list[str]]:
    """Prepare, then work (its evaluations in `tuner.opts.workers` processes:
    hastune.tune.pool). Returns (interrupted, what failed)."""
    from hastune.tune.pool import WorkerDied

    failures: list[str] = []
    try:
        tuner.evaluations = tuner.pool()  # started before pruning: its probes use it too
        tuner.prepare(st, on_trial=progress.trial)
        tuner.work(st, 0, on_trial=progress.trial)
    except WorkerDied as exc:
        failures.append(f"{exc}; its trial and those under way were failed — the next run "
                        "evaluates them again")
        tuner.reaper.reap(st)
    except (KeyboardInterrupt, *storage_errors()) as exc:
        from hastune.tune.storage import TuneError, interrupted, root_cause

        if interrupted(exc):  # Ctrl-C, also inside a storage write: an interrupt, not a failure
            return True, failures
        failures.append(str(exc) if isinstance(exc, TuneError) else
                        f"the study's storage failed ({root_cause(exc)}); the trials finished "
                        "before it are kept in it: fix it and run the same command to resume")
    finally:
        if tuner.evaluations is not None:
            tuner.evaluations.close()
            tuner.evaluations = None
    return False, failures
