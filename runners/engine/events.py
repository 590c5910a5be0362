"""What the workers and the engine's own threads report, read by one consumer: the engine's run
loop (and `wait_ready`, steplog's flush).

Local processes: each worker writes a multiprocessing queue of its own (`channel`), and a
thread here moves what arrives into one in-process queue. A worker killed while it writes (it
holds the queue's write lock, or has written half a message) then breaks only its own channel:
with one queue shared by every worker (as before) the lock stayed taken, no other worker's
event got through and every request still in flight "timed out" (seen in CI: the padg kill
test, tests/engine/test_replica.py). Python's multiprocessing documentation warns of exactly
this (killing a process while it uses a Queue). Ray actors put into the hub with a call that
cannot be cut in half (runners/engine/ray_backend.py), so there every channel is one queue.

`get` hands out what has arrived in the order of its timestamps (events are
(kind, rid, worker, t, extra)): what the forwarding threads moved in the same instant is sorted
before it is read, as the one shared pipe used to deliver it."""

from __future__ import annotations

import queue
import threading
from collections import deque
from typing import Any


class Events:
    def __init__(self, ctx: Any, per_worker: bool = True):
        self.ctx, self.per_worker = ctx, per_worker
        self.local: queue.Queue = queue.Queue()
        self.ready: deque = deque()
        self.stopping = threading.Event()
        self.shared: Any = None  # the one channel when not per worker

    def channel(self) -> Any:
        """A queue for one worker to put its events into (pass it to the worker process)."""
        if not self.per_worker and self.shared is not None:
            return self.shared
        q = self.ctx.Queue()
        if not self.per_worker:
            self.shared = q
        threading.Thread(target=self._forward, args=(q,), daemon=True,
                         name="engine-events").start()
        return q

    def _forward(self, q: Any) -> None:
        while not self.stopping.is_set():
            try:
                item = q.get(timeout=0.2)
            except queue.Empty:
                continue
            except Exception:  # its writer died mid-message (EOF, a torn pickle): it is done
                return
            self.local.put(item)

    def put(self, item: tuple) -> None:
        """An event from the engine's own threads (the frontend, the windowed scheduler)."""
        self.local.put(item)

    def get(self, timeout: float) -> tuple:
        """The next event, waiting up to `timeout` seconds (queue.Empty after that)."""
        if not self.ready:
            batch = [self.local.get(timeout=timeout)]
            while True:
                try:
                    batch.append(self.local.get_nowait())
                except queue.Empty:
                    break
            if len(batch) > 1 and self.per_worker:  # (ray: the hub's order; other clocks)
                batch.sort(key=lambda e: e[3])
            self.ready.extend(batch)
        return self.ready.popleft()

    def close(self) -> None:
        """Stop the forwarding threads (the engine's workers have stopped)."""
        self.stopping.set()
