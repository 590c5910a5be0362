"""Admission control at the frontend: a request the engine cannot serve within its TTFT SLO is
rejected at arrival, explicitly and at once, instead of joining a queue that only grows.

The rule (docs/engine-runtime.md#admission-control): let q be the requests admitted that have
no first token yet (the queue ahead of an arrival, wherever it waits: an encode worker, a
prefill queue, a replica, the windowed scheduler) and μ the engine's measured first-token rate
while it is busy (first tokens per second of time with q > 0, both counts decayed with a time
constant `tau_s`, so μ follows the load of the last few seconds and is the service rate, not
the arrival rate). An arrival is admitted when its predicted TTFT

    (q + 1) / μ  ≤  factor × TTFT SLO

and rejected otherwise. Until `min_firsts` first tokens have been measured there is no μ and
at most `prior` requests may wait (a bound of a few per entry worker). μ is kept across the
runs of one engine (the real evaluator's probes), q starts at 0 in each.
"""

from __future__ import annotations

import math
import threading

EV_REJECTED = "rejected"  # frontend event: extra = the reason


class AdmissionGate:
    def __init__(self, ttft_slo_s: float, factor: float = 0.5, prior: int = 4,
                 tau_s: float = 5.0, min_firsts: int = 3):
        self.bound_s = factor * ttft_slo_s
        self.prior, self.tau, self.min_firsts = max(1, prior), tau_s, min_firsts
        self.lock = threading.Lock()
        self.firsts = 0.0     # decayed first tokens measured while busy
        self.busy = 0.0       # decayed busy seconds
        self.seen = 0         # first tokens measured (not decayed)
        self.t = math.nan
        self.begin()

    def begin(self) -> None:
        """A new run: nobody waits."""
        with self.lock:
            self.q = 0
            self.max_q = 0
            self.rejected = 0

    def _advance(self, now: float) -> None:
        if not math.isnan(self.t) and now > self.t:
            dt = now - self.t
            decay = math.exp(-dt / self.tau)
            self.firsts *= decay
            self.busy = self.busy * decay + (dt if self.q > 0 else 0.0)
        self.t = now

    def rate(self) -> float | None:
        """μ: first tokens per busy second, or None before `min_firsts` were measured."""
        if self.seen < self.min_firsts or self.busy <= 0:
            return None
        return self.firsts / self.busy

    def predicted_ttft(self) -> float | None:
        mu = self.rate()
        return None if mu is None else (self.q + 1) / mu

    def offer(self, now: float) -> str | None:
        """Admit an arrival (None) or say why it is rejected."""
        with self.lock:
            self._advance(now)
            pred = self.predicted_ttft()
            if pred is None:
                if self.q >= self.prior:
                    self.rejected += 1
                    return (f"rejected at arrival: {self.q} requests wait and the service "
                            "rate is not measured yet")
            elif pred > self.bound_s:
                self.rejected += 1
                return (f"rejected at arrival: predicted TTFT {pred:.2f} s ({self.q} waiting "
                        f"at {self.rate():.1f} first tokens/s) > {self.bound_s:.2f} s")
            self.q += 1
            self.max_q = max(self.max_q, self.q)
            return None

    def first(self, now: float) -> None:
        """An admitted request got its first token."""
        with self.lock:
            self._advance(now)
            if self.q > 0:
                self.q -= 1
            self.firsts += 1.0
            self.seen += 1

    def gone(self, now: float) -> None:
        """An admitted request failed before its first token."""
        with self.lock:
            self._advance(now)
            if self.q > 0:
                self.q -= 1

    def extra(self) -> dict[str, float]:
        with self.lock:
            mu = self.rate()
            return {"admission_bound_s": self.bound_s,
                    "admission_rate_rps": mu if mu is not None else 0.0,
                    "admission_max_waiting": float(self.max_q)}
