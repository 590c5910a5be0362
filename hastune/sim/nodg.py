"""Discrete-event simulation of `nodg` (vLLM-like) deployments: full replicas that prefill
and decode on the same GPUs.

A request goes to the replica with the fewest requests in flight (hastune.policies
`LeastInFlight`), waits FIFO until its KV (prompt + output, reserved up front, no preemption)
and a batch slot are free, then prefills (hastune.policies `IterationScheduler`):

- chunked (`chunk_tokens` = T, Sarathi-style): every iteration decodes each running sequence
  once and fills the rest of the T-token budget with prefill chunks (FIFO). The chunk's cost is
  added to the decode step, so a decode step never stalls longer than one chunk's worth;
- unchunked (`chunk_tokens: null`, vLLM's default): waiting prompts run as prefill-only
  iterations (up to the profile's `max_batch_tokens`) and decoding pauses meanwhile.

The first token comes at the end of the iteration that finishes the prompt; the request joins
the decode batch at the next iteration. Multimodal requests are encoded inline, in the
iteration that carries their first chunk. Between iterations that carry prefill work the
decode batch advances in closed form (hastune.sim.instance.ReplicaDecode), so a long output
costs no more than a short one; and what is already known runs as one event: a long prompt's
consecutive chunk iterations (with the one that finishes it when nothing can change its plan),
timed with the same float operations as one by one (InstanceTiming.mixed_run), and the step
boundary an arrival at a decoding replica waits for when nothing arrives before it. Same
timestamps, fewer events (tests/sim/test_nodg_runs.py checks against one event each).
"""

from __future__ import annotations

import math
import time
from heapq import heappush

import numpy as np

from hastune.cluster import Cluster
from hastune.config import NoDGConfig
from hastune.policies import IterationScheduler, LeastInFlight, Prompt
from hastune.profile import Profile
from hastune.recipe import SLO
from hastune.sim.common import (
    EventLoop,
    StopRule,
    build_result,
    check_gpus,
    request_lists,
)
from hastune.sim.events import PRIO_DONE
from hastune.sim.instance import InstanceTiming, ReplicaDecode
from hastune.sim.result import RunResult
from hastune.workload import RequestSet

STEP = 1  # the event kind after common.ARRIVE (0), a closed-loop client's next request


class _Replica:
    """One replica's state in a run: its decode batch, its scheduler, its pending event."""

    __slots__ = ("tm", "dec", "sched", "active", "in_iter", "ver", "ev_t", "target", "decodes",
                 "busy_since", "busy_s", "iters", "prefill_s", "max_iter", "run", "early",
                 "early_ver")

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


class NoDGSimulator:
    """Simulates one nodg deployment; `run(requests, rate)` is deterministic."""

    stop_rule: StopRule | None = None  # set by the evaluator: stop runs that have failed

    def __init__(self, profile: Profile, cluster: Cluster, config: NoDGConfig,
                 warmup: float = 0.1, slo: SLO | None = None):
        check_gpus(config, cluster)
        self.profile, self.cluster, self.config, self.warmup = profile, cluster, config, warmup
        g = config.instance_gpus
        self.timings = [InstanceTiming(profile, config.tp, config.pp, cluster, first_gpu=i * g)
                        for i in range(config.replicas)]

    def run(self, reqs: RequestSet, rate: float) -> RunResult:
        return _Run(self, reqs, rate).go()


