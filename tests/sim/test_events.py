"""The event core every simulator runs on: hastune.sim.common.EventLoop.

Same-time order (priority, then push order; a request set's arrivals before heap events of
priority PRIO_ARRIVE or later), time never going back, closed-loop re-arrivals and early stop.
The generated test runs random event sets — with ties, zero gaps and events pushed while the
loop runs — through the loop and through a plain reference (pick the least key each time)."""

from __future__ import annotations

import math
from heapq import heappush

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.sim import compiled
from hastune.sim.common import ARRIVE, EventLoop
from hastune.sim.events import PRIO_ARRIVE, PRIO_DONE, PRIO_TIMER, SimulationError
from hastune.sim.stoprule import StopRule, Watcher
from hastune.workload import RequestSet


def requests(gaps: list[float], think_s: float | None = None) -> RequestSet:
    """Requests whose arrivals at rate 1 are the running sums of `gaps` (exact for quarters)."""
    n = len(gaps)
    zeros = np.zeros(n, dtype=np.int64)
    return RequestSet(gaps=np.asarray(gaps, dtype=float), modality=zeros, encoder_tokens=zeros,
                      llm_tokens=zeros, prompt_tokens=zeros + 8, output_tokens=zeros + 4, seed=0,
                      think_s=think_s)


def push(loop: EventLoop, t: float, prio: int, kind: int, a: object = None,
         b: object = None) -> None:
    """What the simulators write inline."""
    heappush(loop.heap, (t, prio, next(loop.seq), kind, a, b))


def test_same_time_events_run_by_priority_then_push_order():
    loop = EventLoop(requests([]), 1.0, closed_loop=False)
    push(loop, 1.0, PRIO_TIMER, 1, "timer")
    push(loop, 1.0, PRIO_ARRIVE, 1, "arrive-1")
    push(loop, 1.0, PRIO_DONE, 1, "done")
    push(loop, 1.0, PRIO_ARRIVE, 1, "arrive-2")
    push(loop, 0.5, PRIO_TIMER, 1, "early")
    order = [ev[4] for ev in loop.events(lambda r, t: None)]
    assert order == ["early", "done", "arrive-1", "arrive-2", "timer"]
    assert loop.popped == 5 and loop.t == 1.0


def test_arrivals_go_after_done_and_before_arrive_and_timer_events_of_their_instant():
    loop = EventLoop(requests([1.0, 0.0]), 1.0, closed_loop=False)  # two arrivals at t = 1
    push(loop, 1.0, PRIO_TIMER, 1, "timer")
    push(loop, 1.0, PRIO_ARRIVE, 1, "heap-arrive")
    push(loop, 1.0, PRIO_DONE, 1, "done")
    seen: list = []
    for ev in loop.events(lambda r, t: seen.append(("request", r, t))):
        seen.append(ev[4])
    assert seen == ["done", ("request", 0, 1.0), ("request", 1, 1.0), "heap-arrive", "timer"]
    assert loop.arrived == 2


def test_an_event_pushed_in_the_past_is_refused():
    loop = EventLoop(requests([]), 1.0, closed_loop=False)
    push(loop, 2.0, PRIO_DONE, 7)
    with pytest.raises(SimulationError, match=r"event kind 5 at t=1.0 is earlier than now=2.0"):
        for ev in loop.events(lambda r, t: None):
            if ev[3] == 7:
                push(loop, 1.0, PRIO_DONE, 5)


def test_an_event_earlier_than_an_arrival_already_seen_is_refused():
    loop = EventLoop(requests([3.0]), 1.0, closed_loop=False)
    push(loop, 4.0, PRIO_DONE, 1)

    def arrive(r: int, t: float) -> None:
        push(loop, t - 0.5, PRIO_DONE, 2)  # a handler that gets its arithmetic wrong

    with pytest.raises(SimulationError, match="earlier than now=3.0"):
        list(loop.events(arrive))


def test_same_time_pushes_are_not_in_the_past():
    loop = EventLoop(requests([1.0]), 1.0, closed_loop=False)
    got: list = []

    def arrive(r: int, t: float) -> None:
        push(loop, t, PRIO_DONE, 1, "now")  # zero duration: allowed

    for ev in loop.events(arrive):
        got.append((ev[0], ev[4]))
        if ev[4] == "now":
            push(loop, ev[0], PRIO_TIMER, 2, "also now")
    assert got == [(1.0, "now"), (1.0, "also now")]


