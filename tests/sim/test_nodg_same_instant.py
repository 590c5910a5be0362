"""An idle nodg replica woken by an arrival plans once every arrival of that instant is in (as an
engine's loop schedules whatever waits when its next iteration starts): requests that arrive
together are prefilled together. Without ties (Poisson arrivals) nothing changes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.config import parse_config
from hastune.evaluators.sim import Evaluation
from hastune.sim.nodg.run import Run as NoDGRun
from tests.sim.replica_recipes import recipe


@pytest.fixture(scope="module")
def ev():
    return Evaluation(recipe("sharegpt", 60))


def _tied(reqs, prompts: list[int], n: int):
    """The first len(prompts) requests arrive together at an idle replica, the rest far apart."""
    k = len(prompts)
    gaps = np.full(n, 1e4)
    gaps[1:k] = 0.0
    pt = reqs.prompt_tokens.copy()
    pt[:k] = prompts
    return dataclasses.replace(reqs, gaps=gaps, prompt_tokens=pt, llm_tokens=pt * 0)


@settings(max_examples=25, deadline=None)
@given(prompts=st.lists(st.integers(16, 1500), min_size=2, max_size=6),
       chunk=st.sampled_from([2048, 4096, 8192]), ahead=st.booleans())
def test_same_instant_arrivals_share_the_first_iteration(ev, prompts, chunk, ahead):
    sim = ev.simulator(parse_config({"architecture": "nodg", "tp": 2, "replicas": 1,
                                     "chunk_tokens": chunk}))
    sim.core = "python"  # (`ahead` is the Python path's; the compiled core's run is `ahead` off)
    reqs = _tied(ev.requests_at(1.0, 20), prompts, 20)
    old = NoDGRun.ahead
    NoDGRun.ahead = ahead
    try:
        res = sim.run(reqs, 1.0)
    finally:
        NoDGRun.ahead = old
    k = len(prompts)
    first = res.arrival[:k] + res.ttft[:k]
    assert np.all(res.arrival[:k] == res.arrival[0])
    if sum(prompts) <= chunk:  # one iteration prefills them all: one first-token time
        assert np.all(first == first[0]), first
    else:  # the budget splits them, but the first iteration is full: none finishes alone
        assert first.min() > res.arrival[0]
    assert np.all(np.isfinite(first))


def test_poisson_arrivals_wake_no_replica_late(ev, monkeypatch):
    """No two Poisson arrivals tie: every woken replica plans at its arrival, as before (the
    deferral is never taken), and the event-by-event run agrees bit for bit."""
    calls: list = []
    wake = NoDGRun.wake
    monkeypatch.setattr(NoDGRun, "wake", lambda s, *a: (calls.append(a), wake(s, *a)))
    sim = ev.simulator(parse_config({"architecture": "nodg", "tp": 2, "replicas": 4,
                                     "chunk_tokens": 2048}))
    sim.core = "python"
    reqs = ev.requests_at(3.0, 60)
    fast = sim.run(reqs, 3.0)
    monkeypatch.setattr(NoDGRun, "ahead", False)
    slow = sim.run(reqs, 3.0)
    assert calls == []
    for f in ("ttft", "tpot", "arrival", "finish"):
        assert np.array_equal(getattr(fast, f), getattr(slow, f), equal_nan=True), f
