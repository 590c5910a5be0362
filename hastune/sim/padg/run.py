"""One run of the padg simulator: its state (requests, instances, macro-instances, the event
heap) and its event handlers, one short method each. hastune.sim.padg makes one per `run`;
the behaviour they implement is described there.

Hot methods bind the attributes they read to locals first (the run is CPU-bound Python)."""

from __future__ import annotations

import math
from heapq import heappush
from typing import TYPE_CHECKING

import numpy as np

from hastune.policies import Admission, SlackTracker, Verdict
from hastune.policies.rolling import pick_macro as pick_macro_wrr
from hastune.sim.common import ARRIVE, EventLoop, request_lists
from hastune.sim.events import PRIO_DONE, PRIO_TIMER
from hastune.sim.instance import InstanceTiming
from hastune.sim.padg.state import (
    DEC,
    DECODE,
    PF_DONE,
    PF_NEXT,
    PREFILL,
    READY,
    RETRY,
    SCALE,
    SWITCH,
    SWITCHING,
    Inst,
    Macro,
)
from hastune.workload import RequestSet

ADMIT = Verdict.ADMIT

if TYPE_CHECKING:
    from hastune.sim.padg.simulator import PaDGSimulator


def estimates(reqs: RequestSet, tm: InstanceTiming) -> tuple[list[float], list[float], list]:
    """Per request: its inline encode time, the profiled encode + prefill time that admission
    charges, and the KV tokens it needs (prompt + output). Whole arrays at once: the same
    floats as one call per request, in the same order of operations."""
    x = reqs.encoder_tokens
    L = reqs.prefill_tokens
    if (x > 0).any():
        enc = np.where(x > 0, tm.encode_latency(1, x, x * x), 0.0)
    else:
        enc = np.zeros(len(x))
    est = enc + tm.prefill_stage(L, L * L)
    need = L + reqs.output_tokens.astype(np.int64)
    return enc.tolist(), est.tolist(), need.tolist()


