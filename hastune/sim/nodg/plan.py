"""Planning one nodg replica's next iterations: the half of a run (hastune.sim.nodg.run.Run)
that decides, between iterations, what the next one carries and how long it takes, and runs
what is already known as one event (a prompt's consecutive chunk iterations) with the
timestamps of one event each."""

from __future__ import annotations

import math
from heapq import heappush
from typing import TYPE_CHECKING

from hastune.policies import Prompt
from hastune.sim.events import PRIO_DONE

if TYPE_CHECKING:
    from hastune.sim.nodg.run import Replica

STEP = 1  # the event kind after common.ARRIVE (0), a closed-loop client's next request


class Planner:
    """Run's planning methods; they read the run's replicas (`reps`), heap and arrivals."""

    def plan(self, k: int, t: float) -> None:
        """Replica k at t, between iterations: admit, then start the next iteration that
        carries prefill work (and the ones after it that are known now: solo for one prompt,
        chunk_run otherwise), or decode to the next finish, or go idle."""
        rp = self.reps[k]
        d = rp.dec
        sched = rp.sched
        nd = d.n
        if sched.waiting:
            sched.admit(nd, d.reserved)
        pf = sched.prefilling
        if pf and self.batch_wait is not None and self.waits(rp, k, nd):
            return
        if pf:
            if self.solo_ok and len(pf) == 1 and nd < sched.chunk:
                self.solo(rp, k, t, pf[0], nd)
                return
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

    def waits(self, rp: Replica, k: int, n: int) -> bool:
        """TensorRT-LLM's batch waiting (hastune.policies.BatchWait) beside n decoding
        requests: if the prompts not yet started wait, decode alone up to the end of the wait
        or the next finish (an arrival before it plans again at its step boundary) and
        True."""
        sched, d = rp.sched, rp.dec
        w = rp.wait_from = self.batch_wait.since(sched.prefilling, sched.chunk, n, d.step,
                                                 rp.wait_from)
        if w < 0:
            return False
        end = w + self.batch_wait.iters
        sf = d.running[0][0]
        s = end if end < sf else sf
        v = rp.ver = rp.ver + 1
        rp.ev_t = d.time_of(s - d.step)
        rp.target = s
        heappush(self.heap, (rp.ev_t, PRIO_DONE, next(self.seq), STEP, k, v))
        return True

    def solo(self, rp: Replica, k: int, t: float, p: Prompt, n: int) -> None:
        """plan, for its common case: one prompt prefilling (chunked, text only), so each
        iteration gives it the whole budget b = chunk − n until its last (the plan of
        `IterationScheduler.plan`, computed here). The iterations known now make one event:
        those that start before the next decoding request finishes, then the one that
        finishes p — taken back (`retract`) if a request joins the queue before it starts,
        as that request could share it, unless p fills its budget. Nothing else in the
        replica changes in between — an arrival only queues behind p — and
        InstanceTiming.mixed_run times them as one by one; `rp.run` keeps how the event
        started, for `unwind`."""
        d = rp.dec
        b = rp.sched.chunk - n
        done = p.done
        left = p.total - done
        step = d.step
        ctx = d.S + n * step  # d.context
        tm = rp.tm
        busy, longest, iters = rp.prefill_s, rp.max_iter, rp.iters
        room = d.running[0][0] - step if n else 1 << 62  # iterations up to the next finish
        if left <= b:  # this one finishes p
            run, c = 0, left
        else:
            full = int((left - 1) // b)  # iterations of b tokens before the last
            run = full if full < room else room
            c = left - full * b if full < room else 0.0  # the last, before the next finish
        if run:
            t_end, busy, longest, last = tm.mixed_run(run, t, n, ctx, b, done, busy, longest, c)
            p.done = done + run * b
        else:  # one iteration finishes p (short prompts)
            t_end = t
            last = tm.mixed(n, ctx, c, (done + c) * (done + c) - done * done)
        if c:  # and the one that finishes p
            d0 = p.done
            if run and c < b:  # a request arriving before it would share it
                i = self.next_arrival  # the first arrival not seen yet
                if self.closed or (i < self.n_open and self.arr[i] < t_end):
                    rp.spec = (t_end, d0, busy, longest)  # take it back then: `retract`
                    rp.spec_ver = rp.ver + 1
            p.done = d0 + c
            t_end += last
            busy += last
            if last > longest:
                longest = last
            run_all = run + 1
        else:
            run_all = run
        if run_all > 1:
            rp.run = (t, run, n, ctx, b, done, rp.prefill_s, rp.max_iter, iters, last, 1,
                      rp.ver + 1)
        rp.prefill_s, rp.max_iter, rp.iters = busy, longest, iters + run_all
        rp.target = step + run_all
        rp.decodes = n > 0
        rp.in_iter = True
        v = rp.ver = rp.ver + 1
        rp.ev_t = t_end
        heappush(self.heap, (t_end, PRIO_DONE, next(self.seq), STEP, k, v))

    def retract(self, rp: Replica, k: int) -> None:
        """A request joined rp's queue before the last iteration of its `solo` event started:
        as event by event, that iteration is planned when it starts (the newcomer may share
        it), so the event ends where it would have started."""
        t, done, busy, longest = rp.spec  # type: ignore[misc]
        rp.sched.prefilling[0].done = done
        rp.prefill_s, rp.max_iter = busy, longest
        rp.iters -= 1
        rp.target -= 1
        r = rp.run
        v = rp.ver = rp.ver + 1
        rp.run = (*r[:9], 0.0, r[10], v)  # type: ignore[index]
        rp.ev_t = t
        heappush(self.heap, (t, PRIO_DONE, next(self.seq), STEP, k, v))

    def iteration_s(self, rp: Replica, chunks: list, tokens: float, sq: float, n: int,
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

    def chunk_run(self, rp: Replica, t: float, ctx: float, dur: float) -> float:
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
            t, rp.prefill_s, rp.max_iter, _ = rp.tm.mixed_run(run, t, n, ctx, chunk, done,
                                                              busy, longest)
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
        rp.run = (t0, run, n, ctx, chunk, done, busy, longest, iters, last, 0, rp.ver + 1)
        return t

    def unwind(self, rp: Replica, end: float) -> None:
        """A stopped run ended at `end` inside rp's chunk run: count only the iterations that
        had started by then, as event by event (the statistics of a stopped run)."""
        t, run, n, ctx, chunk, done, busy, longest, iters, last, lead, _ = rp.run  # type: ignore
        m = 0
        while m < run and t <= end:  # the boundary at t was reached: iteration m + 1 starts
            t, busy, longest, _ = rp.tm.mixed_run(1, t, n, ctx, chunk, done, busy, longest)
            ctx += n
            done += chunk
            m += 1
        if m == run and last and t <= end:  # and the one that finishes the prompt
            busy += last
            longest = last if last > longest else longest
            m += 1
        rp.prefill_s, rp.max_iter, rp.iters = busy, longest, iters + m
        if n:  # (lead: its first iteration started at the plan, not at a step boundary)
            rp.dec.steps_run += m - lead
