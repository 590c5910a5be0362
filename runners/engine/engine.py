"""The frontend: starts the workers of a deployment config, submits requests at their arrival
times, timestamps first and last tokens, and never loses a request — every one ends completed
or as an explicit failure, also when a worker process dies.

Each request has an owner (the worker holding it): its encode worker, then the prefill worker
its `encoded` event names, then the decode worker its `first` event names. When a worker
process is found dead, every request it owns fails at once, it is marked dead so routing skips
it, and a request later handed to it fails when the hand-off is reported.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hastune import archs
from runners.engine import backend
from runners.engine.admission import EV_REJECTED, AdmissionGate
from runners.engine.events import Events
from runners.engine.fit import NOT_COMPARABLE, Fit, check_fit
from runners.engine.messages import (
    EV_DONE,
    EV_ENCODED,
    EV_FAILED,
    EV_FIRST,
    EV_READY,
    EV_SPLIT,
    EV_STEP,
    EV_STEPS,
    STOP,
    Job,
)
from runners.engine.modes import launch
from runners.engine.steplog import flush_steps, run_steps
from runners.engine.workers import Shared, decode_main, encode_main, prefill_main

log = logging.getLogger(__name__)


@dataclass
class EngineOptions:
    model: str = "ref-small"
    device: str = "cpu"
    threads: int = 1               # torch threads per worker process
    # CPU, local backend: pin each worker process to `threads` cores of its own (round robin
    # over this process's cores), so a worker is one "device" as the simulator assumes — an
    # encode worker's co-resident local prefill then time-shares the encoder's cores instead
    # of taking another worker's
    pin_cores: bool = True
    prefill_tokens: int = 2048     # prefill batch token budget
    kv_tokens: int = 1 << 16       # decode KV budget per decode worker (tokens)
    max_batch: int = 64            # decode batch cap
    start_timeout_s: float = 180.0
    drain_timeout_s: float = 60.0  # after the last arrival, how long to wait for stragglers
    ttft_slo_s: float | None = None  # the windowed mode's admission checks (default 5 s / 0.1 s)
    tpot_slo_s: float | None = None
    # admission control (runners/engine/admission.py), on when ttft_slo_s is given: reject at
    # arrival a request whose predicted TTFT (the wait counted admit_margin times) exceeds
    # ttft_slo_s (None: off)
    admit_margin: float | None = 2.0
    backend: str = "local"         # local processes, or ray actors (runners/engine/backend.py)
    ray_address: str | None = None  # the Ray cluster to join (default: a local one)
    # a deployment needing more cores / GPUs than this process has (runners/engine/fit.py) is
    # refused before any worker starts; True runs it anyway, workers sharing devices, and the
    # run record says it is not comparable with the simulator
    oversubscribe: bool = False
    # each worker records its step timings (runners/engine/steplog.py) into the run record
    record_steps: bool = True


@dataclass
class RunRecord:
    rate: float
    arrival: np.ndarray
    first: np.ndarray
    last: np.ndarray
    tokens: np.ndarray
    failed: dict[int, str] = field(default_factory=dict)
    # rejected at arrival by admission control (never started): rid → reason
    rejected: dict[int, str] = field(default_factory=dict)
    overhead: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0
    # disaggregated mode: how each encode worker split its device with its local prefill
    # (runners/engine/partition.py: sm_split "green contexts" | "threads" | "none", shares used)
    sm_split: dict[str, dict] = field(default_factory=dict)
    # the devices the deployment needs and has (runners/engine/fit.py Fit.as_dict())
    fit: dict = field(default_factory=dict)
    # worker → its step timings in this run (runners/engine/steplog.py: columns)
    steps: dict[str, dict] = field(default_factory=dict)


class Engine:
    def __init__(self, config: Any, options: EngineOptions | None = None,
                 rate_hint: float = 1.0):
        self.config = config
        self.opts = options or EngineOptions()
        self.rate_hint = rate_hint
        self.procs: dict[str, Any] = {}
        self.pinned: dict[str, list[int]] = {}  # worker → cores it is pinned to (CPU, local)
        self.inboxes: dict[str, Any] = {}
        self.started = False
        self.mode: Any = None  # replica modes: routes requests and reads what replicas report
        self.sm_split: dict[str, dict] = {}  # encode worker → its last DevicePartition report
        self.gate: AdmissionGate | None = None
        self.fit: Fit | None = None

    # -- life cycle ---------------------------------------------------------------------
    def start(self) -> Engine:
        cfg = self.config
        o = self.opts
        arch = archs.of(cfg)
        arch.engine_check(cfg)  # what the engine cannot run, then what the machine cannot hold
        self.fit = check_fit(cfg, o.device, o.threads, o.backend, o.oversubscribe)
        if self.fit.oversubscribed:
            print(f"hastune engine: {self.fit.arithmetic()}: {NOT_COMPARABLE}",
                  file=sys.stderr, flush=True)
        ctx = self.ctx = backend.context(o.backend, o.ray_address, cpus=o.threads,
                                         gpus=1.0 if o.device.startswith("cuda") else 0.0)
        if arch.engine_mode != "disaggregated":  # replica modes: runners/engine/modes.py
            self.mode = launch(self, ctx)
            self.started = True
            self._gate(len(self.names))
            return self
        workers = arch.engine_workers(cfg)  # (name, role), as the architecture names them
        e_names, p_names, d_names = ([n for n, r in workers if r == role]
                                     for role in ("encode", "prefill", "decode"))
        self.names = e_names + p_names + d_names
        self.e_names = e_names
        self.shared = Shared(ctx, len(p_names), len(d_names), self.names)
        self.events = Events(ctx, per_worker=o.backend == "local")
        for n in self.names:
            self.inboxes[n] = ctx.Queue()
        o = self.opts
        wopts = {"model": o.model, "device": o.device, "threads": o.threads,
                 "prefill_tokens": o.prefill_tokens, "kv_tokens": o.kv_tokens,
                 "max_batch": o.max_batch, "record_steps": o.record_steps,
                 "rate_hint": self.rate_hint, "config": cfg.model_dump()}
        p_in = [self.inboxes[n] for n in p_names]
        d_in = [self.inboxes[n] for n in d_names]
        ch = self.events.channel  # each worker's own events queue (runners/engine/events.py)
        for i, n in enumerate(d_names):
            self._spawn(ctx, n, decode_main, (n, i, wopts, self.inboxes[n], ch(), self.shared))
        for i, n in enumerate(p_names):
            self._spawn(ctx, n, prefill_main, (n, i, wopts, self.inboxes[n], ch(), d_in,
                                               d_names, self.shared))
        for i, n in enumerate(e_names):
            self._spawn(ctx, n, encode_main, (n, i, wopts, self.inboxes[n], ch(), p_in,
                                              p_names, d_in, d_names, self.shared))
        self.wait_ready(self.names)
        self.started = True
        self._gate(len(e_names))
        return self

    def _gate(self, entry_workers: int) -> None:
        """Admission control against the TTFT SLO, when there is one (called again: a gate
        that has measured nothing yet, e.g. after a warm-up load)."""
        self._entry = entry_workers
        o = self.opts
        if o.ttft_slo_s is not None and o.admit_margin is not None:
            self.gate = AdmissionGate(o.ttft_slo_s, o.admit_margin,
                                      prior=max(4, 2 * entry_workers))

    def wait_ready(self, names: list[str]) -> None:
        """Block until every worker in `names` reported ready (it loaded its model); stop the
        engine and raise when one exits first or `start_timeout_s` passes."""
        o = self.opts
        ready: set[str] = set()
        deadline = time.monotonic() + o.start_timeout_s
        while len(ready) < len(names):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"workers not ready after {o.start_timeout_s:.0f} s: "
                                   f"{sorted(set(names) - ready)}")
            for n, p in self.procs.items():
                if not p.is_alive():
                    self.stop()
                    raise RuntimeError(f"worker {n} exited while loading (code {p.exitcode})")
            try:
                kind, _, name, _, extra = self.events.get(timeout=0.5)
            except queue.Empty:
                continue
            if kind == EV_READY:
                ready.add(name)
                if isinstance(extra, dict):
                    self.sm_split[name] = extra

    def _spawn(self, ctx: Any, name: str, target: Any, args: tuple) -> None:
        k = len(self.procs)
        dev = self.fit.device_for(k)  # CUDA: one GPU per worker
        if isinstance(args[2], dict) and dev != args[2].get("device", dev):
            args = (*args[:2], {**args[2], "device": dev}, *args[3:])
        p = ctx.Process(target=target, args=args, name=f"hastune-{name}", daemon=True)
        p.start()
        self.procs[name] = p
        cores = self._cores_for(k)
        if cores:
            try:
                os.sched_setaffinity(p.pid, cores)
                self.pinned[name] = sorted(cores)
            except (OSError, AttributeError):
                pass  # pinning is best effort (no such call here, or not permitted)

    def _cores_for(self, k: int) -> set[int] | None:
        """The cores of the k-th worker started, or None when workers are not pinned."""
        o = self.opts
        if not (o.pin_cores and o.device == "cpu" and o.backend == "local"
                and hasattr(os, "sched_getaffinity")):
            return None
        return set(self.fit.cores_for(k))

    def stop(self) -> None:
        for n, q in self.inboxes.items():
            if self.procs.get(n) is not None and self.procs[n].is_alive():
                q.put(STOP)
        for p in self.procs.values():
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        if getattr(self, "events", None) is not None:
            self.events.close()
        backend.close(getattr(self, "ctx", None))
        self.started = False

    def __enter__(self) -> Engine:
        return self if self.started else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kill(self, name: str) -> None:
        """Kill one worker process (for failure tests)."""
        self.procs[name].kill()

    # -- one run --------------------------------------------------------------------------
    def run(self, jobs: list[Job], offsets: list[float], rate: float,
            on_progress: Any = None) -> RunRecord:
        """Submit `jobs` at `offsets` seconds from now; wait until each completes or fails."""
        n = len(jobs)
        first = np.full(n, math.nan)
        last = np.full(n, math.nan)
        tokens = np.zeros(n)
        arrival = np.full(n, math.nan)
        failed: dict[int, str] = {}
        rejected: dict[int, str] = {}
        gate = self.gate
        if gate is not None:
            gate.begin()
        owner: dict[int, str] = {}
        index = {j.rid: k for k, j in enumerate(jobs)}
        dead: set[str] = {n_ for n_ in self.names if not self.shared.is_alive(n_)}
        overhead: dict[str, tuple[float, float]] = {}
        steps: dict[str, list] = {}
        if self.mode is not None:
            self.mode.begin_run()
        t0 = time.monotonic() + 0.05
        lock = threading.Lock()  # owner and arrival are shared with the submit thread

        def submit() -> None:
            for k, (job, off) in enumerate(zip(jobs, offsets)):
                delay = t0 + off - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                job.arrival = time.monotonic()
                if gate is not None:
                    why = gate.offer(job.rid, job.arrival)
                    if why is not None:  # the run loop counts it; it never reaches a worker
                        with lock:
                            arrival[index[job.rid]] = job.arrival
                        self.events.put((EV_REJECTED, job.rid, "frontend", job.arrival, why))
                        continue
                e = (self.mode.route(job) if self.mode is not None
                     else self.e_names[k % len(self.e_names)])
                with lock:
                    arrival[index[job.rid]] = job.arrival
                    owner[job.rid] = e
                if e is None:  # windowed mode: the macro-instance scheduler holds it
                    self.mode.hold(job)
                    continue
                if not self.shared.is_alive(e):
                    self.events.put((EV_FAILED, job.rid, e, job.arrival, f"worker {e} is dead"))
                    continue
                self.inboxes[e].put(job)

        th = threading.Thread(target=submit, daemon=True)
        th.start()
        wall0 = time.monotonic()
        end_by = t0 + (offsets[-1] if offsets else 0.0) + self.opts.drain_timeout_s
        finished = 0

        def fail(rid: int, why: str) -> None:
            nonlocal finished
            if rid not in failed and rid not in rejected and math.isnan(last[index[rid]]):
                failed[rid] = why
                finished += 1
                if gate is not None:
                    gate.gone(rid)

        while finished < n:
            if time.monotonic() > end_by:
                for j in jobs:
                    if math.isnan(last[index[j.rid]]):
                        fail(j.rid, "timed out")
                break
            for name, p in self.procs.items():
                if name not in dead and not p.is_alive():
                    dead.add(name)
                    self.shared.alive[self.names.index(name)] = 0
                    log.warning("worker %s died (exit code %s)", name, p.exitcode)
                    with lock:
                        for rid, w in list(owner.items()):
                            if w == name:
                                fail(rid, f"worker {name} died")
            try:
                kind, rid, name, t, extra = self.events.get(timeout=0.2)
                t += getattr(self.procs.get(name), "clock_shift", 0.0)  # ray: other machines
                if self.mode is not None:
                    self.mode.on_event(kind, rid, name, t, extra)
            except queue.Empty:
                finished = sum(1 for j in jobs if j.rid in failed or j.rid in rejected
                               or not math.isnan(last[index[j.rid]]))
                continue
            if kind == EV_STEP:
                overhead[name] = (extra[0], extra[1], extra[2])
                continue
            if kind == EV_STEPS:
                steps.setdefault(name, []).extend(extra[0])
                continue
            if kind == EV_SPLIT:
                self.sm_split[name] = extra
                continue
            if rid not in index or rid in failed or rid in rejected:
                continue
            k = index[rid]
            if kind == EV_REJECTED:
                rejected[rid] = str(extra)
                finished += 1
                if on_progress:
                    on_progress(finished, n)
                continue
            if gate is not None and math.isnan(first[k]) and kind in (EV_FIRST, EV_DONE):
                gate.first(rid, t)
            with lock:
                if kind == EV_ENCODED:
                    owner[rid] = extra
                elif kind == EV_FIRST:
                    first[k] = t
                    owner[rid] = extra if extra else name
                elif kind == EV_DONE:
                    if math.isnan(first[k]):
                        first[k] = t
                    last[k] = t
                    tokens[k] = extra
                    owner.pop(rid, None)
                    finished += 1
                    if on_progress:
                        on_progress(finished, n)
                    continue
                elif kind == EV_FAILED:
                    fail(rid, str(extra))
                    continue
                dest = owner.get(rid)
                if dest == "-" or dest in dead:
                    fail(rid, f"handed to {'no worker' if dest == '-' else dest}, "
                              "which is dead")
        th.join(timeout=1)
        if self.mode is not None:
            self.mode.end_run()
        wall = time.monotonic() - wall0
        flush_steps(self, steps, dead, overhead)
        model_s = sum(v[0] for v in overhead.values())
        over_s = sum(v[1] for v in overhead.values())
        return RunRecord(rate, arrival, first, last, tokens, failed, rejected,
                         {"decode_model_s": model_s, "decode_overhead_s": over_s,
                          "decode_steps": float(sum(v[2] for v in overhead.values())),
                          "decode_overhead_share": over_s / model_s if model_s else 0.0,
                          **(self.mode.extra() if self.mode is not None else {}),
                          **(gate.extra() if gate is not None else {})},
                         wall, dict(self.sm_split),
                         self.fit.as_dict() if self.fit is not None else {},
                         run_steps(self, steps, t0 - 0.05))
