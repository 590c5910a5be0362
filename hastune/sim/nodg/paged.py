"""nodg with KV on demand (Profile.kv_on_demand: vLLM's and SGLang's paged KV, set by
hastune.engine_terms): a request is admitted when its prompt's KV fits beside what the running
requests hold now — not beside their whole outputs — and its KV grows by one token per decode
step. When the next step would not fit, the most recently admitted running request is
preempted, as vLLM V1 does (`running.pop()`): its KV is freed and it goes back to the head of
the queue, to prefill its prompt and the tokens it had made again (recompute) and go on from
there; its first token keeps its time, and the stall shows in its TPOT.

The run is the event-by-event one of hastune.sim.nodg.run (`ahead` off: every iteration an
event, the shared loop; its arrivals, with no output KV taken at admission), with admission
against the live KV (`PagedDecode.reserved` is the
batch's context) and decode stretches that end at the step where KV would run out
(`PagedDecode.next_finish`).

With a front end that streams tokens at a cost per token (FrontEnd.per_output_token_s:
SGLang's tokenizer manager, hastune.engine_terms.FRONTEND_TOKEN_S), every token the engine
makes passes through one process per replica in order (hastune.sim.frontend.Delivery): a
request's first and last tokens reach the client when that process is through them, and in
closed loop the client sends its next request then. Where the engine makes tokens faster than
the process can pass them on, they queue there and the engine holds fewer requests.

An open-loop run without batch waiting runs in the compiled core (hastune.sim._core's
NoDGCore: these handlers and the shared loop in C, the same events and floats); this module
stays the reference (HASTUNE_SIM_CORE=python), and a change here must be made there too, or
tests/sim/test_core.py fails."""

from __future__ import annotations

from hastune.policies import Prompt
from hastune.sim.decode_paged import pop_newest
from hastune.sim.instance import ReplicaDecode
from hastune.sim.nodg.run import Run


class PagedDecode(ReplicaDecode):
    """A decode batch whose KV is its context (no reservation), bounded by the scheduler's
    share of the instance's KV; with `deliver`, its tokens pass through the front end."""

    __slots__ = ("sched", "deliver", "prompts", "pre")

    def made(self) -> float:
        """The tokens the running requests have made so far, together: their context less
        their prompts (`prompts`, kept by PagedRun)."""
        return self.S + self.n * self.step - self.prompts

    def advance(self, t: float, step: int, t_last: list[float]) -> list[tuple]:
        m, n, t0 = step - self.step, self.n, self.t0
        dl = self.deliver
        made = self.made() if dl is not None else 0.0
        done = super().advance(t, step, t_last)
        if dl is not None:
            pre = self.pre
            for e in done:
                self.prompts -= pre[e[1]]
            if m > 0 and n:
                f = dl.stretch(t0, t, n, m, made)
                for e in done:
                    t_last[e[1]] = f
        return done

    @property
    def reserved(self) -> float:  # what admission compares: the KV held now
        return self.S + self.n * self.step

    @reserved.setter
    def reserved(self, v: float) -> None:  # ReplicaDecode's reservations do not apply
        pass

    def room(self) -> int:
        """Decode steps that fit before the KV runs out (with the prefilling prompts')."""
        n = self.n
        free = self.sched.kv_cap - self.sched.reserved - (self.S + n * self.step)
        return int(free // n) if n else 1 << 62

    def next_finish(self) -> tuple[float, int] | None:
        if self.n == 0:
            return None
        s = min(self.running[0][0], self.step + max(self.room(), 1))
        return self.time_of(s - self.step), s


class PagedRun(Run):
    """The paged run; with `lists` False (open loop, no batch waiting: NoDGSimulator.run)
    its loop and handlers run in the compiled core (hastune.sim._core.run_nodg, the same
    run, event for event: tests/sim/test_core.py)."""

    ahead = False
    paged = True

    def __init__(self, sim, reqs, rate: float, lists: bool = True):
        super().__init__(sim, reqs, rate, lists)
        front = self.loop.feed.front
        self.deliver = front.delivers
        for rp in self.reps:
            d = PagedDecode(rp.tm.decode, rp.tm.first_gpu)
            d.sched = rp.sched
            d.deliver = front.delivery()
            d.prompts = 0.0
            d.pre = self.pre_tok
            rp.dec = d
        n = len(self.out_tok)
        self.out_kv = [0] * n     # admission takes the prompt's KV only (see Run.arrive)
        self.gen = [0] * n        # tokens made before the current stretch of decoding
        self.joined = [0] * n     # the decode step it (re)joined at
        self.order = [0] * n      # admission order (the victim is the newest)
        self.redo: dict[int, int] = {}  # preempted: tokens made, to recompute
        self.preempted = 0
        self.seq_join = 0

    def step(self, k: int, t: float) -> None:
        rp = self.reps[k]
        d = rp.dec
        fin = ()
        if rp.in_iter:
            rp.in_iter = False
            if rp.decodes:
                fin = d.advance(t, rp.target, self.t_last)
            else:
                d.t0 = t
            pf = rp.sched.prefilling
            if pf[0].done >= pf[0].total:
                for p in rp.sched.pop_done():
                    self.joins(k, d, p, t)
        else:
            fin = d.advance(t, rp.target, self.t_last)
        if fin:
            self.left(k, fin, t)
        self.make_room(rp)
        self.plan(k, t)

    def joins(self, k: int, d: PagedDecode, p, t: float) -> None:
        """A prompt (or a preempted request's recompute) finished prefilling at t."""
        q = p.req
        g = self.redo.pop(q, 0)
        tc = t if d.deliver is None else d.deliver.one(t)  # when its client has the token
        if not g:
            self.t_first[q] = tc
        left = self.out_tok[q] - g
        if left <= 1:
            self.t_last[q] = tc
            self.done(k, q, tc)
            return
        self.gen[q] = g + 1
        self.joined[q] = d.step
        self.seq_join += 1
        self.order[q] = self.seq_join
        d.join(q, p.total + 1.0, left, 0.0)
        d.prompts += self.pre_tok[q]

    def left(self, k: int, fin, t: float) -> None:
        """As Run.left; with the front end passing tokens on, each client has its last token
        when `Delivery` says (PagedDecode.advance put it in t_last)."""
        if not self.deliver:
            return super().left(k, fin, t)
        self.release(k, len(fin))
        if self.closed:
            t_last = self.t_last
            for e in fin:
                self.loop.finished(e[1], t_last[e[1]])

    def make_room(self, rp) -> None:
        """Preempt the newest running requests while the next decode step would not fit."""
        d, sched = rp.dec, rp.sched
        order = self.order
        while d.n and d.S + d.n * (d.step + 1) + sched.reserved > sched.kv_cap:
            run = d.running
            e = pop_newest(run, order)
            d.n -= 1
            d.S -= e[2]
            q = e[1]
            d.prompts -= self.pre_tok[q]
            g = self.gen[q] + (d.step - self.joined[q])
            self.redo[q] = g
            sched.waiting.appendleft(Prompt(q, self.pre_tok[q] + g, self.pre_tok[q] + g))
            self.preempted += 1

    def result(self):
        res = super().result()
        res.extra["preemptions"] = float(self.preempted)
        return res
