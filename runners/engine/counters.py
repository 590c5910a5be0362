"""The load counters the engine's processes share (runners/engine/workers.py Shared):
outstanding prefill tokens per prefill worker, reserved decode KV per decode worker."""

from __future__ import annotations

from typing import Any


def _bump(arr: Any, i: int, x: float) -> None:
    """arr[i] += x. A Ray hub array (runners/engine/ray_backend.py) sends the change as a
    delta read under its mirror's lock, which is this process's own; a local lock-free
    array has no lock (one writer per element)."""
    lock = getattr(arr, "get_lock", None)
    if lock is None:
        arr[i] += x
    else:
        with lock():
            arr[i] += x


class Load:
    """A counter per target worker that other workers add to and the target takes from
    (outstanding prefill tokens, reserved decode KV), without a lock: each writer has a row of
    its own and the target its own `freed` slot, so every element has one writer and a read
    sums them. A worker killed mid-update then leaves at most its own row stale; with one
    lock shared by all (as before) a kill inside the lock would have stopped every worker
    that routes by the counter (runners/engine/events.py tells the same of the event queue).
    `writer` is the writer's index in Shared.names."""

    def __init__(self, ctx: Any, writers: int, targets: int):
        self.w, self.n = writers, max(targets, 1)
        self.added = ctx.Array("d", self.w * self.n, lock=False)
        self.freed = ctx.Array("d", self.n, lock=False)

    def add(self, writer: int, target: int, x: float) -> None:
        _bump(self.added, writer * self.n + target, x)

    def free(self, target: int, x: float) -> None:
        _bump(self.freed, target, x)

    def __getitem__(self, target: int) -> float:
        added = self.added
        return sum(added[w * self.n + target] for w in range(self.w)) - self.freed[target]
