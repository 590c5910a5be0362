"""The discrete-event core: a heap of (time, priority, sequence, kind, a, b).

The sequence counter belongs to the queue instance, so same-time, same-priority events run in
the order they were scheduled and separate runs never share state. Scheduling in the past is an
error, never silently fixed.
"""

from __future__ import annotations

from heapq import heappop, heappush
from itertools import count

# Same-time order: work that frees a resource finishes before new work is admitted, and timers
# (batch deadlines) fire last, after every arrival of that instant has been seen.
PRIO_DONE = 0
PRIO_ARRIVE = 1
PRIO_TIMER = 2


class EventQueue:
    __slots__ = ("heap", "seq", "now", "popped")

    def __init__(self) -> None:
        self.heap: list[tuple] = []
        # Hot loops may push `(t, prio, next(q.seq), kind, a, b)` with heapq directly; they
        # must then only schedule at t ≥ now (durations are validated ≥ 0 at their source).
        self.seq = count()
        self.now = 0.0
        self.popped = 0

    def push(self, t: float, prio: int, kind: int, a: object = None, b: object = None) -> None:
        if t < self.now:
            raise ValueError(f"event scheduled in the past: t={t} < now={self.now}")
        heappush(self.heap, (t, prio, next(self.seq), kind, a, b))

    def pop(self) -> tuple:
        ev = heappop(self.heap)
        self.now = ev[0]
        self.popped += 1
        return ev

    def peek_key(self) -> tuple[float, int] | None:
        if not self.heap:
            return None
        top = self.heap[0]
        return top[0], top[1]

    def __len__(self) -> int:
        return len(self.heap)
