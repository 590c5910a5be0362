"""SM partitioners of an encode GPU with a co-resident local prefill.

`SMPartitioner`, EAServe's dynamic one: per encode batch, the smallest encoder SM share that
keeps encode latency within (1 + δ) of its full-GPU latency; the local prefill gets the rest
while the batch runs and the whole GPU while the encoder idles.

`FixedSplit`, what CUDA MPS can run on the engines people use: an encode server and a prefill
server on one GPU, each capped at its share of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, set
once per process), so the encoder has share f for every batch and the prefill 1 − f always,
also while the encoder idles.
"""

from __future__ import annotations

from collections.abc import Callable

# The seed's measured fallback table: encode batch → encoder SM share.
SEED_SM_TABLE: dict[int, float] = {1: 0.20, 2: 0.30, 4: 0.40, 6: 0.60, 8: 0.75}

Curve = list[tuple[float, float]]


def min_share_within(points: Curve, budget: float) -> float:
    """Smallest share f with rel(f) ≤ 1 + budget on a piecewise-linear, non-increasing curve
    of (share, relative latency) points ending at (1.0, 1.0)."""
    limit = 1.0 + budget
    if points[0][1] <= limit:
        # rel(f) = r0·s0/f below the first point
        s0, r0 = points[0]
        return min(s0, s0 * r0 / limit)
    for (s0, r0), (s1, r1) in zip(points, points[1:]):
        if r1 <= limit:
            if r0 == r1:
                return s1
            return s0 + (s1 - s0) * (r0 - limit) / (r0 - r1)
    return 1.0


class SMPartitioner:
    """`encode_share(batch)` → encoder share f. `curve_for(batch)` returns the profile's curve
    (or None, then the seed's table is used: largest key ≤ batch)."""

    def __init__(self, curve_for: Callable[[int], Curve | None] | None = None,
                 budget: float = 0.2, table: dict[int, float] | None = None):
        if budget <= 0:
            raise ValueError("budget must be > 0")
        self.budget = budget
        self._curve_for = curve_for
        self._table = dict(sorted((table or SEED_SM_TABLE).items()))
        self._cache: dict[int, float] = {}

    def encode_share(self, batch: int) -> float:
        f = self._cache.get(batch)
        if f is None:
            curve = self._curve_for(batch) if self._curve_for else None
            if curve:
                f = min_share_within(curve, self.budget)
            else:
                f = next(iter(self._table.values()))
                for k, v in self._table.items():
                    if batch >= k:
                        f = v
            self._cache[batch] = f
        return f

    def prefill_share(self, batch: int) -> float:
        return 1.0 - self.encode_share(batch)

    @property
    def idle_prefill_share(self) -> float:
        """The local prefill's share while the encoder idles: the whole GPU."""
        return 1.0

    def slowdown_without_curve(self, share: float) -> float:
        """An encode batch's latency relative to the whole GPU where the profile has no SM
        curve: the budget the share was chosen for."""
        return 1.0 + self.budget


class FixedSplit(SMPartitioner):
    """One encoder share f for every batch; the local prefill gets 1 − f at all times."""

    def __init__(self, share: float):
        if not 0.0 < share < 1.0:
            raise ValueError("a fixed SM split must be in (0, 1)")
        super().__init__(None)
        self.share = share

    def encode_share(self, batch: int) -> float:
        return self.share

    @property
    def idle_prefill_share(self) -> float:
        return 1.0 - self.share

    def slowdown_without_curve(self, share: float) -> float:
        """No curve: latency as 1 / share (all of the encoder's work scales with its SMs, the
        slowest a share can make it)."""
        return 1.0 / share
