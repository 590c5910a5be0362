"""What one run at one rate yields, simulated or measured: per-request TTFT/TPOT from the run's
timestamps (`latencies`, the one place that arithmetic lives) and the `RunResult` the goodput
search reads. Neutral ground: the simulators (hastune.sim) and the engine (runners.engine.load)
both build RunResults here, and this module imports neither."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

import numpy as np

from hastune.recipe import SLO
from hastune.stability import SHORTFALL, Stability, assess, meets, not_judged


def latencies(arrival: np.ndarray, first: np.ndarray, last: np.ndarray, tokens: np.ndarray,
              rejected: Collection[int]) -> tuple[np.ndarray, np.ndarray]:
    """(TTFT, TPOT) per request, in seconds, from its arrival, first- and last-token times and
    output-token count: TTFT = first − arrival; TPOT = (last − first)/(tokens − 1), nan for a
    request of one token (no inter-token time); a rejected (or failed) request gets inf for
    both."""
    ttft = first - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(tokens > 1, (last - first) / np.maximum(tokens - 1, 1), np.nan)
    if len(rejected):
        idx = list(rejected)
        ttft[idx] = np.inf
        tpot[idx] = np.inf
    return ttft, tpot



@dataclass
class RunResult:
    """Per-request TTFT/TPOT (seconds) of one run at one rate. Rejected requests have TTFT and
    TPOT = inf; requests with one output token have TPOT = nan (no inter-token time).
    `arrival` and `finish` (when known): each request's arrival and last-token times, which
    the stability verdict reads (hastune.stability)."""

    rate: float
    ttft: np.ndarray
    tpot: np.ndarray
    warmup: int = 0
    rejected: int = 0
    utilisation: dict[str, float] = field(default_factory=dict)
    sim_time_s: float = 0.0
    events: int = 0
    wall_s: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
    arrival: np.ndarray | None = None
    finish: np.ndarray | None = None
    verdict: Stability | None = None  # the evaluator's stability verdict, when it judged

    @property
    def measured(self) -> slice:
        return slice(self.warmup, None)

    def ttft_measured(self) -> np.ndarray:
        return self.ttft[self.measured]

    def tpot_measured(self) -> np.ndarray:
        x = self.tpot[self.measured]
        return x[~np.isnan(x)]

    @property
    def completed(self) -> int:
        return int(np.isfinite(self.ttft).sum())

    def percentile(self, which: str, q: float) -> float:
        x = self.ttft_measured() if which == "ttft" else self.tpot_measured()
        if x.size == 0:
            return 0.0
        # inf (rejected) sorts last, so a percentile over them is inf when they matter
        return float(np.percentile(x, q, method="higher"))

    def attainment(self, slo: SLO) -> float:
        ttft = self.ttft_measured()
        tpot = self.tpot[self.measured]
        ok = (ttft <= slo.ttft_s) & (np.isnan(tpot) | (tpot <= slo.tpot_s))
        return float(ok.mean()) if ok.size else 0.0

    def passes(self, slo: SLO) -> bool:
        att = slo.attainment if slo.criterion == "attainment" else None
        m = self.measured
        return meets(self.ttft[m], self.tpot[m], slo.ttft_s, slo.tpot_s, slo.percentile, att)

    def stability(self, slo: SLO, shortfall: float = SHORTFALL, final: bool = True
                  ) -> Stability:
        """Whether this run is a steady state (hastune.stability)."""
        if self.arrival is None or self.finish is None:
            return not_judged("the run has no arrival and finish times")
        att = slo.attainment if slo.criterion == "attainment" else None
        return assess(self.arrival, self.finish, self.ttft, self.tpot, self.warmup,
                      slo.ttft_s, slo.tpot_s, slo.percentile, att, shortfall, final)

    def summary(self, slo: SLO) -> dict:
        def stats(x: np.ndarray) -> dict[str, float]:
            if x.size == 0:
                return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
            fin = x[np.isfinite(x)]
            return {
                "mean": float(fin.mean()) if fin.size == x.size else float("inf"),
                "p50": float(np.percentile(x, 50, method="higher")),
                "p90": float(np.percentile(x, 90, method="higher")),
                "p99": float(np.percentile(x, 99, method="higher")),
            }

        t = stats(self.ttft_measured())
        p = stats(self.tpot_measured())
        return {
            "rate_rps": self.rate,
            "requests": int(self.ttft.size),
            "measured": int(self.ttft.size - self.warmup),
            "completed": self.completed,
            "rejected": self.rejected,
            "ttft_mean_s": t["mean"], "ttft_p50_s": t["p50"], "ttft_p90_s": t["p90"],
            "ttft_p99_s": t["p99"],
            "tpot_mean_s": p["mean"], "tpot_p50_s": p["p50"], "tpot_p90_s": p["p90"],
            "tpot_p99_s": p["p99"],
            "attainment": self.attainment(slo),
            "slo_met": self.passes(slo),
            "utilisation": dict(self.utilisation),
            "sim_time_s": self.sim_time_s,
            "events": self.events,
            **self.extra,
        }
