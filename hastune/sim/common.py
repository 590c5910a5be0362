"""Pieces the simulators share: arrivals (open or closed loop), the event loop that merges them
with the event heap, per-request lists, and turning per-request
timestamps into a RunResult."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from heapq import heappop, heappush
from itertools import count

import numpy as np

from hastune.runs import RunResult, latencies
from hastune.sim import compiled
from hastune.sim.events import PRIO_ARRIVE, SimulationError
from hastune.sim.frontend import RunFrontEnd, open_arrivals
from hastune.sim.stoprule import StopRule, Watcher
from hastune.sim.warmup import client_starts, steady_start
from hastune.workload import RequestSet

# Event kind of an arrival that comes through the heap (a closed-loop client's next request,
# pushed by EventLoop.finished). Simulators that run closed loop number their other kinds from 1.
ARRIVE = 0


def check_gpus(config, cluster) -> None:
    """Refuse a config that uses more GPUs than the cluster has."""
    if config.gpus > cluster.gpus:
        raise ValueError(f"config uses {config.gpus} GPUs, the budget is {cluster.gpus}")


def request_lists(reqs: RequestSet, lists: bool = True) -> tuple[
        list[float], list[float], list[int], bool, list[float], list[float], list[int]]:
    """What a run reads per request, as lists: prefill tokens, encoder tokens, output tokens,
    and whether any request is multimodal; then what it fills in: first- and last-token
    times (nan until known) and the rejected requests. `lists` False: the prefill and
    encoder tokens as the request set's arrays, the output tokens as an int64 array and the
    first- and last-token times as float64 arrays (for compiled code, which reads and writes
    them whole)."""
    n = len(reqs)
    pre, enc = reqs.prefill_tokens, reqs.encoder_tokens
    out = reqs.output_tokens.astype(np.int64)
    mm = bool((reqs.encoder_tokens > 0).any())
    if not lists:
        return (pre, enc, out, mm, np.full(n, math.nan), np.full(n, math.nan),  # type: ignore
                [])
    return pre.tolist(), enc.tolist(), out.tolist(), mm, [math.nan] * n, [math.nan] * n, []


class Arrivals:
    """Where requests come from in one run.

    Open loop: `times` holds every arrival (the request set's gaps scaled to `rate`, or its
    rate schedule); with `lists` False, `times` and `sent` are float64 arrays (compiled
    code). Closed loop (`reqs.think_s` set): `rate` is the number of clients; each sends its
    first request at t = 0 (with `reqs.ramp_s`, client i at i·ramp_s/clients: spread over one
    request's lifetime, not in lockstep; with `reqs.ramp_random`, at independent uniform times
    over it, drawn from the request set's seed) and its next one `think_s` after the
    previous one completes (or is rejected), as benchmark tools with a fixed concurrency do.

    With the engine's front end on the request set (`reqs.frontend`, hastune.engine_terms),
    a request reaches the engine `frontend_delays` after its client sent it: `times` are the
    engine's arrivals, `sent` the clients' (what TTFT is measured from). In closed loop the
    clients' first requests then come through the heap too (`initial` is 0)."""

    __slots__ = ("closed", "clients", "think", "issued", "n", "times", "sent", "front",
                 "queued", "steady")

    def __init__(self, reqs: RequestSet, rate: float, streams: int = 1,
                 closed_loop: bool = True, lists: bool = True):
        self.n = len(reqs)
        self.closed = closed_loop and reqs.think_s is not None
        self.steady = reqs.steady
        self.front = front = RunFrontEnd(reqs, streams, self.closed)
        self.queued: float | None = None  # FrontEnd.queued: the last completion so far
        self.sent: list[float] | None = None
        if self.closed:
            if front.delays is not None and front.terms.queued:  # type: ignore[union-attr]
                self.queued = 0.0
            self.clients = max(1, min(self.n, int(round(rate))))
            self.think = float(reqs.think_s)  # type: ignore[arg-type]
            self.issued = self.clients
            self.times = [math.inf] * self.n
            self.times[:self.clients] = client_starts(reqs, self.clients)
            if front.delays is not None:
                self.sent = list(self.times)
                for i in range(self.clients):
                    self.times[i] = front.seen_first(i, self.times[i], self.clients)
        else:
            self.clients = 0
            self.think = 0.0
            self.issued = self.n
            self.times, self.sent = open_arrivals(reqs, rate, streams, lists)

    def initial(self) -> int:
        """How many requests arrive from the pre-computed list (all, or one per client; none
        in closed loop with a front end: the clients' first requests come through the heap)."""
        if self.closed and self.front.delays is not None:
            return 0
        return self.issued

    def next_after(self, t: float, done: int = -1) -> tuple[float, int] | None:
        """Closed loop: request `done` completed at t, so its client sends the next one, which
        the engine sees when the front end has passed it on (RunFrontEnd.seen_next)."""
        if self.issued >= self.n:
            return None
        r = self.issued
        self.issued += 1
        ta = t + self.think
        if self.front.delays is not None:
            self.sent[r] = ta  # type: ignore[index]
            if self.queued is not None:  # queued at the completion before this one
                self.sent[r], self.queued = min(ta, self.queued + self.think), t  # type: ignore
            ta = self.front.seen_next(r, ta, self.clients, t - self.times[done])
        self.times[r] = ta
        return ta, r


class EventLoop:
    """One run's event heap of (time, priority, sequence, kind, a, b) tuples (the order of
    hastune.sim.events), merged with the run's arrivals. Where requests come from is one
    object, `feed` (an `Arrivals`: the clients, and the engine's front end between them and
    the engine, `feed.front`); the loop reads its times `arr` and, in closed loop, asks it for a
    client's next request (`finished`). With `closed_loop=False` the arrivals are open loop
    whatever the request set says, for simulators that model open loop only (`lists` False:
    their arrivals as arrays, Arrivals); the stop rule is
    the loop's own (`watch`). The first `n_open` arrivals never enter the heap:
    `events(arrive)` yields the heap's events in order and calls `arrive(r, t)` for each of
    them where it comes first — before the heap's next event, or at the same time when that
    event's priority is PRIO_ARRIVE or later. Closed-loop arrivals after those come through the
    heap as ARRIVE events (`finished`).

    Same-time heap events come out by priority, then in push order. Simulators push onto `heap`
    with `next(seq)` directly (heappush, no method call in the hot loop); an event earlier than
    the time already reached raises SimulationError when it is popped (time never goes back).

    `closed`: whether requests come from closed-loop clients. After the loop, `t` is the time
    of the last thing that happened and `popped` the heap events taken; during it, `arrived`
    counts the pre-computed arrivals seen so far."""

    __slots__ = ("heap", "seq", "arr", "n_open", "feed", "closed", "arrived", "t", "popped",
                 "watcher", "stopped", "sent", "rate", "windows", "window", "rejected",
                 "gone", "left", "watch_at")

    def __init__(self, reqs: RequestSet, rate: float, closed_loop: bool = True,
                 streams: int = 1, lists: bool = True):
        self.heap: list[tuple] = []
        self.seq = count()
        self.feed = feed = Arrivals(reqs, rate, streams, closed_loop, lists)
        self.closed = feed.closed
        self.arr = feed.times
        self.sent = feed.sent
        self.n_open = feed.initial()
        if feed.closed and feed.sent is not None:  # the clients' first requests
            for i in range(feed.clients):
                heappush(self.heap, (self.arr[i], PRIO_ARRIVE, next(self.seq), ARRIVE, i, None))
        self.arrived = 0
        self.t = 0.0
        self.popped = 0
        self.rate = rate
        self.watcher: Watcher | None = None
        self.stopped = False
        self.windows: list[int] = []   # request counts still to be judged (StopRule.windows)
        self.window = 0                # the window the run ended at (0: it ran to the end)
        self.rejected: list[int] = []  # the run's rejected requests (watch)
        self.gone: set[int] = set()    # those of them _gone has read, as a set
        self.left = 0                  # requests below this index are known to have left
        self.watch_at = 0              # the arrival count of the stop rule's next check

    def watch(self, rule: StopRule | None, t_first: list[float], t_last: list[float],
              out_tok: list[int], rejected: list[int], core: str | None = None) -> None:
        """Stop the run once `rule` says it has failed whatever comes next, or once a window
        of it is settled (open loop; StopRule.windows). `core`: the watcher's path, compiled
        or python (hastune.sim.compiled.core_name)."""
        if rule is not None and not self.closed:
            fast = compiled.core_name(core) == "compiled"
            make = compiled.core.Watcher if fast else Watcher  # type: ignore[union-attr]
            self.watcher = make(rule, self.sent if self.sent is not None else self.arr,
                                t_first, t_last, out_tok)
            self.rejected = rejected
            n = len(self.arr)
            self.windows = [w for w in rule.windows if w < n] if rule.judge else []
            if self.windows:
                self.watcher.horizon(self.windows[0])
            self.watch_at = self.watcher.every

    def first_check(self) -> int:
        """The arrival count of the run's first check (checkpoint), or past the last arrival
        when nothing is watched."""
        if self.watcher is None:
            return self.n_open + 1
        if self.windows:
            return min(self.watch_at, self.windows[0])
        return self.watch_at

    def checkpoint(self, i: int, t: float) -> int | None:
        """At a check (i arrivals in, time t): None when the run stops here — the stop rule
        says it has failed, or its current window has left and is settled — else the arrival
        count of the next check (the stop rule's every `watcher.every` arrivals; a window's,
        once its last request is in, every 1/64 of it)."""
        watcher = self.watcher
        if i >= self.watch_at:
            if watcher.failed(i, t):  # type: ignore[union-attr]
                self.stopped = True
                return None
            self.watch_at = i + watcher.every  # type: ignore[union-attr]
        windows = self.windows
        if windows and i >= windows[0] and self._gone(windows[0]):
            self.t, self.arrived = t, i
            w = windows.pop(0)
            rule = watcher.rule  # type: ignore[union-attr]
            run = build_result(self.rate, self, watcher.t_first, watcher.t_last,  # type: ignore
                               watcher.out, self.rejected, rule.warmup, {},  # type: ignore
                               time.perf_counter(), load_stats=False, upto=w)
            if rule.judge(run):  # type: ignore[misc]
                self.window = w
                return None
            watcher.horizon(windows[0] if windows else len(self.arr))  # type: ignore[union-attr]
            self.watch_at = min(self.watch_at, i + watcher.every)  # type: ignore[union-attr]
        if windows:
            return min(self.watch_at, max(i, windows[0]) + max(16, windows[0] // 64))
        return self.watch_at

    def _gone(self, w: int) -> bool:
        """Whether requests 0..w−1 have all left (a last token, or rejected)."""
        t_last, rejected, gone = self.watcher.t_last, self.rejected, self.gone  # type: ignore
        gone.update(rejected[len(gone):])  # at least the entries added since the last look
        k = self.left
        while k < w and (t_last[k] == t_last[k] or k in gone):
            k += 1
        self.left = k
        return k >= w

    def span(self) -> float:
        """Seconds from the first arrival to the end of the run (after `events`)."""
        arr = self.arr
        return max(self.t - (float(arr[0]) if len(arr) else 0.0), 1e-12)

    def finished(self, r: int, t: float) -> None:
        """Request r completed (or was rejected) at t: in closed loop its client sends its
        next request, an ARRIVE event on the heap."""
        if self.closed:
            nxt = self.feed.next_after(t, r)
            if nxt is not None:
                heappush(self.heap, (nxt[0], PRIO_ARRIVE, next(self.seq), ARRIVE, nxt[1], None))

    def events(self, arrive: Callable[[int, float], None]) -> Iterator[tuple]:
        """The heap's events in time order; the pre-computed arrivals in between go to
        `arrive`."""
        heap, arr, n_open = self.heap, self.arr, self.n_open
        check = self.first_check()
        i = 0
        popped = 0
        t = 0.0
        while True:
            if i >= check:
                nxt = self.checkpoint(i, t)
                if nxt is None:
                    break
                check = nxt
            if heap:
                ev = heap[0]
                if i < n_open:
                    ta = arr[i]
                    if ta < ev[0] or (ta == ev[0] and ev[1] >= PRIO_ARRIVE):
                        t = ta
                        arrive(i, t)
                        i += 1
                        self.arrived = i
                        continue
                heappop(heap)  # ev
                if ev[0] < t:
                    raise SimulationError(f"event kind {ev[3]} at t={ev[0]!r} is earlier than "
                                          f"now={t!r}: a simulator scheduled it in the past")
                popped += 1
                t = ev[0]
                yield ev
            elif i < n_open:
                t = arr[i]
                arrive(i, t)
                i += 1
                self.arrived = i
            else:
                break
        self.t = t
        self.popped = popped

    def run_versioned(self, arrive: Callable[[int, float], None],
                      step: Callable[[int, float], None], owners: list) -> None:
        """`events` for heap events (t, prio, seq, kind, k, version) of which only the one
        whose version is `owners[k].ver` counts: `step(k, t)` for those, `arrive(r, t)` for
        every arrival (pre-computed, or ARRIVE events); a superseded event is dropped."""
        for t, _, _, kind, k, ver in self.events(arrive):
            if kind == ARRIVE:
                arrive(k, t)
            elif ver == owners[k].ver:
                step(k, t)


def build_result(rate: float, loop: EventLoop, t_first: list[float], t_last: list[float],
                 out_tok: list[int], rejected: list[int], warmup: float,
                 utilisation: dict[str, float], wall0: float,
                 extra: dict[str, float] | None = None, load_stats: bool = True,
                 upto: int = 0) -> RunResult:
    """The RunResult of a finished `loop`. TTFT = first token − arrival;
    TPOT = (t_last − t_first)/(n_out − 1); rejected → inf. `load_stats`: add throughput_rps and
    max_in_flight to `extra` (the encode/prefill/decode simulator does not report them).
    A run with windows (StopRule.windows) is the result of its first `upto` requests, or of the
    window it ended at, or (stopped early) of the window the stop rule was counting against:
    as a run of only those requests would report them."""
    arr = loop.sent if loop.sent is not None else loop.arr  # TTFT from the client's send
    n = upto or loop.window or (loop.watcher.n if loop.stopped and loop.watcher is not None
                                else len(arr))
    lists = (arr, t_first, t_last, out_tok)
    if n < len(arr):
        lists = tuple(x[:n] for x in lists)
        rejected = [r for r in rejected if r < n]
    span = loop.span()
    a, tf, tl, outs = (np.array(x, dtype=float) for x in lists)
    w, feed = int(warmup * n), loop.feed
    ex = dict(extra or {})
    if loop.window or upto:
        ex["window"] = n
    if loop.stopped:
        # stopped early (StopRule): the requests that arrived, with lower bounds for those
        # still in the system — enough to fail, as the rule found
        m = min(loop.arrived, n)
        a, tf, tl, outs = a[:m], tf[:m], tl[:m], outs[:m]
        finish = tl
        tl = np.where(np.isnan(tl) & ~np.isnan(tf), loop.t, tl)
        tf = np.where(np.isnan(tf), loop.t, tf)
        rejected = [r for r in rejected if r < m]
        ex["stopped_early_s"] = loop.t
    else:
        finish = tl
    ttft, tpot = latencies(a, tf, tl, outs, rejected)
    ttft = feed.front.after(ttft, a, tl)  # the front end's wait behind its streams
    if loop.closed:  # closed loop: warm-up to its steady state
        w = max(w, steady_start(ttft, feed.clients) if feed.steady and not loop.stopped
                else min(2 * feed.clients, n // 2))  # stopped early, or a benchmark's mean
    # throughput while requests were still arriving (in closed loop: while every client was
    # busy): measured completions up to the last arrival, over that stretch
    n = len(a)
    if load_stats and n > w + 1 and not loop.stopped:
        t0, t1 = float(a[w]), float(a.max())
        if t1 > t0:
            ex["throughput_rps"] = float(((tl[w:] >= t0) & (tl[w:] <= t1)).sum()) / (t1 - t0)
    if load_stats and n and not loop.stopped:
        # the most requests in the system at once (closed loop: the concurrency)
        fin = np.where(np.isfinite(tl), tl, a)
        ev = np.concatenate([np.stack([a, np.ones(n)], 1), np.stack([fin, -np.ones(n)], 1)])
        ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]  # at equal times, leave before arriving
        ex["max_in_flight"] = float(np.cumsum(ev[:, 1]).max())
    return RunResult(rate=rate, ttft=ttft, tpot=tpot, warmup=w, rejected=len(rejected),
                     utilisation=utilisation, sim_time_s=span,
                     events=loop.popped + (loop.arrived if loop.window else min(loop.n_open, n)),
                     wall_s=time.perf_counter() - wall0,
                     extra=ex, arrival=a, finish=finish)
