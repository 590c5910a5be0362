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

Measured probes are noisy. With `repeat` (the real evaluators: a probe within the noise of the
SLO) a probe is run again at its rate, with the same requests and arrivals, up to `repeats`
runs in all; its verdict is the majority's (a tie fails) and its numbers the median run's of
that side; so are the bracket's two ends once the bisection is done (`_settle`: an end that
flips moves the bracket). The result then has a `spread`: the highest rate every run of which
passed and the lowest above it every run of which failed, so that the search's bracket and the
repeats' disagreement both widen it. The simulator passes neither; its results are unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from hastune.recipe import SLO
from hastune.repeats import majority, spread
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
    repeats: list[Probe] = field(default_factory=list)  # the other runs at this rate, if any

    @property
    def runs(self) -> int:
        return 1 + len(self.repeats)

    @property
    def runs_passed(self) -> int:
        return int(self.passed) + sum(q.passed for q in self.repeats)

    @property
    def unanimous(self) -> bool:
        """Every run at this rate gave the verdict this probe has."""
        return all(q.passed == self.passed for q in self.repeats)

    def as_dict(self, percentile: float) -> dict:
        tag = "p90" if percentile == 90 else f"p{percentile:g}"
        d = {"rate": self.rate, f"ttft_{tag}_s": self.ttft_p, f"tpot_{tag}_s": self.tpot_p,
             "attainment": self.attainment, "slo_met": self.slo_met, "passed": self.passed,
             "requests": self.requests, "phase": self.phase}
        if self.stability is not None:
            d["stability"] = self.stability.as_dict()
        if self.repeats:
            d.update(runs=self.runs, runs_passed=self.runs_passed,
                     repeats=[q.as_dict(percentile) for q in self.repeats])
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
    # (low, high) req/s where the search repeats close probes (None: it does not, the sim)
    spread: tuple[float, float] | None = None

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
            **({} if self.spread is None else {"spread_rps": list(self.spread)}),
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
                   integer: bool = False,
                   confirm: Callable[[float], RunResult] | None = None,
                   repeat: Callable[[RunResult, Probe], bool] | None = None,
                   repeats: int = 3) -> GoodputResult:
    """Find the largest passing grid rate; `run_at(rate)` runs one probe (its `verdict`, when
    set, says whether the run was stable).

    With `confirm` the search has two phases: `run_at` (short, cheap probes) brackets and
    bisects to a coarse answer, then `confirm` (long probes, the ones whose verdict counts)
    walks from it — up while it passes, down until it passes, in doubling steps — and bisects
    to neighbouring grid rates, the lower passing and the upper failing at full length.

    With `early_stop` and an `incumbent` (the best goodput a tuner has found so far) the search
    is the configuration's own until a probe of the final phase (full-length, or the only
    phase) fails at a rate at or below the incumbent: every later probe of the search would be
    below that rate, so its answer would be too — the configuration cannot beat or tie the
    incumbent — and the search stops there (`early_stopped`; its value is then the highest
    rate a probe of the final phase passed, or, with none, a short probe's: a lower bound,
    not the answer, and below the incumbent). A configuration whose answer is at least the
    incumbent gets exactly its full search (tests/test_goodput.py, on generated pass/fail
    rules). Not with `repeat`: a repeated probe can flip, and the bracket move above it.
    `integer`: rates are numbers of clients (closed loop).

    With `repeat` (it says whether a run is within the noise of the SLO) such a probe is run
    again, up to `repeats` runs, and decided by their majority (`repeated`), and so are the
    bracket's two ends (`_settle`, not with `confirm`); the result then carries its `spread`
    (hastune.repeats)."""
    grid = RateGrid(tolerance, integer)
    res = GoodputResult(0.0, slo.criterion, slo.percentile, tolerance)
    k_min = grid.index(max(min_rate, 1.0 if integer else min_rate))
    k_max = grid.index(max_rate)
    final_phase = "fine" if confirm is not None else "coarse"
    ceiling = (incumbent if early_stop and incumbent is not None and incumbent > 0
               and repeat is None else None)

    def prober(runner: Callable[[float], RunResult], phase: str) -> _Prober:
        return _Prober(runner, phase, phase == final_phase, grid, slo, res, on_probe, repeat,
                       repeats, ceiling if phase == final_phase else None)

    coarse = prober(run_at, "coarse")
    try:
        lo = _search(coarse, grid, start_rate, k_min, k_max, res, max_probes, repeat,
                     final_phase)
        if lo is not None and final_phase == "fine":
            fine = prober(confirm, "fine")  # type: ignore[arg-type]
            lo = _refine(fine, lo, k_min, k_max, res, max_probes)
    except _Beaten as beaten:
        res.early_stopped = True
        lo = beaten.best
        if lo is None:  # no final probe passed: a short probe's rate, below the failure
            passed = max((k for k, ok in coarse.cache.items() if ok), default=None)
            lo = None if passed is None else min(passed, beaten.failed - 1)
    res.goodput_rps = grid.rate(lo) if lo is not None else 0.0
    if repeat is not None:
        res.spread = spread([p for p in res.probes if p.phase == final_phase],
                            res.goodput_rps, grid)
    return res


def _search(coarse: _Prober, grid: RateGrid, start_rate: float, k_min: int, k_max: int,
            res: GoodputResult, max_probes: int, repeat, final_phase: str) -> int | None:
    """The first phase: bracket from the start (about ×2 up or down), then bisect to
    neighbouring grid rates (and settle the ends with `repeat`); the largest passing index."""
    k = min(max(grid.index(start_rate), k_min), k_max)
    lo: int | None = None   # largest passing index known
    hi: int | None = None   # smallest failing index known
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
        lo, hi = _bisect(coarse, lo, hi, 1, res, max_probes)
        if repeat is not None and final_phase == "coarse":
            lo, hi = _settle(coarse, lo, hi, k_min, k_max, 1, res, max_probes)
    return lo


