"""How long a closed loop runs (hastune.sim.warmup.settled / steady_run, issue 13: a closed-loop
mean must not depend on the run's length), on generated TTFT series and a fake simulator whose
runs hold a transient of a given length: a run is doubled until its steady mean is known, never
past its cap, and a benchmark's run (no steady-state rule) is run once."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.caveats import closed_loop
from hastune.runs import RunResult
from hastune.sim import warmup
from hastune.sim.warmup import steady_start
from hastune.workload import RequestSet


def _run(y: np.ndarray, clients: int) -> RunResult:
    return RunResult(rate=float(clients), ttft=y, tpot=np.full(len(y), 0.01),
                     warmup=steady_start(y, clients))


def _series(rounds, clients, level, noise, seed, step_at=None, step=0.0):
    rng = np.random.default_rng(seed)
    y = level * (1 + noise * rng.standard_normal((rounds, clients)))
    if step_at is not None:
        y[step_at:] *= 1 + step
    return y.ravel()


@given(rounds=st.integers(24, 200), clients=st.integers(1, 64), level=st.floats(0.01, 10),
       noise=st.floats(0.0, 0.01), seed=st.integers(0, 10_000))
@settings(max_examples=150, deadline=None)
def test_a_stationary_run_is_settled(rounds, clients, level, noise, seed):
    """Per-request noise of ≤ 1% around a level: the halves agree and the standard error is
    far under PRECISION, so it is settled — unless MSER's cut landed on its bound (which a
    stationary series does about once in a hundred at 40 rounds: then one doubling more)."""
    run = _run(_series(rounds, clients, level, noise, seed), clients)
    at_bound = run.warmup // clients >= rounds // 2 - 1
    assert warmup.settled(run, clients) or at_bound
    if noise == 0.0:
        assert warmup.settled(run, clients)


@given(rounds=st.integers(24, 200), clients=st.integers(1, 64), level=st.floats(0.01, 10),
       where=st.floats(0.55, 0.8), step=st.floats(0.1, 0.9), sign=st.sampled_from([-1, 1]),
       seed=st.integers(0, 10_000))
@settings(max_examples=150, deadline=None)
def test_a_level_that_moves_late_in_the_run_is_not_settled(rounds, clients, level, where,
                                                           step, sign, seed):
    """The TTFT moves by ≥ 10% (up or down) for the last fifth of the run or more, after more
    than half of it — past where MSER may cut: the two halves of what is kept differ by more
    than DRIFT, so the run is not settled. (A smaller or later move can pass: 4.7% over the
    last 19% of 29 rounds does.)"""
    y = _series(rounds, clients, level, 0.002, seed, int(where * rounds), sign * step)
    assert not warmup.settled(_run(y, clients), clients)


@given(rounds=st.integers(24, 100), level=st.floats(0.01, 10), seed=st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_a_noisy_run_is_not_settled(rounds, level, seed):
    """One client whose TTFT varies by half its mean from request to request: the standard
    error of a mean over ≤ 100 rounds is ≥ 5%, over PRECISION."""
    rng = np.random.default_rng(seed)
    y = level * rng.exponential(1.0, rounds)
    assert not warmup.settled(_run(y, 1), 1)


def test_runs_it_cannot_judge_are_taken_as_they_are():
    y = np.full(40 * 4, 0.2)
    y[:80] = 1.0  # a transient over half the run, but: a rejected request
    r = _run(y, 4)
    assert not warmup.settled(r, 4)
    y2 = y.copy()
    y2[-1] = np.inf
    assert warmup.settled(_run(y2, 4), 4)
    stopped = _run(y, 4)
    stopped.extra["stopped_early_s"] = 3.0
    assert warmup.settled(stopped, 4)
    assert warmup.settled(_run(np.full(5 * 4, 0.2), 4), 4)  # too short to batch


class _Transient:
    """A fake simulator: round j of a run has TTFT high for j < `rounds` (a transient that
    lasts that many rounds whatever the run's length), then the level; records each run."""

    def __init__(self, clients: int, rounds: int, excess: float):
        self.clients, self.rounds, self.excess = clients, rounds, excess
        self.lengths: list[int] = []

    def run(self, reqs: RequestSet, rate: float) -> RunResult:
        n = len(reqs)
        self.lengths.append(n)
        j = np.arange(n) // self.clients
        y = np.where(j < self.rounds, 0.1 * (1 + self.excess), 0.1)
        return _run(y, self.clients)


def _make(steady: bool):
    def make(n: int) -> RequestSet:
        z = np.zeros(n)
        return RequestSet(np.ones(n), z.astype(np.int64), z, z, np.full(n, 100.0),
                          np.full(n, 10.0), 0, None, 0.0, None, 0.0, steady)
    return make


@given(clients=st.integers(1, 32), start=st.integers(8, 60), transient=st.integers(0, 400),
       excess=st.floats(0.1, 3.0), most=st.one_of(st.none(), st.integers(1, 20_000)))
@settings(max_examples=100, deadline=None)
def test_steady_run_doubles_until_settled_within_its_cap(clients, start, transient, excess,
                                                         most):
    """Each run doubles the last (the first: `start` rounds), none past the cap (EXTEND × the
    first, or `most`), and the loop ends at the first settled run or at the cap; the result
    says its rounds per client."""
    sim = _Transient(clients, transient, excess)
    n = clients * start
    run = warmup.steady_run(sim, _make(True), n, clients, most)
    cap = warmup.EXTEND * n if most is None else max(n, min(warmup.EXTEND * n, most))
    lens = list(sim.lengths)  # (the checks below run the fake again)
    assert lens[0] == n and all(b == min(2 * a, cap) for a, b in zip(lens, lens[1:]))
    assert max(lens) <= cap
    assert len(run.ttft) == lens[-1]
    assert run.extra["rounds"] == lens[-1] / clients
    before = None
    for m in lens[:-1]:  # every run before the last was not known
        r = sim.run(_make(True)(m), clients)
        assert not warmup.known(r, clients, before)
        before = warmup._judged_mean(r, clients)
    assert lens[-1] == cap or warmup.known(run, clients, before)
    # it says whether it stopped settled, and a result's caveats say so when not
    assert run.extra["settled"] is warmup.known(run, clients, before)  # a bool, for JSON
    said = closed_loop(run.extra)
    assert bool(said) == (not run.extra["settled"])
    if said:
        assert f"{lens[-1] / clients:g} rounds per client" in said[0]
    if 2 * transient + 4 < lens[-1] // clients:  # a transient under half the run is cut
        assert np.all(run.ttft_measured() == 0.1)


def test_a_benchmarks_run_is_run_once():
    sim = _Transient(4, 100, 1.0)
    run = warmup.steady_run(sim, _make(False), 4 * 40, 4)
    assert sim.lengths == [160] and len(run.ttft) == 160
    assert "settled" not in run.extra and closed_loop(run.extra) == []  # no rule, no verdict


def _series_run(y: np.ndarray, clients: int, warm: int = 2) -> RunResult:
    return RunResult(rate=float(clients), ttft=np.repeat(y, clients),
                     tpot=np.full(len(y) * clients, 0.01), warmup=warm * clients)


@given(level=st.floats(0.05, 5.0), clients=st.integers(1, 16), off=st.floats(0.04, 0.5),
       sign=st.sampled_from([-1, 1]), seed=st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_a_run_is_known_when_precise_or_when_it_agrees_with_its_first_half(level, clients, off,
                                                                          sign, seed):
    """A settled run whose standard error is between SURE and PRECISION is known only if its
    steady mean is within AGREE of the run half its length (`before`); one precise to SURE is
    known alone; one that is not settled is never known."""
    rng = np.random.default_rng(seed)
    rounds = 200
    # noise for a standard error of ~1% (between SURE and PRECISION): i.i.d. rounds
    noisy = level * (1 + 0.14 * rng.standard_normal(rounds))
    r = _series_run(noisy, clients)
    r.warmup = steady_start(r.ttft, clients)
    if not warmup.settled(r, clients):
        assert not warmup.known(r, clients, None)
        return
    se = warmup.standard_error(warmup.steady_rounds(r, clients))
    m = float(warmup.steady_rounds(r, clients).mean())
    if se > warmup.SURE:
        assert not warmup.known(r, clients, None)
        assert warmup.known(r, clients, m * (1 + 0.5 * warmup.AGREE))
        assert not warmup.known(r, clients, m * (1 + sign * max(off, 2 * warmup.AGREE)))
    calm = _series_run(level * (1 + 1e-4 * rng.standard_normal(rounds)), clients)
    assert warmup.known(calm, clients, None)
    assert warmup.known(calm, clients, level * (1 + off))  # precise: no need to agree
