"""A serial front end (FrontEnd.stream_token_s, TensorRT-LLM's trtllm-serve: one process
streams every output token) in open loop and with several instances that stream tokens
(hastune.sim.frontend.SerialFrontEnd, open_arrivals; issue 13)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import engine_terms as et
from hastune.archs.nodg import NoDGConfig
from hastune.cluster import Cluster
from hastune.profile import load_profile
from hastune.sim.frontend import open_arrivals
from hastune.sim.nodg import NoDGSimulator
from hastune.workload import RequestSet

ROOT = Path(__file__).resolve().parents[2]
PROFILE = load_profile(ROOT / "profiles" / "a100-80gb" / "llama-30b.yaml")


def _reqs(osl: np.ndarray, gaps: np.ndarray, fe: et.FrontEnd | None, think=None,
          life: float = 0.0, isl: float = 256.0, seed: int = 0) -> RequestSet:
    n = len(osl)
    z = np.zeros(n)
    return RequestSet(gaps, z.astype(np.int64), z, z, np.full(n, isl), osl.astype(float), seed,
                      None, think, fe, 0.0, True, life)


@given(n=st.integers(1, 300), rate=st.floats(0.5, 200.0), b=st.floats(1e-6, 1e-2),
       life=st.floats(0.0, 20.0), streams=st.integers(1, 8), fe_s=st.floats(0.0, 0.05),
       seed=st.integers(0, 10_000))
@settings(max_examples=80, deadline=None)
def test_open_loop_serial_front_end(n, rate, b, life, streams, fe_s, seed):
    """On generated open-loop request sets: the engine sees each request no sooner than its
    client's send plus the front end's delay, in the order sent; with no slack given (life_s
    0) or slack for all the work at once nothing waits; otherwise the last request reaches
    the engine no sooner than the streaming of all the requests before it less the slack, at
    `streams` servers' speed — the ceiling of streams / (b × osl) requests a second."""
    rng = np.random.default_rng(seed)
    osl = rng.integers(1, 2000, n).astype(float)
    gaps = rng.exponential(1.0, n)
    fe = et.FrontEnd(fe_s, stream_token_s=b)
    plain_seen, plain_sent = open_arrivals(_reqs(osl, gaps, fe), rate, streams)
    seen, sent = open_arrivals(_reqs(osl, gaps, fe, life=life), rate, streams)
    assert sent == plain_sent
    s = np.asarray(seen)
    assert (s >= np.asarray(sent) + fe_s - 1e-9).all()
    assert (np.diff(s) >= -1e-12).all()
    work = b * osl / streams
    if life == 0.0 or life >= work.sum():
        np.testing.assert_allclose(s, plain_seen, rtol=0, atol=1e-12)
    else:
        assert s[-1] >= sent[0] + fe_s + work[:-1].sum() - life - 1e-9
    one = open_arrivals(_reqs(osl, gaps, et.FrontEnd(fe_s, stream_token_s=b / streams),
                              life=life), rate, 1)[0]
    np.testing.assert_allclose(s, one, rtol=1e-12, atol=1e-12)  # k servers = one k× faster


def _sim(replicas: int) -> NoDGSimulator:
    cfg = NoDGConfig(architecture="nodg", replicas=replicas, tp=2, pp=1, chunk_tokens=2048)
    return NoDGSimulator(PROFILE, Cluster(gpu="a100-80gb", gpus=2 * replicas), cfg,
                         warmup=0.0)


def _rate(res, skip: int) -> float:
    done = np.sort(res.finish[np.isfinite(res.finish)])
    return (len(done) - 1 - skip) / (done[-1] - done[skip])


