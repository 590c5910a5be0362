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
    early_stopped: bool = False

    def as_dict(self) -> dict:
        return {
            "goodput_rps": self.goodput_rps,
            "criterion": self.criterion,
            "percentile": self.percentile,
            "tolerance": self.tolerance,
            "bracketed": self.bracketed,
            "early_stopped": self.early_stopped,
            "probes": [p.as_dict(self.percentile) for p in self.probes],
        }


def probe_of(run: RunResult, slo: SLO) -> Probe:
    return Probe(run.rate, run.percentile("ttft", slo.percentile),
                 run.percentile("tpot", slo.percentile), run.attainment(slo), run.passes(slo))


def search_goodput(run_at: Callable[[float], RunResult], slo: SLO, start_rate: float = 1.0,
                   tolerance: float = 0.02, max_probes: int = 30, min_rate: float = 1e-3,
                   max_rate: float = 1e5,
                   on_probe: Callable[[Probe], None] | None = None,
                   incumbent: float | None = None, coarse_tolerance: float = 0.1,
                   coarse_probes: int = 5) -> GoodputResult:
    """Find the largest passing rate; `run_at(rate)` runs one probe.

    With `incumbent` (the best goodput found so far by a tuner), the first probe is at it; a
    deployment that fails there cannot win, so the search stops early: it only narrows
    the goodput to `coarse_tolerance` in at most `coarse_probes` probes (a useful value for a
    surrogate model, at a fraction of the cost) and sets `early_stopped`."""
    res = GoodputResult(0.0, slo.criterion, slo.percentile, tolerance)
    if incumbent is not None and incumbent > 0:
        start_rate = incumbent

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
        if incumbent is not None and incumbent > 0:
            res.early_stopped = True
            tolerance = max(tolerance, coarse_tolerance)
            max_probes = min(max_probes, coarse_probes)
            res.tolerance = tolerance
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
