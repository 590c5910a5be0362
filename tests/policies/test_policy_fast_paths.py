"""The policies' calls for callers that keep their own books (the nodg simulator):
LeastInFlight.pick / release choose and count as route / finish do, and
IterationScheduler.queue queues or refuses as add(Prompt(...)) does. Generated streams."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.policies import IterationScheduler, LeastInFlight, Prompt


@settings(max_examples=200)
@given(st.integers(1, 6), st.lists(st.tuples(st.booleans(), st.integers(0, 50)), max_size=300))
def test_pick_and_release_choose_as_route_and_finish(n, ops):
    keyed, counted = LeastInFlight(n), LeastInFlight(n)
    live: list[tuple[int, int]] = []  # (key, replica)
    for key, (arrive, which) in enumerate(ops):
        if arrive or not live:
            k = counted.pick()
            assert k == keyed.route(key)
            live.append((key, k))
        else:
            gone, k = live.pop(which % len(live))
            assert keyed.finish(gone) == k
            counted.release(k)
        assert counted.inflight == keyed.inflight
    assert counted.where == {}  # pick keeps no key map
    for k in range(n):  # many leaving at once
        left = [key for key, r in live if r == k]
        counted.release(k, len(left))
        for key in left:
            keyed.finish(key)
    assert counted.inflight == keyed.inflight == [0] * n


@settings(max_examples=200)
@given(st.integers(0, 5000),
       st.lists(st.tuples(st.integers(1, 4000), st.integers(1, 2000)), max_size=40))
def test_queue_is_add_of_a_new_prompt(kv_cap, reqs):
    a = IterationScheduler(8, kv_cap, 512, 4096)
    b = IterationScheduler(8, kv_cap, 512, 4096)
    for i, (total, out) in enumerate(reqs):
        p = b.queue(i, float(total + out), float(total))
        assert (p is not None) == a.add(Prompt(i, float(total + out), float(total)))
        assert p is None or (p.req, p.need, p.total, p.done) == (i, total + out, total, 0.0)
        if i % 3 == 2:  # admissions see the same queue
            assert a.admit(1, 100.0) == b.admit(1, 100.0)
    assert [(p.req, p.need) for p in a.waiting] == [(p.req, p.need) for p in b.waiting]
    assert [p.req for p in a.prefilling] == [p.req for p in b.prefilling]
    assert a.reserved == b.reserved
