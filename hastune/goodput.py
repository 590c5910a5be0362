"""P90 goodput: the largest arrival rate at which a deployment still meets its SLOs.

Bracket (double or halve from a start rate until one rate passes and a higher one fails), then
bisect until (hi − lo) ≤ tolerance·hi. Every probe uses the same RequestSet (common random
numbers), so rates and deployments are compared on identical requests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hastune.recipe import SLO
from hastune.sim.result import RunResult


@dataclass
class Probe:
    rate: float
    ttft_p: float
    tpot_p: float
    attainment: float
    passed: bool

    def as_dict(self, percentile: float) -> dict:
        return {"rate": self.rate, "ttft_p90_s" if percentile == 90 else f"ttft_p{percentile:g}_s":
                self.ttft_p, "tpot_p90_s" if percentile == 90 else f"tpot_p{percentile:g}_s":
                self.tpot_p, "attainment": self.attainment, "passed": self.passed}


@dataclass
class GoodputResult:
    goodput_rps: float
    criterion: str
    percentile: float
    tolerance: float
    probes: list[Probe] = field(default_factory=list)
    best_run: RunResult | None = None
    bracketed: bool = True

    def as_dict(self) -> dict:
        return {
            "goodput_rps": self.goodput_rps,
            "criterion": self.criterion,
            "percentile": self.percentile,
            "tolerance": self.tolerance,
            "bracketed": self.bracketed,
            "probes": [p.as_dict(self.percentile) for p in self.probes],
        }


def probe_of(run: RunResult, slo: SLO) -> Probe:
    return Probe(run.rate, run.percentile("ttft", slo.percentile),
                 run.percentile("tpot", slo.percentile), run.attainment(slo), run.passes(slo))


def search_goodput(run_at: Callable[[float], RunResult], slo: SLO, start_rate: float = 1.0,
                   tolerance: float = 0.02, max_probes: int = 30, min_rate: float = 1e-3,
                   max_rate: float = 1e5,
                   on_probe: Callable[[Probe], None] | None = None) -> GoodputResult:
    """Find the largest passing rate; `run_at(rate)` runs one probe."""
    res = GoodputResult(0.0, slo.criterion, slo.percentile, tolerance)

    def probe(rate: float) -> bool:
        run = run_at(rate)
        p = probe_of(run, slo)
        res.probes.append(p)
        if on_probe:
            on_probe(p)
        if p.passed and (res.best_run is None or rate > res.best_run.rate):
            res.best_run = run
        return p.passed

    lo, hi = 0.0, None
    rate = start_rate
    if probe(rate):
        lo = rate
        while len(res.probes) < max_probes:
            rate *= 2.0
            if rate > max_rate:
                res.bracketed = False
                break
            if probe(rate):
                lo = rate
            else:
                hi = rate
                break
    else:
        hi = rate
        while len(res.probes) < max_probes:
            rate /= 2.0
            if rate < min_rate:
                res.bracketed = False
                break
            if probe(rate):
                lo = rate
                break
            hi = rate
    if lo > 0 and hi is not None:
        while hi - lo > tolerance * hi and len(res.probes) < max_probes:
            mid = 0.5 * (lo + hi)
            if probe(mid):
                lo = mid
            else:
                hi = mid
    res.goodput_rps = lo
    return res
