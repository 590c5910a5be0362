"""Is a probe's run a steady state? The stability verdict that every goodput probe carries.

A finite run of an overloaded deployment can meet its SLOs only because its queues have not
had time to grow; goodput is a steady-state property (DESIGN.md §4), so a probe passes only if
its run is also stable. The measured window (arrivals after warm-up) is cut into thirds by
arrival time, and the last two are checked:

- **throughput**: the requests that left (completed or were rejected) during the last two
  thirds, against those that arrived in them. A system that keeps up loses nothing between
  the two counts but the change in what it holds, small against the window when the window
  spans many request lifetimes; an overloaded one falls short by 1 − μ/Λ. Unstable when the
  ratio is below 1 − `shortfall`.
- **the last third**: the SLOs must hold on the requests that arrived in the last third, not
  only on the whole window. A queue that grows shows first there.

A verdict is *settled* when the window agrees with itself and is clear: the whole window, its
middle third and its last third all pass or all fail the SLOs; the share of requests missing
an SLO is `SETTLE_Z` standard errors (binomial, or batch means where misses cluster) from the
share the criterion allows (P90: 10%), so a percentile estimated from few requests, or from
a window near capacity where misses come in long runs, does not decide a close call; and the
throughput is clearly above the bar (or clearly below: 3 × `shortfall`). An unsettled run is
too short to tell a slow queue, a burst or a lucky sample from the steady state, and the
evaluator extends it (hastune.evaluators.sim) until it settles or reaches its cap, where the verdict
above is final. Growths (P90 of the last third − P90 of the middle, in units of the SLO) are
reported.

Closed loop (a fixed number of clients) and rate schedules (a rate that changes by design)
are not judged: the first is stable by construction, the second is not meant to be stationary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SHORTFALL = 0.03   # default: departures may fall short of arrivals by 3% (noise, edge effects)
MIN_MEASURED = 30  # fewer measured requests than this: too few to judge
SETTLE_Z = 2.0     # a pass/fail is clear this many standard errors from the bar
BATCHES = 10       # batch means for the standard error of a share of requests


@dataclass(frozen=True)
class Stability:
    """The verdict on one run. `judged` False: no test was possible (`reason` says why) and
    `stable` is True. `settled` False: a longer run could change the verdict. Rates in req/s;
    growths in units of the SLO."""

    stable: bool
    judged: bool
    reason: str
    settled: bool = True
    arrival_rps: float = 0.0
    throughput_rps: float = 0.0
    ttft_growth: float = 0.0
    tpot_growth: float = 0.0
    span_s: float = 0.0

    @property
    def ratio(self) -> float:
        return self.throughput_rps / self.arrival_rps if self.arrival_rps > 0 else 1.0

    def as_dict(self) -> dict:
        return {"stable": self.stable, "judged": self.judged, "settled": self.settled,
                "reason": self.reason, "arrival_rps": self.arrival_rps,
                "throughput_rps": self.throughput_rps, "throughput_ratio": self.ratio,
                "ttft_growth": self.ttft_growth, "tpot_growth": self.tpot_growth,
                "window_s": self.span_s}


def not_judged(reason: str) -> Stability:
    return Stability(True, False, reason)


def unjudged(workload) -> Stability | None:
    """The verdict for every run of a workload that is not judged — closed loop (the clients
    wait for the system) or a rate schedule (not stationary by design) — else None."""
    if workload.arrival.process == "closed":
        return not_judged("closed loop: the clients wait for the system")
    if workload.rate_schedule is not None:
        return not_judged("rate schedule: the load is not stationary by design")
    return None


def stopped(run_extra: dict) -> Stability | None:
    """The verdict on a run the simulator stopped early (its StopRule: it fails the SLOs
    whatever would follow), else None."""
    if "stopped_early_s" not in run_extra:
        return None
    return not_judged(f"stopped at {run_extra['stopped_early_s']:.4g} s: enough requests had "
                      "missed an SLO to fail it")


def pct(x: np.ndarray, q: float) -> float:
    """The `q` percentile of the non-nan values ("higher": an observed value; inf sorts last),
    0 when there are none."""
    x = x[~np.isnan(x)]
    return float(np.percentile(x, q, method="higher")) if x.size else 0.0


def meets(ttft: np.ndarray, tpot: np.ndarray, ttft_slo: float, tpot_slo: float,
          percentile: float, attainment: float | None = None) -> bool:
    """Whether these requests meet the SLOs: the percentile of TTFT and of TPOT within them, or
    (`attainment` given) at least that share of requests within both."""
    if attainment is not None:
        ok = (ttft <= ttft_slo) & (np.isnan(tpot) | (tpot <= tpot_slo))
        return bool(ok.mean() >= attainment) if ok.size else False
    return pct(ttft, percentile) <= ttft_slo and pct(tpot, percentile) <= tpot_slo


def margin_z(ttft: np.ndarray, tpot: np.ndarray, ttft_slo: float, tpot_slo: float,
             percentile: float, attainment: float | None = None) -> float:
    """How clearly these requests (in arrival order) meet (> 0) or miss (< 0) the SLOs, in
    standard errors of the share of requests over an SLO against the share the criterion
    allows: the smaller of TTFT's and TPOT's for the percentile criterion, the union's for
    attainment. The standard error is the larger of the binomial one and the batch-means one
    (BATCHES contiguous batches): near capacity, requests that miss come in long runs (a queue
    that built up), so a window holds fewer independent samples than requests."""

    def z(over: np.ndarray, allowed: float) -> float:
        n = over.size
        if n == 0:
            return math.inf
        x = over.astype(float)
        se = math.sqrt(max(allowed * (1.0 - allowed), 1e-12) / n)
        if n >= 5 * BATCHES:
            means = np.array([b.mean() for b in np.array_split(x, BATCHES)])
            se = max(se, float(means.std(ddof=1)) / math.sqrt(BATCHES))
        return (allowed - float(x.mean())) / se

    with np.errstate(invalid="ignore"):
        if attainment is not None:
            miss = (ttft > ttft_slo) | (~np.isnan(tpot) & (tpot > tpot_slo))
            return z(miss, 1.0 - attainment)
        allowed = 1.0 - percentile / 100.0
        tp = tpot[~np.isnan(tpot)]
        return min(z(ttft > ttft_slo, allowed), z(tp > tpot_slo, allowed))


def _growth(last: float, mid: float, slo: float) -> float:
    if math.isinf(last):
        return 0.0 if math.isinf(mid) else math.inf  # both inf: the SLO check fails it anyway
    return (last - mid) / slo


def assess(arrival: np.ndarray, finish: np.ndarray, ttft: np.ndarray, tpot: np.ndarray,
           warmup: int, ttft_slo: float, tpot_slo: float, percentile: float = 90.0,
           attainment: float | None = None, shortfall: float = SHORTFALL,
           final: bool = True) -> Stability:
    """The verdict on a run: per request its arrival, the time it left (inf or nan when it
    never finished: rejected requests count as leaving when they arrived), TTFT and TPOT
    (inf when rejected, nan without a second token); the first `warmup` requests are not
    measured. `final` False: a longer run is possible, so an unclear window is reported as
    unsettled instead of being decided."""
    n = len(arrival)
    if n - warmup < MIN_MEASURED:
        return not_judged(f"{n - warmup} measured requests: too few to judge")
    a = np.asarray(arrival, dtype=float)
    t0, t1 = float(a[warmup:].min()), float(a[warmup:].max())
    span = t1 - t0
    if span <= 0:
        return not_judged("every measured request arrived at once")
    ta, tb = t0 + span / 3, t0 + 2 * span / 3
    left = np.asarray(finish, dtype=float).copy()
    gone = ~np.isfinite(left) & np.isinf(ttft)  # rejected: left on arrival
    left[gone] = a[gone]
    arrived = int(((a > ta) & (a <= t1)).sum())
    departed = int(((left > ta) & (left <= t1)).sum())
    window = t1 - ta
    measured = np.arange(n) >= warmup
    mid = measured & (a >= ta) & (a < tb)
    last = measured & (a >= tb)
    q = percentile
    res = dict(arrival_rps=arrived / window, throughput_rps=departed / window,
               ttft_growth=_growth(pct(ttft[last], q), pct(ttft[mid], q), ttft_slo),
               tpot_growth=_growth(pct(tpot[last], q), pct(tpot[mid], q), tpot_slo),
               span_s=span)
    ratio = departed / arrived if arrived else 1.0

    def ok(sel: np.ndarray) -> bool:
        return meets(ttft[sel], tpot[sel], ttft_slo, tpot_slo, q, attainment)

    whole, in_mid, in_last = ok(measured), ok(mid), ok(last)
    clear = abs(margin_z(ttft[measured], tpot[measured], ttft_slo, tpot_slo, q,
                         attainment)) >= SETTLE_Z
    short = (f"throughput {departed / window:.4g} req/s fell short of arrivals "
             f"{arrived / window:.4g} req/s by {1 - ratio:.1%}")
    if ratio < 1.0 - 3 * shortfall:
        return Stability(False, True, f"{short} (> {3 * shortfall:.0%})", **res)
    if not final and not (whole == in_mid == in_last and clear and ratio >= 1.0 - shortfall):
        return Stability(False, True, "not settled: the window disagrees with itself",
                         settled=False, **res)
    if ratio < 1.0 - shortfall:
        return Stability(False, True, f"{short} (> {shortfall:.0%})", **res)
    if whole and not in_last:
        return Stability(False, True, "the SLOs break in the last third of the window", **res)
    return Stability(True, True, "steady", **res)