class _Run:
    """One run: the replicas, the router, the request lists, and the event handlers."""

    ahead = True  # plan what is already known at once (chunk_run, arrivals); False: every
    # iteration and step boundary is an event (the reference tests/sim/test_nodg_runs.py uses)

    def __init__(self, sim: NoDGSimulator, reqs: RequestSet, rate: float):
        self.wall0 = time.perf_counter()
        self.sim, self.rate = sim, rate
        self.loop = loop = EventLoop(reqs, rate)
        self.heap, self.seq = loop.heap, loop.seq
        (self.pre_tok, _, self.out_tok, mm, self.t_first, self.t_last,
         self.rejected) = request_lists(reqs)
        self.mm = mm
        if mm:  # each request's inline encode, 0 without a payload
            x = reqs.encoder_tokens
            lat = sim.timings[0].encode_latency(1, x, x * x)
            self.enc_s = np.where(x > 0, lat, 0.0).tolist()
        loop.watch(sim.stop_rule, self.t_first, self.t_last, self.out_tok)
        chunk = sim.config.chunk_tokens
        self.chunked = chunk is not None
        self.runs = self.chunked and self.ahead  # chunk_run
        for tm in sim.timings:
            tm.kv_cap = tm.kv_cap_mm if mm else tm.kv_cap_text
        self.reps = [_Replica(tm, tm.kv_cap, chunk) for tm in sim.timings]
        self.router = LeastInFlight(len(self.reps))
        self.route, self.finish = self.router.route, self.router.finish
        self.closed = loop.closed
        self.next_arrival = 0  # the first pre-computed arrival not seen yet (open loop)
        self.arr, self.n_open = loop.arr, loop.n_open
        self.early_ok = self.ahead and not self.closed  # arrive: a boundary taken ahead

    def go(self) -> RunResult:
        self.loop.run_versioned(self.arrive, self.step, self.reps)
        return self.result()

    def done(self, q: int, t: float) -> None:
        """Request q left the system at t (finished or rejected)."""
        self.finish(q)
        if self.closed:
            self.loop.finished(q, t)

    def arrive(self, q: int, t: float) -> None:
        self.next_arrival = q + 1
        k = self.route(q)
        rp = self.reps[k]
        pre = self.pre_tok[q]
        if not rp.sched.add(Prompt(q, pre + self.out_tok[q], pre)):
            self.rejected.append(q)
            self.t_first[q] = self.t_last[q] = math.inf
            self.done(q, t)
            return
        if not rp.active:
            rp.active = True
            rp.busy_since = t
            rp.dec.t0 = t
            self.plan(k, t)
        elif not rp.in_iter:  # decoding only: the next step boundary takes it
            d = rp.dec
            tb, sb = d.boundary(t)
            if tb < rp.ev_t:
                i = q + 1  # nothing else comes first: that boundary, now
                if self.early_ok and (i >= self.n_open or self.arr[i] >= tb):
                    s = d.steps_run  # (for a run stopped before tb: result)
                    rp.early = (tb, s, rp.iters, rp.prefill_s, rp.max_iter)
                    run = d.running
                    if run and run[0][0] <= sb:
                        d.advance(tb, sb, self.t_last)
                    else:  # advance, inlined: before the next finish
                        d.steps_run = s + (sb - d.step)
                        d.step = sb
                        d.t0 = tb
                    self.plan(k, tb)
                    rp.early_ver = rp.ver
                    return
                rp.ver += 1
                rp.ev_t = tb
                rp.target = sb
                heappush(self.heap, (tb, PRIO_DONE, next(self.seq), STEP, k, rp.ver))

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
                        self.done(q, t)
                    else:
                        d.join(q, p.total + 1.0, out_tok[q], p.need)
        else:
            fin = d.advance(t, rp.target, self.t_last)
        if fin:
            finish = self.finish
            for e in fin:
                finish(e[1])
            if self.closed:
                for e in fin:
                    self.loop.finished(e[1], t)
        sched = rp.sched
        if sched.waiting or sched.prefilling or d.n == 0:
            self.plan(k, t)
        else:  # plan, inlined: decode to the next finish
            tf, sf = d.next_finish()  # type: ignore[misc]
            v = rp.ver = rp.ver + 1
            rp.ev_t = tf
            rp.target = sf
            heappush(self.heap, (tf, PRIO_DONE, next(self.seq), STEP, k, v))

    def plan(self, k: int, t: float) -> None:
        """Replica k at t, between iterations: admit, then start the next iteration that
        carries prefill work (and the ones after it that are known now: chunk_run), or
        decode to the next finish, or go idle."""
        rp = self.reps[k]
        d = rp.dec
        sched = rp.sched
        nd = d.n
        if sched.waiting:
            sched.admit(nd, d.reserved)
        if sched.prefilling:
            chunks, tokens, sq = sched.plan(nd)
            if tokens > 0:
                n = nd if self.chunked else 0
                ctx = d.S + nd * d.step  # d.context
                if self.mm:  # encode inline the payloads of the prompts it starts
                    dur = self.iteration_s(rp, chunks, tokens, sq, n, ctx)
                else:  # (0.0 + a duration is that duration)
                    dur = rp.tm.mixed(n, ctx, tokens, sq)
                rp.prefill_s += dur
                if dur > rp.max_iter:
                    rp.max_iter = dur
                rp.decodes = n > 0
                rp.in_iter = True
                rp.iters += 1
                rp.target = d.step + 1
                t_end = t + dur
                if self.runs:  # the first prompt is cut, so alone, when this much is left
                    p = chunks[0][0]
                    if p.total - p.done > tokens + tokens:  # a run pays from 2 iterations on
                        t_end = self.chunk_run(rp, t_end, ctx, dur)
                v = rp.ver = rp.ver + 1
                rp.ev_t = t_end
                heappush(self.heap, (t_end, PRIO_DONE, next(self.seq), STEP, k, v))
                return
        if nd > 0:
            tf, sf = d.next_finish()  # type: ignore[misc]
            v = rp.ver = rp.ver + 1
            rp.ev_t = tf
            rp.target = sf
            heappush(self.heap, (tf, PRIO_DONE, next(self.seq), STEP, k, v))
        else:
            rp.active = False
            rp.ev_t = math.inf
            rp.busy_s += t - rp.busy_since

    def iteration_s(self, rp: _Replica, chunks: list, tokens: float, sq: float, n: int,
                    ctx: float) -> float:
        """How long an iteration takes that prefills `chunks` (`tokens` in all, adding `sq` to
        Σ L²; the payloads of the prompts it starts encoded inline) beside a decode step of n
        sequences of total context ctx."""
        tm = rp.tm
        enc = 0.0
        if self.mm:
            enc_s = self.enc_s
            for p, c in chunks:
                if p.done == c:
                    enc += enc_s[p.req]
        return enc + tm.mixed(n, ctx, tokens, sq)

    def chunk_run(self, rp: _Replica, t: float, ctx: float, dur: float) -> float:
        """The chunked iteration just planned (`dur` long, ending at t, decode context ctx) gave
        the whole budget to one prompt, and the next ones would too (`run_head`). Add at once those
        that start before the next decoding request finishes, then the one that finishes the
        prompt if no request arrives before it starts or the prompts already prefilling fill
        its budget (`fills`). Nothing in the replica changes in between — an arrival only
        queues behind that prompt — so they make one event with the first, with the
        timestamps of one event each. The end time of the last; `rp.run` keeps how the run
        started, for `unwind`."""
        d, sched = rp.dec, rp.sched
        n = d.n
        room = d.running[0][0] - rp.target if n else 1 << 62  # iterations before a finish
        if room < 2:
            return t  # one event saved at most: not worth the bookkeeping
        p = sched.prefilling[0]
        if p.total - p.done <= 3 * (sched.chunk - n):  # two more at most, then the last:
            i = self.next_arrival  # worth it only with the last (a guess: it stays exact)
            if self.closed or (i < self.n_open and self.arr[i] < t + 3 * dur):
                return t
        run, chunk, done, whole = sched.run_head(n, room)
        busy, longest, iters = rp.prefill_s, rp.max_iter, rp.iters
        t0 = t
        ctx += n
        if run:
            t, rp.prefill_s, rp.max_iter = rp.tm.mixed_run(run, t, n, ctx, chunk, done, busy,
                                                           longest)
            rp.iters += run
            rp.target += run
        last = 0.0
        if whole and run < room:
            i = self.next_arrival  # the first arrival not seen yet
            if (not self.closed and (i >= self.n_open or self.arr[i] >= t)) or sched.fills(n):
                chunks, tokens, sq = sched.plan(n)
                if self.mm:
                    last = self.iteration_s(rp, chunks, tokens, sq, n, ctx + n * run)
                else:  # (0.0 + a duration is that duration)
                    last = rp.tm.mixed(n, ctx + n * run, tokens, sq)
                t += last
                rp.prefill_s += last
                if last > rp.max_iter:
                    rp.max_iter = last
                rp.iters += 1
                rp.target += 1
        rp.run = (t0, run, n, ctx, chunk, done, busy, longest, iters, last, rp.ver + 1)
        return t

    def unwind(self, rp: _Replica, end: float) -> None:
        """A stopped run ended at `end` inside rp's chunk run: count only the iterations that
        had started by then, as event by event (the statistics of a stopped run)."""
        t, run, n, ctx, chunk, done, busy, longest, iters, last, _ = rp.run  # type: ignore[misc]
        m = 0
        while m < run and t <= end:  # the boundary at t was reached: iteration m + 1 starts
            t, busy, longest = rp.tm.mixed_run(1, t, n, ctx, chunk, done, busy, longest)
            ctx += n
            done += chunk
            m += 1
        if m == run and last and t <= end:  # and the one that finishes the prompt
            busy += last
            longest = last if last > longest else longest
            m += 1
        rp.prefill_s, rp.max_iter, rp.iters = busy, longest, iters + m
        if n:
            rp.dec.steps_run += m

    def result(self) -> RunResult:
        loop, reps, cfg = self.loop, self.reps, self.sim.config
        end = loop.t
        if loop.stopped:  # count only what had started by the end, as event by event
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
