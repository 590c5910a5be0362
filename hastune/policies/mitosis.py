"""Mitosis scaling (EcoServe §3.4): a macro-instance grows and shrinks one instance at a time
between N_l and N_u instances, splits in two when it would pass N_u and merges back when two
small ones fit in one. Removed instances drain (finish what they hold) before they leave.

Pure: `decide` reads one macro-instance's recent statistics and returns what to do; the caller
(the simulator, or the runtime) acts and tells it nothing back but the next statistics.

- grow when the mean TTFT of the requests that got their first token in the last interval is
  above the TTFT SLO (admission queues build up TTFT first when the group is overloaded), or
  when requests waited for admission for the whole interval;
- shrink when the mean TTFT is below `shrink_ttft` × SLO and the mean saved TPOT of the group's
  decoding requests is above an upper bound that grows with the load the others would absorb:
  `shrink_slack` × TPOT SLO × n / (n − 1). (The paper says only "saved TPOT above an upper
  bound computed from the current number of instances"; this is our reading of it.)
"""

from __future__ import annotations

GROW, SHRINK, HOLD = "grow", "shrink", "hold"


class Mitosis:
    __slots__ = ("n_lower", "n_upper", "ttft_slo", "tpot_slo", "shrink_ttft", "shrink_slack")

    def __init__(self, n_lower: int, n_upper: int, ttft_slo: float, tpot_slo: float,
                 shrink_ttft: float = 0.3, shrink_slack: float = 10.0):
        if not 1 <= n_lower <= n_upper:
            raise ValueError("need 1 ≤ n_lower ≤ n_upper")
        self.n_lower, self.n_upper = n_lower, n_upper
        self.ttft_slo, self.tpot_slo = ttft_slo, tpot_slo
        self.shrink_ttft, self.shrink_slack = shrink_ttft, shrink_slack

    def slack_bound(self, n: int) -> float:
        """Mean saved TPOT above which a group of n instances can lose one."""
        if n <= 1:
            return float("inf")
        return self.shrink_slack * self.tpot_slo * n / (n - 1)

    def decide(self, n: int, mean_ttft: float | None, mean_saved: float,
               queued_all_interval: bool = False) -> str:
        """What a macro-instance of n active instances should do now."""
        if queued_all_interval or (mean_ttft is not None and mean_ttft > self.ttft_slo):
            return GROW
        if (n > 1 and mean_ttft is not None and mean_ttft <= self.shrink_ttft * self.ttft_slo
                and mean_saved >= self.slack_bound(n)):
            return SHRINK
        return HOLD

    def split(self, n: int) -> tuple[int, int] | None:
        """Sizes of the two halves when a group of n has passed N_u, else None."""
        if n <= self.n_upper:
            return None
        return (n + 1) // 2, n // 2

    def can_merge(self, a: int, b: int) -> bool:
        """Two groups, one of them below N_l, fit together under N_u."""
        return min(a, b) < self.n_lower and a + b <= self.n_upper
