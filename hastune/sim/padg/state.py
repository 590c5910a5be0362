"""State of padg's instances and macro-instances (the simulator in hastune.sim.padg drives
them; hastune.sim.padg.scaling regroups them)."""

from __future__ import annotations

import math
from collections import deque

from hastune.policies import RollingActivation, SlackTracker
from hastune.sim.instance import InstanceTiming, ReplicaDecode

DECODE, SWITCHING, PREFILL = 0, 1, 2  # an instance's phase (SWITCHING: decoding to a boundary)

# event kinds after common.ARRIVE (0), a closed-loop client's next request: a switch to
# prefill at a decode boundary, a decode finish, a prefill batch done, the first stage free, a
# re-offer timer, a mitosis decision, a started instance ready
SWITCH, DEC, PF_DONE, PF_NEXT, RETRY, SCALE, READY = range(1, 8)


class Inst:
    """One instance's state."""

    __slots__ = ("id", "tm", "dec", "slack", "phase", "queue", "pending_s", "kv_other", "win",
                 "win_start", "in_flight", "last_done", "stage_busy", "ver", "ev_t", "target",
                 "macro", "draining", "active", "cap", "seats", "prefill_s", "decode_since",
                 "decode_s", "windows", "window_reqs")

    def __init__(self, i: int, tm: InstanceTiming, slack: SlackTracker):
        self.id = i
        self.tm = tm
        self.dec = ReplicaDecode(tm.decode, tm.first_gpu)
        self.slack = slack
        self.phase = DECODE
        self.queue: deque[int] = deque()  # given to this instance, prefill not started
        self.pending_s = 0.0              # profiled prefill time of `queue`
        self.kv_other = 0.0               # KV reserved by queue + window (decode: dec.reserved)
        self.win: list[int] = []          # prefilled in the open window, awaiting the switch
        self.win_start = 0.0
        self.in_flight = 0                # prefill batches running
        self.last_done = 0.0              # when the last running batch ends
        self.stage_busy = False
        self.ver = 0
        self.ev_t = 0.0
        self.target = 0
        self.macro: Macro | None = None
        self.draining = False
        self.active = True
        self.cap = tm.kv_cap
        self.seats = tm.decode.max_batch
        self.prefill_s = 0.0
        self.decode_since = 0.0
        self.decode_s = 0.0
        self.windows = 0
        self.window_reqs = 0

    @property
    def idle(self) -> bool:
        return (self.phase == DECODE and self.dec.n == 0 and not self.queue and not self.win)


class Macro:
    """A macro-instance: its members (rolling order), its waiting requests, its statistics."""

    __slots__ = ("rolling", "queue", "timer", "tver", "cw", "ttft_sum", "ttft_n",
                 "blocked_since", "starting")

    def __init__(self, members: list[int]):
        self.rolling = RollingActivation(members)
        self.queue: deque[int] = deque()
        self.timer = math.inf  # when its next re-offer is planned
        self.tver = 0
        self.cw = 0.0
        self.ttft_sum = 0.0
        self.ttft_n = 0
        self.blocked_since: float | None = None
        self.starting = 0
