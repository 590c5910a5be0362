"""TensorRT-LLM's batch waiting in the nodg simulator (Profile.batch_wait_iters / _ratio,
hastune.sim.nodg_plan.Planner.waits): while requests decode, a prompt not yet started waits
up to `batch_wait_iters` decode steps for more prompts, unless the next iteration's tokens
already reach `batch_wait_ratio` × its budget; with nothing decoding it never waits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.config import parse_config
from hastune.evaluate import Evaluation
from hastune.model_ref import Engine
from hastune.sim import nodg_run
from hastune.workload import RequestSet
from tests.sim.replica_recipes import recipe

CHUNK = 2048


@pytest.fixture(scope="module")
def ev():
    rec = recipe("sharegpt", 200)
    rec = rec.model_copy(update={"engine": Engine(name="trtllm", terms=False)})
    return Evaluation(rec)


def _sim(ev, iters: int, ratio: float, replicas: int = 1):
    sim = ev.simulator(parse_config({"architecture": "nodg", "tp": 4, "replicas": replicas,
                                     "chunk_tokens": CHUNK}))
    sim.profile = sim.profile.model_copy(update={"batch_wait_iters": iters,
                                                 "batch_wait_ratio": ratio})
    return sim


def _two(prompt: int, out0: int, out1: int, gap: float) -> RequestSet:
    """Request 0 at t ≈ 0, request 1 `gap` seconds later (open loop at rate 1)."""
    n = 2
    return RequestSet(np.array([1e-9, gap]), np.zeros(n, int), np.zeros(n), np.zeros(n),
                      np.array([prompt, prompt], float), np.array([out0, out1], float), 0)


@given(prompt=st.integers(16, 1500), gap=st.floats(0.05, 0.5), iters=st.integers(1, 30))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
def test_a_prompt_alone_beside_decoding_waits_its_iterations(ev, prompt, gap, iters):
    """Request 1 comes while request 0 decodes a long output: its first token comes `iters`
    decode steps later than without waiting (each as long as request 0's time per token, which
    its one-request batch sets), while request 0, which came to an idle replica, does not wait.
    A wait longer than request 0's output ends at its last step: nothing decodes then."""
    reqs = _two(prompt, 4000, 50, gap)
    base = _sim(ev, 0, 0.0).run(reqs, 1.0)
    got = _sim(ev, iters, 0.9).run(reqs, 1.0)
    assert got.ttft[0] == base.ttft[0]
    step = base.tpot[0]  # one sequence decoding: its steps, a little longer as its context grows
    assert got.ttft[1] - base.ttft[1] == pytest.approx(iters * step, rel=0.02)
    short = _two(prompt, 12, 50, gap)  # request 0 finishes within the wait
    b2 = _sim(ev, 0, 0.0).run(short, 1.0)
    g2 = _sim(ev, 10_000, 0.9).run(short, 1.0)
    fin0 = b2.ttft[0] + b2.tpot[0] * 11 + b2.arrival[0]
    if b2.arrival[1] + b2.ttft[1] < fin0:  # it would have started before request 0 finished
        assert g2.arrival[1] + g2.ttft[1] > fin0  # now it starts at that finish
        assert g2.arrival[1] + g2.ttft[1] - fin0 < base.ttft[0] + 1e-9  # alone, at once


@given(rate=st.floats(0.5, 6.0), n=st.integers(20, 120), iters=st.integers(1, 25))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
def test_a_threshold_always_met_never_waits(ev, rate, n, iters):
    """A ratio of 0 (the next iteration's tokens always reach it) or one so small that a
    single decoding request meets it never holds a prompt: the run is the one without batch
    waiting, bit for bit."""
    reqs = ev.requests_at(rate, n)
    base = _sim(ev, 0, 0.0).run(reqs, rate)
    for ratio in (0.0, 1.0 / CHUNK):
        got = _sim(ev, iters, ratio).run(reqs, rate)
        for f in ("ttft", "tpot", "arrival", "finish"):
            assert np.array_equal(getattr(got, f), getattr(base, f), equal_nan=True), f


@given(rate=st.floats(1.0, 12.0), n=st.integers(30, 150), iters=st.integers(1, 25),
       ratio=st.floats(0.05, 1.0), replicas=st.integers(1, 2))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
def test_waiting_runs_as_event_by_event_and_delays_prompts(ev, rate, n, iters, ratio, replicas,
                                                           monkeypatch):
    """With batch waiting the run takes no shortcut (every iteration planned as it starts):
    the event-by-event reference (`_Run.ahead = False`) gives the same timestamps, open loop;
    and prompts wait on average: the mean TTFT is not below the run without waiting by more
    than the batching it buys could save (a loose bound: 5%)."""
    reqs = ev.requests_at(rate, n)
    sim = _sim(ev, iters, ratio, replicas)
    fast = sim.run(reqs, rate)
    monkeypatch.setattr(nodg_run._Run, "ahead", False)
    slow = sim.run(reqs, rate)
    monkeypatch.setattr(nodg_run._Run, "ahead", True)
    for f in ("ttft", "tpot", "arrival", "finish"):
        assert np.array_equal(getattr(fast, f), getattr(slow, f), equal_nan=True), f
    base = _sim(ev, 0, 0.0, replicas).run(reqs, rate)
    assert np.nanmean(fast.ttft) >= 0.95 * np.nanmean(base.ttft)
