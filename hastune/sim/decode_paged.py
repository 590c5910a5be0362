"""A decode-only worker with KV on demand (Profile.kv_on_demand: vLLM's and SGLang's paged
KV, set by hastune.engine_terms), for EPD's and FuDG's decode pools: the policy of
hastune.sim.nodg.paged on an instance that only decodes.

- Admission (FIFO, at a step boundary): a waiting request joins when its prompt's KV (and
  its first token's) fits beside what the running requests will hold after the next step
  (their context, not their whole outputs: vLLM gives the running their slots first) and a
  batch seat is free. Its KV then grows by one token per decode step.
- When the next step would not fit, the most recently admitted running request is preempted,
  as vLLM V1 does (`running.pop()`); no request is admitted at a boundary that preempted
  (vLLM's scheduler skips its waiting queue in a step that preempted).
- A preempted request goes back to the head of the waiting queue. It cannot fetch its KV
  again from the prefill instance (a KV connector loads a request's remote KV once): vLLM
  recomputes it on the decode instance itself, a prefill of its prompt + the tokens it had
  made. That is what is modelled: when it rejoins, the instance first runs one prefill-only
  iteration of the rejoiners' tokens, timed by the instance's own prefill latency (the
  profile's at the decode pool's TP / PP), during which the decode batch does not advance;
  the recompute produces its next token. (vLLM runs that prefill in chunks beside the
  decode steps; in the linear latency model the work is the same, the chunk iterations'
  fixed costs aside.) Its first token keeps its time; the stall shows in TPOTs. (One whose
  recompute makes its last token is reported finished at the boundary, its last token at
  the recompute's end.)

Closed-form stepping is kept (hastune.sim.decode): a wake is planned at the earlier of the
next finish and the step at which the KV would run out; the recompute's stall moves the
start of the next step (`t0`) later. `reserved` is the KV held now (what routing reads);
a request that could never fit (prompt + output > capacity) is rejected, as when reserving.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from heapq import heapify, heappop, heappush

from hastune.sim.decode import DecodeWorker


def pop_newest(running: list, order: dict) -> tuple:
    """Take the running entry (a decode heap's tuple, its request second) whose request is
    the newest by `order` out of `running`, which stays a heap: the victim a preemption picks
    (vLLM preempts the last-scheduled request), shared by the paged pools, nodg and padg."""
    i = max(range(len(running)), key=lambda j: order[running[j][1]])
    e = running[i]
    running[i] = running[-1]
    running.pop()
    heapify(running)
    return e


class _Paged:
    """The methods of a paged worker (mixed into a DecodeWorker class by `paged`)."""

    __slots__ = ()

    def __init__(self, *a, **k):
        super().__init__(*a, **k)  # type: ignore[call-arg]
        self.prefill_s: Callable[[float, float], float] = lambda n, sq: 0.0
        self.redo: set[int] = set()      # preempted, to recompute when they rejoin
        self.order: dict[int, int] = {}  # admission order of the running
        self.seq_join = 0
        self.preempted = 0
        self.peak_kv = 0.0               # the most KV held at a step (tests read it)

    @property
    def reserved(self) -> float:  # the KV held now
        return self.S + self.n * self.step

    @reserved.setter
    def reserved(self, v: float) -> None:
        pass

    def add(self, req: int, ctx0: float, out_tokens: int,
            t: float) -> tuple[float, int] | None:
        if self.n and t <= self.t0:  # during a recompute's prefill: the next boundary
            self.pending.append((req, ctx0, ctx0 + out_tokens, out_tokens))
            self.pending_tokens += ctx0 + out_tokens
            target = self.step + 1
            if self.wake_step is not None and self.wake_step <= target:
                return None
            self.wake_step = target
            self.version += 1
            return self.time_of(1), target
        return super().add(req, ctx0, out_tokens, t)  # type: ignore[misc]

    def wake(self, t: float, t_last: list[float], rejected: list[int],
             finished: list[int] | None = None) -> tuple[float, int] | None:
        step = self.wake_step
        self.steps_run += step - self.step  # type: ignore[operator]
        self.step = step  # type: ignore[assignment]
        self.t0 = t
        self.wake_step = None
        n, S = self.n, self.S  # locals: this runs at every boundary
        was_busy = n > 0
        running = self.running
        if running and running[0][0] <= step:
            order = self.order
            while running and running[0][0] <= step:
                _, req, s_i, _ = heappop(running)
                t_last[req] = t
                if finished is not None:
                    finished.append(req)
                n -= 1
                S -= s_i
                del order[req]
            self.n, self.S = n, S
        cap = self.cap
        if n and S + n * (step + 1) > cap:  # type: ignore[operator]
            self.make_room()
            n, S = self.n, self.S
        elif self.pending:
            self.admit(t, t_last, rejected, finished)
            n, S = self.n, self.S
        if n == 0:
            if was_busy:
                self.busy_s += t - self.busy_since
            return None
        if not was_busy:
            self.busy_since = t
        room = int((cap - S - n * (step + 1)) // n)  # type: ignore[operator]
        nxt = running[0][0]
        if step + 1 + room < nxt:  # type: ignore[operator]
            nxt = step + 1 + room  # type: ignore[operator]
        kv = S + n * nxt  # the most it holds before then: after step nxt − 1
        if kv > self.peak_kv:
            self.peak_kv = kv
        self.wake_step = nxt
        self.version += 1
        m = nxt - step  # type: ignore[operator]  # time_of(m), inlined
        c = self.c
        return (self.t0 + m * (self.a + self.b * n + c * (S + n * step))  # type: ignore[operator]
                + c * n * m * (m - 1) * 0.5), nxt

    def make_room(self) -> None:
        """Preempt the newest running requests while the next step would not fit."""
        running, order = self.running, self.order
        while self.n and self.S + self.n * (self.step + 1) > self.cap:
            e = pop_newest(running, order)
            self.n -= 1
            self.S -= e[2]
            q = e[1]
            ctx = e[2] + self.step  # its KV now: prompt + the tokens it made
            del order[q]
            out_left = e[0] - self.step  # tokens left; the recompute makes the first
            self.redo.add(q)
            # it waits with the context it rejoins with (its recompute's token in)
            self.pending.appendleft((q, ctx + 1.0, ctx + out_left, out_left))
            self.pending_tokens += ctx + out_left
            self.preempted += 1

    def admit(self, t: float, t_last: list[float], rejected: list[int],
              finished: list[int] | None) -> None:
        """FIFO admission: the oldest waiting joins if its KV fits beside what the running
        hold after the next step (vLLM gives the running their slots first); rejoiners
        recompute first, in one prefill."""
        pending, cap, step, redo = self.pending, self.cap, self.step, self.redo
        tok = sq = 0.0
        late: list[int] = []  # recomputes whose prefill made their last token
        while pending:
            req, ctx0, reserve, out = pending[0]
            if reserve > cap:
                pending.popleft()
                self.pending_tokens -= reserve
                rejected.append(req)
                t_last[req] = math.inf
                if finished is not None:
                    finished.append(req)
                continue
            if (self.n >= self.max_batch
                    or self.S + self.n * (step + 1) + ctx0 + 1.0 > cap):
                break
            pending.popleft()
            self.pending_tokens -= reserve
            if req in redo:  # recompute: ctx0 − 1 tokens prefilled, their next made
                redo.discard(req)
                x = ctx0 - 1.0
                tok += x
                sq += x * x
                if out <= 1:
                    late.append(req)
                    continue
            elif out <= 1:  # the prefill's token was the only one
                t_last[req] = t
                if finished is not None:
                    finished.append(req)
                continue
            s_i = ctx0 - step
            heappush(self.running, (step + out - 1, req, s_i, 0.0))
            self.n += 1
            self.S += s_i
            self.seq_join += 1
            self.order[req] = self.seq_join
        if tok:
            self.t0 = t + self.prefill_s(tok, sq)
            for req in late:
                t_last[req] = self.t0
                if finished is not None:
                    finished.append(req)


_SLOTS = ("prefill_s", "redo", "order", "seq_join", "preempted", "peak_kv")


@cache
def paged(base: type[DecodeWorker]) -> type[DecodeWorker]:
    """`base` (DecodeWorker or a subclass wired to a run) with KV on demand. Set
    `prefill_s(tokens, tokens_sq)` (the instance's prefill latency) on each worker."""
    return type("Paged" + base.__name__, (_Paged, base), {"__slots__": _SLOTS})
