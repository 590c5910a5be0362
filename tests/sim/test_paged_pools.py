"""EPD's and FuDG's decode pools with KV on demand (hastune.sim.decode_paged, issue 13): a
request joins when its prompt's KV fits beside what the running hold now, the newest running
request is preempted when the next step would not fit and recomputed on its decode instance."""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hastune.cluster import Cluster
from hastune.config import parse_config
from hastune.profile import DecodeSpec
from hastune.sim.decode import DecodeWorker
from hastune.sim.decode_paged import paged
from hastune.sim.epd import EPDSimulator, _EPDRun
from hastune.sim.fudg import FuDGRun, FuDGSimulator
from hastune.workload import RequestSet
from tests.sim.paged_kv import profile_with_kv, random_requests

CLUSTER = Cluster(gpu="a100-80gb", gpus=8)
SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _profile(paged: bool, kv_tokens: int, tp: int = 2):
    return profile_with_kv(paged, kv_tokens, tp)


def _reqs(n: int, seed: int, out_max: int) -> RequestSet:
    return random_requests(n, seed, out_max, out_min=2)


def _fudg(d: int):
    return parse_config({"architecture": "fudg", "prefill_instances": 2, "prefill_tp": 2,
                         "decode_instances": d, "decode_tp": 2})


def _epd(d: int):
    return parse_config({"architecture": "epd", "n_E": 1, "n_P": 1, "n_D": d, "tp_D": 2,
                         "B": 4, "s": 0.5})


def _run(arch: str, prof, d: int, reqs: RequestSet, rate: float):
    """(the decode workers, the run's result)."""
    if arch == "fudg":
        sim = FuDGSimulator(prof, CLUSTER, _fudg(d), warmup=0.0)
        run = FuDGRun(sim, reqs, rate)
        run.events()
        return run.dws, sim.run(reqs, rate)
    sim = EPDSimulator(prof, CLUSTER, _epd(d), warmup=0.0)
    erun = _EPDRun(sim, reqs, rate)
    for t, _, _, handler, a, b in erun.loop.events(erun.arrive):
        handler(t, a, b)
    return erun.dws, sim.run(reqs, rate)


@given(seed=st.integers(0, 10_000), rate=st.floats(1.0, 12.0), kv=st.integers(4_000, 40_000),
       arch=st.sampled_from(["fudg", "epd"]), d=st.integers(1, 2))
@SETTINGS
def test_on_demand_kv_never_overflows_and_every_request_finishes(seed, rate, kv, arch, d):
    """At no step does a decode instance hold more KV than it has; every request (the
    preempted ones too) gets its last token, after its first."""
    reqs = _reqs(150, seed, 600)
    dws, res = _run(arch, _profile(True, kv), d, reqs, rate)
    for w in dws:
        assert w.peak_kv <= w.cap
        assert w.n == 0 and not w.pending and not w.redo
    assert res.completed == len(reqs) and res.rejected == 0
    assert np.all(np.isfinite(res.ttft)) and np.all(res.ttft > 0)
    assert np.all(np.isfinite(res.tpot[reqs.output_tokens > 1]))


@given(seed=st.integers(0, 10_000), rate=st.floats(0.5, 10.0),
       arch=st.sampled_from(["fudg", "epd"]))
@SETTINGS
def test_with_room_to_spare_on_demand_runs_as_reserving(seed, rate, arch):
    """KV that never runs out (one decode instance: routing reads the KV held, which differs):
    nothing is preempted and both runs admit at the same boundaries, so the same TTFT and
    TPOT."""
    reqs = _reqs(150, seed, 400)
    big = 10_000_000
    _, on = _run(arch, _profile(True, big), 1, reqs, rate)
    _, off = _run(arch, _profile(False, big), 1, reqs, rate)
    assert on.extra["preemptions"] == 0.0
    assert np.array_equal(on.ttft, off.ttft)
    np.testing.assert_allclose(on.tpot, off.tpot, rtol=1e-9)


@given(seed=st.integers(0, 10_000), arch=st.sampled_from(["fudg", "epd"]))
@SETTINGS
def test_short_of_kv_on_demand_batches_more_and_finishes_sooner(seed, arch):
    """A burst of long outputs on little KV: reserving holds every output's KV from the
    start, on demand only what has been made, so more requests decode at once (some are
    preempted) and the burst is done sooner."""
    reqs = _reqs(120, seed, 1500)
    rate = 200.0
    kv = 30_000
    dws_on, on = _run(arch, _profile(True, kv), 1, reqs, rate)
    _, off = _run(arch, _profile(False, kv), 1, reqs, rate)
    assert on.completed == off.completed == len(reqs)
    assert on.extra["preemptions"] > 0
    assert on.finish is not None and off.finish is not None
    assert on.finish.max() < off.finish.max()


