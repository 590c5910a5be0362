"""TensorRT-LLM's batch waiting in the nodg simulator (Profile.batch_wait: (iters, ratio),
hastune.sim.nodg.plan.Planner.waits): while requests decode, a prompt not yet started waits
up to `batch_wait_iters` decode steps for more prompts, unless the next iteration's tokens
already reach `batch_wait_ratio` × its budget; with nothing decoding it never waits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.config import parse_config
from hastune.evaluators.sim import Evaluation
from hastune.model_ref import Engine
from hastune.sim.nodg.run import Run as NoDGRun
from hastune.workload import RequestSet
from tests.sim.replica_recipes import recipe

CHUNK = 2048
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def ev():
    rec = recipe("sharegpt", 200)
    rec = rec.model_copy(update={"engine": Engine(name="trtllm", terms=False)})
    return Evaluation(rec)


def _sim(ev, iters: int, ratio: float, replicas: int = 1):
    sim = ev.simulator(parse_config({"architecture": "nodg", "tp": 4, "replicas": replicas,
                                     "chunk_tokens": CHUNK}))
    sim.profile = sim.profile.model_copy(update={"batch_wait": (iters, ratio)})
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
    the event-by-event reference (`Run.ahead = False`) gives the same timestamps, open loop;
    and prompts wait on average: the mean TTFT is not below the run without waiting by more
    than the batching it buys could save (a loose bound: 5%)."""
    reqs = ev.requests_at(rate, n)
    sim = _sim(ev, iters, ratio, replicas)
    fast = sim.run(reqs, rate)
    monkeypatch.setattr(NoDGRun, "ahead", False)
    slow = sim.run(reqs, rate)
    monkeypatch.setattr(NoDGRun, "ahead", True)
    for f in ("ttft", "tpot", "arrival", "finish"):
        assert np.array_equal(getattr(fast, f), getattr(slow, f), equal_nan=True), f
    base = _sim(ev, 0, 0.0, replicas).run(reqs, rate)
    assert np.nanmean(fast.ttft) >= 0.95 * np.nanmean(base.ttft)


@given(name=st.sampled_from(["vllm", "sglang", "trtllm"]), iters=st.integers(0, 50),
       ratio=st.sampled_from([0.0, 0.5, 0.9, 1.0]))
@settings(max_examples=40, deadline=None)
def test_a_recipe_sets_batch_waiting_on_trtllm_only_and_both_or_neither(name, iters, ratio):
    """`engine: {name: trtllm, batch_wait_iters: N, batch_wait_ratio: R}`: refused, with the
    fix, on another engine or with one of the two alone; carried into the terms' scheduler
    (and so the profile) when given; left out of the recipe's dump when not (identity)."""
    from pydantic import ValidationError

    from hastune import engine_terms as et

    ok = (iters == 0 and ratio == 0.0) or (name == "trtllm" and iters > 0 and ratio > 0)
    data = {"name": name, "batch_wait_iters": iters, "batch_wait_ratio": ratio}
    if not ok:
        with pytest.raises(ValidationError, match="Fix:"):
            Engine.model_validate(data)
        return
    e = Engine.model_validate(data)
    dump = e.model_dump(mode="json")
    assert ("batch_wait_iters" in dump) == (iters > 0)
    assert Engine(name=name).model_dump(mode="json") == {"name": name, "version": None,
                                                          "terms": True}
    from hastune.profile import load_profile
    from hastune.recipe import Recipe

    rec = Recipe.model_validate({"name": "w", "model": "llama-30b", "engine": data,
                                 "cluster": {"gpu": "h100-80gb", "gpus": 1},
                                 "workload": {"requests": 10},
                                 "slo": {"ttft_s": 1.0, "tpot_s": 0.1}})
    assert rec.engine == e
    prof = load_profile(ROOT / "profiles" / "h100-80gb" / "llama-30b.yaml")
    t = et.for_profile(rec.engine, prof)
    assert (t.scheduler.wait_iters, t.scheduler.wait_ratio) == (iters, ratio)
    assert et.record(rec.engine, prof, t)["scheduler"]["wait_iters"] == iters
    applied = et.apply(prof, t)
    assert applied.batch_wait == (iters, ratio)
    assert ("batch_wait" in applied.model_dump(mode="json")) == (iters > 0)  # _since


def test_batch_waiting_outside_nodg_is_said():
    from hastune.caveats import caveats

    rec = {"on": True, "engine": "trtllm", "gpu": "h100-80gb", "fitted_for": "h100-80gb",
           "fitted_on": "rows", "scheduler": {"wait_iters": 20, "wait_ratio": 0.9}}
    padg = parse_config({"architecture": "padg", "instances": 2, "tp": 1})
    nodg = parse_config({"architecture": "nodg", "replicas": 2, "tp": 1})
    assert any("batch waiting" in c for c in caveats(rec, padg, 1.0))
    assert not any("batch waiting" in c for c in caveats(rec, nodg, 1.0))
    rec["scheduler"]["wait_iters"] = 0
    assert not any("batch waiting" in c for c in caveats(rec, padg, 1.0))