@given(clients=st.integers(8, 24), osl=st.integers(16, 48), load=st.floats(2.5, 5.0),
       seed=st.integers(0, 20))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_each_instance_has_its_own_server(clients, osl, load, seed):
    """Closed loop over two replicas, each with its own API server: with a per-token cost at
    which the engine outruns one server `load` times, the run completes more requests than
    one server could stream, and no more than two can (2 / (b × osl) a second)."""
    gaps = np.ones(clients * 16)
    lengths = np.full(len(gaps), float(osl))
    base = _reqs(lengths, gaps, et.FrontEnd(0.001), think=0.0, seed=seed)
    sim = _sim(2)
    engine = _rate(sim.run(base, float(clients)), 2 * clients)
    b = 2 * load / (engine * osl)  # both servers together stream 1/load of what it makes
    got = _rate(sim.run(replace(base, frontend=et.FrontEnd(0.001, stream_token_s=b)),
                        float(clients)), 2 * clients)
    assert got <= 2.0 / (b * osl) * 1.05
    assert got > 1.0 / (b * osl) * 1.3


@given(rate=st.floats(0.2, 1.0), engine=st.sampled_from(list(et.ENGINES)))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_evaluator_gives_an_open_loop_serial_front_end_a_lifetime_of_slack(rate, engine):
    """An open-loop recipe with the terms on: its requests carry the zero-load lifetime as
    the serial front end's slack where the engine has one (TensorRT-LLM), none otherwise;
    beyond the server's ceiling the engine sees the requests later than without it."""
    from hastune.evaluators.sim import Evaluation
    from hastune.recipe import Recipe

    rec = Recipe.model_validate({
        "name": "x", "model": "llama-30b", "cluster": {"gpu": "a100-80gb", "gpus": 2},
        "engine": {"name": engine, "terms": True},
        "workload": {"requests": 3000, "arrival": {"process": "poisson"},
                     "prompt_tokens": {"dist": "fixed", "mean": 512, "min": 1, "max": 512},
                     "output_tokens": {"dist": "fixed", "mean": 64, "min": 1, "max": 64}},
        "slo": {"ttft_s": 10.0, "tpot_s": 1.0}, "architecture": "nodg"})
    ev = Evaluation(rec, PROFILE)
    reqs = ev.requests
    serial = reqs.frontend is not None and reqs.frontend.stream_token_s > 0
    assert serial == (engine == "trtllm")
    assert reqs.life_s == (pytest.approx(ev.lifetime_s) if serial else 0.0)
    if serial:  # well past the ceiling of 1 / (b × 64) requests a second
        b = reqs.frontend.stream_token_s
        fast = 4.0 / (b * 64) * (1 + rate)
        seen, sent = open_arrivals(reqs, fast)
        free, _ = open_arrivals(replace(reqs, life_s=0.0), fast)
        assert seen[-1] > free[-1]
        assert seen[-1] >= sent[0] + b * 64 * (len(seen) - 1) - ev.lifetime_s - 1e-9


@given(rate=st.floats(1.0, 3.0), osl=st.integers(16, 48), seed=st.integers(0, 20))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_open_loop_replicas_each_have_their_own_server(rate, osl, seed):
    """Open loop over two replicas whose servers together stream 4/3 of `rate`'s tokens
    (one alone 2/3), with a lifetime of slack long beside a request's streaming: at `rate`
    the requests do not wait for them (as without a serial front end, to the TTFT), at
    twice the rate — past both — they do, more and more."""
    n = 400
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0, n)
    lengths = np.full(n, float(osl))
    b = 1.5 / (rate * osl)  # two servers: 2 / (b × osl) = 4/3 × rate requests a second
    life = 40 * b * osl / 2  # the slack: a lifetime, long beside a request's streaming
    sim = _sim(2)

    def ttft(fe_b: float, r: float) -> np.ndarray:
        fe = et.FrontEnd(0.001, stream_token_s=fe_b)
        return sim.run(_reqs(lengths, gaps, fe, life=life, seed=seed), r).ttft

    for r in (rate, 2 * rate):
        plain, served = ttft(0.0, r), ttft(b, r)
        if r == rate:
            np.testing.assert_allclose(served, plain, rtol=1e-9, atol=1e-9)
        else:
            assert served.mean() > 2 * plain.mean() + 1.0
            assert served[-50:].mean() > served[:50].mean()
