"""A decode worker with continuous batching, advanced in closed form.

Step j of a worker with n running sequences and total context C_j lasts
    d_j = a + b·n + c·C_j,   C_j = S + n·j,   S = Σ_i (ctx0_i − join_i)
so between membership changes (a join or a finish) step times form an arithmetic progression,
and the start time of step j0 + m is
    T(m) = T0 + m·(a + b·n + c·(S + n·j0)) + c·n·m(m − 1)/2.
The simulator only wakes a worker at the step boundaries where something changes: a sequence
finishes (its finish step is known at join) or waiting requests join. Cost per request is
O(log batch), independent of its output length.

KV memory: a request reserves (prompt + output) tokens when it joins and frees them when it
finishes (no preemption); requests wait FIFO for room, and one that can never fit is rejected.
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heappop, heappush

from hastune.profile import DecodeSpec


class DecodeWorker:
    __slots__ = ("a", "b", "c", "max_batch", "cap", "n", "S", "step", "t0", "running",
                 "pending", "pending_tokens", "reserved", "wake_step", "version", "busy_since",
                 "busy_s", "gpu", "steps_run")

    def __init__(self, spec: DecodeSpec, cap_tokens: int, gpu: int):
        self.a, self.b, self.c = spec.fixed_s, spec.per_seq_s, spec.per_context_token_s
        self.max_batch = spec.max_batch
        self.cap = cap_tokens
        self.gpu = gpu
        self.n = 0
        self.S = 0.0
        self.step = 0
        self.t0 = 0.0
        self.running: list[tuple[int, int, float, float]] = []  # (finish, req, ctx0-join, kv)
        self.pending: deque[tuple[int, float, float, int]] = deque()  # (req, ctx0, kv, out)
        self.pending_tokens = 0.0
        self.reserved = 0.0
        self.wake_step: int | None = None
        self.version = 0
        self.busy_since = 0.0
        self.busy_s = 0.0
        self.steps_run = 0

    @property
    def load(self) -> float:
        """KV tokens reserved or waiting: what routing balances."""
        return self.reserved + self.pending_tokens

    def time_of(self, m: int) -> float:
        """Start time of step (self.step + m) with the current membership."""
        n = self.n
        alpha = self.a + self.b * n + self.c * (self.S + n * self.step)
        return self.t0 + m * alpha + self.c * n * m * (m - 1) * 0.5

    def steps_until(self, t: float) -> int:
        """Smallest m ≥ 1 with time_of(m) ≥ t (the first boundary a joiner can use)."""
        n = self.n
        alpha = self.a + self.b * n + self.c * (self.S + n * self.step)
        dt = t - self.t0
        beta = self.c * n * 0.5
        if beta <= 0.0:
            m = math.ceil(dt / alpha - 1e-9)
        else:
            # beta·m² + (alpha − beta)·m − dt = 0
            q = alpha - beta
            m = math.ceil((-q + math.sqrt(q * q + 4.0 * beta * dt)) / (2.0 * beta) - 1e-9)
        return m if m > 1 else 1

    def add(self, req: int, ctx0: float, out_tokens: int, t: float) -> tuple[float, int] | None:
        """A request arrives at t. Returns (wake time, wake step) if the worker must be woken
        earlier than planned, else None."""
        reserve = ctx0 + out_tokens
        self.pending.append((req, ctx0, reserve, out_tokens))
        self.pending_tokens += reserve
        n = self.n
        if n == 0:
            if self.wake_step is not None and self.t0 >= t:
                return None  # already waking now
            self.t0 = t
            return self._plan(t, self.step)
        # steps_until(t) and time_of(m), inlined: this runs once per request
        c, step = self.c, self.step
        alpha = self.a + self.b * n + c * (self.S + n * step)
        dt = t - self.t0
        beta = c * n * 0.5
        if beta <= 0.0:
            m = math.ceil(dt / alpha - 1e-9)
        else:
            q = alpha - beta
            m = math.ceil((-q + math.sqrt(q * q + 4.0 * beta * dt)) / (2.0 * beta) - 1e-9)
        if m < 1:
            m = 1
        target = step + m
        if self.wake_step is not None and self.wake_step <= target:
            return None
        self.wake_step = target
        self.version += 1
        return self.t0 + m * alpha + c * n * m * (m - 1) * 0.5, target

    def _plan(self, t: float, step: int) -> tuple[float, int]:
        self.wake_step = step
        self.version += 1
        return t, step

    def wake(self, t: float, t_last: list[float], rejected: list[int],
             finished: list[int] | None = None) -> tuple[float, int] | None:
        """Run the boundary at t: finish, admit, and plan the next wake (or go idle). With
        `finished`, append every request whose last token came at t (finished, rejected, or
        done with its prefill's token)."""
        step = self.wake_step
        self.steps_run += step - self.step  # type: ignore[operator]
        self.step = step  # type: ignore[assignment]
        self.t0 = t
        self.wake_step = None
        running = self.running
        n, S, reserved = self.n, self.S, self.reserved  # locals: this runs at every boundary
        was_busy = n > 0
        while running and running[0][0] <= step:
            _, req, s_i, reserve = heappop(running)
            t_last[req] = t
            if finished is not None:
                finished.append(req)
            n -= 1
            S -= s_i
            reserved -= reserve
        pending, cap = self.pending, self.cap
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
            if n >= self.max_batch or reserved + reserve > cap:
                break
            pending.popleft()
            self.pending_tokens -= reserve
            if out <= 1:  # the prefill's token was the only one
                t_last[req] = t
                if finished is not None:
                    finished.append(req)
                continue
            reserved += reserve
            s_i = ctx0 - step
            heappush(running, (step + out - 1, req, s_i, reserve))  # type: ignore[operator]
            n += 1
            S += s_i
        self.n, self.S, self.reserved = n, S, reserved
        if n == 0:
            if was_busy:
                self.busy_s += t - self.busy_since
            return None
        if not was_busy:
            self.busy_since = t
        nxt = running[0][0]
        self.wake_step = nxt
        self.version += 1
        m = nxt - step  # time_of(m), inlined
        alpha = self.a + self.b * n + self.c * (S + n * step)
        return t + m * alpha + self.c * n * m * (m - 1) * 0.5, nxt
