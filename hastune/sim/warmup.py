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

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hastune.sim import Simulator
    from hastune.workload import RequestSet

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


PILOT_ROUNDS = 4   # a closed loop's pilot run: rounds, the first of which is left out


def loaded_ramp(sim: Simulator, reqs: RequestSet, rate: float) -> RequestSet:
    """The request set of a closed loop whose clients start spread over the loaded cycle (a
    client's send-to-send time under this load) instead of one zero-load lifetime.

    Clients spread over a zero-load lifetime start bunched when the deployment queues: their
    cycle under load is several times longer (Llama-3.1-8B, TP 1, 128 clients of 1024 + 128
    tokens on TensorRT-LLM's H100 terms: 0.87 s at zero load, 4.47 s loaded), and identical
    clients peel apart one collision at a time, so the run takes 120 rounds to settle (mean
    TTFT 572 ms in its first 16 rounds, 315 ms from round 112 on) and a 40-round run's mean
    is 50% over a 400-round one's, beyond what MSER can cut. Started over the loaded cycle they
    settle in a few rounds. The cycle is read off a pilot run: the first PILOT_ROUNDS rounds
    of the same requests with the zero-load ramp, the mean send-to-last-token time (TTFT +
    TPOT × (output − 1)) plus the think time of every request after the first round. No
    change where the cycle is not longer than the ramp (a deployment that does not queue), in
    open loop, for runs shorter than 2 × PILOT_ROUNDS rounds, or without the steady-state rule
    (RequestSet.steady False: a benchmark's mean, hastune fidelity)."""
    from dataclasses import replace

    if reqs.think_s is None or reqs.ramp_s <= 0.0 or not reqs.steady:
        return reqs
    c = max(1, min(len(reqs), int(round(rate))))
    n = c * PILOT_ROUNDS
    if len(reqs) < 2 * n:
        return reqs
    pilot = sim.run(reqs.head(n), rate)
    ttft, tpot = pilot.ttft[c:n], pilot.tpot[c:n]
    out = np.asarray(reqs.output_tokens[c:n], dtype=float)
    life = ttft + np.where(np.isnan(tpot), 0.0, tpot) * np.maximum(out - 1.0, 0.0)
    if not np.isfinite(life).all():  # rejected or unfinished requests: leave the ramp be
        return reqs
    cycle = float(life.mean()) + float(reqs.think_s)
    return replace(reqs, ramp_s=cycle) if cycle > reqs.ramp_s else reqs
