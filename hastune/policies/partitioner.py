"""Dynamic SM partitioner: the smallest encoder SM share that keeps encode latency within
(1 + δ) of its full-GPU latency; the co-resident local prefill gets the rest."""

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