class PaDGRun:
    """The state of one padg run; `events()` runs it, `scaler` is set when mitosis is on."""

    def __init__(self, sim: PaDGSimulator, reqs: RequestSet, rate: float):
        cfg, slo = sim.config, sim.slo
        self.cfg = cfg
        self.tpot_slo = slo.tpot_s
        self.loop = loop = EventLoop(reqs, rate, streams=cfg.instances)  # a front end each
        self.arr, self.heap, self.seq, self.done = loop.arr, loop.heap, loop.seq, loop.finished
        (self.pre, _, self.out_tok, mm, self.t_first, self.t_last,
         self.rejected) = request_lists(reqs)
        loop.watch(sim.stop_rule, self.t_first, self.t_last, self.out_tok, self.rejected)
        n = len(reqs)
        self.home = [-1] * n        # the instance that admitted each request ...
        self.decoded_on = [-1] * n  # ... and the one that produced its last token
        self.refused = [0] * len(Verdict)  # admission attempts, counted by verdict
        self.enc_lat, self.est, self.need = estimates(reqs, sim.timings[0])
        self.insts = insts = [Inst(i, tm, SlackTracker(slo.tpot_s, cfg.slack,
                                                       cfg.slack_quantile))
                              for i, tm in enumerate(sim.timings)]
        for x in insts:
            x.cap = x.tm.kv_cap_mm if mm else x.tm.kv_cap_text
        self.cap = insts[0].cap
        self.macros = macros = [Macro(g) for g in sim.groups(cfg.instances)]
        for m in macros:
            for k in m.rolling.members:
                insts[k].macro = m
        for x in insts[cfg.instances:]:
            x.active = False
        self.check = Admission(slo.ttft_s).check
        self.status = cfg.status_interval_ms / 1e3
        self.pp1 = cfg.pp == 1
        self.scaler = None
        if cfg.mitosis:
            from hastune.sim.padg.scaling import Scaler

            self.scaler = Scaler(sim, insts, macros, self.push, self.pump)
            self.push(cfg.scale_interval_s, PRIO_TIMER, SCALE, None)

    def push(self, t: float, prio: int, kind: int, a: object, b: object = None) -> None:
        heappush(self.heap, (t, prio, next(self.seq), kind, a, b))

    # -- the event loop ---------------------------------------------------------------------
    def events(self) -> None:
        """Run to the end: every event goes to its handler."""
        decoded, prefilled, start, pump = self.decoded, self.prefilled, self.start, self.pump
        arrive = self.arrive
        for t, _, _, kind, x, b in self.loop.events(arrive):
            if kind == DEC or kind == SWITCH:
                if b == x.ver:
                    decoded(x, kind, t)
            elif kind == PF_DONE:
                prefilled(x, b, t)
            elif kind == PF_NEXT:  # the first stage is free (pp > 1)
                x.stage_busy = False
                start(x, t)
            elif kind == RETRY:
                if b == x.tver:
                    x.timer = math.inf
                    pump(x, t)
            elif kind == ARRIVE:
                arrive(x, t)
            elif kind == SCALE:
                self.rescale(t)
            elif kind == READY:
                self.scaler.ready(x, b, t)  # type: ignore[union-attr]

    def never_fits(self, r: int) -> bool:
        """Whether request r is larger than an instance's KV: its reservation (prompt and
        output, reserved at admission)."""
        return self.need[r] > self.cap

    def arrive(self, r: int, t: float) -> None:
        """Request r joins a macro-instance's queue (rejected if it can never fit)."""
        if self.never_fits(r):
            self.rejected.append(r)
            self.t_first[r] = self.t_last[r] = math.inf
            self.done(r, t)
            return
        macros = self.macros
        if len(macros) == 1:
            m = macros[0]
        else:
            m = pick_macro_wrr(macros, lambda m: len(m.rolling.members))  # type: ignore
        waiting = bool(m.queue)
        m.queue.append(r)
        if not waiting:
            self.pump(m, t)

    def decoded(self, x: Inst, kind: int, t: float) -> None:
        """Instance x's decode batch reached its planned boundary: requests finished there,
        and (SWITCH) a prefill window opens."""
        d = self.finish(x, t)
        if kind == SWITCH:
            self.open_window(x, t)
            return
        if d.n == 0:
            if self.scaler is not None and x.draining and x.idle:
                self.scaler.retire(x, t)
        else:  # plan the next finish (plan_decode, inline: this is the hottest path)
            s = d.running[0][0]
            x.ver += 1
            x.ev_t = tb = d.time_of(s - d.step)
            x.target = s
            heappush(self.heap, (tb, PRIO_DONE, next(self.seq), DEC, x, x.ver))
        m = x.macro
        if m.queue:
            self.pump(m, t)

    def finish(self, x: Inst, t: float):
        """Instance x's decode batch at its boundary `t`: its decode time counted, and the
        requests that finished there done. Returns the batch."""
        d = x.dec
        if d.n > 0:
            x.decode_s += t - x.decode_since
            x.decode_since = t
        for e in d.advance(t, x.target, self.t_last):
            x.slack.remove(e[4])
            self.decoded_on[e[1]] = x.id
            self.done(e[1], t)
        return d

    def prefilled(self, x: Inst, batch: list[int], t: float) -> None:
        """A prefill batch of x came out of its last stage."""
        x.in_flight -= 1
        x.win.extend(batch)
        if self.pp1:
            x.stage_busy = False
            self.start(x, t)
        if x.in_flight == 0 and not x.queue:
            self.end_window(x, t)
            if self.scaler is not None and x.draining and x.idle:
                self.scaler.retire(x, t)

    def rescale(self, t: float) -> None:
        """Mitosis decides every `scale_interval_s` while the run goes on."""
        loop = self.loop
        if len(self.heap) > 0 or loop.arrived < loop.n_open:
            self.scaler.step(t)  # type: ignore[union-attr]
            self.push(t + self.cfg.scale_interval_s, PRIO_TIMER, SCALE, None)

    # -- the macro scheduler: offers, admission, re-offers -------------------------------------
    def pump(self, m: Macro, t: float) -> None:
        """Offer the macro-instance's waiting requests, oldest first."""
        q = m.queue
        insts, refusal, admit = self.insts, self.refusal, self.admit
        est, need, refused = self.est, self.need, self.refused
        rolling = m.rolling
        while q:
            r = q[0]
            est_r, need_r = est[r], need[r]
            # rolling.candidates() as two slices (the same order: members from the cursor
            # on, each once; tests/sim/test_padg.py checks), without a generator per offer
            c = rolling.cursor
            for k in rolling.members[c:] + rolling.members[:c]:
                x = insts[k]
                why = refusal(x, est_r, need_r, t)
                refused[why] += 1
                if why is ADMIT:
                    admit(x, r, t)
                    rolling.took(k)
                    q.popleft()
                    break
            else:
                if m.blocked_since is None:
                    m.blocked_since = t
                # offer it again at the next status report after the first moment a
                # decoding instance's slack could cover it; windows closing and requests
                # finishing (the other ways a check can turn) re-offer it themselves
                when = max(self.next_chance(m, r, t), t + self.status)
                if when < m.timer:
                    m.timer = when
                    m.tver += 1
                    self.push(when, PRIO_TIMER, RETRY, m, m.tver)
                return
        m.blocked_since = None

    def refusal(self, x: Inst, est_r: float, need_r: float, t: float) -> int:
        """Admission's three checks at t on instance x for a request whose prefill is
        profiled at est_r seconds and whose KV needs need_r tokens: 0 if it passes, else the
        number of the check that refuses it."""
        d = x.dec
        phase = x.phase
        sb = d.step  # the decode step at which the window would open
        if phase == PREFILL:
            window = t - x.win_start
            left = x.last_done - t
            pending = x.pending_s + (left if left > 0.0 else 0.0)
            saved = x.slack.saved(d.step, t)
            empty = False
        else:
            pending = x.pending_s
            if d.n > 0:
                if phase == SWITCHING:
                    tb, sb = x.ev_t, x.target
                else:
                    tb, sb = d.boundary(t)
                saved = x.slack.saved(sb, tb)
                window = tb - t
            else:
                saved, window = math.inf, 0.0
            empty = pending == 0.0
        seats = x.seats - d.n - len(x.win) - len(x.queue)
        return self.check(window, pending, est_r, saved, self.kv_free(x, sb), need_r, seats,
                          empty)

    def kv_free(self, x: Inst, sb: int) -> float:
        """The KV tokens x can still give a request whose window opens at decode step sb:
        what neither its decode batch nor the requests given to it have reserved."""
        return x.cap - x.dec.reserved - x.kv_other

    def next_chance(self, m: Macro, r: int, t: float) -> float:
        """The first decode boundary at which some member's saved TPOT covers r's prefill."""
        best = math.inf
        need_s = self.est[r]
        slo, insts = self.tpot_slo, self.insts
        for k in m.rolling.members:
            x = insts[k]
            if x.phase == DECODE and x.slack.n:
                w = x.dec.first_boundary_where(slo, x.slack.stat_key(), need_s, t)
                if w < best:
                    best = w
        return best

    def admit(self, x: Inst, r: int, t: float) -> None:
        """x takes r: it prefills now if its window is open, else switches to prefill at its
        next decode boundary (at once when it is not decoding)."""
        self.home[r] = x.id
        x.queue.append(r)
        x.pending_s += self.est[r]
        x.kv_other += self.need[r]
        if x.phase == DECODE:
            d = x.dec
            if d.n > 0:
                tb, sb = d.boundary(t)
                x.phase = SWITCHING
                x.ver += 1
                x.ev_t, x.target = tb, sb
                heappush(self.heap, (tb, PRIO_DONE, next(self.seq), SWITCH, x, x.ver))
            else:
                self.open_window(x, t)
        elif x.phase == PREFILL:
            self.start(x, t)

    # -- an instance's windows ----------------------------------------------------------------
    def open_window(self, x: Inst, t: float) -> None:
        x.phase = PREFILL
        x.win_start = t
        x.windows += 1
        self.start(x, t)

    def start(self, x: Inst, t: float) -> None:
        """Start x's next prefill batch if its first stage is free and requests wait."""
        q = x.queue
        if x.stage_busy or not q:
            return
        pre, enc_lat, est = self.pre, self.enc_lat, self.est
        lim = x.tm.max_batch_tokens
        batch: list[int] = []
        tokens = sq = enc = work = 0.0
        while q:
            r = q[0]
            L = pre[r]
            if batch and tokens + L > lim:
                break
            q.popleft()
            batch.append(r)
            tokens += L
            sq += L * L
            enc += enc_lat[r]
            work += est[r]
        x.pending_s = x.pending_s - work if q else 0.0
        lat = enc + x.tm.prefill_latency(tokens, sq)
        x.in_flight += 1
        if t + lat > x.last_done:
            x.last_done = t + lat
        x.stage_busy = True
        heap, seq = self.heap, self.seq
        heappush(heap, (t + lat, PRIO_DONE, next(seq), PF_DONE, x, batch))
        if not self.pp1:
            heappush(heap, (t + enc + x.tm.prefill_stage(tokens, sq), PRIO_DONE, next(seq),
                            PF_NEXT, x, None))

    def end_window(self, x: Inst, t: float) -> None:
        """x's last prefill batch is done: the window's requests get their first token and
        join the decode batch, which resumes."""
        d = x.dec
        d.t0 = t
        steps = d.step
        sl = x.slack
        m = x.macro
        arr, t_first, t_last, need, pre = self.arr, self.t_first, self.t_last, self.need, self.pre
        out_tok, done, join, key, add = self.out_tok, self.done, d.join, sl.key, sl.add
        for r in x.win:
            t_first[r] = t
            m.ttft_sum += t - arr[r]
            m.ttft_n += 1
            x.kv_other -= need[r]
            if out_tok[r] <= 1:
                t_last[r] = t
                self.decoded_on[r] = x.id
                done(r, t)
            else:
                k = key(t, steps)
                join(r, pre[r] + 1.0, out_tok[r], need[r], k)
                add(k)
        self.close_window(x, t)
        if d.n > 0:
            x.decode_since = t
            self.plan_decode(x)
        if m.queue:
            self.pump(m, t)

    def close_window(self, x: Inst, t: float) -> None:
        """x's prefill window closes at `t` (its requests have joined the decode batch)."""
        x.window_reqs += len(x.win)
        x.win.clear()
        x.prefill_s += t - x.win_start
        x.phase = DECODE
        x.pending_s = 0.0

    def plan_decode(self, x: Inst) -> None:
        nf = x.dec.next_finish()
        if nf is not None:
            x.ver += 1
            x.ev_t, x.target = nf
            heappush(self.heap, (nf[0], PRIO_DONE, next(self.seq), DEC, x, x.ver))
