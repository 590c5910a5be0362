"""padg with KV on demand (hastune.sim.padg.paged, issue 13): admission asks for the prompt's
KV, the decode batch's KV grows one token per step, the newest running request is preempted
when the next step would not fit and recomputed in its instance's next prefill window."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.cluster import Cluster
from hastune.config import parse_config
from hastune.recipe import SLO
from hastune.sim.padg import PaDGSimulator
from hastune.sim.padg.paged import PagedReplicaDecode
from hastune.workload import RequestSet
from tests.sim.paged_kv import profile_with_kv, random_requests

CLUSTER = Cluster(gpu="a100-80gb", gpus=8)
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LOOSE = SLO(ttft_s=1e6, tpot_s=10.0)  # the memory check is the one that binds


def _profile(paged: bool, kv_tokens: int, tp: int = 2):
    return profile_with_kv(paged, kv_tokens, tp)


def _reqs(n: int, seed: int, out_max: int) -> RequestSet:
    return random_requests(n, seed, out_max, out_min=1)


def _run(prof, k: int, reqs: RequestSet, rate: float, slo: SLO = LOOSE):
    cfg = parse_config({"architecture": "padg", "tp": 2, "instances": k})
    sim = PaDGSimulator(prof, CLUSTER, cfg, warmup=0.0, slo=slo)
    res = sim.run(reqs, rate)
    return sim.last["instances"], res


@given(seed=st.integers(0, 10_000), rate=st.floats(1.0, 20.0), kv=st.integers(4_000, 40_000),
       k=st.integers(1, 3))
@SETTINGS
def test_on_demand_kv_never_overflows_and_every_request_finishes(seed, rate, kv, k):
    """No instance's decode batch holds more KV than it has, at any step or window; every
    request (the preempted ones too) gets its last token after its first, and nothing is left
    waiting or reserved."""
    reqs = _reqs(150, seed, 600)
    insts, res = _run(_profile(True, kv), k, reqs, rate)
    for x in insts:
        assert x.dec.peak_kv <= x.cap
        assert x.dec.n == 0 and not x.queue and not x.win and abs(x.kv_other) < 1e-6
    assert res.completed == len(reqs) and res.rejected == 0
    assert np.all(np.isfinite(res.ttft)) and np.all(res.ttft > 0)
    assert np.all(np.isfinite(res.tpot[reqs.output_tokens > 1]))
    assert np.all(res.finish >= res.ttft)


@given(seed=st.integers(0, 10_000), rate=st.floats(0.5, 10.0), k=st.integers(1, 3),
       slo=st.sampled_from([LOOSE, SLO(ttft_s=2.0, tpot_s=0.08)]))
@SETTINGS
def test_with_room_to_spare_on_demand_runs_as_reserving(seed, rate, k, slo):
    """KV that never runs out: nothing is preempted, the memory check never binds, so the
    same admissions at the same times: identical TTFT and TPOT."""
    reqs = _reqs(150, seed, 400)
    big = 10_000_000
    _, on = _run(_profile(True, big), k, reqs, rate, slo)
    _, off = _run(_profile(False, big), k, reqs, rate, slo)
    assert on.extra["preemptions"] == 0.0
    assert np.array_equal(on.ttft, off.ttft)
    assert np.array_equal(on.tpot, off.tpot, equal_nan=True)


@given(seed=st.integers(0, 10_000), k=st.integers(1, 2))
@SETTINGS
def test_short_of_kv_on_demand_batches_more_and_finishes_sooner(seed, k):
    """A burst of long outputs on little KV: reserving holds every output's KV from the start,
    on demand only what has been made, so more requests decode at once (some are preempted
    and recomputed) and the burst is done sooner."""
    reqs = _reqs(120, seed, 1500)
    insts_on, on = _run(_profile(True, 30_000), k, reqs, 200.0)
    insts_off, off = _run(_profile(False, 30_000), k, reqs, 200.0)
    assert on.completed == off.completed == len(reqs)
    assert on.extra["preemptions"] > 0
    assert on.extra["refused_memory"] < off.extra["refused_memory"]
    assert on.finish.max() < off.finish.max()


class _Count:
    """Counts each request's tokens in a paged padg run: its first (prefill), one per decode
    step it ran in its batch, one per recompute (each preemption is followed by one)."""

    def __init__(self, n: int):
        self.made, self.joined = [1] * n, {}

    def __enter__(self):
        cls = PagedReplicaDecode
        self.saved = cls.join, cls.advance, cls.make_room
        join, advance, make_room = self.saved
        made, joined = self.made, self.joined

        def j(d, req, *a, **k):
            joined[req] = d.step
            join(d, req, *a, **k)

        def adv(d, t, step, t_last):
            done = advance(d, t, step, t_last)
            for e in done:
                made[e[1]] += step - joined.pop(e[1])
            return done

        def room(d):
            out = make_room(d)
            for q, *_ in out:
                made[q] += d.step - joined.pop(q) + 1
            return out

        cls.join, cls.advance, cls.make_room = j, adv, room
        return self

    def __exit__(self, *exc):
        PagedReplicaDecode.join, PagedReplicaDecode.advance, PagedReplicaDecode.make_room = \
            self.saved


@given(seed=st.integers(0, 10_000), rate=st.floats(2.0, 50.0), kv=st.integers(3_000, 20_000),
       k=st.integers(1, 2))
@SETTINGS
def test_every_request_makes_all_of_its_output(seed, rate, kv, k):
    """Counted token by token, preempted or not, each request makes exactly its output."""
    reqs = _reqs(100, seed, 1200)
    with _Count(len(reqs)) as c:
        _, res = _run(_profile(True, kv), k, reqs, rate)
    keep = (reqs.prefill_tokens + reqs.output_tokens <= kv)
    assert res.completed == int(keep.sum())
    got = np.array(c.made)[keep]
    assert np.array_equal(got, reqs.output_tokens[keep].astype(int))
    assert not c.joined
