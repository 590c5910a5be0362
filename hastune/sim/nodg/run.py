"""One run of the nodg simulator (hastune.sim.nodg describes the model): the replicas' state,
the event loop, and the handlers of arrivals and of a replica's pending event. Planning a
replica's next iterations is hastune.sim.nodg.plan's half of the run (`Planner`).

Hot methods bind what they read to locals (the run is CPU-bound Python)."""

from __future__ import annotations

import math
import time
from heapq import heappop, heappush
from typing import TYPE_CHECKING

import numpy as np

from hastune.policies import BatchWait, IterationScheduler, LeastInFlight
from hastune.sim.common import ARRIVE, EventLoop, build_result, request_lists
from hastune.sim.compiled import core
from hastune.sim.events import PRIO_DONE, PRIO_TIMER, SimulationError
from hastune.sim.instance import InstanceTiming, ReplicaDecode
from hastune.sim.nodg.plan import STEP, Planner
from hastune.sim.result import RunResult
from hastune.workload import RequestSet

if TYPE_CHECKING:
    from hastune.sim.nodg.simulator import NoDGSimulator


class Replica:
    """One replica's state in a run: its decode batch, its scheduler, its pending event."""

    __slots__ = ("tm", "dec", "sched", "active", "in_iter", "ver", "ev_t", "target", "decodes",
                 "busy_since", "busy_s", "iters", "prefill_s", "max_iter", "run", "early",
                 "early_ver", "spec", "spec_ver", "waking", "wait_from")

    def __init__(self, tm: InstanceTiming, kv_cap: int, chunk: int | None):
        self.tm = tm
        self.dec = ReplicaDecode(tm.decode, tm.first_gpu)
        self.sched = IterationScheduler(tm.decode.max_batch, kv_cap, chunk, tm.max_batch_tokens)
        self.active = False     # holds requests (busy time runs)
        self.in_iter = False    # an iteration that carries prefill work is running
        self.ver = 0            # of the one pending STEP event that counts
        self.ev_t = math.inf    # its time
        self.target = 0         # the decode step it ends at (decode-only stretches)
        self.decodes = False    # whether the running iteration advances the decode batch
        self.busy_since = 0.0
        self.busy_s = 0.0
        self.iters = 0
        self.prefill_s = 0.0
        self.max_iter = 0.0     # longest iteration that carried prefill work
        self.run: tuple | None = None  # the last chunk run, as it started (chunk_run)
        self.early: tuple | None = None  # the last boundary taken ahead, and before (arrive)
        self.early_ver = -1     # the event planned there
        self.spec: tuple | None = None  # the last iteration of a solo event, as it started
        self.spec_ver = -1      # that event (retract)
        self.waking = False     # woken by an arrival: starts once its instant's arrivals are in
        self.wait_from = -1     # the decode step its prompts began waiting at (batch waiting)


