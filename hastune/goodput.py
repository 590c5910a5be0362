"""P90 goodput: the largest arrival rate at which a deployment still meets its SLOs in steady
state.

Rates are probed on one grid per tolerance, Λ_k = (1 + tolerance)^k req/s (k an integer): the
search brackets (steps of about ×2 up or down from a start rate until one rate passes and a
higher one fails), then bisects on k until the two are neighbours. The start is the
configuration's own (the recipe's `start_rate`, or a guess from the profile), never where a
tuner happens to be, so `evaluate`, `grid`, `tune` and pruning's probes run the same probes and
give a configuration one number, even where pass/fail is not monotone in the rate (for a
monotone one, any start gives the largest passing grid rate). Closed loop searches the number
of clients, one at a time.

A probe passes when its run meets the SLOs *and* is stable (hastune.stability): a short run of
an overloaded deployment whose queues have not yet grown fails. Every probe uses the same
RequestSet (common random numbers), so rates and deployments see identical requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from hastune.recipe import SLO
from hastune.runs import RunResult
from hastune.stability import Stability


@dataclass
class Probe:
    rate: float
    ttft_p: float
    tpot_p: float
    attainment: float
    passed: bool
    slo_met: bool = True
    stability: Stability | None = None
    requests: int = 0
    phase: str = "coarse"   # "coarse" (locating) or "fine" (full-length: the verdict counts)

    def as_dict(self, percentile: float) -> dict:
        tag = "p90" if percentile == 90 else f"p{percentile:g}"
        d = {"rate": self.rate, f"ttft_{tag}_s": self.ttft_p, f"tpot_{tag}_s": self.tpot_p,
             "attainment": self.attainment, "slo_met": self.slo_met, "passed": self.passed,
             "requests": self.requests, "phase": self.phase}
        if self.stability is not None:
            d["stability"] = self.stability.as_dict()
        return d


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

    def failure(self, slo: SLO) -> str | None:
        """Why no rate meets the SLOs (None when one does): the lowest rate probed and what
        it missed."""
        if self.goodput_rps > 0 or not self.probes:
            return None
        p = min(self.probes, key=lambda q: q.rate)
        pct = f"P{self.percentile:g}"
        missed = [f"{pct} {name} {got:.4g} s > SLO {want:g} s"
                  for name, got, want in (("TTFT", p.ttft_p, slo.ttft_s),
                                          ("TPOT", p.tpot_p, slo.tpot_s)) if got > want]
        if not p.slo_met and not missed:
            missed.append(f"SLO attainment {p.attainment:.1%}")
        if p.slo_met and p.stability is not None and not p.stability.stable:
            missed.append(f"not a steady state ({p.stability.reason})")
        return (f"at {p.rate:.4g} req/s, the lowest rate probed: "
                + ("; ".join(missed) or "the probe failed"))

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
    """A run as a probe: it passes when it meets the SLOs and its verdict (if any) is
    stable."""
    met = run.passes(slo)
    stability = run.verdict
    return Probe(run.rate, run.percentile("ttft", slo.percentile),
                 run.percentile("tpot", slo.percentile), run.attainment(slo),
                 met and (stability is None or stability.stable), met, stability,
                 int(run.ttft.size))


class RateGrid:
    """The rates a search may probe: (1 + step)^k req/s, or whole numbers of clients."""

    def __init__(self, step: float, integer: bool = False):
        self.step, self.integer = step, integer
        self._log = math.log1p(step)

    def rate(self, k: int) -> float:
        return float(k) if self.integer else (1.0 + self.step) ** k

    def index(self, rate: float) -> int:
        """The grid point nearest to `rate` (at least 1 client)."""
        if self.integer:
            return max(1, int(round(rate)))
        return int(round(math.log(rate) / self._log))

    def steps(self, ratio: float) -> int:
        """Grid steps that make up a factor `ratio` (at least one)."""
        if self.integer:
            return 1
        return max(1, int(math.ceil(math.log(ratio) / self._log - 1e-9)))

    def up(self, k: int) -> int:
        """About twice the rate."""
        return 2 * k if self.integer else k + self.steps(2.0)

    def down(self, k: int) -> int:
        """About half the rate."""
        return max(1, k // 2) if self.integer else k - self.steps(2.0)


def search_goodput(run_at: Callable[[float], RunResult], slo: SLO, start_rate: float = 1.0,
                   tolerance: float = 0.02, max_probes: int = 40, min_rate: float = 1e-3,
                   max_rate: float = 1e5,
                   on_probe: Callable[[Probe], None] | None = None,
                   incumbent: float | None = None, early_stop: bool = False,
                   coarse_tolerance: float = 0.1,
                   integer: bool = False,
                   confirm: Callable[[float], RunResult] | None = None) -> GoodputResult:
    """Find the largest passing grid rate; `run_at(rate)` runs one probe (its `verdict`, when
    set, says whether the run was stable).

    With `confirm` the search has two phases: `run_at` (short, cheap probes) brackets and
    bisects to a coarse answer, then `confirm` (long probes, the ones whose verdict counts)
    walks from it — up while it passes, down until it passes, in doubling steps — and bisects
    to neighbouring grid rates, the lower passing and the upper failing at full length.

    With `early_stop` and an `incumbent` (the best goodput a tuner has found so far) the first
    probe is at the incumbent, and a deployment that fails there — it cannot win — is only
    narrowed to `coarse_tolerance` by `run_at` (`early_stopped`; its value is then a passing
    rate of a short probe, not the exact answer). Without `early_stop` the incumbent is
    ignored: the search is the configuration's own. `integer`: rates are numbers of clients
    (closed loop)."""
    grid = RateGrid(tolerance, integer)
    res = GoodputResult(0.0, slo.criterion, slo.percentile, tolerance)
    k_min = grid.index(max(min_rate, 1.0 if integer else min_rate))
    k_max = grid.index(max_rate)

    def prober(runner: Callable[[float], RunResult], phase: str) -> Callable[[int], bool]:
        cache: dict[int, bool] = {}

        def probe(k: int) -> bool:
            if k not in cache:
                rate = grid.rate(k)
                run = runner(rate)
                p = probe_of(run, slo)
                p.phase = phase
                res.probes.append(p)
                if on_probe:
                    on_probe(p)
                if p.passed and phase == final_phase and (
                        res.best_run is None or rate > res.best_run.rate):
                    res.best_run = run
                cache[k] = p.passed
            return cache[k]

        return probe

    use_incumbent = early_stop and incumbent is not None and incumbent > 0
    final_phase = "fine" if confirm is not None and not use_incumbent else "coarse"
    coarse = prober(run_at, "coarse")
    start = incumbent if use_incumbent else start_rate
    k = min(max(grid.index(start), k_min), k_max)
    lo: int | None = None   # largest passing index known
    hi: int | None = None   # smallest failing index known
    stop_at = 1
    if coarse(k):
        lo = k
        while len(res.probes) < max_probes:
            if k >= k_max:
                res.bracketed = False
                break
            k = min(grid.up(k), k_max)
            if coarse(k):
                lo = k
            else:
                hi = k
                break
    else:
        hi = k
        if use_incumbent:
            res.early_stopped = True
            res.tolerance = max(tolerance, coarse_tolerance)
            stop_at = grid.steps(1.0 + res.tolerance)
        while len(res.probes) < max_probes:
            if k <= k_min:
                res.bracketed = False
                break
            k = max(grid.down(k), k_min)
            if coarse(k):
                lo = k
                break
            hi = k
    if lo is not None and hi is not None:
        lo, hi = _bisect(coarse, lo, hi, stop_at, res, max_probes)
    if lo is not None and final_phase == "fine":
        lo = _refine(prober(confirm, "fine"), lo, k_min, k_max, res, max_probes)  # type: ignore
    res.goodput_rps = grid.rate(lo) if lo is not None else 0.0
    return res


def _bisect(probe: Callable[[int], bool], lo: int, hi: int, stop_at: int, res: GoodputResult,
            max_probes: int) -> tuple[int, int]:
    while hi - lo > stop_at and len(res.probes) < max_probes:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return lo, hi


def _refine(probe: Callable[[int], bool], start: int, k_min: int, k_max: int,
            res: GoodputResult, max_probes: int) -> int | None:
    """From a coarse answer, the largest index that passes with `probe` below one that fails:
    walk in doubling steps (up while passing, down until passing), then bisect."""
    step = 1
    if probe(start):
        lo, hi = start, None
        while len(res.probes) < max_probes:
            k = min(lo + step, k_max)
            if k == lo:
                res.bracketed = False
                return lo
            if probe(k):
                lo, step = k, 2 * step
            else:
                hi = k
                break
    else:
        lo, hi = None, start
        while len(res.probes) < max_probes:
            k = max(hi - step, k_min)
            if k == hi:
                return None
            if probe(k):
                lo = k
                break
            hi, step = k, 2 * step
    if lo is None:
        return None
    if hi is not None:
        lo, _ = _bisect(probe, lo, hi, 1, res, max_probes)
    return lo
