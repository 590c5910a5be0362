"""runners/engine/events.py: a worker killed while it writes its events silences only itself;
the shared counters (runners/engine/counters.py Load) have no lock to leave held.

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


# --- the shared counters (runners/engine/counters.py Load): no lock, no lost update ---------


def _add_many(load, writer: int, n: int, go) -> None:
    go.wait(60)  # all at once, so that the writes overlap
    for _ in range(n):
        load.add(writer, 0, 1.0)


def test_two_writers_and_the_target_lose_no_update_without_a_lock():
    """Two processes add to one target's counter 200,000 times each while this one (the
    target) frees 100,000, all at once: each writes only its own element, so the sum is
    exact (two writers on one element, unlocked, lose updates: tried, 2 cores)."""
    from runners.engine.counters import Load

    ctx = mp.get_context("spawn")
    load = Load(ctx, writers=3, targets=2)
    go = ctx.Barrier(3)
    ps = [ctx.Process(target=_add_many, args=(load, w, 200_000, go), daemon=True)
          for w in (1, 2)]
    for p in ps:
        p.start()
    go.wait(60)
    for _ in range(100_000):
        load.free(0, 1.0)
    for p in ps:
        p.join(60)
        assert p.exitcode == 0
    assert load[0] == 300_000.0 and load[1] == 0.0
    assert not hasattr(load.added, "get_lock")  # nothing a killed worker could hold
