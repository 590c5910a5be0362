"""EcoServe's admission: the macro scheduler's three checks, and the saved-TPOT statistic
they read. Pure objects: the caller passes the time and the instance's state.

Saved TPOT (EcoServe §3.3): a decoding request that produced its first token at t_f and has
produced `tokens_out` tokens by t has

    saved = tokens_out × TPOT_SLO − (t − t_f)

seconds of slack — how far ahead of the typewriter schedule its stream is. On an instance that
has run s decode steps, a request that joined at step j has tokens_out = s − j + 1, so
saved = s·SLO − t + key with key = t_f − (j − 1)·SLO fixed per request: a statistic over the
requests is s·SLO − t + statistic(keys), kept up to date as requests join and leave.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from enum import IntEnum

STATISTICS = ("mean", "min", "quantile")


class SlackTracker:
    """Saved TPOT of one instance's decoding requests, as one statistic: `mean` (the paper),
    `min` (the request with the least slack: no request is sacrificed to the average) or
    `quantile` (the `q`-th lowest share: between the two)."""

    __slots__ = ("slo", "statistic", "q", "n", "total", "keys")

    def __init__(self, tpot_slo: float, statistic: str = "mean", q: float = 0.1):
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {STATISTICS}")
        if not 0.0 < q < 1.0:
            raise ValueError("q must be in (0, 1)")
        self.slo = tpot_slo
        self.statistic = statistic
        self.q = q
        self.n = 0
        self.total = 0.0
        self.keys: list[float] = []  # sorted; only kept for min / quantile

    def key(self, t_first: float, join_step: int) -> float:
        return t_first - (join_step - 1) * self.slo

    def add(self, key: float) -> None:
        self.n += 1
        self.total += key
        if self.statistic != "mean":
            insort(self.keys, key)

    def remove(self, key: float) -> None:
        self.n -= 1
        if self.n == 0:
            self.total = 0.0
            self.keys.clear()
            return
        self.total -= key
        if self.statistic != "mean":
            del self.keys[bisect_left(self.keys, key)]

    def stat_key(self) -> float:
        if self.statistic == "mean":
            return self.total / self.n
        if self.statistic == "min":
            return self.keys[0]
        return self.keys[int(self.q * (self.n - 1))]

    def saved(self, steps: int, t: float) -> float:
        """The statistic of saved TPOT after `steps` decode steps, at time t (∞ if nobody is
        decoding: there is no stream to delay)."""
        if self.n == 0:
            return math.inf
        return steps * self.slo - t + self.stat_key()

    def mean_saved(self, steps: int, t: float) -> float:
        """The mean, whatever the statistic (mitosis reads it)."""
        if self.n == 0:
            return math.inf
        return steps * self.slo - t + self.total / self.n


class Verdict(IntEnum):
    """Admission's answer: admitted, or the first of the three checks that refused. An int
    (0 admits, falsy), so a count per verdict is a list indexed by it."""

    ADMIT = 0
    TTFT = 1     # check 1: the prefill window would outlast the TTFT SLO
    TPOT = 2     # check 2: the decoding requests' saved TPOT cannot absorb the stall
    MEMORY = 3   # check 3: no KV room or no batch seat


_ADMIT, _TTFT, _TPOT, _MEMORY = Verdict  # bound once: `check` runs per offer


class Admission:
    """May instance X take request R now? (EcoServe, Algorithm 1; time is passed in.)

    1. TTFT: the time the instance's prefill window has been open (or the wait for its switch
       to prefill) + the profiled prefill times pending on it + R's ≤ TTFT SLO. The paper sums
       the pending prefill times only; adding the open window's age keeps a window from
       growing past the SLO while requests keep arriving. Waived for a request that would open
       an empty window (a prompt longer than the SLO is admitted where it can start).
    2. TPOT: the saved-TPOT statistic of the decoding requests ≥ the pending prefill time + R's
       (the decode stall they must absorb).
    3. Memory: R's KV (prompt + output) fits beside everything reserved, and a batch seat is free.

    `check` returns Verdict.ADMIT when all pass, else the first check that fails."""

    __slots__ = ("ttft_slo",)

    def __init__(self, ttft_slo: float):
        if ttft_slo <= 0:
            raise ValueError("ttft_slo must be > 0")
        self.ttft_slo = ttft_slo

    def check(self, window_s: float, pending_s: float, new_s: float, saved_s: float,
              kv_free: float, kv_need: float, seats_free: int, empty: bool = False) -> Verdict:
        if not empty and window_s + pending_s + new_s > self.ttft_slo:
            return _TTFT
        if saved_s < pending_s + new_s:
            return _TPOT
        if kv_need > kv_free or seats_free < 1:
            return _MEMORY
        return _ADMIT
