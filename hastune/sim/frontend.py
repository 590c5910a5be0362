"""The engine's front end in a simulated run (hastune.engine_terms.FrontEnd): when the engine
sees a request its client sent, and how many requests were in flight when it was sent.

The front end's wait behind the other streams (`per_stream_s` for each request in flight) is
added to the TTFT afterwards, counted from the run (`in_flight_at`) — unless it varies
(`FrontEnd.spread` > 0, SGLang's): then in closed loop each request waits per_stream_s ×
(clients − 1) × a draw of mean 1 (`stream_waits`, seeded by the request set: the same run
gives the same draws) before the engine sees it. Waits that vary keep closed-loop clients of
equal lengths out of the one clump that prefills together, which an engine that runs waiting
prompts before decoding otherwise never leaves (hastune.engine_terms.FRONTEND_SPREAD)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hastune.workload import RequestSet


def frontend_delays(reqs: RequestSet) -> list[float]:
    """Each request's time in the engine's front end (hastune.engine_terms.FrontEnd): its fixed
    part and one per prompt token, from the client's send to the engine's queue."""
    fe = reqs.frontend
    d = fe.request_s + fe.per_token_s * reqs.prefill_tokens  # type: ignore[union-attr]
    return (np.asarray(d, dtype=float) + np.zeros(len(reqs))).tolist()


def stream_waits(reqs: RequestSet, spread: float) -> list[float]:
    """Per request, its wait behind the front end's other streams in units of its mean: a
    gamma draw of mean 1 and coefficient of variation `spread` (1: exponential; closed loop,
    hastune.sim.common.Arrivals scales it). Seeded by the request set."""
    rng = np.random.default_rng(np.random.SeedSequence([int(reqs.seed), 0x5EED13]))
    k = 1.0 / (spread * spread)
    return rng.gamma(k, 1.0 / k, len(reqs)).tolist()


def open_arrivals(reqs: RequestSet, rate: float, streams: int = 1
                  ) -> tuple[list[float], list[float] | None]:
    """Open loop: (when the engine sees each request, when its client sent it — None without
    a front end, where the two are the same). Requests reach the engine in the order sent; a
    serial front end (FrontEnd.stream_token_s, `streams` of them sharing the load) takes each
    once what it took on before can be done within the request's zero-load lifetime
    (RequestSet.life_s, which the evaluator sets; 0: not modelled)."""
    sent = reqs.arrivals(rate).tolist()
    fe = reqs.frontend
    if fe is None or fe.off:
        return sent, None
    seen = np.maximum.accumulate(np.asarray(sent) + np.asarray(frontend_delays(reqs)))
    serial = SerialFrontEnd.of(reqs, streams) if reqs.life_s > 0 else None
    if serial is None:
        return seen.tolist(), sent
    life = float(reqs.life_s)  # in the order sent, so the times taken stay in order
    return [serial.take(i, t, life) for i, t in enumerate(seen.tolist())], sent


def in_flight_at(sent: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """How many requests were in the system when each was sent (itself excluded): sent
    before it and not finished by then."""
    s = np.sort(sent)
    f = np.sort(np.where(np.isfinite(finish), finish, np.inf))
    before = np.searchsorted(s, sent, side="left")
    done = np.searchsorted(f, sent, side="right")
    return np.maximum(before - done, 0).astype(float)



class SerialFrontEnd:
    """A front end that streams every request's output in one process (FrontEnd.
    stream_token_s; closed loop): `work[r]`, request r's streaming time; `free`, when the
    work taken on so far would be done, served without a pause."""

    __slots__ = ("work", "free")

    def __init__(self, work: np.ndarray):
        self.work = np.asarray(work, dtype=float).tolist()
        self.free = 0.0

    @classmethod
    def of(cls, reqs: RequestSet, streams: int = 1) -> SerialFrontEnd | None:
        """The request set's serial front end, None without one. With `streams` instances
        that stream tokens, each with its own server and an even share of the requests, the
        one process stands for them all at `streams` times the speed (a request's work is
        1/streams of its streaming time)."""
        f = reqs.frontend
        if f is None or f.stream_token_s <= 0:
            return None
        return cls(f.stream_token_s * reqs.output_tokens / max(1, int(streams)))

    def take(self, r: int, t: float, slack: float = float("inf")) -> float:
        """When it takes request r sent at t: once the work it took on before can be done
        within `slack` — the lifetime of a request, over which its streaming is spread. So a
        request waits only while the streams need more than the process has: at saturation
        requests come one streaming's work apart, and the other clients queue."""
        busy = self.free if self.free > t else t
        self.free = busy + self.work[r]
        return busy - slack if busy - slack > t else t
