"""The iteration scheduler of continuous batching (vLLM / Sarathi), pure and clock-free: which
requests get KV and a seat, and which prompt tokens the next iteration prefills.

- admission: FIFO. The oldest waiting request is given its KV (prompt + output, reserved up
  front, never preempted) and a seat once `seats` is not reached by the decoding plus the
  prefilling requests and its reservation fits beside theirs in `kv_cap`; nobody overtakes it.
- chunked (`chunk_tokens` = T): every iteration decodes each running request once and fills
  the rest of the budget, T − running, with prefill chunks of the admitted prompts in FIFO order;
- unchunked (`chunk_tokens` None): an iteration with prompts to prefill is prefill-only (the
  decode batch pauses) and takes whole prompts, FIFO, up to `prefill_tokens` (the first one
  whatever its length).

A prompt whose last chunk ran is done (`pop_done`): it produced its first token at the end of
that iteration and the caller moves it, and its KV, to the decode batch. The simulator
(hastune.sim.nodg) and the engine's replica workers (runners/engine/replica.py) both drive one
scheduler per replica; time is theirs.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class Prompted(Protocol):
    """What the scheduler reads and writes of a request (Prompt, or the engine's own)."""

    need: float   # KV tokens reserved for it (prompt + output, rounded as the caller's KV is)
    total: float  # prompt positions to prefill
    done: float   # positions prefilled so far


class Prompt:
    """A request as the scheduler sees it; `req` is the caller's key."""

    __slots__ = ("req", "need", "total", "done")

    def __init__(self, req: object, need: float, total: float):
        self.req = req
        self.need = need
        self.total = total
        self.done = 0.0


class IterationScheduler:
    """FIFO admission under seats and KV, and the prefill chunks of each next iteration.

    The caller says how many requests are decoding (`running`) and the KV they hold
    (`running_kv`); the scheduler holds the waiting and prefilling requests and the KV of the
    latter (`reserved`)."""

    __slots__ = ("seats", "kv_cap", "chunk", "chunked", "prefill_tokens", "waiting",
                 "prefilling", "reserved")

    def __init__(self, seats: int, kv_cap: float, chunk_tokens: int | None,
                 prefill_tokens: float):
        self.seats, self.kv_cap = seats, kv_cap
        self.chunked = chunk_tokens is not None
        self.chunk = chunk_tokens or 0
        self.prefill_tokens = prefill_tokens
        self.waiting: deque = deque()     # not yet given KV
        self.prefilling: deque = deque()  # given KV and a seat, prompt not fully prefilled
        self.reserved = 0.0               # KV of the prefilling requests

    def add(self, p: Prompted) -> bool:
        """Queue a request; False (not queued) for one that can never fit in `kv_cap`."""
        if p.need > self.kv_cap:
            return False
        self.waiting.append(p)
        return True

    def queue(self, req: object, need: float, total: float) -> Prompt | None:
        """`add` of a new Prompt(req, need, total): that prompt, or None (not queued)."""
        if need > self.kv_cap:
            return None
        p = Prompt(req, need, total)
        self.waiting.append(p)
        return p

    def admit(self, running: int, running_kv: float) -> int:
        """Give KV and a seat to waiting requests, FIFO, while both allow; how many."""
        waiting, pf = self.waiting, self.prefilling
        seats, cap, reserved = self.seats, self.kv_cap, self.reserved
        n = 0
        while waiting:
            p = waiting[0]
            if running + len(pf) >= seats or running_kv + reserved + p.need > cap:
                break
            waiting.popleft()
            reserved += p.need
            pf.append(p)
            n += 1
        self.reserved = reserved
        return n

    def budget(self, running: int) -> float:
        """Prefill tokens the next iteration may carry beside `running` decoding requests."""
        return self.chunk - running if self.chunked else self.prefill_tokens

    def plan(self, running: int) -> tuple[list[tuple[Prompted, float]], float, float]:
        """The next iteration's prefill chunks, [(request, tokens)] in FIFO order, already
        counted in each request's `done` (a request starts its prompt when done == tokens);
        with their tokens and the Σ L² their attention adds (Σ done_after² − done_before²).
        No chunks: nothing to prefill, or no room beside the decode batch."""
        chunks: list[tuple[Prompted, float]] = []
        tokens = sq = 0.0
        if self.chunked:
            budget = self.chunk - running
            for p in self.prefilling:
                if budget <= 0:
                    break
                d0 = p.done
                c = p.total - d0
                if c >= budget:  # the last chunk that fits: the budget is spent
                    if c > budget:
                        c = budget
                    d1 = p.done = d0 + c
                    chunks.append((p, c))
                    return chunks, tokens + c, sq + (d1 * d1 - d0 * d0)
                d1 = p.done = d0 + c
                chunks.append((p, c))
                sq += d1 * d1 - d0 * d0
                tokens += c
                budget -= c
            return chunks, tokens, sq
        budget = self.prefill_tokens
        for p in self.prefilling:
            if budget <= 0:
                break
            d0 = p.done
            c = p.total - d0
            if c > budget and chunks:
                break  # a whole prompt over the budget runs alone
            d1 = p.done = d0 + c
            chunks.append((p, c))
            sq += d1 * d1 - d0 * d0
            tokens += c
            budget -= c
        return chunks, tokens, sq

    def pop_done(self) -> list[Prompted]:
        """The prompts fully prefilled (a FIFO prefix), released with their KV: the caller
        adds that KV to the decode batch."""
        pf = self.prefilling
        out = []
        while pf and pf[0].done >= pf[0].total:
            p = pf.popleft()
            self.reserved -= p.need
            out.append(p)
        return out

    def run_head(self, running: int, limit: int) -> tuple[int, float, float, bool]:
        """Count at once the next iterations, at most `limit`, that would each give the whole
        chunk budget to the first prefilling prompt without finishing it, if the decode batch
        stays at `running`: requests admitted in between only queue behind that prompt, so a
        caller may run them without planning each. Returns (how many, the budget each gave,
        the prompt's `done` before them, whether that was all of them: the next iteration
        finishes the prompt)."""
        b = self.chunk - running
        if not self.chunked or not self.prefilling or b <= 0:
            return 0, 0.0, 0.0, False
        p = self.prefilling[0]
        done = p.done
        left = p.total - done
        full = int((left - 1) // b) if left > b else 0
        k = full if full < limit else limit
        p.done = done + k * b
        return k, b, done, k == full

    def fills(self, running: int) -> bool:
        """Whether the prompts already prefilling fill the next chunked iteration's budget:
        then requests admitted before it queue behind and cannot change its plan."""
        need = self.chunk - running
        if not self.chunked or need <= 0:
            return False
        for p in self.prefilling:
            need -= p.total - p.done
            if need <= 0:
                return True
        return False