SPEC = DecodeSpec(fixed_s=0.01, per_seq_s=0.0005, per_context_token_s=2e-6, max_batch=16)


def _prefill(tokens: float, sq: float) -> float:
    return 0.02 + 1e-4 * tokens + 1e-9 * sq


def _closed_form(arrivals, cap):
    """The paged worker, driven as EPD and FuDG drive theirs: (t_last, preemptions)."""
    w = paged(DecodeWorker)(SPEC, cap, 0)
    w.prefill_s = _prefill
    t_last = [math.nan] * len(arrivals)
    heap = [(t, 0, i, None) for i, (t, _, _) in enumerate(arrivals)]
    heapq.heapify(heap)
    seq = len(heap)
    while heap:
        t, kind, a, _ = heapq.heappop(heap)
        if kind == 0:
            nxt = w.add(a, arrivals[a][1] + 1.0, arrivals[a][2], t)
        elif a != w.version:
            continue
        else:
            nxt = w.wake(t, t_last, [])
            assert w.S + w.n * (w.wake_step or w.step) <= cap  # the most held till then
        if nxt is not None:
            seq += 1
            heapq.heappush(heap, (nxt[0], 1, w.version, seq))
    return t_last, w.preempted


def _step_by_step(arrivals, cap):
    """The same policy, one decode step at a time, counting every request's tokens:
    (t_last, preemptions, tokens made)."""
    n = len(arrivals)
    made, t_last = [0] * n, [math.nan] * n
    order = sorted(range(n), key=lambda i: arrivals[i][0])
    pending: deque = deque()
    running: list[list] = []  # [req, context, tokens left, admission order]
    t, k, seq, preempted = 0.0, 0, 0, 0
    while k < n or pending or running:
        if not running and not pending:
            t = max(t, arrivals[order[k]][0])
        while k < n and arrivals[order[k]][0] <= t:
            r = order[k]
            pending.append((r, arrivals[r][1], arrivals[r][2], False))
            made[r] = 1  # the prefill instance's token
            k += 1
        for e in [e for e in running if e[2] == 0]:
            running.remove(e)
            t_last[e[0]] = t
        hit = False
        while running and sum(e[1] for e in running) + len(running) > cap:
            e = max(running, key=lambda e: e[3])
            running.remove(e)
            pending.appendleft((e[0], e[1], e[2], True))
            preempted += 1
            hit = True
        tok = sq = 0.0
        while pending and not hit and len(running) < SPEC.max_batch:
            r, ctx, left, redo = pending[0]
            if sum(e[1] for e in running) + len(running) + ctx + 1 + 1 > cap:
                break
            pending.popleft()
            if redo:
                tok, sq, left = tok + ctx, sq + ctx * ctx, left - 1
                made[r] += 1
                if left == 0:
                    t_last[r] = -1.0  # at the end of the recompute
                    continue
            elif left <= 1:
                t_last[r] = t
                continue
            else:
                left -= 1
            seq += 1
            running.append([r, ctx + 1, left, seq])
        if tok:
            t += _prefill(tok, sq)
            t_last = [t if x == -1.0 else x for x in t_last]
        if running:
            t += SPEC.step(len(running), sum(e[1] for e in running))
            for e in running:
                e[1] += 1
                e[2] -= 1
                made[e[0]] += 1
        elif k < n and not pending:
            continue
    return t_last, preempted, made


@given(seed=st.integers(0, 10_000), cap=st.integers(1_500, 6_000), rate=st.floats(5.0, 80.0))
@settings(max_examples=40, deadline=None)
def test_closed_form_matches_one_step_at_a_time(seed, cap, rate):
    """The closed-form paged worker finishes every request when a step-by-step run of the
    same policy does, which counts each request's tokens: all of its output, preempted or
    not."""
    rng = np.random.default_rng(seed)
    m = 60
    t = np.cumsum(rng.exponential(1.0 / rate, m))
    pre = rng.integers(20, 600, m)
    out = rng.integers(1, 400, m)
    keep = pre + out <= cap  # the others are rejected by both
    arrivals = [(float(a), float(p), int(o)) for a, p, o in zip(t[keep], pre[keep], out[keep])]
    got, pre_cf = _closed_form(arrivals, cap)
    ref, pre_ref, made = _step_by_step(arrivals, cap)
    assert made == [o for _, _, o in arrivals]
    assert pre_cf == pre_ref
    np.testing.assert_allclose(got, ref, rtol=1e-9, atol=1e-9)
