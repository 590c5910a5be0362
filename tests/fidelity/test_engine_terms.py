"""Engine terms (hastune.engine_terms) and the closed-loop client model (issue 13)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune import engine_terms as et
from hastune.cluster import Cluster
from hastune.config import NoDGConfig
from hastune.model_ref import Engine
from hastune.profile import load_profile
from hastune.sim.nodg import NoDGSimulator
from hastune.workload import RequestSet

ROOT = Path(__file__).resolve().parents[2]
PROFILE = load_profile(ROOT / "profiles" / "a100-80gb" / "llama-30b.yaml")


def _terms(k=1.0, it=0.0, seq=0.0, fe=0.0, stream=0.0, engine="vllm"):
    sched = et.scheduler_defaults(engine, 80, "h100-80gb")
    return et.EngineTerms(engine, "h100-80gb", sched, it, seq, k, et.FrontEnd(fe, 0.0, stream))


def _reqs(n: int, isl: int, osl: int, think: float | None = 0.0, seed: int = 0) -> RequestSet:
    z = np.zeros(n)
    return RequestSet(np.ones(n), z.astype(np.int64), z, z, np.full(n, float(isl)),
                      np.full(n, float(osl)), seed, None, think)


@given(k=st.floats(0.5, 3.0), it=st.floats(0, 0.01), seq=st.floats(0, 1e-4),
       n=st.integers(1, 256), ctx=st.floats(0, 1e6), tok=st.floats(1, 16384))
@settings(max_examples=60, deadline=None)
def test_apply_adds_the_iteration_terms_to_every_tp_degree(k, it, seq, n, ctx, tok):
    t = _terms(k, it, seq)
    p2 = et.apply(PROFILE, t)
    for tp in PROFILE.tp_degrees:
        a, b = PROFILE.for_tp(tp), p2.for_tp(tp)
        assert b.decode.step(n, ctx) == pytest.approx(k * a.decode.step(n, ctx) + it + seq * n,
                                                      rel=1e-9)
        assert b.prefill.latency(tok, tok * tok) == pytest.approx(
            k * a.prefill.latency(tok, tok * tok) + it, rel=1e-9)
        assert b.decode.max_batch == t.scheduler.max_seqs
    assert p2.encode == PROFILE.encode  # an encoder batch is not an engine iteration


def test_terms_apply_to_kernel_profiles_only_and_can_be_turned_off():
    assert et.applies(PROFILE)
    assert et.for_profile(Engine(name="vllm", terms=True), PROFILE) is not None
    assert et.for_profile(Engine(name="vllm"), PROFILE) is None  # opt-in (docs/fidelity.md)
    measured = load_profile(next((ROOT / "profiles" / "cpu").glob("*.yaml")))
    assert not et.applies(measured)
    assert et.for_profile(Engine(name="vllm", terms=True), measured) is None


def test_scheduler_defaults_follow_the_engines_rules():
    assert et.scheduler_defaults("vllm", 80, "h100-80gb").chunk_tokens == 8192
    assert et.scheduler_defaults("vllm", 80, "a100-80gb").chunk_tokens == 2048  # A100 rule
    assert et.scheduler_defaults("vllm", 48, "l40s-48gb").max_seqs == 256
    sg = et.scheduler_defaults("sglang", 141, "h200-141gb")
    assert sg.chunk_tokens is None and sg.prefill_tokens == 8192  # separate prefill batches
    assert et.scheduler_defaults("sglang", 180, "b200-180gb").prefill_tokens == 16384
    assert et.scheduler_defaults("sglang", 24, "x").prefill_tokens == 2048
    with pytest.raises(ValueError):
        et.scheduler_defaults("tgi", 80, "h100-80gb")


def test_a_config_without_chunk_tokens_runs_the_engines_default():
    t = _terms()
    cfg = NoDGConfig(architecture="nodg", replicas=1, tp=1, pp=1)
    assert et.config_defaults(cfg, t).chunk_tokens == 8192
    given_ = NoDGConfig(architecture="nodg", replicas=1, tp=1, pp=1, chunk_tokens=512)
    assert et.config_defaults(given_, t).chunk_tokens == 512
    assert et.config_defaults(cfg, None).chunk_tokens == 512  # no terms: as before


@given(fe=st.floats(0.001, 0.2), rate=st.floats(0.05, 0.5), seed=st.integers(0, 50))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_open_loop_front_end_adds_its_delay_to_ttft(fe, rate, seed):
    """A constant front-end delay shifts every engine arrival by the same amount: the engine's
    schedule is the same, so each client TTFT is the engine's plus the delay."""
    cl = Cluster(gpu="a100-80gb", gpus=2)
    cfg = NoDGConfig(architecture="nodg", replicas=1, tp=2, pp=1, chunk_tokens=512)
    reqs = _reqs(200, 700, 40, think=None, seed=seed)
    rng = np.random.default_rng(seed)
    reqs = replace(reqs, gaps=rng.exponential(1.0, 200))
    base = NoDGSimulator(PROFILE, cl, cfg, warmup=0.0).run(reqs, rate)
    with_fe = NoDGSimulator(PROFILE, cl, cfg, warmup=0.0).run(
        replace(reqs, frontend=et.FrontEnd(fe)), rate)
    np.testing.assert_allclose(with_fe.ttft, base.ttft + fe, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(with_fe.tpot, base.tpot, rtol=1e-6, atol=1e-12)


@given(clients=st.integers(2, 24), isl=st.sampled_from([256, 1024, 3000]),
       osl=st.integers(8, 64), seed=st.integers(0, 20))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_closed_loop_ttft_does_not_depend_on_run_length(clients, isl, osl, seed):
    """Clients that start spread over a request's lifetime (ramp_s) settle at once: the mean
    TTFT of 40 rounds per client and of 400 differ by < 5% (issue 13's bar)."""
    t = _terms(1.0, 5e-4, 1e-5, 0.02, 0.002)
    prof = et.apply(PROFILE, t)
    cl = Cluster(gpu="a100-80gb", gpus=2)
    cfg = et.config_defaults(NoDGConfig(architecture="nodg", replicas=1, tp=2, pp=1), t)
    pt = prof.for_tp(2)
    ramp = pt.prefill.latency(isl, isl * isl) + (osl - 1) * pt.decode.step(1, isl + osl / 2)
    means = []
    for rounds in (40, 400):
        reqs = replace(_reqs(clients * rounds, isl, osl, seed=seed),
                       frontend=t.frontend, ramp_s=ramp)
        res = NoDGSimulator(prof, cl, cfg, warmup=0.0).run(reqs, float(clients))
        means.append(float(np.mean(res.ttft_measured())))
    assert abs(means[1] / means[0] - 1) < 0.05


def test_closed_loop_counts_the_stream_wait_per_request_in_flight():
    t = _terms(1.0, 0.0, 0.0, 0.0, 0.003)
    cl = Cluster(gpu="a100-80gb", gpus=2)
    cfg = NoDGConfig(architecture="nodg", replicas=1, tp=2, pp=1, chunk_tokens=2048)
    reqs = _reqs(8 * 20, 512, 16)
    base = NoDGSimulator(PROFILE, cl, cfg, warmup=0.0).run(reqs, 8.0)
    fe = NoDGSimulator(PROFILE, cl, cfg, warmup=0.0).run(replace(reqs, frontend=t.frontend),
                                                         8.0)
    # a client's request finds the other 7 in flight (no think time), fewer when some finish
    # at the very instant it is sent; the wait is a whole number of per-stream waits
    k = (fe.ttft_measured() - base.ttft_measured()) / 0.003
    np.testing.assert_allclose(k, np.round(k), atol=1e-6)
    assert k.min() >= 0 and k.max() == pytest.approx(7) and np.median(k) == pytest.approx(7)
