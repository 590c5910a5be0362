"""The front end that passes tokens on at a cost per token (SGLang's tokenizer manager:
hastune.engine_terms.FRONTEND_TOKEN_S, hastune.sim.frontend.Delivery)."""

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
from hastune.fidelity import fit as F
from hastune.profile import load_profile
from hastune.sim.frontend import Delivery
from hastune.sim.nodg import NoDGSimulator
from hastune.workload import RequestSet

ROOT = Path(__file__).resolve().parents[2]
PROFILE = load_profile(ROOT / "profiles" / "a100-80gb" / "llama-30b.yaml").model_copy(
    update={"kv_on_demand": True})


def _step_by_step(free, t0, t1, n, m, made, cost, per_made):
    """The same tokens one step at a time: step j's n tokens come at t0 + j·(t1 − t0)/m."""
    for j in range(1, m + 1):
        free = max(free, t0 + j * (t1 - t0) / m) + cost * n + per_made * (made + n * (j - 1))
    return free


@given(free=st.floats(0, 2), t0=st.floats(0, 1), dur=st.floats(1e-4, 1), n=st.integers(1, 512),
       m=st.integers(1, 200), made=st.floats(0, 1e6), cost=st.floats(0, 1e-4),
       per_made=st.floats(0, 1e-7))
@settings(max_examples=200, deadline=None)
def test_a_stretch_is_bounded_by_its_steps_one_by_one(free, t0, dur, n, m, made, cost,
                                                      per_made):
    """Delivery.stretch takes the work of m steps at once: never later than the steps one by
    one, never before the last step's tokens or the work after the process's backlog, and
    exact for one step or behind a backlog that outlasts the stretch."""
    d = Delivery(cost, per_made)
    d.free = free
    t1 = t0 + dur
    got = d.stretch(t0, t1, n, m, made)
    exact = _step_by_step(free, t0, t1, n, m, made, cost, per_made)
    last = cost * n + per_made * (made + n * (m - 1))
    work = cost * n * m + per_made * (m * made + n * m * (m - 1) / 2)
    assert got <= exact + 1e-9
    assert got >= t1 + last - 1e-12 and got >= max(free, t0) + work - 1e-9
    if m == 1 or free >= t1:  # one step, or a backlog that outlasts the stretch
        assert got == pytest.approx(exact, rel=1e-9, abs=1e-12)


def _reqs(n, isl, osl, seed, think=None):
    rng = np.random.default_rng(seed)
    z = np.zeros(n)
    return RequestSet(rng.exponential(1.0, n), z.astype(np.int64), z, z, np.full(n, float(isl)),
                      np.full(n, float(osl)), seed, None, think)


def _run(reqs, rate, cost=0.0, per_made=0.0):
    fe = et.FrontEnd(per_output_token_s=cost, per_made_token_s=per_made)
    cfg = NoDGConfig(architecture="nodg", replicas=1, tp=2, pp=1, chunk_tokens=2048)
    sim = NoDGSimulator(PROFILE, Cluster(gpu="a100-80gb", gpus=2), cfg, warmup=0.0)
    return sim.run(replace(reqs, frontend=fe) if not fe.off else reqs, rate)


@given(seed=st.integers(0, 200), rate=st.floats(0.5, 8.0), osl=st.integers(2, 200),
       cost=st.floats(1e-6, 5e-3), per_made=st.floats(0, 1e-5))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_open_loop_tokens_reach_clients_later_and_no_faster_than_the_process(seed, rate, osl,
                                                                             cost, per_made):
    """Open loop: the engine runs the same schedule; each first and last token reaches its
    client no earlier than the engine made it, and the clients get at most 1 / cost tokens
    a second."""
    reqs = _reqs(150, 300, osl, seed)
    base, fe = _run(reqs, rate), _run(reqs, rate, cost, per_made)
    ok = np.isfinite(base.ttft)
    assert (fe.ttft[ok] >= base.ttft[ok] - 1e-9).all()
    assert (fe.finish[ok] >= base.finish[ok] - 1e-9).all()
    tokens = float(np.sum(reqs.output_tokens[ok]))
    span = float(np.max(fe.finish[ok]) - np.min(fe.arrival))
    assert tokens * cost <= span * (1 + 1e-9)


@given(seed=st.integers(0, 50), clients=st.integers(4, 64))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_slow_front_end_holds_closed_loop_requests_outside_the_engine(seed, clients):
    """Closed loop, a process slower than the engine: the clients' throughput falls to what
    the process passes on, and the TTFT grows (the first token queues behind the others)."""
    reqs = _reqs(clients * 12, 300, 64, seed, think=0.0)
    base, slow = _run(reqs, float(clients)), _run(reqs, float(clients), 2e-3)
    span = float(np.max(slow.finish))
    assert np.sum(reqs.output_tokens) * 2e-3 <= span * (1 + 1e-9)
    assert np.mean(slow.ttft) > np.mean(base.ttft)


def test_sglang_alone_gets_the_token_cost():
    s = et.terms_for("sglang", "h200-141gb", 141).frontend
    assert (s.per_output_token_s, s.per_made_token_s) == et.FRONTEND_TOKEN_S["sglang"]
    assert s.per_output_token_s > 0 and not s.off
    for eng, gpu in (("vllm", "h200-141gb"), ("trtllm", "h100-80gb")):
        f = et.terms_for(eng, gpu, 141).frontend
        assert f.per_output_token_s == f.per_made_token_s == 0.0
    sched = et.scheduler_defaults("sglang", 141, "h200-141gb")
    assert F.terms("sglang", "h200-141gb", sched, F.PRIOR).frontend.per_output_token_s > 0
    assert F.terms("vllm", "h200-141gb", sched, F.PRIOR).frontend.per_output_token_s == 0
