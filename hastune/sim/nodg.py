"""Discrete-event simulation of `nodg` (vLLM-like) deployments: full replicas that prefill
and decode on the same GPUs.

A request goes to the replica with the fewest requests in flight, waits FIFO until its KV
(prompt + output, reserved up front, no preemption) and a batch slot are free, then prefills:

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
from collections import deque
from heapq import heappush

from hastune.cluster import Cluster
from hastune.config import NoDGConfig
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
    __slots__ = ("tm", "dec", "waiting", "pf", "pf_reserved", "active", "in_iter", "ver",
                 "ev_t", "target", "completes", "decodes", "busy_since", "busy_s", "inflight",
                 "iters", "prefill_s", "max_seqs", "max_iter")

    def __init__(self, tm: InstanceTiming):
        self.tm = tm
        self.dec = ReplicaDecode(tm.decode, tm.first_gpu)
        self.waiting: deque[int] = deque()   # not yet given KV
        self.pf: deque[list] = deque()       # admitted, prefilling: [req, tokens done]
        self.pf_reserved = 0.0
        self.active = False
        self.in_iter = False
        self.ver = 0
        self.ev_t = math.inf
        self.target = 0
        self.completes = 0      # prompts the in-flight iteration finishes (a prefix of pf)
        self.decodes = False    # whether the in-flight iteration advances the decode batch
        self.busy_since = 0.0
        self.busy_s = 0.0
        self.inflight = 0
        self.iters = 0
        self.prefill_s = 0.0
        self.max_seqs = tm.decode.max_batch
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
        wall0 = time.perf_counter()
        cfg = self.config
        loop = EventLoop(reqs, rate)
        heap, seq = loop.heap, loop.seq
        pre_tok, enc_tok, out_tok, mm, t_first, t_last, rejected = request_lists(reqs)
        loop.watch(self.stop_rule, t_first, t_last, out_tok)
        where = [0] * len(reqs)
        reps = [_Replica(tm) for tm in self.timings]
        for r in reps:
            r.tm.kv_cap = r.tm.kv_cap_mm if mm else r.tm.kv_cap_text
        chunked = cfg.chunk_tokens is not None
        chunk = cfg.chunk_tokens or 0
        closed, finished = loop.closed, loop.finished

        def done(req: int, t: float) -> None:
            reps[where[req]].inflight -= 1
            if closed:
                finished(req, t)

        def plan(k: int, t: float) -> None:
            rp = reps[k]
            d = rp.dec
            tm = rp.tm
            cap = tm.kv_cap
            waiting, pf = rp.waiting, rp.pf
            # give KV to waiting requests, FIFO, while memory and batch slots allow
            while waiting:
                q = waiting[0]
                need = pre_tok[q] + out_tok[q]
                if (d.n + len(pf) >= rp.max_seqs
                        or d.reserved + rp.pf_reserved + need > cap):
                    break
                waiting.popleft()
                rp.pf_reserved += need
                pf.append([q, 0.0])
            dur = 0.0
            if pf:
                budget = (chunk - d.n) if chunked else tm.max_batch_tokens
                tokens = sq = enc = 0.0
                completes = 0
                for e in pf:
                    if budget <= 0:
                        break
                    q = e[0]
                    L = pre_tok[q]
                    c = L - e[1]
                    if c > budget:
                        if not chunked:
                            if tokens > 0:
                                break
                        else:
                            c = budget
                    if e[1] == 0.0 and enc_tok[q] > 0:
                        x = enc_tok[q]
                        enc += tm.encode_latency(1, x, x * x)
                    d1 = e[1] + c
                    sq += d1 * d1 - e[1] * e[1]
                    e[1] = d1
                    tokens += c
                    budget -= c
                    if d1 >= L:
                        completes += 1
                if tokens > 0:
                    dur = enc + tm.mixed(d.n if chunked else 0, d.context, tokens, sq)
                    rp.prefill_s += dur
                    if dur > rp.max_iter:
                        rp.max_iter = dur
                    rp.completes = completes
                    rp.decodes = chunked and d.n > 0
            if dur > 0.0:
                rp.in_iter = True
                rp.iters += 1
                rp.ver += 1
                rp.ev_t = t + dur
                heappush(heap, (t + dur, PRIO_DONE, next(seq), STEP, k, rp.ver))
            elif d.n > 0:
                tf, sf = d.next_finish()  # type: ignore[misc]
                rp.ver += 1
                rp.ev_t = tf
                rp.target = sf
                heappush(heap, (tf, PRIO_DONE, next(seq), STEP, k, rp.ver))
            else:
                rp.active = False
                rp.ev_t = math.inf
                rp.busy_s += t - rp.busy_since

        def arrive(q: int, t: float) -> None:
            loads = [rp.inflight for rp in reps]
            k = 0
            best = loads[0]
            for j in range(1, len(loads)):
                if loads[j] < best:
                    best, k = loads[j], j
            rp = reps[k]
            where[q] = k
            rp.inflight += 1
            if pre_tok[q] + out_tok[q] > rp.tm.kv_cap:
                rejected.append(q)
                t_first[q] = t_last[q] = math.inf
                done(q, t)
                return
            rp.waiting.append(q)
            if not rp.active:
                rp.active = True
                rp.busy_since = t
                rp.dec.t0 = t
                plan(k, t)
            elif not rp.in_iter:
                tb, sb = rp.dec.boundary(t)
                if tb < rp.ev_t:
                    rp.ver += 1
                    rp.ev_t = tb
                    rp.target = sb
                    heappush(heap, (tb, PRIO_DONE, next(seq), STEP, k, rp.ver))

        for t, _, _, kind, k, ver in loop.events(arrive):
            if kind == ARRIVE:
                arrive(k, t)
                continue
            rp = reps[k]
            if ver != rp.ver:
                continue
            d = rp.dec
            if rp.in_iter:
                rp.in_iter = False
                fin = d.advance(t, d.step + 1, t_last) if rp.decodes else ()
                if not rp.decodes:
                    d.t0 = t
                pf = rp.pf
                for _ in range(rp.completes):
                    q, _tok = pf.popleft()
                    need = pre_tok[q] + out_tok[q]
                    rp.pf_reserved -= need
                    t_first[q] = t
                    if out_tok[q] <= 1:
                        t_last[q] = t
                        done(q, t)
                    else:
                        d.join(q, pre_tok[q] + 1.0, out_tok[q], need)
            else:
                fin = d.advance(t, rp.target, t_last)
            for e in fin:
                done(e[1], t)
            plan(k, t)

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
        return build_result(rate, loop, t_first, t_last, out_tok, rejected, self.warmup, util,
                            wall0, extra)
