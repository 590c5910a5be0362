"""padg with KV on demand (Profile.kv_on_demand: vLLM's and SGLang's paged KV, set by
hastune.engine_terms, issue 13): the policy of hastune.sim.decode_paged on EcoServe's
partially disaggregated instances, which alternate prefill windows and decode windows.

- Admission's memory check (check 3) asks for the prompt's KV and its first token's (and the
  slot of its next token), not prompt + output, beside what the instance holds: its decode
  batch's context after the step at which the window would open (plus that step's slot: vLLM
  gives the running their slots first) and what the requests already given to it will take.
  A request that could never fit (prompt + output > capacity) is rejected, as when reserving.
- The decode batch's KV grows one token per step; its next wake is planned at the earlier of
  the next finish and the step at which the next step would not fit. There the newest running
  request is preempted (vLLM V1's `running.pop()`), then the next newest, until it fits.
- A preempted request leaves the slack tracker and waits at the head of its instance's own
  waiting list (`redo`); it rejoins at a later decode boundary (a finish frees KV; never at a
  boundary that preempted, as vLLM's scheduler skips its waiting queue in such a step) when
  its KV fits, ahead of any new request (check 3 refuses new ones while an instance has
  preempted requests waiting). It is recomputed in the next prefill window: a prefill of its
  prompt + the tokens it had made, which produces its next token. It keeps its first-token
  time; the stall shows in its TPOT. Its KV stays on its instance: padg never moves KV.

With ample KV nothing is preempted and check 3 never binds: the run is the reserving one.
"""

from __future__ import annotations

from collections import deque
from heapq import heappush
from typing import TYPE_CHECKING

from hastune.sim.decode_paged import pop_newest
from hastune.sim.events import PRIO_DONE
from hastune.sim.instance import ReplicaDecode
from hastune.sim.padg.run import PaDGRun
from hastune.sim.padg.state import DEC, SWITCH, Inst
from hastune.workload import RequestSet

if TYPE_CHECKING:
    from hastune.sim.padg.simulator import PaDGSimulator


