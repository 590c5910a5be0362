"""hastune.policies.encode: the one factory of an EPD encode worker's policies, which the simulator
and the engine both call, so that the two apply the config's knobs with the config's defaults."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.archs.epd import EPDConfig
from hastune.archs.epd_static import EPDStaticConfig
from hastune.config import config_dict, parse_config
from hastune.policies import PoissonGapBatcher, TimeoutBatcher, poisson_gap_kappa
from hastune.policies.encode import epd_policies, policies_for, static_policies
from hastune.sim.epd import _EPDRun
from runners.engine.workers import encode_policies


@st.composite
def epd_configs(draw) -> EPDConfig:
    n_P = draw(st.integers(0, 3))
    knobs = {"architecture": "epd", "n_E": draw(st.integers(1, 4)), "n_P": n_P,
             "n_D": draw(st.integers(1, 4)), "B": draw(st.integers(1, 16)),
             "s": 0.0 if n_P == 0 else draw(st.sampled_from([0.0, 0.25, 0.3, 0.5, 1.0]))}
    for k, v in (("p", st.floats(0.05, 0.95)), ("sm_budget", st.floats(0.05, 1.0)),
                 ("max_gap_ms", st.one_of(st.none(), st.floats(0.5, 500)))):
        if draw(st.booleans()):  # set, or left to the config's default
            knobs[k] = draw(v)
    return EPDConfig(**knobs)


@st.composite
def static_configs(draw) -> EPDStaticConfig:
    knobs = {"architecture": "epd-static", "n_E": draw(st.integers(1, 4)),
             "n_P": draw(st.integers(1, 3)), "n_D": draw(st.integers(1, 4))}
    if draw(st.booleans()):
        knobs["batch"] = draw(st.integers(1, 16))
    if draw(st.booleans()):
        knobs["timeout_ms"] = draw(st.floats(0, 200))
    return EPDStaticConfig(**knobs)


def state(pol) -> dict:
    """Everything a built policy set holds, as comparable values (the partitioner's curve
    source is compared by identity)."""
    def slots(obj):
        if obj is None:
            return None
        names = getattr(type(obj), "__slots__", None) or vars(obj)
        return type(obj).__name__, {n: getattr(obj, n) for n in names}
    return {"batcher": slots(pol.batcher), "router": slots(pol.router),
            "partitioner": slots(pol.partitioner), "local": pol.local_prefill}


@given(epd_configs(), st.floats(0.01, 1e4))
def test_epd_policies_carry_the_configs_knobs(cfg, rate):
    pol = policies_for(cfg, rate)
    b = pol.batcher
    assert isinstance(b, PoissonGapBatcher) and b.B == cfg.B and b.p == cfg.p
    assert b.kappa == poisson_gap_kappa(cfg.B, cfg.p)
    assert b.rate == pytest.approx(rate / cfg.n_E)  # the pool's rate, split over its workers
    assert b.max_gap == (math.inf if cfg.max_gap_ms is None else cfg.max_gap_ms / 1e3)
    assert pol.router.s == cfg.s
    assert pol.local_prefill and pol.partitioner.budget == cfg.sm_budget


@given(static_configs(), st.floats(0.01, 1e4))
def test_static_policies_carry_the_configs_knobs(cfg, rate):
    pol = policies_for(cfg, rate)
    b = pol.batcher
    assert isinstance(b, TimeoutBatcher)
    assert b.batch == cfg.batch and b.timeout == cfg.timeout_ms / 1e3
    assert pol.router.s == 1.0  # every prefill remote
    assert pol.partitioner is None and not pol.local_prefill


def test_defaults_are_the_configs():
    """A config that leaves a knob out gets the config model's default, whichever side builds
    the policies (the engine once repeated them as literals)."""
    pol = policies_for(parse_config({"architecture": "epd", "n_E": 1, "n_P": 1, "n_D": 1,
                                     "B": 4, "s": 0.5}))
    fields = EPDConfig.model_fields
    assert pol.batcher.p == fields["p"].default
    assert pol.batcher.max_gap == fields["max_gap_ms"].default / 1e3
    assert pol.partitioner.budget == fields["sm_budget"].default
    st_ = policies_for(parse_config({"architecture": "epd-static", "n_E": 1, "n_P": 1,
                                     "n_D": 1})).batcher
    fields = EPDStaticConfig.model_fields
    assert st_.batch == fields["batch"].default
    assert st_.timeout == fields["timeout_ms"].default / 1e3


def test_builders_by_config_type():
    epd = EPDConfig(architecture="epd", n_E=1, n_P=0, n_D=1, B=2, s=0.0)
    static = EPDStaticConfig(architecture="epd-static", n_E=1, n_P=1, n_D=1)
    assert state(policies_for(epd, 3.0)) == state(epd_policies(epd, 3.0))
    assert state(policies_for(static, 3.0)) == state(static_policies(static, 3.0))
    with pytest.raises(TypeError, match="not an EPD config"):
        policies_for(parse_config({"architecture": "nodg", "tp": 1, "replicas": 1}))


@settings(max_examples=30, deadline=None)
@given(st.one_of(epd_configs(), static_configs()), st.floats(0.01, 1e4))
def test_engine_and_simulator_build_equal_policies(cfg, rate):
    """The engine's encode worker (sent the config as a dict) and the simulator's run build
    the same policies for the same arrival rate."""
    engine = encode_policies({"config": cfg.model_dump(), "rate_hint": rate})
    assert state(engine) == state(policies_for(cfg, rate))
    assert state(encode_policies({"config": config_dict(cfg), "rate_hint": rate})) \
        == state(engine)


def test_simulator_run_uses_the_factory(audio_eval, epd_config, static_config):
    """Each simulated encode worker holds what the factory builds for the multimodal share of
    the run's rate (the profile's encoder curves for the partitioner)."""
    reqs, rate = audio_eval.requests, 20.0
    mm = float((reqs.encoder_tokens > 0).mean())
    for cfg in (epd_config, static_config):
        sim = audio_eval.simulator(cfg)
        run = _EPDRun(sim, reqs, rate)
        want = policies_for(cfg, rate * mm, sim.timing.encode.curve_for)
        for ew in run.enc:
            got = state(type(want)(ew.batcher, run.router, ew.partitioner))
            assert got == state(want)
        assert all((ew.local is not None) == want.local_prefill for ew in run.enc)