def test_loops_do_not_share_sequence_counters():
    a = EventLoop(requests([]), 1.0, closed_loop=False)
    b = EventLoop(requests([]), 1.0, closed_loop=False)
    push(a, 0.0, PRIO_DONE, 1)
    push(a, 0.0, PRIO_DONE, 1)
    push(b, 0.0, PRIO_DONE, 1)
    assert next(a.events(lambda r, t: None))[2] == 0
    assert next(b.events(lambda r, t: None))[2] == 0


def test_closed_loop_clients_send_their_next_request_think_time_after_a_completion():
    # 2 clients, 5 requests, think 1 s, every request served in 0.5 s
    loop = EventLoop(requests([1.0] * 5, think_s=1.0), 2.0)
    assert loop.closed and loop.n_open == 2
    DONE = 1
    arrivals: list[tuple[int, float]] = []

    def arrive(r: int, t: float) -> None:
        arrivals.append((r, t))
        push(loop, t + 0.5, PRIO_DONE, DONE, r)

    for t, _, _, kind, a, _ in loop.events(arrive):
        if kind == ARRIVE:
            arrive(a, t)
        else:
            loop.finished(a, t)
    assert arrivals == [(0, 0.0), (1, 0.0), (2, 1.5), (3, 1.5), (4, 3.0)]
    assert loop.arr == [0.0, 0.0, 1.5, 1.5, 3.0]
    assert loop.t == 3.5 and loop.span() == 3.5


def _watched(n: int, serve: bool) -> tuple[EventLoop, list[float]]:
    loop = EventLoop(requests([1.0] * n), 1.0, closed_loop=False)
    t_first = [math.nan] * n
    t_last = [math.nan] * n
    loop.watch(StopRule(ttft_s=2.0, tpot_s=0.1, quantile=0.9, union=False, warmup=0.0),
               t_first, t_last, [4] * n, [])

    def arrive(r: int, t: float) -> None:
        if serve:
            t_first[r] = t + 0.5
            t_last[r] = t + 0.6

    list(loop.events(arrive))
    return loop, t_first


def test_watcher_stops_a_run_that_has_already_failed():
    loop, _ = _watched(2000, serve=False)  # nobody gets a first token
    assert loop.stopped
    assert loop.arrived == loop.watcher.every == 256  # first check: 256 arrivals
    assert loop.t == 256.0  # the last arrival seen


def test_watcher_lets_a_passing_run_finish():
    loop, _ = _watched(2000, serve=True)
    assert not loop.stopped and loop.arrived == 2000 and loop.t == 2000.0


def test_watcher_is_off_in_closed_loop():
    loop = EventLoop(requests([1.0] * 10, think_s=1.0), 2.0)
    loop.watch(StopRule(ttft_s=1.0, tpot_s=0.1, quantile=0.9, union=False, warmup=0.0),
               [math.nan] * 10, [math.nan] * 10, [4] * 10, [])
    assert loop.watcher is None


# -- generated: random event sets against a reference ---------------------------------------

QUARTERS = st.integers(0, 8).map(lambda k: k / 4)  # exact in binary: ties happen
EVENT = st.tuples(QUARTERS, st.sampled_from([PRIO_DONE, PRIO_ARRIVE, PRIO_TIMER]))
CHILDREN = st.lists(st.tuples(QUARTERS, st.sampled_from([PRIO_DONE, PRIO_ARRIVE, PRIO_TIMER])),
                    max_size=2)


def reference(arrivals: list[float], initial: list[tuple[float, int]],
              children: dict[str, list[tuple[float, int]]]) -> list[tuple[float, str]]:
    """Every pending item with its key; take the least one each time. A request-set arrival
    has key (t, PRIO_ARRIVE, −∞, index): before every heap event of its instant at
    PRIO_ARRIVE or later, after those at PRIO_DONE. Handling an item pushes its children at
    t + delay, in order."""
    pending = [((t, PRIO_ARRIVE, -math.inf, i), f"r{i}") for i, t in enumerate(arrivals)]
    seq = 0
    for k, (t, p) in enumerate(initial):
        pending.append(((t, p, seq, 0), f"e{k}"))
        seq += 1
    out = []
    while pending:
        key, name = min(pending)
        pending.remove((key, name))
        out.append((key[0], name))
        for j, (d, p) in enumerate(children.get(name, [])):
            pending.append(((key[0] + d, p, seq, 0), f"{name}.{j}"))
            seq += 1
    return out


