"""Many tuners, one study: who prunes, who evaluates which configuration, and what happens to
the trials of a process that died.

Any number of processes — `--workers K`, several `hastune tune` commands, machines sharing a
storage — work on one study with nothing in common but the storage. Every write to an optuna
RDB or journal storage is committed before the call returns and every read sees what was
committed, so a process that writes and then reads sees every write made before its read.

- **Trials are created by the process that runs them** (`new_trial`), named at creation (user
  attribute `worker`, host:pid) and, when hastune chose the configuration rather than the
  sampler, with its parameters fixed in the same write. No trial is ever WAITING: optuna's
  enqueue + ask pops a WAITING trial with a read followed by a write, which SQLite lets two
  processes both win.
- **A configuration is claimed before it is evaluated** (`claim`): the process writes
  `claim` = the configuration's key on its own RUNNING trial, then reads the study. It
  evaluates only if no other RUNNING trial claims that key, no finished trial evaluated it,
  and the evaluated plus the claimed trials are fewer than `--trials`. Of two processes
  claiming at once, the one that read last saw the other's claim, so at most one evaluates
  (both may step back; the configuration is then free again). The study therefore ends at
  exactly `--trials` evaluations, none repeated.
- **Pruning runs once per study**: the lowest-numbered RUNNING trial with `role: prepare`
  prunes and records the survivors on the study; the other processes wait for them
  (`TuneOptions.prepare_timeout_s`). Trial numbers follow creation order, and the role is
  written with the trial, so every process agrees on the lowest. Prepare trials end FAIL
  (they hold no parameters, which optuna's samplers would read as a search space).
- **Dead processes** (`Reaper`): a RUNNING trial whose worker on this host is gone (its pid,
  or a zombie), or whose heartbeat (`BEAT`, rewritten every BEAT_S by the worker while the
  trial runs) has not changed for STALE_S (this host or another), is failed by whichever
  process sees it first; its claim goes with it. WAITING trials (left by earlier versions)
  are failed the same way.
"""

from __future__ import annotations

import datetime
import os
import socket
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import optuna

from hastune.procs import pid_alive
from hastune.tune.storage import worker_id

RUNNING = optuna.trial.TrialState.RUNNING
WAITING = optuna.trial.TrialState.WAITING
COMPLETE = optuna.trial.TrialState.COMPLETE
FAIL = optuna.trial.TrialState.FAIL
CLAIM = "claim"          # user attr: the key of the configuration this trial evaluates
ROLE = "role"            # user attr: "prepare" on the trial of the process that prunes
BEAT = "hastune:beat"    # system attr: a counter the running worker rewrites every BEAT_S
BEAT_S = 10.0
STALE_S = 120.0          # a heartbeat unchanged this long (seen from here): the worker is gone
ORPHAN_GRACE_S = 10.0    # a RUNNING trial naming no worker (created by another client)


def is_memory(study: optuna.Study) -> bool:
    return isinstance(study._storage, optuna.storages.InMemoryStorage)


# -- creating and finishing trials ---------------------------------------------------------
def new_trial(study: optuna.Study, fixed: dict[str, Any] | None = None,
              role: str | None = None) -> optuna.Trial:
    """`study.ask()` without the WAITING queue: a new RUNNING trial named after this worker,
    with `fixed` parameters (those of enqueue_trial) written in the same call."""
    user = {"worker": worker_id(), **({ROLE: role} if role else {})}
    tmpl = optuna.trial.FrozenTrial(
        number=-1, state=RUNNING, value=None, datetime_start=datetime.datetime.now(),
        datetime_complete=None, params={}, distributions={}, user_attrs=user,
        system_attrs={"fixed_params": fixed} if fixed else {}, intermediate_values={},
        trial_id=-1)
    study._thread_local.cached_all_trials = None
    tid = study._storage.create_new_trial(study._study_id, template_trial=tmpl)
    trial = optuna.Trial(study, tid)
    heartbeat(study).track(tid)
    return trial


def finish(study: optuna.Study, trial: optuna.Trial, value: float | None = None,
           state: optuna.trial.TrialState | None = None) -> bool:
    """Tell `trial`; False when another process had failed it already (it took this worker
    for dead), in which case nothing of it is recorded."""
    heartbeat(study).untrack(trial._trial_id)
    try:
        study.tell(trial, value, state=state)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    return True


# -- what the study holds now ----------------------------------------------------------------
@dataclass
class Census:
    evaluated: dict[str, float] = field(default_factory=dict)  # key → goodput
    n_evaluated: int = 0                                        # evaluated trials
    claimed: dict[str, int] = field(default_factory=dict)       # key → RUNNING trial number
    preparers: list[int] = field(default_factory=list)          # RUNNING prepare trials


