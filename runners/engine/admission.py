"""Admission control at the frontend: a request the engine cannot serve within its TTFT SLO is
rejected at arrival, explicitly and at once, instead of joining a queue that only grows.

The rule (docs/engine-runtime.md#admission-control-runnersengineadmissionpy): let q be the
requests admitted that have no first token yet (the queue ahead of an arrival, wherever it
waits: an encode worker, a prefill queue, a replica, the windowed scheduler). Two
measurements, each an average over recent first tokens (weight `alpha` each): L, the TTFT of
a request that found nobody ahead (its own service time), and s, the TTFT each request ahead
adds: (TTFT − L) / (requests ahead at its arrival), over those that found some. When the
engine is backlogged s is 1 / its service rate; when it serves several requests at once
(batches, replicas) s is smaller than L. L + q × s predicts an arrival's mean TTFT; the SLO
bounds a percentile (P90), and the tail comes from the wait, so an arrival is admitted when

    L + margin × q × s  ≤  TTFT SLO       (margin 2: a wait's P90 is about twice its mean)

or when nobody waits (q = 0: it is served as soon as it can be, and keeps L measured), and
rejected otherwise — also when the oldest request waiting has waited longer than SLO − L
(it will miss the SLO: the engine is behind now, which L and s, learned from first tokens,
show only a TTFT later). Until `min_firsts` first tokens have been measured there is no
prediction and at most `prior` requests may wait (a few per entry worker); until s is
measured it is taken as L. L and s are kept across the runs of one engine (the real
evaluator's probes); q starts at 0 in each.
"""

from __future__ import annotations

import threading

EV_REJECTED = "rejected"  # frontend event: extra = the reason


class AdmissionGate:
    def __init__(self, ttft_slo_s: float, margin: float = 2.0, prior: int = 4,
                 alpha: float = 0.1, min_firsts: int = 3):
        self.bound_s, self.margin = ttft_slo_s, margin
        self.prior, self.alpha, self.min_firsts = max(1, prior), alpha, min_firsts
        self.lock = threading.Lock()
        self.base = 0.0       # L: recent TTFT with nobody ahead (seconds)
        self.per_ahead = 0.0  # s: recent TTFT each request ahead adds (seconds)
        self.seen = 0         # first tokens measured
        self.seen_base = self.seen_ahead = 0
        self.begin()

    def begin(self) -> None:
        """A new run: nobody waits."""
        with self.lock:
            self.waiting: dict[int, tuple[float, int]] = {}  # rid → (arrival, ahead)
            self.max_q = 0
            self.rejected = 0

    @property
    def q(self) -> int:
        return len(self.waiting)

    def predicted_ttft(self, margin: float = 1.0) -> float | None:
        """L + margin × q × s, or None before `min_firsts` first tokens were measured."""
        if self.seen < self.min_firsts:
            return None
        base = self.base if self.seen_base else self.per_ahead
        s = self.per_ahead if self.seen_ahead else base
        return base + margin * self.q * s

    def offer(self, rid: int, now: float) -> str | None:
        """Admit an arrival (None) or say why it is rejected."""
        with self.lock:
            q = self.q
            pred = self.predicted_ttft(self.margin)
            if q == 0:
                pass
            elif pred is None:
                if q >= self.prior:
                    self.rejected += 1
                    return (f"rejected at arrival: {q} requests wait and the engine's speed "
                            "is not measured yet")
            else:
                late = now - next(iter(self.waiting.values()))[0]  # the oldest waiting
                if pred > self.bound_s:
                    why = (f"{q} waiting, predicted TTFT {self.predicted_ttft():.2f} s, its "
                           f"tail {pred:.2f} s > the SLO {self.bound_s:.2f} s")
                elif late > self.bound_s - (self.base if self.seen_base else 0.0):
                    why = f"{q} waiting, the oldest for {late:.2f} s: the engine is behind"
                else:
                    why = None
                if why is not None:
                    self.rejected += 1
                    return f"rejected at arrival: {why}"
            self.waiting[rid] = (now, q)
            self.max_q = max(self.max_q, q + 1)
            return None

    def first(self, rid: int, now: float) -> None:
        """An admitted request got its first token at `now`."""
        with self.lock:
            arrived = self.waiting.pop(rid, None)
            if arrived is None:
                return
            ttft, ahead = max(0.0, now - arrived[0]), arrived[1]
            self.seen += 1
            if ahead == 0:
                self.seen_base += 1
                self.base += self._weight(self.seen_base) * (ttft - self.base)
            else:
                base = self.base if self.seen_base else 0.0
                self.seen_ahead += 1
                x = max(0.0, ttft - base) / ahead
                self.per_ahead += self._weight(self.seen_ahead) * (x - self.per_ahead)

    def _weight(self, n: int) -> float:
        return max(self.alpha, 1.0 / n)  # a plain mean of the first ones

    def gone(self, rid: int) -> None:
        """An admitted request failed before its first token."""
        with self.lock:
            self.waiting.pop(rid, None)

    def extra(self) -> dict[str, float]:
        with self.lock:
            return {"admission_bound_s": self.bound_s,
                    "admission_ttft_alone_s": self.base,
                    "admission_ttft_per_ahead_s": self.per_ahead,
                    "admission_max_waiting": float(self.max_q)}
