"""The discrete-event core's constants: the heap of every simulator holds
(time, priority, sequence, kind, a, b) tuples (hastune.sim.common.EventLoop runs it).

At one instant events run by priority, then in the order they were pushed (the loop's own
sequence counter, so separate runs never share state). An event earlier than the loop's
current time is an error (`SimulationError` when it is popped), never silently reordered.
"""

from __future__ import annotations

# Same-time order: work that frees a resource finishes before new work is admitted, and timers
# (batch deadlines) fire last, after every arrival of that instant has been seen. A request
# set's arrivals (EventLoop) come before every heap event of their instant whose priority is
# PRIO_ARRIVE or later.
PRIO_DONE = 0
PRIO_ARRIVE = 1
PRIO_TIMER = 2


class SimulationError(RuntimeError):
    """The event core found a simulator bug (an event scheduled in the past)."""
