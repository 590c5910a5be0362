"""Pieces the replica-based simulators share: arrivals (open or closed loop), routing across
instances, and turning per-request timestamps into a RunResult."""

from __future__ import annotations

import math
import time

import numpy as np

from hastune.sim.result import RunResult
from hastune.workload import RequestSet


class Arrivals:
    """Where requests come from in one run.

    Open loop: `times` holds every arrival (the request set's gaps scaled to `rate`, or its
    rate schedule). Closed loop (`reqs.think_s` set): `rate` is the number of clients; each
    sends its first request at t = 0 and its next one `think_s` after the previous one
    completes (or is rejected), as benchmark tools with a fixed concurrency do."""

    __slots__ = ("closed", "clients", "think", "issued", "n", "times")

    def __init__(self, reqs: RequestSet, rate: float):
        self.n = len(reqs)
        self.closed = reqs.think_s is not None
        if self.closed:
            self.clients = max(1, min(self.n, int(round(rate))))
            self.think = float(reqs.think_s)  # type: ignore[arg-type]
            self.issued = self.clients
            self.times = [math.inf] * self.n
            for i in range(self.clients):
                self.times[i] = 0.0
        else:
            self.clients = 0
            self.think = 0.0
            self.issued = self.n
            self.times = reqs.arrivals(rate).tolist()

    def initial(self) -> int:
        """How many requests arrive from the pre-computed list (all, or one per client)."""
        return self.issued

    def next_after(self, t: float) -> tuple[float, int] | None:
        """Closed loop: a request completed at t, so its client sends the next one."""
        if self.issued >= self.n:
            return None
        r = self.issued
        self.issued += 1
        ta = t + self.think
        self.times[r] = ta
        return ta, r


def least_loaded(loads: list[float]) -> int:
    """Index of the smallest load (the first on ties)."""
    best, bi = loads[0], 0
    for i in range(1, len(loads)):
        if loads[i] < best:
            best, bi = loads[i], i
    return bi


def build_result(rate: float, arr: list[float], t_first: list[float], t_last: list[float],
                 out_tok: list[int], rejected: list[int], warmup: float, end: float,
                 utilisation: dict[str, float], events: int, wall0: float,
                 extra: dict[str, float] | None = None) -> RunResult:
    """TTFT = first token − arrival; TPOT = (t_last − t_first)/(n_out − 1); rejected → inf."""
    n = len(arr)
    start = arr[0] if n else 0.0
    span = max(end - start, 1e-12)
    a = np.array(arr, dtype=float)
    tf = np.array(t_first, dtype=float)
    tl = np.array(t_last, dtype=float)
    outs = np.array(out_tok, dtype=float)
    ttft = tf - a
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(outs > 1, (tl - tf) / np.maximum(outs - 1, 1), np.nan)
    if rejected:
        ttft[rejected] = np.inf
        tpot[rejected] = np.inf
    w = int(warmup * n)
    ex = dict(extra or {})
    # throughput while requests were still arriving (in closed loop: while every client was
    # busy): measured completions up to the last arrival, over that stretch
    if n > w + 1:
        t0, t1 = float(a[w]), float(a.max())
        if t1 > t0:
            ex["throughput_rps"] = float(((tl[w:] >= t0) & (tl[w:] <= t1)).sum()) / (t1 - t0)
    if n:  # the most requests in the system at once (in closed loop: the concurrency)
        fin = np.where(np.isfinite(tl), tl, a)
        ev = np.concatenate([np.stack([a, np.ones(n)], 1), np.stack([fin, -np.ones(n)], 1)])
        ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]  # at equal times, leave before arriving
        ex["max_in_flight"] = float(np.cumsum(ev[:, 1]).max())
    return RunResult(rate=rate, ttft=ttft, tpot=tpot, warmup=w, rejected=len(rejected),
                     utilisation=utilisation, sim_time_s=span, events=events,
                     wall_s=time.perf_counter() - wall0, extra=ex)