@settings(max_examples=150, deadline=None)
@given(gaps=st.lists(QUARTERS, max_size=8), initial=st.lists(EVENT, max_size=8),
       spawn=st.lists(CHILDREN, max_size=40))
def test_events_come_out_in_key_order(gaps, initial, spawn):
    """Random arrivals, random heap events and events pushed while the loop runs (up to two
    children per handled item): the loop's order is the reference's."""
    loop = EventLoop(requests(gaps), 1.0, closed_loop=False)
    arrivals = loop.arr[:]
    names = iter(spawn)
    children: dict[str, list[tuple[float, int]]] = {}

    def handle(name: str, t: float) -> None:
        kids = children.setdefault(name, next(names, []))
        for j, (d, p) in enumerate(kids):
            push(loop, t + d, p, 1, f"{name}.{j}")

    seen: list[tuple[float, str]] = []

    def arrive(r: int, t: float) -> None:
        seen.append((t, f"r{r}"))
        handle(f"r{r}", t)

    for k, (t, p) in enumerate(initial):
        push(loop, t, p, 1, f"e{k}")
    for t, _, _, _, name, _ in loop.events(arrive):
        seen.append((t, name))
        handle(name, t)
    assert seen == reference(arrivals, initial, children)
    assert [t for t, _ in seen] == sorted(t for t, _ in seen)  # time never goes back
    assert loop.popped == len(seen) - len(arrivals)
    assert loop.t == (seen[-1][0] if seen else 0.0)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_incremental_watcher_answers_as_the_reference_at_every_check(data):
    """Watcher.failed keeps each request's flags between checks (they only turn on, and are
    final once its tokens are known); failed_reference recomputes every request; the compiled
    watcher (hastune.sim._core.Watcher) keeps the same flags in C arrays: on random
    runs revealed check by check as an event loop would (a token time is written when the loop
    reaches it), with the horizon moved part way as a continued probe does, the two agree."""
    n = data.draw(st.integers(40, 300))
    rule = StopRule(ttft_s=data.draw(st.sampled_from([0.5, 1.0, 2.0])),
                    tpot_s=data.draw(st.sampled_from([0.05, 0.1])),
                    quantile=data.draw(st.sampled_from([0.5, 0.9])),
                    union=data.draw(st.booleans()),
                    warmup=data.draw(st.sampled_from([0.0, 0.1])), clear=1.0)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    arr = np.cumsum(rng.exponential(0.2, n)).tolist()
    out = rng.integers(1, 8, n).tolist()
    first = [a + rng.exponential(data.draw(st.sampled_from([0.3, 1.5]))) for a in arr]
    last = [f + (o - 1) * rng.exponential(0.08) for f, o in zip(first, out)]
    never = rng.random(n) < 0.1  # rejected: no first token, t_last inf
    t_first, t_last = [math.nan] * n, [math.nan] * n
    inc = Watcher(rule, arr, t_first, t_last, out)
    ref = Watcher(rule, arr, t_first, t_last, out)
    fast = compiled.core.Watcher(rule, arr, t_first, t_last, out)  # hastune/sim/_core.pyx
    moved = data.draw(st.integers(n // 4, n))
    for h in (inc, ref, fast):
        h.horizon(moved)
    checks = sorted(rng.uniform(0, max(last) + 1, data.draw(st.integers(3, 30))).tolist())
    for k, t in enumerate(checks):
        for r in range(n):  # what the loop has written by time t
            if never[r]:
                t_last[r] = math.inf if arr[r] <= t else math.nan
            else:
                t_first[r] = first[r] if first[r] <= t else math.nan
                t_last[r] = last[r] if last[r] <= t else math.nan
        if k == len(checks) // 2:
            for h in (inc, ref, fast):
                h.horizon(n)
        i = sum(a <= t for a in arr)
        got = inc.failed(i, t)
        assert got == ref.failed_reference(i, t), (k, t, i)
        assert fast.failed(i, t) == got, (k, t, i)  # the compiled watcher: the same counts
        assert (fast.late, fast.slow, fast.either, fast.seen) == (inc.late, inc.slow,
                                                                   inc.either, inc.seen)