def census(study: optuna.Study, exclude: int | None = None) -> Census:
    """One read of the study (trial `exclude` left out)."""
    c = Census()
    for t in study.get_trials(deepcopy=False):
        if t.number == exclude:
            continue
        u = t.user_attrs
        if t.state == COMPLETE and u.get("evaluated"):
            c.n_evaluated += 1
            c.evaluated.setdefault(u.get("key"), float(t.value or 0.0))
        elif t.state == RUNNING:
            if u.get(CLAIM) is not None:
                c.claimed.setdefault(u[CLAIM], t.number)
            if u.get(ROLE) == "prepare":
                c.preparers.append(t.number)
    c.preparers.sort()
    return c


def n_claims(c: Census) -> int:
    return len(c.claimed)


def claim(study: optuna.Study, trial: optuna.Trial, key: str,
          quota: int | None) -> tuple[str, float]:
    """Claim `key` for `trial` (write, then read): ("won", 0) — evaluate it; ("done", goodput)
    — evaluated already; ("busy", 0) — another trial claims it; ("full", 0) — `quota`
    evaluations are done or under way."""
    trial.set_user_attr(CLAIM, key)
    c = census(study, exclude=trial.number)
    if key in c.evaluated:
        return "done", c.evaluated[key]
    if key in c.claimed:
        return "busy", 0.0
    if quota is not None and c.n_evaluated + n_claims(c) >= quota:
        return "full", 0.0
    return "won", 0.0


# -- heartbeats ----------------------------------------------------------------------------
class Heartbeat:
    """Rewrites BEAT on this process's running trials every `interval` seconds (a daemon
    thread, started with the first trial; none for in-memory studies)."""

    def __init__(self, study: optuna.Study, interval: float = BEAT_S):
        self.storage = study._storage
        self.interval = interval
        self.enabled = not is_memory(study)
        self.ids: set[int] = set()
        self.lock = threading.Lock()
        self.pid: int | None = None
        self.n = 0

    def track(self, trial_id: int) -> None:
        if not self.enabled:
            return
        with self.lock:
            if self.pid != os.getpid():  # first trial in this process (or a forked child)
                self.pid = os.getpid()
                self.ids = set()
                threading.Thread(target=self._run, name="hastune-heartbeat",
                                 daemon=True).start()
            self.ids.add(trial_id)

    def untrack(self, trial_id: int) -> None:
        with self.lock:
            self.ids.discard(trial_id)

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            with self.lock:
                ids = sorted(self.ids)
            self.n += 1
            for tid in ids:
                try:
                    self.storage.set_trial_system_attr(tid, BEAT, self.n)
                except Exception:  # noqa: BLE001 - finished meanwhile, or the storage is gone
                    self.untrack(tid)


_BEATS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def heartbeat(study: optuna.Study) -> Heartbeat:
    hb = _BEATS.get(study)
    if hb is None:
        hb = _BEATS[study] = Heartbeat(study)
    return hb


# -- dead workers ----------------------------------------------------------------------------
class Reaper:
    """Fails the RUNNING trials of dead workers and any WAITING trial. One per process: it
    remembers when it first saw each heartbeat value."""

    def __init__(self, stale_s: float = STALE_S, orphan_grace_s: float = ORPHAN_GRACE_S):
        self.stale_s = stale_s
        self.orphan_grace_s = orphan_grace_s
        self.seen: dict[int, tuple[Any, float]] = {}

    def dead(self, t: optuna.trial.FrozenTrial) -> str | None:
        """Why `t`'s worker is taken for dead, or None."""
        w = t.user_attrs.get("worker")
        if w is None:
            age = (datetime.datetime.now() - (t.datetime_start or datetime.datetime.now()))
            return "no worker named it" if age.total_seconds() > self.orphan_grace_s else None
        if w == worker_id():
            return None  # this process
        host, _, pid = w.rpartition(":")
        if host == socket.gethostname() and pid.isdigit() and not pid_alive(int(pid)):
            return f"its worker {w} is gone"
        beat = t.system_attrs.get(BEAT)
        now = time.monotonic()
        prev = self.seen.get(t._trial_id)
        if prev is None or prev[0] != beat:
            self.seen[t._trial_id] = (beat, now)
            return None
        if now - prev[1] > self.stale_s:
            return f"no heartbeat from {w} for {now - prev[1]:.0f} s"
        return None

    def reap(self, study: optuna.Study) -> int:
        """Fail what is dead; returns how many."""
        if is_memory(study):
            return 0  # nothing but this process can have written to it
        n = 0
        storage = study._storage
        for t in study.get_trials(deepcopy=False, states=(RUNNING, WAITING)):
            why = ("waiting: hastune runs no queue" if t.state == WAITING else self.dead(t))
            if why is None:
                continue
            try:
                storage.set_trial_user_attr(t._trial_id, "reason", f"failed: {why}")
                storage.set_trial_state_values(t._trial_id, FAIL)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue  # its worker (or another reaper) finished it meanwhile
            self.seen.pop(t._trial_id, None)
            n += 1
        return n
