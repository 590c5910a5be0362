"""Encode micro-batchers. Both hold request ids and are told the time; neither sleeps.

Protocol: `add(t, item)` returns a batch (list) when one must leave now, else None;
`deadline()` is the time at which `poll(t)` would release the waiting items (None if empty);
`poll(t)` returns the batch if that time has come.
"""

from __future__ import annotations

import math


def poisson_gap_kappa(B: int, p: float) -> float:
    """κ = −ln(1 − p^(1/(B−1))): with Poisson arrivals of rate λ, a gap longer than κ/λ appears
    among the next B − 1 gaps with probability 1 − p, i.e. a batch fills with probability p."""
    if B < 2:
        return 0.0
    if not 0.0 < p < 1.0:
        raise ValueError("p must be in (0, 1)")
    return -math.log(1.0 - p ** (1.0 / (B - 1)))


class PoissonGapBatcher:
    """EAServe's load-adaptive micro-batcher: a batch leaves at B items, or when no item has
    arrived for g = κ/λ since the last one. λ (per worker) is estimated online from
    inter-arrival times (EWMA of gaps), starting from `rate_hint`.

    `max_gap` (seconds, optional) caps g. The paper's rule lets g grow without bound as load
    falls (g = κ/λ), so at low load a request can wait seconds for company; the cap bounds that
    wait at a cost only when the encoder would otherwise sit idle."""

    __slots__ = ("B", "p", "kappa", "items", "last_t", "mean_gap", "alpha", "max_gap")

    def __init__(self, B: int, p: float = 0.6, rate_hint: float = 1.0, alpha: float = 1 / 16,
                 max_gap: float | None = None):
        if B < 1:
            raise ValueError("B must be ≥ 1")
        if rate_hint <= 0:
            raise ValueError("rate_hint must be > 0")
        self.B = B
        self.p = p
        self.kappa = poisson_gap_kappa(B, p)
        self.items: list = []
        self.last_t: float | None = None
        self.mean_gap = 1.0 / rate_hint
        self.alpha = alpha
        self.max_gap = math.inf if max_gap is None else max_gap

    @property
    def rate(self) -> float:
        """Current λ estimate (items per second)."""
        return 1.0 / self.mean_gap

    @property
    def gap(self) -> float:
        """Current gap threshold g = κ / λ (seconds), capped at max_gap."""
        g = self.kappa * self.mean_gap
        return g if g < self.max_gap else self.max_gap

    def observe(self, t: float) -> None:
        if self.last_t is not None:
            self.mean_gap += self.alpha * ((t - self.last_t) - self.mean_gap)
            if self.mean_gap <= 1e-12:
                self.mean_gap = 1e-12
        self.last_t = t

    def add(self, t: float, item: object) -> list | None:
        self.observe(t)
        self.items.append(item)
        if len(self.items) >= self.B:
            out, self.items = self.items, []
            return out
        return None

    def deadline(self) -> float | None:
        if not self.items:
            return None
        return self.last_t + self.gap  # type: ignore[operator]

    def poll(self, t: float) -> list | None:
        d = self.deadline()
        if d is not None and t >= d:
            out, self.items = self.items, []
            return out
        return None


class TimeoutBatcher:
    """Static baseline: a batch leaves at `batch` items or `timeout` seconds after its first."""

    __slots__ = ("batch", "timeout", "items", "first_t")

    def __init__(self, batch: int, timeout: float):
        if batch < 1 or timeout < 0:
            raise ValueError("batch must be ≥ 1 and timeout ≥ 0")
        self.batch = batch
        self.timeout = timeout
        self.items: list = []
        self.first_t = 0.0

    def add(self, t: float, item: object) -> list | None:
        if not self.items:
            self.first_t = t
        self.items.append(item)
        if len(self.items) >= self.batch or self.timeout == 0:
            out, self.items = self.items, []
            return out
        return None

    def deadline(self) -> float | None:
        return self.first_t + self.timeout if self.items else None

    def poll(self, t: float) -> list | None:
        d = self.deadline()
        if d is not None and t >= d:
            out, self.items = self.items, []
            return out
        return None
