"""nodg with KV on demand and preemption (hastune.sim.nodg.paged, issue 13)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.archs.nodg import NoDGConfig
from hastune.cluster import Cluster
from hastune.profile import load_profile
from hastune.sim.nodg import NoDGSimulator
from hastune.sim.nodg.run import Run as NoDGRun
from hastune.workload import RequestSet

ROOT = Path(__file__).resolve().parents[2]
BASE = load_profile(ROOT / "profiles" / "a100-80gb" / "llama-30b.yaml")


def _profile(paged: bool, kv_tokens: int | None = None):
    p = BASE.model_copy(update={"kv_on_demand": paged})
    if kv_tokens is None:
        return p
    m = p.for_tp(2).memory
    gpu = (m.weight_bytes + m.activation_bytes + kv_tokens * m.kv_bytes_per_token) / m.utilisation
    mem = m.model_copy(update={"gpu_bytes": gpu})
    v = p.variants[2].model_copy(update={"memory": mem}) if 2 in p.variants else None
    return p.model_copy(update={"variants": {**p.variants, 2: v}}) if v else \
        p.model_copy(update={"memory": mem})


def _reqs(n, seed, out_mean, closed=False):
    rng = np.random.default_rng(seed)
    z = np.zeros(n)
    prompt = rng.integers(50, 1500, n).astype(float)
    out = rng.integers(2, out_mean * 2, n).astype(float)
    return RequestSet(rng.exponential(1.0, n), z.astype(np.int64), z, z, prompt, out, seed,
                      None, 0.0 if closed else None)


def _run(profile, reqs, rate, chunk=512):
    cl = Cluster(gpu="a100-80gb", gpus=2)
    cfg = NoDGConfig(architecture="nodg", replicas=1, tp=2, pp=1, chunk_tokens=chunk)
    return NoDGSimulator(profile, cl, cfg, warmup=0.0).run(reqs, rate)


@given(seed=st.integers(0, 500), rate=st.floats(0.2, 3.0), chunk=st.sampled_from([256, 2048]),
       closed=st.booleans())
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_with_room_to_spare_paged_kv_runs_as_the_reserving_run(seed, rate, chunk, closed):
    """KV that never runs out: on-demand allocation admits and schedules exactly as the
    event-by-event reserving run (hastune.sim.nodg.run with ahead off)."""
    reqs = _reqs(150, seed, 60, closed)
    r = rate * 8 if closed else rate
    paged = _run(_profile(True), reqs, r, chunk)

    class Ref(NoDGRun):
        ahead = False

    cl = Cluster(gpu="a100-80gb", gpus=2)
    cfg = NoDGConfig(architecture="nodg", replicas=1, tp=2, pp=1, chunk_tokens=chunk)
    sim = NoDGSimulator(_profile(False), cl, cfg, warmup=0.0)
    ref = Ref(sim, reqs, r).go()
    assert paged.extra["preemptions"] == 0
    np.testing.assert_array_equal(paged.ttft, ref.ttft)
    np.testing.assert_array_equal(paged.tpot, ref.tpot)


@given(seed=st.integers(0, 500), kv=st.integers(6000, 30000), chunk=st.sampled_from([512, None]))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_short_of_kv_every_request_finishes_and_more_run_at_once(seed, kv, chunk):
    """A KV cache that holds a few whole requests: on-demand allocation runs more of them at
    once than reserving prompt + output does (never fewer), preempts when it must, and every
    request still finishes with its own output."""
    reqs = _reqs(120, seed, 400, closed=True)
    paged = _run(_profile(True, kv), reqs, 24.0, chunk)
    held = _run(_profile(False, kv), reqs, 24.0, chunk)
    for res in (paged, held):
        done = np.isfinite(res.ttft)
        assert done.all() and np.isfinite(res.tpot[reqs.output_tokens > 1]).all()
    # the same tokens decoded in fewer steps: more requests decode at once
    assert paged.extra["decode_steps"] <= held.extra["decode_steps"]
