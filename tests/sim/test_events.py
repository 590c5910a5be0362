from __future__ import annotations

import pytest

from hastune.sim.events import PRIO_ARRIVE, PRIO_DONE, PRIO_TIMER, EventQueue


def test_same_time_events_run_by_priority_then_insertion():
    q = EventQueue()
    q.push(1.0, PRIO_TIMER, 0, "timer")
    q.push(1.0, PRIO_ARRIVE, 0, "arrive-1")
    q.push(1.0, PRIO_DONE, 0, "done")
    q.push(1.0, PRIO_ARRIVE, 0, "arrive-2")
    q.push(0.5, PRIO_TIMER, 0, "early")
    order = [q.pop()[4] for _ in range(5)]
    assert order == ["early", "done", "arrive-1", "arrive-2", "timer"]


def test_scheduling_in_the_past_is_an_error():
    q = EventQueue()
    q.push(2.0, PRIO_DONE, 0)
    q.pop()
    with pytest.raises(ValueError, match="past"):
        q.push(1.0, PRIO_DONE, 0)


def test_queues_do_not_share_sequence_counters():
    a, b = EventQueue(), EventQueue()
    a.push(0.0, 0, 0)
    a.push(0.0, 0, 0)
    b.push(0.0, 0, 0)
    assert a.pop()[2] == 0 and b.pop()[2] == 0