class _Beaten(Exception):
    """A final-phase probe failed (at index `failed`) at or below the incumbent: the search's
    answer would be below it. `best`: the highest index the final phase passed so far (None:
    none)."""

    def __init__(self, best: int | None, failed: int):
        super().__init__()
        self.best, self.failed = best, failed


class _Prober:
    """One phase's probes on the grid, each rate run once (then cached) and, with `repeat`,
    again while within the noise; `again(k)` runs rate k to a majority of `repeats`. The
    result's probes (one per rate), `on_probe` and, for the final phase, its `best_run` (the
    highest passing rate's run) follow every verdict."""

    def __init__(self, runner: Callable[[float], RunResult], phase: str, final: bool,
                 grid: RateGrid, slo: SLO, res: GoodputResult,
                 on_probe: Callable[[Probe], None] | None,
                 repeat: Callable[[RunResult, Probe], bool] | None, repeats: int,
                 ceiling: float | None = None):
        self.runner, self.phase, self.final, self.grid, self.slo = runner, phase, final, grid, slo
        self.res, self.on_probe, self.repeat, self.repeats = res, on_probe, repeat, repeats
        self.ceiling = ceiling  # a failure at or below this rate ends the search (_Beaten)
        self.cache: dict[int, bool] = {}
        self.runs: dict[int, list[tuple[RunResult, Probe]]] = {}
        self.shown: dict[int, tuple[RunResult, Probe]] = {}

    def __call__(self, k: int) -> bool:
        if k not in self.cache:
            rate = self.grid.rate(k)
            run = self.runner(rate)
            p = probe_of(run, self.slo)
            self.runs[k] = [(run, p)]
            if self.repeat is not None and self.repeats > 1 and self.repeat(run, p):
                run, p = repeated(lambda: self.runner(rate), self.slo, self.runs[k],
                                  self.repeats)
            self._show(k, run, p)
            if not p.passed and self.ceiling is not None and rate <= self.ceiling:
                raise _Beaten(max((kk for kk, ok in self.cache.items() if ok), default=None), k)
        return self.cache[k]

    def again(self, k: int) -> bool:
        rate = self.grid.rate(k)
        n = len(self.runs[k])
        run, p = repeated(lambda: self.runner(rate), self.slo, self.runs[k], self.repeats)
        if len(self.runs[k]) > n:
            self._show(k, run, p)
        return self.cache[k]

    def _show(self, k: int, run: RunResult, p: Probe) -> None:
        for q in (p, *p.repeats):
            q.phase = self.phase
        old = self.shown.get(k)
        if old is None:
            self.res.probes.append(p)
        else:
            self.res.probes[next(i for i, q in enumerate(self.res.probes) if q is old[1])] = p
        self.shown[k] = (run, p)
        self.cache[k] = p.passed
        if self.on_probe:
            self.on_probe(p)
        if self.final:
            best = max((kk for kk, ok in self.cache.items() if ok), default=None)
            self.res.best_run = None if best is None else self.shown[best][0]


def _settle(probe: _Prober, lo: int, hi: int, k_min: int, k_max: int, stop_at: int,
            res: GoodputResult, max_probes: int) -> tuple[int | None, int | None]:
    """Runs the bracket's two ends again (the same requests) until a majority decides each;
    when one flips, the bracket moves to the largest passing rate and the smallest failing
    one above it (walking on in doubling steps when either is missing) and is bisected
    again, with two probes more than `max_probes` allows — and walking down as far as it
    takes: a flip late in the search must not leave it without an answer. The verdicts that
    decide the goodput are then never a single noisy run."""
    grid, max_probes = probe.grid, max_probes + 2
    for _ in range(4 * max_probes):
        if probe.again(lo) and not probe.again(hi):
            break
        passes = [k for k, ok in probe.cache.items() if ok]
        lo_ = max(passes, default=None)
        fails = [k for k, ok in probe.cache.items() if not ok and (lo_ is None or k > lo_)]
        hi_ = min(fails, default=None)
        while lo_ is None and hi_ > k_min:  # type: ignore[operator]  # until one passes
            k = max(grid.down(hi_), k_min)  # type: ignore[arg-type]
            lo_, hi_ = (k, hi_) if probe(k) else (None, k)
        while hi_ is None and len(res.probes) < max_probes and lo_ < k_max:  # type: ignore
            k = min(grid.up(lo_), k_max)  # type: ignore[arg-type]
            lo_, hi_ = (lo_, k) if not probe(k) else (k, None)
        if lo_ is None or hi_ is None:
            res.bracketed = False
            return lo_, hi_
        lo, hi = _bisect(probe, lo_, hi_, stop_at, res, max_probes)
    return lo, hi


def _load(p: Probe, slo: SLO) -> float:
    """How near a probe is to its SLOs: the larger of its TTFT and TPOT over their SLOs."""
    return max(p.ttft_p / slo.ttft_s, p.tpot_p / slo.tpot_s)


def repeated(again: Callable[[], RunResult], slo: SLO, runs: list[tuple[RunResult, Probe]],
             repeats: int) -> tuple[RunResult, Probe]:
    """`runs` at one rate and more from `again` until a majority decides (hastune.repeats)."""

    def more() -> tuple[RunResult, Probe]:
        run = again()
        return run, probe_of(run, slo)

    return majority(runs, repeats, more, lambda p: _load(p, slo))


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
