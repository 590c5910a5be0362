"""Where a tuning study lives: the optuna storage is the record of the run.

- default: SQLite file DIR/study.db;
- `journal:PATH` or a path ending in .log/.journal: optuna's journal file (many processes on one
  machine, or a shared file system);
- any SQLAlchemy URL optuna accepts (sqlite:///…, postgresql://…) for many machines;
- `memory`: in this process only (benchmarks, experiments; nothing to resume from).

A trial whose worker died (kill -9) stays RUNNING in the storage; every worker fails such
trials of dead processes on its own host when it starts and between trials (their pid is
gone). RUNNING trials of other hosts are left alone: they never count as evaluations, so they
cannot block a run, and the configuration is free to be suggested again.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from pathlib import Path

import optuna


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def open_storage(url: str | None, out: Path) -> optuna.storages.BaseStorage:
    if url is None:
        out.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{(out / 'study.db').resolve()}"
    if url == "memory":
        return optuna.storages.InMemoryStorage()
    if url.startswith("journal:") or url.endswith((".log", ".journal")):
        path = Path(url.removeprefix("journal:"))
        path.parent.mkdir(parents=True, exist_ok=True)
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(str(path)))
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    return _rdb(url, kwargs)


def _rdb(url: str, kwargs: dict, attempts: int = 8) -> optuna.storages.RDBStorage:
    """Open an RDB storage. Processes that open a new database at the same moment (workers, a
    second `hastune tune`, a monitoring script) race to create its tables; the loser sees
    "table … already exists", a duplicate schema-version row or "database is locked". Its next
    try finds the tables made."""
    from sqlalchemy.exc import IntegrityError, OperationalError

    for i in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except (OperationalError, IntegrityError):
            if i == attempts - 1:
                raise
            time.sleep(0.05 * 2**i)
    raise AssertionError("unreachable")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


ORPHAN_GRACE_S = 2.0


def orphans(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """RUNNING trials that name no worker: a process died between asking for the trial and
    naming itself (a live worker names itself within milliseconds of asking)."""
    return [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if "worker" not in t.user_attrs]


def fail_dead_trials(study: optuna.Study) -> int:
    """Fail RUNNING trials whose worker process on this host is gone, and orphans older than
    ORPHAN_GRACE_S. Returns how many."""
    host = socket.gethostname()
    now = datetime.datetime.now()
    n = 0
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        w = t.user_attrs.get("worker")
        if w is None:
            started = t.datetime_start or now
            dead = (now - started).total_seconds() > ORPHAN_GRACE_S
        else:
            h, _, pid = w.rpartition(":")
            dead = h == host and pid.isdigit() and not _pid_alive(int(pid))
        if dead:
            study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
            n += 1
    return n


def settle(study: optuna.Study) -> None:
    """Before a worker leaves: wait out the grace of any orphan, then fail it."""
    if orphans(study):
        time.sleep(ORPHAN_GRACE_S + 0.1)
        fail_dead_trials(study)