class PagedReplicaDecode(ReplicaDecode):
    """An instance's decode batch whose KV is its context (`reserved`: S + n·step), with the
    running requests' admission order (for preemption) and the most KV it held at a step."""

    __slots__ = ("order", "seq_join", "preempted", "peak_kv")

    def __init__(self, spec, gpu: int = 0):
        super().__init__(spec, gpu)
        self.order: dict[int, int] = {}
        self.seq_join = 0
        self.preempted = 0
        self.peak_kv = 0.0

    @property
    def reserved(self) -> float:  # type: ignore[override]  # the KV held now
        return self.S + self.n * self.step

    @reserved.setter
    def reserved(self, v: float) -> None:
        pass

    def next_kv(self, step: int) -> float:
        """The KV the batch holds to run the step after boundary `step`."""
        return self.S + self.n * (step + 1) if self.n else 0.0

    def join(self, req: int, ctx0: float, out: int, reserve: float, key: float = 0.0) -> None:
        super().join(req, ctx0, out, reserve, key)
        self.seq_join += 1
        self.order[req] = self.seq_join

    def advance(self, t: float, step: int, t_last: list[float]) -> list[tuple]:
        done = super().advance(t, step, t_last)
        for e in done:
            del self.order[e[1]]
        return done

    def next_wake(self) -> int:
        """The earlier of the next finish and the last step before the KV runs out."""
        n, step = self.n, self.step
        room = int((self.cap - self.S - n * (step + 1)) // n)
        s = self.running[0][0]
        return s if s <= step + 1 + room else step + 1 + room

    def make_room(self) -> list[tuple[int, float, int, float]]:
        """Preempt the newest running requests while the next step would not fit: for each,
        newest first, (request, its context now, tokens it has left, its slack key)."""
        running, order, out = self.running, self.order, []
        while self.n and self.S + self.n * (self.step + 1) > self.cap:
            e = pop_newest(running, order)
            self.n -= 1
            self.S -= e[2]
            del order[e[1]]
            out.append((e[1], e[2] + self.step, e[0] - self.step, e[4]))
            self.preempted += 1
        return out


class PagedPaDGRun(PaDGRun):
    """One padg run with KV on demand (the module's docstring says what changes)."""

    def __init__(self, sim: PaDGSimulator, reqs: RequestSet, rate: float):
        super().__init__(sim, reqs, rate)
        out = self.out_tok
        self.total = [p + o for p, o in zip(self.pre, out)]  # KV to finish: what must fit
        self.need = [p + 1.0 + (o > 1) for p, o in zip(self.pre, out)]
        self.prompt = list(self.pre)
        self.pre = list(self.pre)      # a preempted request's becomes its recompute's tokens
        self.left: dict[int, int] = {}  # a preempted request: tokens it has left
        self.redo: list[deque[int]] = [deque() for _ in self.insts]
        for x in self.insts:
            x.dec = d = PagedReplicaDecode(x.tm.decode, x.tm.first_gpu)
            d.cap = x.cap

    def never_fits(self, r: int) -> bool:
        """On demand, a request that cannot fit alone at its last token (prompt + output)."""
        return self.total[r] > self.cap

    def decoded(self, x: Inst, kind: int, t: float) -> None:
        """A boundary of x's decode batch: finishes, preemptions if the next step would not
        fit, preempted requests back in if they fit now, then the next wake."""
        d = self.finish(x, t)
        hit = d.n > 0 and d.next_kv(d.step) > d.cap
        if hit:
            self.preempt(x)
        if not hit or d.n == 0:
            self.readmit(x)
        if kind == SWITCH:
            self.open_window(x, t)
            return
        if x.queue:  # preempted requests back in: a window for their recomputes
            self.open_window(x, t)
        elif d.n == 0:
            if self.scaler is not None and x.draining and x.idle:
                self.scaler.retire(x, t)
        else:
            self.plan_decode(x)
        m = x.macro
        if m.queue:
            self.pump(m, t)

    def preempt(self, x: Inst) -> None:
        """x's newest running requests leave its batch for its `redo` list, oldest first."""
        sl, pre, need, est, enc, tm = (x.slack, self.pre, self.need, self.est, self.enc_lat,
                                       x.tm)
        rq = self.redo[x.id]
        for q, ctx, left, key in x.dec.make_room():
            sl.remove(key)
            pre[q] = ctx
            self.left[q] = left
            need[q] = ctx + 1.0 + (left > 1)
            enc[q] = 0.0  # its encoder output was consumed by its first prefill
            est[q] = tm.prefill_stage(ctx, ctx * ctx)
            rq.appendleft(q)

    def readmit(self, x: Inst) -> None:
        """x's preempted requests whose KV fits beside what x holds and will take go back to
        the head of its queue (a prefill window opens for them)."""
        rq = self.redo[x.id]
        if not rq:
            return
        d, need = x.dec, self.need
        held = d.next_kv(d.step)
        back = []
        while rq and x.seats - d.n - len(x.win) - len(x.queue) - len(back) > 0:
            r = rq[0]
            if held + x.kv_other + need[r] > x.cap:
                break
            rq.popleft()
            back.append(r)
            x.kv_other += need[r]
            x.pending_s += self.est[r]
        x.queue.extendleft(reversed(back))

    def kv_free(self, x: Inst, sb: int) -> float:
        """Admission's memory check against the KV the decode batch holds at step sb, where
        the window opens; none while x has preempted requests waiting (they go first)."""
        return -1.0 if self.redo[x.id] else x.cap - x.dec.next_kv(sb) - x.kv_other

    def end_window(self, x: Inst, t: float) -> None:
        """x's window is done: first prefills get their first token, recomputes their next;
        both join the decode batch, which resumes."""
        d = x.dec
        d.t0 = t
        steps = d.step
        sl, m = x.slack, x.macro
        arr, t_first, t_last, need, pre = self.arr, self.t_first, self.t_last, self.need, self.pre
        out_tok, done, join, key, add, left = (self.out_tok, self.done, d.join, sl.key, sl.add,
                                               self.left)
        for r in x.win:
            x.kv_other -= need[r]
            n_left = left.pop(r, None)
            if n_left is None:
                t_first[r] = t
                m.ttft_sum += t - arr[r]
                m.ttft_n += 1
                n_left, k = out_tok[r], key(t, steps)
            else:  # the recompute made one more token: made − 1 before it
                made = pre[r] + 1.0 - self.prompt[r]
                k = key(t_first[r], steps - int(made) + 1)
            if n_left <= 1:
                t_last[r] = t
                self.decoded_on[r] = x.id
                done(r, t)
            else:
                join(r, pre[r] + 1.0, n_left, 0.0, k)
                add(k)
        self.close_window(x, t)
        if d.n > 0:
            if d.next_kv(steps) > d.peak_kv:
                d.peak_kv = d.next_kv(steps)
            x.decode_since = t
            self.plan_decode(x)
        else:
            self.readmit(x)
            if x.queue:
                self.open_window(x, t)
        if m.queue:
            self.pump(m, t)

    def plan_decode(self, x: Inst) -> None:
        d = x.dec
        if d.next_kv(d.step) > d.cap:  # cannot happen: admission left the step its room
            raise AssertionError("padg paged: a window's joiners overflow the KV")
        s = d.next_wake()
        kv = d.S + d.n * s  # the most it holds before then: after step s − 1
        if kv > d.peak_kv:
            d.peak_kv = kv
        x.ver += 1
        x.ev_t = tb = d.time_of(s - d.step)
        x.target = s
        heappush(self.heap, (tb, PRIO_DONE, next(self.seq), DEC, x, x.ver))

