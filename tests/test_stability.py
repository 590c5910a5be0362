"""The stability verdict (hastune.stability) on generated queues, and the simulator's early stop
(StopRule): it only ever stops a run that the SLOs fail anyway."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.evaluators.sim import Evaluation
from hastune.recipe import SLO
from hastune.runs import RunResult
from hastune.stability import assess

SLO_ = SLO(ttft_s=2.0, tpot_s=0.1)


def queue(rho: float, n: int, seed: int, service: float = 0.1, cv: float = 1.0):
    """A FIFO single-server queue (Lindley's recursion) with Gamma arrivals at load `rho`:
    arrival times, departure times and waits."""
    rng = np.random.default_rng(seed)
    k = 1.0 / (cv * cv)
    gaps = rng.gamma(k, service / rho / k, n)
    svc = rng.exponential(service, n)
    a = np.cumsum(gaps)
    d = np.empty(n)
    free = 0.0
    for i in range(n):
        start = max(a[i], free)
        free = d[i] = start + svc[i]
    return a, d


def verdict(a, d, final=True, slo=SLO_):
    ttft = d - a
    tpot = np.full(len(a), 0.01)
    return assess(a, d, ttft, tpot, int(0.1 * len(a)), slo.ttft_s, slo.tpot_s, final=final)


@settings(max_examples=30, deadline=None)
@given(rho=st.floats(1.15, 3.0), seed=st.integers(0, 10_000), cv=st.floats(0.5, 2.0))
def test_an_overloaded_queue_is_unstable(rho, seed, cv):
    a, d = queue(rho, 20_000, seed, cv=cv)
    v = verdict(a, d, slo=SLO(ttft_s=1e9, tpot_s=1.0))  # SLOs it cannot miss: only the queue
    assert v.judged and not v.stable, v
    assert v.ratio < 0.97


@settings(max_examples=30, deadline=None)
@given(rho=st.floats(0.05, 0.7), seed=st.integers(0, 10_000), cv=st.floats(0.5, 2.0))
def test_a_lightly_loaded_queue_is_stable_and_settled(rho, seed, cv):
    """Stable at 20,000 requests; settled there, or — bursty arrivals near ρ 0.7 can leave
    thirds that disagree — once run 4× as long, as the evaluator extends it (`extend` 4)."""
    a, d = queue(rho, 20_000, seed, cv=cv)
    v = verdict(a, d, final=False)
    if v.judged and not v.settled:
        a, d = queue(rho, 80_000, seed, cv=cv)
        v = verdict(a, d, final=False)
    assert v.judged and v.stable and v.settled, v
    assert v.ratio == pytest.approx(1.0, abs=0.03)


def test_a_queue_that_only_breaks_its_slo_late_is_unstable_or_unsettled():
    # 3% over capacity: the whole window still meets a loose TTFT SLO, its last third does not
    a, d = queue(1.03, 20_000, 1, cv=1.0)
    slo = SLO(ttft_s=float(np.percentile((d - a)[2000:], 90)) * 1.01, tpot_s=0.1)
    assert verdict(a, d, final=False, slo=slo).settled is False
    v = verdict(a, d, slo=slo)
    assert not v.stable and ("last third" in v.reason or "short" in v.reason)


def test_rejected_requests_leave_when_they_arrive():
    a, d = queue(0.5, 3000, 2)
    d = d.copy()
    ttft = d - a
    ttft[::10] = np.inf  # a tenth rejected: they never finish
    d[::10] = np.inf
    v = assess(a, d, ttft, np.full(len(a), 0.01), 300, 1e9, 1.0)
    assert v.ratio == pytest.approx(1.0, abs=0.02)


def test_too_few_requests_are_not_judged():
    a, d = queue(0.5, 20, 3)
    assert not verdict(a, d).judged


# -- the simulator's early stop ---------------------------------------------------------------

@pytest.fixture(scope="module")
def audio_small(audio_recipe):
    return Evaluation(audio_recipe, requests=600)


@settings(max_examples=12, deadline=None)
@given(rate=st.floats(20.0, 400.0), which=st.sampled_from(["epd-2-2-4", "static"]),
       ttft=st.floats(0.3, 3.0), tpot=st.floats(0.03, 0.2))
def test_a_run_stopped_early_fails_exactly_when_the_whole_run_fails(
        audio_small, epd_config, static_config, rate, which, ttft, tpot):
    """The stop rule is exact: a run it stops fails its SLOs, and so does the whole run."""
    rec = audio_small.recipe.model_copy(update={"slo": SLO(ttft_s=ttft, tpot_s=tpot)})
    ev = Evaluation(rec, requests=600)
    cfg = epd_config if which == "epd-2-2-4" else static_config
    sim = ev.simulator(cfg)
    reqs = ev.requests_at(rate)
    watched = sim.run(reqs, rate)
    sim.stop_rule = None
    whole = sim.run(reqs, rate)
    assert "stopped_early_s" not in whole.extra
    if "stopped_early_s" in watched.extra:
        assert not watched.passes(rec.slo) and not whole.passes(rec.slo)
    else:
        assert np.array_equal(watched.ttft, whole.ttft)


def test_a_far_overloaded_probe_stops_early(audio_small, epd_config):
    run = audio_small.run(epd_config, 2000.0)
    assert "stopped_early_s" in run.extra and not run.passes(audio_small.recipe.slo)
    assert len(run.ttft) < audio_small.probe_size(2000.0)
    assert run.verdict is not None and "stopped" in run.verdict.reason


def test_probe_windows_span_the_slo_lifetime(audio_small):
    rec = audio_small.recipe
    life = rec.slo.ttft_s + rec.slo.tpot_s * (audio_small.requests.output_tokens.mean() - 1)
    assert audio_small.span_s >= rec.evaluator.min_span * life - 1e-9
    for rate in (1.0, 50.0, 500.0):
        n = audio_small.probe_size(rate)
        assert n >= min(rate * audio_small.span_s, rec.evaluator.max_requests)
        assert audio_small.probe_cap(rate) >= n


def test_run_result_without_times_is_not_judged():
    run = RunResult(rate=1.0, ttft=np.full(100, 0.1), tpot=np.full(100, 0.01))
    assert not run.stability(SLO_).judged
