"""runners/engine/events.py: a worker killed while it writes its events silences only itself.

A worker dies holding its queue's write lock (what SIGKILL mid-`put` leaves behind; here the
dying process takes the lock itself, so the case is certain rather than a race). On one queue
shared by every worker, as the engine had, the other workers' events then never arrive — the
control case below shows it — and every request in flight times out (a CI run of the padg
kill test). With a channel per worker the others' events keep arriving, in time order."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time

from runners.engine.events import Events


def _die_holding_the_lock(q, ready) -> None:
    q._wlock.acquire()  # what a kill inside Queue's feeder thread leaves held
    ready.set()
    time.sleep(60)


def _tick(q, n: int) -> None:
    for k in range(n):
        q.put(("tick", k, "B", time.monotonic(), None))
        time.sleep(0.005)
    time.sleep(2)  # let the feeder thread flush


def _kill_a_writer_then_tick(ctx, a, b):
    ready = ctx.Event()
    pa = ctx.Process(target=_die_holding_the_lock, args=(a, ready), daemon=True)
    pa.start()
    assert ready.wait(30)
    pa.kill()
    pa.join(10)
    pb = ctx.Process(target=_tick, args=(b, 20), daemon=True)
    pb.start()
    return pb


def _drain(get, within: float) -> list:
    got, deadline = [], time.monotonic() + within
    while time.monotonic() < deadline and len(got) < 20:
        try:
            got.append(get(0.1))
        except queue.Empty:
            continue
    return got


def test_a_worker_killed_holding_its_queue_does_not_silence_the_others():
    ctx = mp.get_context("spawn")
    ev = Events(ctx)
    pb = _kill_a_writer_then_tick(ctx, ev.channel(), ev.channel())
    try:
        got = _drain(ev.get, 20.0)
    finally:
        pb.kill()
        ev.close()
    assert [e[1] for e in got] == list(range(20))  # all of B's, in order
    assert [e[3] for e in got] == sorted(e[3] for e in got)


def test_control_one_shared_queue_is_silenced():
    """The premise: on one queue for both, B's events never get through."""
    ctx = mp.get_context("spawn")
    shared = ctx.Queue()
    pb = _kill_a_writer_then_tick(ctx, shared, shared)
    try:
        got = _drain(lambda t: shared.get(timeout=t), 3.0)
    finally:
        pb.kill()
    assert got == []
