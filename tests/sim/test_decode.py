"""The closed-form decode worker must agree with a plain step-by-step simulation."""

from __future__ import annotations

from collections import deque
from heapq import heappush

import numpy as np
import pytest

from hastune.profile import DecodeSpec
from hastune.sim.common import EventLoop
from hastune.sim.decode import DecodeWorker
from hastune.sim.events import PRIO_ARRIVE, PRIO_DONE
from hastune.workload import RequestSet

SPEC = DecodeSpec(fixed_s=0.02, per_seq_s=1e-4, per_context_token_s=2e-7, max_batch=16)
_EMPTY = np.zeros(0, dtype=np.int64)
NO_REQUESTS = RequestSet(np.zeros(0), _EMPTY, _EMPTY, _EMPTY, _EMPTY, _EMPTY, seed=0)


def step_by_step(spec, cap, arrivals):
    """Reference: one loop iteration per decode step."""
    arrivals = sorted(arrivals)
    t, i = 0.0, 0
    pending: deque = deque()
    running: dict[int, list[float]] = {}  # req -> [steps left, ctx, reserve]
    reserved = 0.0
    finish: dict[int, float] = {}
    while i < len(arrivals) or pending or running:
        while i < len(arrivals) and arrivals[i][0] <= t:
            pending.append(arrivals[i][1:])
            i += 1
        for r in [r for r, v in running.items() if v[0] == 0]:
            finish[r] = t
            reserved -= running.pop(r)[2]
        while pending:
            req, ctx0, out = pending[0]
            if len(running) >= spec.max_batch or reserved + ctx0 + out > cap:
                break
            pending.popleft()
            if out <= 1:
                finish[req] = t
                continue
            running[req] = [out - 1, ctx0, ctx0 + out]
            reserved += ctx0 + out
        if not running:
            if i < len(arrivals):
                t = max(t, arrivals[i][0])
                continue
            break
        t += spec.step(len(running), sum(v[1] for v in running.values()))
        for v in running.values():
            v[0] -= 1
            v[1] += 1
    return finish


def closed_form(spec, cap, arrivals):
    """The worker driven as the simulators drive it: events on an EventLoop's heap (which
    also checks the worker never schedules a wake-up in the past)."""
    w = DecodeWorker(spec, cap, gpu=0)
    loop = EventLoop(NO_REQUESTS, 1.0, closed_loop=False)
    heap, seq = loop.heap, loop.seq
    for t, req, ctx0, out in arrivals:
        heappush(heap, (t, PRIO_ARRIVE, next(seq), 1, req, (ctx0, out)))
    t_last = [float("nan")] * (max(a[1] for a in arrivals) + 1)
    rejected: list[int] = []
    for t, _, _, kind, a, b in loop.events(lambda r, t: None):
        if kind == 1:
            nxt = w.add(a, b[0], b[1], t)
        elif b == w.version:
            nxt = w.wake(t, t_last, rejected)
        else:
            continue
        if nxt is not None:
            heappush(heap, (nxt[0], PRIO_DONE, next(seq), 2, None, w.version))
    return {r: x for r, x in enumerate(t_last)}, w


@pytest.mark.parametrize("seed,cap", [(0, 10_000_000), (1, 6_000), (2, 3_000), (3, 50_000)])
def test_closed_form_matches_step_by_step(seed, cap):
    rng = np.random.default_rng(seed)
    n = 120
    times = np.cumsum(rng.exponential(0.15, n))
    arrivals = [(float(times[k]), k, float(rng.integers(10, 800)), int(rng.integers(1, 120)))
                for k in range(n)]
    ref = step_by_step(SPEC, cap, arrivals)
    got, w = closed_form(SPEC, cap, arrivals)
    assert set(ref) == set(range(n))
    for r in range(n):
        assert got[r] == pytest.approx(ref[r], rel=1e-9, abs=1e-9), r
    assert w.n == 0 and w.reserved == pytest.approx(0.0)


def test_request_too_big_is_rejected():
    got, _ = closed_form(SPEC, 500, [(0.0, 0, 400.0, 50), (0.1, 1, 600.0, 10)])
    assert got[1] == float("inf")
    assert np.isfinite(got[0])
