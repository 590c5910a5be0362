"""The frontend side of the engine's replica modes, `continuous` (vLLM-like replicas) and
`windowed` (EcoServe's instances): it starts the replica workers (runners/engine/replica.py)
and decides where each request goes.

- continuous: the replica with the fewest requests in flight (ties: the lowest index), the
  policy the simulator routes with (hastune.policies `LeastInFlight`), among the live replicas.
- windowed: the macro-instance scheduler of the simulator's (hastune/sim/), built from the
  same policy objects (hastune.policies `Admission`, `SlackTracker`, `RollingActivation`) fed
  with the instances' live state: requests go to a macro-instance (smooth weighted round robin
  over the live members, preferring one where nobody waits); its oldest waiting request is
  offered to its instances in rolling order and given to the first that passes the three
  checks; if none does, it waits and is offered again when an instance reports (a window
  closes, a request finishes) or every `status_interval_ms`. KV never leaves the instance
  that admitted it.

The engine calls `route` (continuous) or `hold` (windowed) for each arriving request and
`on_event` for every event its run loop receives; `extra()` adds the mode's statistics to the
run record.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any

from hastune import archs
from hastune.policies import Admission, LeastInFlight, RollingActivation, SlackTracker, Verdict
from hastune.policies.rolling import pick_macro
from runners.engine.events import Events
from runners.engine.messages import (
    EV_DONE,
    EV_ENCODED,
    EV_FAILED,
    EV_PREFILLED,
    EV_WINDOW,
)
from runners.engine.replica import MODALITIES, PREFILL, Status, continuous_main, windowed_main
from runners.engine.workers import Shared

log = logging.getLogger(__name__)

DEFAULT_SLO = (5.0, 0.1)  # (TTFT, TPOT) seconds when the windowed mode starts without a recipe
STAT_FIELDS = ("iterations", "mixed", "prefill_only", "max_iter_tokens", "max_prefill_tokens",
               "max_decode_gap_s", "max_decode_wait_tokens", "max_iter_s", "decode_steps",
               "windows", "window_reqs")


def check_config(cfg: Any, path: Any = None) -> None:
    """InputError (naming the field and the fix) for a config the engine cannot run: its
    architecture module says (hastune.archs: `engine_check`)."""
    archs.of(cfg).engine_check(cfg, path)


def launch(engine: Any, ctx: Any) -> NoDGMode | PaDGMode:
    """Start the replica workers of `engine.config` (its architecture's engine_mode is a
    replica mode), wait until they are ready, and return the mode object the engine routes
    with."""
    cfg, o = engine.config, engine.opts
    check_config(cfg)
    arch = archs.of(cfg)
    continuous = arch.engine_mode == "continuous"
    names = [name for name, _ in arch.engine_workers(cfg)]
    n = len(names)
    engine.names, engine.e_names = names, []
    engine.shared = Shared(ctx, 0, 0, names)
    engine.events = Events(ctx, per_worker=o.backend == "local")
    status = Status(ctx, n)
    wopts = {"model": o.model, "device": o.device, "threads": o.threads,
             "prefill_tokens": o.prefill_tokens, "kv_tokens": o.kv_tokens,
             "max_batch": o.max_batch, "record_steps": o.record_steps, "config": cfg.model_dump()}
    for i, name in enumerate(names):
        engine.inboxes[name] = ctx.Queue()
        engine._spawn(ctx, name, continuous_main if continuous else windowed_main,
                      (name, i, wopts, engine.inboxes[name], engine.events.channel(),
                       status))
    engine.wait_ready(names)
    return (NoDGMode if continuous else PaDGMode)(engine, names, status)


class _Mode:
    def __init__(self, engine: Any, names: list[str], status: Status):
        self.names, self.status, self.shared = names, status, engine.shared
        self.events, self.inboxes = engine.events, engine.inboxes
        self.index = {n: i for i, n in enumerate(names)}
        self.lock = threading.RLock()

    def alive(self, i: int) -> bool:
        return self.shared.is_alive(self.names[i])

    def begin_run(self) -> None:
        for i in range(len(self.names)):  # the workers are idle between runs
            for f in STAT_FIELDS:
                self.status.set(i, f, 0.0)

    def end_run(self) -> None:
        pass

    def stats(self) -> dict[str, dict[str, float]]:
        """Each replica's status row (its counters cover the current or last run)."""
        return {n: self.status.row(i) for i, n in enumerate(self.names)}

    def extra(self) -> dict[str, float]:
        rows = list(self.stats().values())
        out = {}
        for f in STAT_FIELDS:
            vals = [r[f] for r in rows]
            out[f] = max(vals) if f.startswith("max_") else sum(vals)
        return out


class NoDGMode(_Mode):
    def __init__(self, engine: Any, names: list[str], status: Status):
        super().__init__(engine, names, status)
        self.router = LeastInFlight(len(names))

    def begin_run(self) -> None:
        super().begin_run()
        with self.lock:
            self.router = LeastInFlight(len(self.names))

    def route(self, job: Any) -> str:
        with self.lock:
            live = [i for i in range(len(self.names)) if self.alive(i)] or [0]
            return self.names[self.router.route(job.rid, live)]

    def on_event(self, kind: str, rid: int, name: str, t: float, extra: Any) -> None:
        if kind == EV_DONE or kind == EV_FAILED:
            with self.lock:
                self.router.finish(rid)


