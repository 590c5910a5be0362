from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.policies import DeficitRouter, LeastInFlight


@settings(max_examples=300)
@given(st.floats(0.0, 1.0, allow_nan=False), st.integers(1, 3000))
def test_remote_count_within_one_of_target(s, k):
    r = DeficitRouter(s)
    c = 0
    exact = Fraction(s)
    for i in range(1, k + 1):
        c += r.route()
        assert abs(c - i * exact) < 1


def test_float_accumulation_trap():
    # ten additions of 0.1 stay below 1.0 in floating point; the router must still send one
    r = DeficitRouter(0.1)
    assert sum(r.route() for _ in range(10)) == 1


def test_extremes():
    assert not any(DeficitRouter(0.0).route() for _ in range(100))
    assert all(DeficitRouter(1.0).route() for _ in range(100))


@settings(max_examples=200)
@given(st.integers(1, 6), st.lists(st.tuples(st.booleans(), st.integers(0, 50)), max_size=200))
def test_least_in_flight_picks_the_fewest_then_the_lowest_index(n, ops):
    """Arrivals (True) and finishes of some request in flight (False, which one by index)."""
    r = LeastInFlight(n)
    count = [0] * n
    live: list[int] = []
    key = 0
    for arrive, pick in ops:
        if arrive or not live:
            k = r.route(key)
            assert k == min(range(n), key=lambda i: (count[i], i))
            count[k] += 1
            live.append(key)
            key += 1
        else:
            gone = live.pop(pick % len(live))
            count[r.finish(gone)] -= 1
        assert r.inflight == count
    assert r.finish(-1) is None  # a key not in flight


def test_least_in_flight_among_live_replicas():
    r = LeastInFlight(3)
    assert [r.route(i, live=[1, 2]) for i in range(4)] == [1, 2, 1, 2]
    assert r.route(9) == 0


def test_take_pins_a_request_and_pick_sees_it():
    """take(k): the caller chose replica k (the gateway's co-resident prefill); pick then
    counts it like its own."""
    r = LeastInFlight(3)
    r.take(0)
    r.take(1, 2)
    assert r.inflight == [1, 2, 0] and r.pick() == 2 and r.pick() == 0
    r.release(1, 2)
    assert r.inflight == [2, 0, 1]