class Run(Planner):
    """One run: the replicas, the router, the request lists, and the event handlers."""

    ahead = True  # plan what is already known at once (solo, chunk_run, arrivals) and run the
    # open loop here (run_open); False: every iteration and step boundary is an event, through
    # the shared loop (the reference tests/sim/test_nodg_runs.py uses)
    paged = False  # KV on demand (PagedRun), for the compiled core

    def __init__(self, sim: NoDGSimulator, reqs: RequestSet, rate: float, lists: bool = True):
        """`lists` False: the per-request numbers as arrays, and `go` runs in the compiled core
        (open loop without batch waiting: NoDGSimulator.compiled): hastune.sim._core.run_nodg,
        this run with `ahead` off, event for event — so the same timestamps and statistics as
        with `ahead` on, and more events (tests/sim/test_core.py)."""
        self.wall0 = time.perf_counter()
        self.fast = not lists
        self.sim, self.rate = sim, rate
        # one front end per replica (it streams)
        self.loop = loop = EventLoop(reqs, rate, streams=sim.config.replicas, lists=lists)
        self.heap, self.seq = loop.heap, loop.seq
        (self.pre_tok, _, self.out_tok, mm, self.t_first, self.t_last,
         self.rejected) = request_lists(reqs, lists)
        self.mm = mm
        self.out_kv = self.out_tok  # output KV taken at admission (reserved up front)
        if mm:  # each request's inline encode, 0 without a payload
            x = reqs.encoder_tokens
            lat = sim.timings[0].encode_latency(1, x, x * x)
            self.enc_s = np.where(x > 0, lat, 0.0).tolist()
        loop.watch(sim.stop_rule, self.t_first, self.t_last, self.out_tok, self.rejected,
                   sim.core)
        chunk = sim.config.chunk_tokens
        self.chunked = chunk is not None
        # TensorRT-LLM's batch waiting (Profile.batch_wait; Planner.waits): prompts are held
        # beside decoding, so every iteration is planned as it starts
        iters, ratio = sim.profile.batch_wait
        waits = self.chunked and iters > 0
        self.batch_wait = BatchWait(iters, ratio * chunk) if waits else None
        self.runs = self.chunked and self.ahead and not waits  # chunk_run
        self.solo_ok = self.runs and not mm  # plan: solo
        for tm in sim.timings:
            tm.kv_cap = tm.kv_cap_mm if mm else tm.kv_cap_text
        self.reps = [Replica(tm, tm.kv_cap, chunk) for tm in sim.timings]
        self.router = LeastInFlight(len(self.reps))
        self.pick, self.release = self.router.pick, self.router.release
        self.closed = loop.closed
        self.next_arrival = 0  # the first pre-computed arrival not seen yet (open loop)
        self.arr, self.n_open = loop.arr, loop.n_open
        self.early_ok = self.ahead and not self.closed and not waits  # arrive: boundary ahead
        self.woken: list[int] = []  # replicas to start once the instant's arrivals are in
        self.starts = 0  # start events popped (not counted as the run's events)

    def go(self) -> RunResult:
        if self.fast:  # the compiled core, as with `ahead` off
            core.run_nodg(self)  # type: ignore[union-attr]
        elif self.closed or not self.ahead:  # (the reference: the shared loop)
            self.loop.run_versioned(self.arrive, self.step, self.reps)
        else:
            self.run_open()
        self.loop.popped -= self.starts
        return self.result()

    def run_open(self) -> None:
        """EventLoop.run_versioned for an open loop, where every heap event is a replica's STEP
        (PRIO_DONE: before an arrival at the same instant): the same order, stop checks, counts
        and errors, with the next arrival's time kept at hand."""
        loop = self.loop
        heap, arr, n_open, reps = self.heap, self.arr, self.n_open, self.reps
        arrive, step, woken = self.arrive, self.step, self.woken
        check = loop.first_check()
        i = popped = 0
        t = 0.0
        ta = arr[0] if n_open else math.inf
        while True:
            if heap and heap[0][0] <= ta:
                ev = heappop(heap)
                te = ev[0]
                if te < t:
                    loop.arrived = i
                    raise SimulationError(f"event kind {ev[3]} at t={te!r} is earlier than "
                                          f"now={t!r}: a simulator scheduled it in the past")
                popped += 1
                t = te
                k = ev[4]
                if ev[5] == reps[k].ver:
                    step(k, te)
            elif i < n_open:
                t = ta
                arrive(i, ta)
                i += 1
                ta = arr[i] if i < n_open else math.inf
                if woken and ta != t:  # the instant's last arrival: start the woken replicas
                    self.start_woken(t)
                if i >= check:
                    nxt = loop.checkpoint(i, t)
                    if nxt is None:
                        break
                    check = nxt
            else:
                break
        loop.t, loop.popped, loop.arrived = t, popped, i

    def done(self, k: int, q: int, t: float) -> None:
        """Request q left replica k and the system at t (finished or rejected)."""
        self.release(k)
        if self.closed:
            self.loop.finished(q, t)

    def left(self, k: int, fin, t: float) -> None:
        """The decode entries `fin` finished at replica k at t: out of the router, and in
        closed loop their clients send their next requests."""
        self.release(k, len(fin))
        if self.closed:
            for e in fin:
                self.loop.finished(e[1], t)

    def arrive(self, q: int, t: float) -> None:
        if q < 0:  # a woken replica's start (wake), after the arrivals of its instant
            self.starts += 1
            self.start(~q, t)
            return
        self.next_arrival = q + 1
        k = self.pick()
        rp = self.reps[k]
        pre = self.pre_tok[q]
        sched = rp.sched
        alone = self.solo_ok and not sched.waiting and not sched.prefilling
        p = sched.queue(q, pre + self.out_kv[q], pre)
        if p is None:
            self.rejected.append(q)
            self.t_first[q] = self.t_last[q] = math.inf
            self.done(k, q, t)
            return
        d = rp.dec
        early = False
        if not rp.active:
            rp.active = True
            rp.busy_since = t
            d.t0 = t
            if self.closed or (q + 1 < self.n_open and self.arr[q + 1] == t):
                self.wake(rp, k, t)  # others may arrive at t: it starts when all are in
                return
        elif rp.in_iter:  # it queues; but it may share the last iteration planned: retract
            if rp.spec_ver == rp.ver and t < rp.spec[0]:  # type: ignore[index]
                self.retract(rp, k)
            return
        elif rp.waking:  # it starts at t, after this instant's arrivals: it takes q then
            return
        else:  # decoding only: the next step boundary takes it
            tb, sb = d.boundary(t)
            if tb >= rp.ev_t:
                return
            i = q + 1  # nothing else comes first: that boundary, now
            if not (self.early_ok and (i >= self.n_open or self.arr[i] >= tb)):
                rp.ver += 1
                rp.ev_t = tb
                rp.target = sb
                heappush(self.heap, (tb, PRIO_DONE, next(self.seq), STEP, k, rp.ver))
                return
            s = d.steps_run  # (for a run stopped before tb: result)
            rp.early = (tb, s, rp.iters, rp.prefill_s, rp.max_iter)
            early = True
            run = d.running
            if run and run[0][0] <= sb:
                fin = d.advance(tb, sb, self.t_last)  # (as `step` there)
                self.release(k, len(fin))
            else:  # advance, inlined: before the next finish
                d.steps_run = s + (sb - d.step)
                d.step = sb
                d.t0 = tb
            t = tb
        n = d.n  # plan at t; for p alone, with IterationScheduler.admit inlined:
        if (alone and n < sched.chunk and n < sched.seats
                and d.reserved + sched.reserved + p.need <= sched.kv_cap):
            sched.waiting.popleft()
            sched.reserved += p.need
            sched.prefilling.append(p)
            self.solo(rp, k, t, p, n)
        else:
            self.plan(k, t)
        if early:
            rp.early_ver = rp.ver

    def wake(self, rp: Replica, k: int, t: float) -> None:
        """Idle replica k was woken at t by an arrival that others may join at t (closed loop,
        or the next arrival at the same time): as an engine's loop schedules what is waiting
        when its next iteration starts, it plans at t once every arrival of t is in — through
        the open loop's `woken`, or an ARRIVE-kind event ~k at PRIO_TIMER (after arrivals)."""
        rp.waking = True
        if self.ahead and not self.closed:
            self.woken.append(k)
        else:
            heappush(self.heap, (t, PRIO_TIMER, next(self.seq), ARRIVE, ~k, None))

    def start_woken(self, t: float) -> None:
        for k in self.woken:
            self.start(k, t)
        self.woken.clear()

    def start(self, k: int, t: float) -> None:
        """Woken replica k plans at t what arrived at t: one prompt alone as `arrive` would
        (solo), else `plan`."""
        rp = self.reps[k]
        rp.waking = False
        sched, d = rp.sched, rp.dec
        n = d.n
        if self.solo_ok and len(sched.waiting) == 1 and not sched.prefilling:
            p = sched.waiting[0]
            if (n < sched.chunk and n < sched.seats
                    and d.reserved + sched.reserved + p.need <= sched.kv_cap):
                sched.waiting.popleft()
                sched.reserved += p.need
                sched.prefilling.append(p)
                self.solo(rp, k, t, p, n)
                return
        self.plan(k, t)

    def step(self, k: int, t: float) -> None:
        """Replica k's pending event: the end of an iteration (the prompts it finished made
        their first token and join the decode batch), or a decode step boundary."""
        rp = self.reps[k]
        d = rp.dec
        if rp.in_iter:
            rp.in_iter = False
            if rp.decodes:
                s = rp.target
                run = d.running
                if run[0][0] <= s:  # (decodes: n > 0)
                    fin = d.advance(t, s, self.t_last)
                else:  # advance, inlined: nothing finishes
                    d.steps_run += s - d.step
                    d.step = s
                    d.t0 = t
                    fin = ()
            else:
                fin = ()
                d.t0 = t
            pf = rp.sched.prefilling
            if pf[0].done >= pf[0].total:
                out_tok, t_first = self.out_tok, self.t_first
                for p in rp.sched.pop_done():
                    q = p.req
                    t_first[q] = t
                    if out_tok[q] <= 1:
                        self.t_last[q] = t
                        self.done(k, q, t)
                    else:
                        d.join(q, p.total + 1.0, out_tok[q], p.need)
        else:
            fin = d.advance(t, rp.target, self.t_last)
        if fin:
            self.left(k, fin, t)
        sched = rp.sched
        if sched.waiting or sched.prefilling or d.n == 0:
            self.plan(k, t)
        else:  # plan and ReplicaDecode.next_finish, inlined: decode to the next finish
            n, sf, s = d.n, d.running[0][0], d.step
            m, c = sf - s, d.c
            tf = d.t0 + m * (d.a + d.b * n + c * (d.S + n * s)) + c * n * m * (m - 1) * 0.5
            v = rp.ver = rp.ver + 1
            rp.ev_t = tf
            rp.target = sf
            heappush(self.heap, (tf, PRIO_DONE, next(self.seq), STEP, k, v))

    def result(self) -> RunResult:
        loop, reps, cfg = self.loop, self.reps, self.sim.config
        end = loop.t
        if loop.stopped or loop.window:  # count only what had started by the end, as event
            # by event
            for rp in reps:
                if rp.in_iter and rp.run is not None and rp.run[-1] == rp.ver:
                    self.unwind(rp, end)
                e = rp.early
                if e is not None and e[0] > end and rp.early_ver == rp.ver:  # at the arrival
                    rp.dec.steps_run, rp.iters, rp.prefill_s, rp.max_iter = e[1:]
        span = loop.span()
        busy = sum(rp.busy_s + (end - rp.busy_since if rp.active else 0.0) for rp in reps)
        pf_s = sum(rp.prefill_s for rp in reps)
        util = {"replicas": busy / (len(reps) * span),
                "prefill_iterations": pf_s / (len(reps) * span)}
        util["gpus"] = util["replicas"] * cfg.gpus / max(cfg.gpus, 1)
        extra = {"iterations": float(sum(rp.iters for rp in reps)),
                 "max_iteration_s": max(rp.max_iter for rp in reps),
                 "decode_steps": float(sum(rp.dec.steps_run for rp in reps))}
        return build_result(self.rate, loop, self.t_first, self.t_last, self.out_tok,
                            self.rejected, self.sim.warmup, util, self.wall0, extra)
