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

from collections.abc import Callable
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
    score = np.maximum(s2[d] - s1[d] ** 2 / m, 0.0) / (m * m)
    # the earliest of the cuts that tie, up to rounding (a flat tail: any cut in it scores 0
    # but for the sums' rounding, which would otherwise pick one at random)
    tol = 1e-12 * float(np.mean(y)) ** 2
    best = int(d[np.flatnonzero(score <= score.min() + tol)[0]])
    return max(floor, best * c)


# The seed stream of closed-loop clients' random start times (RequestSet.ramp_random), apart
# from the workload's and the front end's streams of the same seed.
RANDOM_RAMP_STREAM = 0x5A3B


def client_starts(reqs: RequestSet, clients: int) -> list[float]:
    """When each of a closed loop's `clients` sends its first request: at t = 0, or evenly
    over `reqs.ramp_s` (client i at i · ramp_s / clients), or with `reqs.ramp_random` at
    independent uniform times over it (sorted), drawn from the request set's seed."""
    if reqs.ramp_random and reqs.ramp_s > 0:
        rng = np.random.default_rng(np.random.SeedSequence([int(reqs.seed),
                                                            RANDOM_RAMP_STREAM]))
        return np.sort(rng.uniform(0.0, reqs.ramp_s, clients)).tolist()
    step = reqs.ramp_s / clients
    return [i * step for i in range(clients)]


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


# How long a closed loop runs (issue 13: a closed-loop mean must not depend on the run's
# length). MSER cuts the warm-up, but a run can be too short to have one to cut: a transient
# longer than half of it, or a slow drift, or swings between clumped and spread states that a
# few dozen rounds sample once (benchmarks/closed_loop_rounds.py: 26 of the 400 rows of
# silicon_llama31.csv moved by more than 5% between 40 and 400 rounds per client). So a run
# whose steady mean is not yet known (`known`) is doubled, as an open-loop probe whose verdict
# is not settled is, up to EXTEND times its requests (and a recipe's evaluator.max_requests).
# SGLang's slowest rows need thousands of rounds: at 16 times, 5 of its 46 rows stopped
# unsettled and one moved by 5.1%; at 64, 2 and 3.9%.
PRECISION = 0.015  # the relative standard error of the steady mean TTFT a run is taken at
SURE = 0.005       # … taken alone; between SURE and PRECISION it must also agree with the run
AGREE = 0.03       # half its length (its first half) to this (`known`)
DRIFT = 0.02       # the most the means of the steady part's two halves may differ
BATCHES = 8        # batch means for the standard error (non-overlapping, of whole rounds)
EXTEND = 64        # a closed loop runs at most this many times the requests it was given


def settled(run, clients: float) -> bool:
    """Whether a closed-loop run's steady mean TTFT is known: not if its warm-up cut (MSER)
    took half the run (the transient may go on past it), if the two halves of what follows
    differ by more than DRIFT, or if the standard error of its mean over BATCHES batch means
    of whole rounds is over PRECISION. A run with a rejected or unfinished request, stopped
    early, or too short to batch, is taken as it is."""
    return _judged(run, clients)[0]


def steady_rounds(run, clients: float) -> np.ndarray:
    """The mean TTFT of each whole round of a closed-loop run from its warm-up cut on."""
    c = max(1, int(round(clients)))
    k = len(run.ttft) // c
    return run.ttft[run.warmup - run.warmup % c:k * c].reshape(-1, c).mean(axis=1)


def known(run, clients: float, before: float | None) -> bool:
    """Whether steady_run may stop at `run`: it is `settled`, and its steady mean is either
    precise to SURE or within AGREE of `before`, the steady mean of the run half its length
    (None: this is the first). The batches of a short run are too short to see slow swings:
    jittered clients clump and part over a hundred rounds (SGLang's H200 terms, TP 4, 48
    clients of 8000 + 100 tokens: 80 rounds, MSER cutting 37, a standard error of 1.4% on a
    mean 7% under the 400-round one). The run before, whose requests are this one's first
    half, sees another part of the swing."""
    ok, y = _judged(run, clients)
    if not ok or y is None:  # not settled, or a run `settled` takes as it is
        return ok
    if standard_error(y) <= SURE:
        return True
    return before is not None and abs(float(y.mean()) / before - 1.0) <= AGREE


def _judged_mean(run, clients: float) -> float | None:
    """The steady mean TTFT of a run `settled` judges (None where it takes the run as it is:
    stopped early, a rejected or unfinished request, too short to batch)."""
    y = _judged(run, clients)[1]
    return None if y is None else float(y.mean())


def _judged(run, clients: float) -> tuple[bool, np.ndarray | None]:
    """`settled`'s verdict on a run and the steady round means it judged it on (None where
    it judged none: a run it takes as it is — stopped early, too short for a warm-up and
    BATCHES batches, or with a rejected or unfinished request, TTFT inf or nan — or whose
    MSER cut is at its bound with too few rounds left to batch)."""
    c = max(1, int(round(clients)))
    k = len(run.ttft) // c
    if "stopped_early_s" in run.extra or k < 2 * FLOOR_ROUNDS + 2:
        return True, None
    if not np.isfinite(run.ttft[:k * c]).all():
        return True, None
    y = steady_rounds(run, c)
    if len(y) < BATCHES:
        return run.warmup // c < k // 2 - 1, None  # unless MSER's cut is at its bound
    if run.warmup // c >= k // 2 - 1:  # MSER's cut at its bound
        return False, y
    h = len(y) // 2
    if abs(y[h:].mean() / y[:h].mean() - 1.0) > DRIFT:
        return False, y
    return standard_error(y) <= PRECISION, y


def standard_error(y: np.ndarray) -> float:
    """The relative standard error of the mean of round means `y`, from BATCHES batch means
    of whole rounds (non-overlapping)."""
    y = np.asarray(y, dtype=float)
    mean = float(y.mean())
    m = len(y) // BATCHES
    b = y[:m * BATCHES].reshape(BATCHES, m).mean(axis=1)
    return float(b.std(ddof=1)) / np.sqrt(BATCHES) / mean if mean > 0 else 0.0


def steady_run(sim: Simulator, make: Callable[[int], RequestSet], n: int, rate: float,
               most: int | None = None):
    """A closed loop of `rate` clients run until its steady mean is known (`known`): `n`
    requests (`make(n)`), doubled while not, up to EXTEND × n (or `most`); each run's
    clients start over the loaded cycle (loaded_ramp). The result's extra["rounds"] and
    ["rounds_asked"] say how many rounds per client were run, and were asked for, and
    ["settled"] whether its steady mean was known when it stopped (False: at the cap, still
    not). A run without the steady-state rule (RequestSet.steady False: a benchmark's mean)
    is run once, as given."""
    cap = EXTEND * n if most is None else max(n, min(EXTEND * n, most))
    c, asked = max(1.0, round(rate)), n
    before: float | None = None
    while True:
        reqs = make(n)
        run = sim.run(loaded_ramp(sim, reqs, rate), rate)
        rule = reqs.steady and reqs.think_s is not None
        ok = not rule or known(run, rate, before)
        before = _judged_mean(run, rate) if rule else None
        if ok or n >= cap:
            run.extra["rounds"], run.extra["rounds_asked"] = len(reqs) / c, asked / c
            if rule:
                run.extra["settled"] = ok
            return run
        n = min(2 * n, cap)
