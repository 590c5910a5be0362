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
costs no more than a short one.
"""

from __future__ import annotations

import math
import time
from heapq import heappush

from hastune.cluster import Cluster
from hastune.config import NoDGConfig
from hastune.policies import IterationScheduler, LeastInFlight, Prompt
from hastune.profile import Profile
from hastune.recipe import SLO
from hastune.sim.common import (
    ARRIVE,
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
                 "busy_since", "busy_s", "iters", "prefill_s", "max_iter")

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

    def __init__(self, sim: NoDGSimulator, reqs: RequestSet, rate: float):
        self.wall0 = time.perf_counter()
        self.sim, self.rate = sim, rate
        self.loop = loop = EventLoop(reqs, rate)
        self.heap, self.seq = loop.heap, loop.seq
        (self.pre_tok, self.enc_tok, self.out_tok, mm, self.t_first, self.t_last,
         self.rejected) = request_lists(reqs)
        self.mm = mm
        loop.watch(sim.stop_rule, self.t_first, self.t_last, self.out_tok)
        chunk = sim.config.chunk_tokens
        self.chunked = chunk is not None
        for tm in sim.timings:
            tm.kv_cap = tm.kv_cap_mm if mm else tm.kv_cap_text
        self.reps = [_Replica(tm, tm.kv_cap, chunk) for tm in sim.timings]
        self.router = LeastInFlight(len(self.reps))
        self.closed = loop.closed

    def go(self) -> RunResult:
        reps, step, arrive = self.reps, self.step, self.arrive
        for t, _, _, kind, k, ver in self.loop.events(arrive):
            if kind == ARRIVE:
                arrive(k, t)
            elif ver == reps[k].ver:
                step(k, t)
        return self.result()

    def done(self, q: int, t: float) -> None:
        """Request q left the system at t (finished or rejected)."""
        self.router.finish(q)
        if self.closed:
            self.loop.finished(q, t)

    def arrive(self, q: int, t: float) -> None:
        k = self.router.route(q)
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
            tb, sb = rp.dec.boundary(t)
            if tb < rp.ev_t:
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
                fin = d.advance(t, d.step + 1, self.t_last)
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
            done = self.done
            for e in fin:
                done(e[1], t)
        self.plan(k, t)

    def plan(self, k: int, t: float) -> None:
        """Replica k at t, between iterations: admit, then start the next iteration that
        carries prefill work (encoding inline the payloads of the prompts it starts, beside a
        decode step of the batch when chunked), or decode to the next finish, or go idle."""
        rp = self.reps[k]
        d = rp.dec
        sched = rp.sched
        if sched.waiting:
            sched.admit(d.n, d.reserved)
        if sched.prefilling:
            chunks, tokens, sq = sched.plan(d.n)
            if tokens > 0:
                tm = rp.tm
                enc = 0.0
                if self.mm:
                    enc_tok = self.enc_tok
                    for p, c in chunks:
                        x = enc_tok[p.req]
                        if p.done == c and x > 0:
                            enc += tm.encode_latency(1, x, x * x)
                n = d.n if self.chunked else 0
                dur = enc + tm.mixed(n, d.S + d.n * d.step, tokens, sq)  # d.context
                rp.prefill_s += dur
                if dur > rp.max_iter:
                    rp.max_iter = dur
                rp.decodes = n > 0
                rp.in_iter = True
                rp.iters += 1
                rp.ver += 1
                rp.ev_t = t + dur
                heappush(self.heap, (t + dur, PRIO_DONE, next(self.seq), STEP, k, rp.ver))
                return
        if d.n > 0:
            tf, sf = d.next_finish()  # type: ignore[misc]
            rp.ver += 1
            rp.ev_t = tf
            rp.target = sf
            heappush(self.heap, (tf, PRIO_DONE, next(self.seq), STEP, k, rp.ver))
        else:
            rp.active = False
            rp.ev_t = math.inf
            rp.busy_s += t - rp.busy_since

    def result(self) -> RunResult:
        loop, reps, cfg = self.loop, self.reps, self.sim.config
        end = loop.t
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