class _Macro:
    __slots__ = ("rolling", "queue", "cw")

    def __init__(self, members: list[int]):
        self.rolling = RollingActivation(members)
        self.queue: deque = deque()
        self.cw = 0.0


class PaDGMode(_Mode):
    """The windowed mode's macro-instance scheduler (see the module docstring)."""

    def __init__(self, engine: Any, names: list[str], status: Status):
        super().__init__(engine, names, status)
        cfg, o = engine.config, engine.opts
        ttft, tpot = getattr(o, "ttft_slo_s", None), getattr(o, "tpot_slo_s", None)
        if ttft is None or tpot is None:
            log.warning("windowed mode without SLOs: admission uses TTFT %.1f s, TPOT %.2f s",
                        *DEFAULT_SLO)
            ttft, tpot = ttft or DEFAULT_SLO[0], tpot or DEFAULT_SLO[1]
        self.cfg, self.tpot = cfg, tpot
        self.adm = Admission(ttft)
        n = len(names)
        k = -(-n // cfg.n_upper)  # as few macro-instances of at most N_u as possible
        self.macros = [_Macro(list(range(n))[j::k]) for j in range(k)]
        self.macro_of = {i: m for m in self.macros for i in m.rolling.members}
        self.interval = cfg.status_interval_ms / 1e3
        self.max_batch = o.max_batch
        self.cap = status.get(0, "cap")
        self.block = int(status.get(0, "block")) or 1
        self.cost_a, self.cost_b = status.get(0, "cost_a"), status.get(0, "cost_b")
        self.mm = {m: (int(status.get(0, f"llm_{m}")), status.get(0, f"enc_{m}"))
                   for m in MODALITIES if status.get(0, f"llm_{m}") >= 0}
        self.llm_seen: dict[tuple, int] = {}
        self.factor = 1.0  # measured / profiled prefill time, learned from the batches
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._reset()

    def _reset(self) -> None:
        n = len(self.names)
        self.slack = [SlackTracker(self.tpot, self.cfg.slack, self.cfg.slack_quantile)
                      for _ in range(n)]
        self.inflight, self.reserved = [0] * n, [0.0] * n
        self.pending, self.pending_n = [0.0] * n, [0] * n
        self.home: dict[int, int] = {}
        self.req: dict[int, tuple] = {}  # rid → (need, est, base est, outputs, prompt, job)
        self.keys: dict[int, float] = {}
        self.admitted_on: dict[int, str] = {}
        self.prefilled_on: dict[int, str] = {}
        self.done_on: dict[int, str] = {}
        # each closed window: (instance, opened, closed, decode steps before it, its rids)
        self.windows: list[tuple[str, float, float, int, tuple]] = []
        self.refused = [0] * len(Verdict)  # admission attempts, counted by verdict
        for m in self.macros:
            m.queue.clear()

    # -- run life cycle ------------------------------------------------------------------
    def begin_run(self) -> None:
        super().begin_run()
        with self.lock:
            self._reset()
        self._stop.clear()
        self._thread = threading.Thread(target=self._status_loop, daemon=True,
                                        name="windowed-scheduler")
        self._thread.start()

    def end_run(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1)

    def _status_loop(self) -> None:
        """The status stream: every `status_interval_ms`, re-offer blocked requests."""
        while not self._stop.wait(self.interval):
            with self.lock:
                for m in self.macros:
                    if m.queue:
                        self._pump(m, time.monotonic())

    def extra(self) -> dict[str, float]:
        out = super().extra()
        with self.lock:
            w = self.windows
            out.update({"mean_window_s": (sum(c - o for _, o, c, _, _ in w) / len(w)
                                          if w else 0.0),
                        "mean_window_requests": (sum(len(x[4]) for x in w) / len(w) if w
                                                 else 0.0),
                        "refused_ttft": float(self.refused[Verdict.TTFT]),
                        "refused_slack": float(self.refused[Verdict.TPOT]),
                        "refused_memory": float(self.refused[Verdict.MEMORY]),
                        "prefill_time_factor": self.factor})
        return out

    # -- arrivals --------------------------------------------------------------------------
    def route(self, job: Any) -> None:
        return None  # the scheduler holds it: see `hold`

    def _size(self, job: Any) -> tuple[int, float]:
        """(prompt positions, profiled prefill seconds without the learned factor)."""
        llm, enc = 0, 0.0
        if job.modality is not None:
            llm, enc = self.mm.get(job.modality, (0, 0.0))
            llm = self.llm_seen.get((job.modality, job.payload_size), llm)
        total = len(job.prompt) + llm
        return total, self.cost_a + self.cost_b * total + enc

    def hold(self, job: Any) -> None:
        now = time.monotonic()
        with self.lock:
            total, base = self._size(job)
            need = -(-(total + job.max_tokens) // self.block) * self.block
            if need > self.cap:
                self.events.put((EV_FAILED, job.rid, "scheduler", now, f"needs {need} KV "
                                 f"tokens; an instance holds {self.cap:.0f}"))
                return
            self.req[job.rid] = (need, base * self.factor, base, job.max_tokens,
                                 len(job.prompt), job)
            m = self._pick_macro()
            if m is None:
                self.events.put((EV_FAILED, job.rid, "scheduler", now,
                                 "no live instance"))
                return
            waiting = bool(m.queue)
            m.queue.append(job)
            if not waiting:
                self._pump(m, now)

    def _live(self, m: _Macro) -> list[int]:
        return [k for k in m.rolling.members if self.alive(k)]

    def _pick_macro(self) -> _Macro | None:
        """Smooth weighted round robin over live sizes, preferring one with nobody waiting
        (the simulator's rule, hastune.policies.rolling.pick_macro)."""
        return pick_macro(self.macros, lambda m: len(self._live(m)))

    # -- admission -------------------------------------------------------------------------
    def _passes(self, i: int, rid: int, t: float) -> bool:
        st, sl = self.status, self.slack[i]
        need, est = self.req[rid][0], self.req[rid][1]
        pending = self.pending[i]
        if st.get(i, "phase") == PREFILL:
            window = t - st.get(i, "win_start")
            saved = sl.saved(int(st.get(i, "steps")), t)
            empty = False
        else:
            if sl.n > 0:  # the switch waits for the step in progress
                tb = max(t, st.get(i, "boundary") + st.get(i, "step_s"))
                saved = sl.saved(int(st.get(i, "steps")) + 1, tb)
                window = tb - t
            else:
                saved, window = math.inf, 0.0
            empty = self.pending_n[i] == 0
        why = self.adm.check(window, pending, est, saved, self.cap - self.reserved[i], need,
                             self.max_batch - self.inflight[i], empty)
        self.refused[why] += 1
        return why is Verdict.ADMIT

    def _pump(self, m: _Macro, t: float) -> None:
        """Offer the macro-instance's waiting requests, oldest first."""
        q = m.queue
        while q:
            job = q[0]
            live = 0
            for k in m.rolling.candidates():
                if not self.alive(k):
                    continue
                live += 1
                if self._passes(k, job.rid, t):
                    self._admit(k, job, t)
                    m.rolling.took(k)
                    q.popleft()
                    break
            else:
                if live == 0:  # every member died: nobody can serve what waits here
                    for j in q:
                        self.events.put((EV_FAILED, j.rid, "scheduler", t,
                                         "no live instance in its macro-instance"))
                    q.clear()
                return

    def _admit(self, i: int, job: Any, t: float) -> None:
        need, est = self.req[job.rid][0], self.req[job.rid][1]
        name = self.names[i]
        self.home[job.rid] = i
        self.inflight[i] += 1
        self.reserved[i] += need
        self.pending[i] += est
        self.pending_n[i] += 1
        self.admitted_on[job.rid] = name
        self.events.put((EV_ENCODED, job.rid, "scheduler", t, name))  # the owner is `name`
        self.inboxes[name].put(job)

    # -- what the instances report ---------------------------------------------------------
    def on_event(self, kind: str, rid: int, name: str, t: float, extra: Any) -> None:
        if kind not in (EV_PREFILLED, EV_WINDOW, EV_DONE, EV_FAILED):
            return
        with self.lock:
            i = self.index.get(name)
            if kind == EV_PREFILLED:
                rids, secs, totals = extra
                base = 0.0
                for r, total in zip(rids, totals):
                    if r in self.req and r not in self.prefilled_on:
                        need, est, b, out, plen, job = self.req[r]
                        base += b
                        self.pending[i] -= est  # type: ignore[index]
                        self.pending_n[i] -= 1  # type: ignore[index]
                        if job.modality is not None:
                            self.llm_seen[(job.modality, job.payload_size)] = total - plen
                    self.prefilled_on[r] = name
                if self.pending_n[i] == 0:  # type: ignore[index]
                    self.pending[i] = 0.0  # type: ignore[index]
                if base > 0:
                    self.factor = min(5.0, max(0.2, 0.7 * self.factor + 0.3 * secs / base))
                return
            if kind == EV_WINDOW:
                opened, steps, rids = extra
                self.windows.append((name, opened, t, steps, tuple(rids)))
                sl = self.slack[i]  # type: ignore[index]
                for r in rids:
                    if r in self.req and self.req[r][3] > 1:
                        self.keys[r] = key = sl.key(t, steps)
                        sl.add(key)
                self._pump(self.macro_of[i], time.monotonic())  # type: ignore[index]
                return
            k = self.home.pop(rid, None)
            info = self.req.pop(rid, None)
            if k is None or info is None:
                return
            self.inflight[k] -= 1
            self.reserved[k] -= info[0]
            if rid not in self.prefilled_on:
                self.pending[k] -= info[1]
                self.pending_n[k] -= 1
            key = self.keys.pop(rid, None)
            if key is not None:
                self.slack[k].remove(key)
            if kind == EV_DONE:
                self.done_on[rid] = name
            self._pump(self.macro_of[k], time.monotonic())
