"""Behaviour of the epd / epd-static simulator."""

from __future__ import annotations

import numpy as np
import pytest

from hastune.archs.epd import EPDConfig
from hastune.archs.epd_static import EPDStaticConfig
from hastune.cluster import Cluster
from hastune.evaluators.sim import Evaluation
from hastune.model_ref import Engine
from hastune.sim.epd import EPDSimulator


def cfg(**kw):
    base = dict(architecture="epd", n_E=2, n_P=2, n_D=4, B=4, s=0.5)
    base.update(kw)
    return EPDConfig(**base)


def test_deterministic_for_a_seed(audio_eval):
    a = audio_eval.run(cfg(), 20.0)
    b = audio_eval.run(cfg(), 20.0)
    assert np.array_equal(a.ttft, b.ttft) and np.array_equal(a.tpot, b.tpot, equal_nan=True)
    other = Evaluation(audio_eval.recipe, requests=600, seed=1).run(cfg(), 20.0)
    assert not np.array_equal(a.ttft, other.ttft)


def test_every_request_completes_with_sane_latencies(audio_eval):
    run = audio_eval.run(cfg(), 10.0)
    assert run.completed == len(run.ttft) >= len(audio_eval.requests) and run.rejected == 0
    assert np.all(run.ttft > 0)
    prof = audio_eval.profile
    # TPOT can never beat one decode step of a batch of one
    assert np.nanmin(run.tpot) >= prof.decode.fixed_s
    # TTFT is at least the request's own prefill on a whole GPU
    pre = audio_eval.requests_at(10.0, len(run.ttft)).prefill_tokens
    assert np.all(run.ttft >= prof.prefill.per_token_s * pre)
    for stage, u in run.utilisation.items():
        assert 0.0 <= u <= 1.0 + 1e-9, stage


def test_router_share_follows_s(audio_eval):
    for s, expected in ((0.0, 0.0), (0.25, 0.25), (1.0, 1.0)):
        run = audio_eval.run(cfg(s=s), 10.0)
        n = len(audio_eval.requests)
        assert abs(run.extra["remote_prefill_share"] * n - expected * n) < 1
    # all prefill local: nothing runs on the remote pool
    run = audio_eval.run(cfg(s=0.0), 10.0)
    assert run.utilisation["prefill"] == 0.0 and run.utilisation["local_prefill"] > 0


def test_static_baseline_has_no_local_prefill(audio_eval, static_config):
    run = audio_eval.run(static_config, 10.0)
    assert run.extra["remote_prefill_share"] == 1.0
    assert run.utilisation["local_prefill"] == 0.0
    assert run.utilisation["prefill"] > 0


def test_overload_breaks_ttft(audio_eval):
    light = audio_eval.run(cfg(), 5.0)
    heavy = audio_eval.run(cfg(), 400.0)
    assert heavy.percentile("ttft", 90) > 5 * light.percentile("ttft", 90)


@pytest.mark.parametrize("terms", [False, True])
def test_kv_memory_bounds_decode_batch(audio_recipe, terms):
    """Room for only a few sequences' KV in a decode instance makes TPOT grow: with KV
    reserved per request (the engine terms off) the decode batch is bounded; paged on demand
    (vLLM's terms, the default) requests hold only their context so far, so it takes less
    room to bind, and then running requests are preempted and recomputed."""
    rec = audio_recipe.model_copy(update={"engine": Engine(name="vllm", terms=terms)})
    ev = Evaluation(rec, requests=600)
    prof = ev.profile
    assert prof.kv_on_demand == terms
    room = 1000 if terms else 3000  # KV tokens per decode instance
    small = prof.model_copy(update={"memory": prof.memory.model_copy(
        update={"gpu_bytes": (prof.memory.weight_bytes + prof.memory.activation_bytes
                              + room * prof.memory.kv_bytes_per_token) / prof.memory.utilisation})})
    cluster = rec.cluster
    big_run = EPDSimulator(prof, cluster, cfg(), warmup=0.1).run(ev.requests, 20.0)
    small_run = EPDSimulator(small, cluster, cfg(), warmup=0.1).run(ev.requests, 20.0)
    assert small_run.percentile("tpot", 90) > 1.5 * big_run.percentile("tpot", 90)
    if terms:
        assert small_run.extra["preemptions"] > 0 == big_run.extra["preemptions"]


def test_slow_links_cost_ttft(audio_eval):
    prof = audio_eval.profile
    reqs = audio_eval.requests
    c = cfg(s=1.0)
    fast = Cluster(gpu="a100-80gb", gpus=8, gpus_per_node=1, inter_node="ib-400g")
    slow = Cluster(gpu="a100-80gb", gpus=8, gpus_per_node=1,
                   inter_node={"bandwidth_GBps": 0.05, "latency_us": 50})
    t_fast = EPDSimulator(prof, fast, c).run(reqs, 5.0)
    t_slow = EPDSimulator(prof, slow, c).run(reqs, 5.0)
    assert t_slow.ttft.mean() > t_fast.ttft.mean() + 0.1
    assert t_slow.extra["network_GB"] == pytest.approx(t_fast.extra["network_GB"])


def test_budget_is_enforced(audio_recipe):
    with pytest.raises(ValueError, match="budget"):
        EPDSimulator(audio_recipe.load_profile(), audio_recipe.cluster,
                     EPDStaticConfig(architecture="epd-static", n_E=3, n_P=3, n_D=3))
