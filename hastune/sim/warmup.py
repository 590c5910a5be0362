"""Where a closed-loop run's steady state begins (issue 13: closed-loop results must not depend
on the run's length; report steady state, warm-up excluded by rule).

Clients that start together, or spread over one zero-load request lifetime, take some rounds
to settle where the deployment queues: a prompt-bound replica (3000-token prompts, 15-token
outputs, 18 clients) gives a mean TTFT 67% above its steady value over the first ten rounds,
then the same value for hundreds. Two rounds of warm-up leave most of that in a 40-round mean
(6.7% over the 400-round one). The rule is MSER (White 1997, the marginal standard error
rule, on batches of one round): of the truncation points from two rounds to half the run, the
one that minimises the squared standard error of the mean of what is left,
    MSER(d) = Σ_{j>d} (Y_j − Ȳ_d)² / (k − d)²,
Y_j the mean TTFT of round j (`clients` consecutive sends) and k the rounds. A run whose first
rounds are no different from the rest loses about the floor; one with a transient loses it.
"""

from __future__ import annotations

import numpy as np

FLOOR_ROUNDS = 2   # always warm-up (the clients' first two rounds)


def steady_start(ttft: np.ndarray, clients: int) -> int:
    """The number of leading requests (whole rounds of `clients`, in send order) that warm up:
    at least FLOOR_ROUNDS rounds (bounded by half the run), at most half the rounds. Runs
    with a rejected or unfinished request (TTFT inf or nan) keep the floor."""
    n = len(ttft)
    c = max(1, int(clients))
    floor = min(FLOOR_ROUNDS * c, n // 2)
    k = n // c
    if k < 2 * FLOOR_ROUNDS + 2 or not np.isfinite(ttft[:k * c]).all():
        return floor
    y = ttft[:k * c].reshape(k, c).mean(axis=1)
    # suffix sums: for a cut at d rounds, the mean and sum of squares of rounds d..k-1
    s1 = np.cumsum(y[::-1])[::-1]
    s2 = np.cumsum((y * y)[::-1])[::-1]
    d = np.arange(FLOOR_ROUNDS, k // 2 + 1)
    m = k - d
    sse = np.maximum(s2[d] - s1[d] ** 2 / m, 0.0)
    best = int(d[np.argmin(sse / (m * m))])
    return max(floor, best * c)
