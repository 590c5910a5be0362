"""The engine's front end in a simulated run (hastune.engine_terms.FrontEnd): when the engine
sees a request its client sent, and how many requests were in flight when it was sent.
`RunFrontEnd` is one run's: every delay a request takes outside the GPU, before it (fixed and
per prompt token, its wait behind the other streams where that wait varies, the serial
streaming server) and after it (the per-stream wait added to TTFT where it does not vary,
and the time per output token it takes to pass tokens on to the clients: `Delivery`, one
process per instance where the terms give one; the paged nodg run's tokens go through it).
The clients that send the requests are hastune.sim.common.Arrivals'.

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
    return delays_array(reqs).tolist()


def delays_array(reqs: RequestSet) -> np.ndarray:
    """frontend_delays as a float64 array."""
    fe = reqs.frontend
    d = fe.request_s + fe.per_token_s * reqs.prefill_tokens  # type: ignore[union-attr]
    return np.asarray(d, dtype=float) + np.zeros(len(reqs))


def stream_waits(reqs: RequestSet, spread: float) -> list[float]:
    """Per request, its wait behind the front end's other streams in units of its mean: a
    gamma draw of mean 1 and coefficient of variation `spread` (1: exponential; closed loop,
    hastune.sim.common.Arrivals scales it). Seeded by the request set."""
    rng = np.random.default_rng(np.random.SeedSequence([int(reqs.seed), 0x5EED13]))
    k = 1.0 / (spread * spread)
    return rng.gamma(k, 1.0 / k, len(reqs)).tolist()


def open_arrivals(reqs: RequestSet, rate: float, streams: int = 1, lists: bool = True
                  ) -> tuple[list[float], list[float] | None]:
    """Open loop: (when the engine sees each request, when its client sent it — None without
    a front end, where the two are the same). Requests reach the engine in the order sent; a
    serial front end (FrontEnd.stream_token_s, `streams` of them sharing the load) takes each
    once what it took on before can be done within the request's zero-load lifetime
    (RequestSet.life_s, which the evaluator sets; 0: not modelled). `lists` False: both as
    float64 arrays (for compiled code), the same values."""
    sent_a = np.asarray(reqs.arrivals(rate), dtype=float)
    sent = sent_a.tolist() if lists else sent_a
    fe = reqs.frontend
    if fe is None or fe.off:
        return sent, None
    seen = np.maximum.accumulate(sent_a + delays_array(reqs))
    serial = SerialFrontEnd.of(reqs, streams) if reqs.life_s > 0 else None
    if serial is None:
        return (seen.tolist() if lists else seen), sent
    life = float(reqs.life_s)  # in the order sent, so the times taken stay in order
    taken = [serial.take(i, t, life) for i, t in enumerate(seen.tolist())]
    return (taken if lists else np.array(taken, dtype=float)), sent


class RunFrontEnd:
    """One run's front end, from the request set's terms (`reqs.frontend`; off: nothing).
    `streams`: the instances that stream tokens, each with its own front end. In closed loop
    it holds each request's delay before the engine (`delays`), its wait behind the other
    streams in units of its mean where that varies (`waits`) and the serial streaming server
    (`serial`); open loop computes the engine's arrivals at once (`open_arrivals`)."""

    __slots__ = ("terms", "per_stream", "delays", "waits", "serial")

    def __init__(self, reqs: RequestSet, streams: int = 1, closed: bool = False):
        f = self.terms = reqs.frontend
        # the wait per request in flight, over the instances that stream tokens
        self.per_stream = f.per_stream_s / max(1, streams) if f is not None else 0.0
        self.delays: list[float] | None = None
        self.waits: list[float] | None = None
        self.serial = SerialFrontEnd.of(reqs, streams) if closed else None
        if closed and f is not None and not f.off:
            self.delays = frontend_delays(reqs)
            if f.spread > 0:  # waits behind the other streams that vary (`seen_next`)
                self.waits = stream_waits(reqs, f.spread)

    def seen_first(self, i: int, t: float, clients: int) -> float:
        """Closed loop: when the engine sees client i's first request, sent at t. Where waits
        vary they are taken as if the other clients' streams ran: the warm-up rounds start
        spread, not as one clump."""
        f = self.terms
        w = f.per_stream_s * (clients - 1) if self.waits is not None else 0.0  # type: ignore
        t0 = self.serial.take(i, t) if self.serial else t
        return t0 + self.delays[i] + (w * self.waits[i] if w else 0.0)  # type: ignore[index]

    def seen_next(self, r: int, t: float, clients: int, slack: float) -> float:
        """Closed loop: when the engine sees request r sent at t — the serial server takes it
        as SerialFrontEnd says (`slack`: the lifetime of the request whose completion sent
        it), then its delay, and where waits vary per_stream × the other clients' requests
        in flight × its own draw."""
        t = self.serial.take(r, t, slack) if self.serial else t
        t += self.delays[r]  # type: ignore[index]
        if self.waits is not None:
            t += self.per_stream * (clients - 1) * self.waits[r]
        return t

    @property
    def delivers(self) -> bool:
        """Whether tokens cost the front end time to pass on (`Delivery`)."""
        f = self.terms
        return f is not None and (f.per_output_token_s > 0 or f.per_made_token_s > 0)

    def delivery(self) -> Delivery | None:
        """A new instance's token-passing process, None where tokens cost nothing."""
        if not self.delivers:
            return None
        f = self.terms
        return Delivery(f.per_output_token_s, f.per_made_token_s)  # type: ignore[union-attr]

    def after(self, ttft: np.ndarray, sent: np.ndarray, finish: np.ndarray) -> np.ndarray:
        """TTFT with the front end's wait behind the streams it serves, per request in flight
        when it was sent (one that varies was taken before the engine saw it)."""
        if self.per_stream > 0 and len(sent) and self.waits is None:
            return ttft + self.per_stream * in_flight_at(sent, finish)
        return ttft


class Delivery:
    """The front end's process that passes one replica's tokens on to their clients, in the
    order made: `cost` seconds a token, and `per_made` more for every token its request has
    made before (the front end hands each chunk its request's whole output so far): `free`
    is when it is through all it has been given."""

    __slots__ = ("cost", "per_made", "free")

    def __init__(self, cost: float, per_made: float = 0.0):
        self.cost = cost
        self.per_made = per_made
        self.free = 0.0

    def stretch(self, t0: float, t1: float, n: int, m: int, made: float) -> float:
        """m decode steps of n tokens each from t0 to t1, their requests having made `made`
        tokens together before the first (their tokens come at each step's end); when the
        last step's tokens reach their clients."""
        c, g = self.cost * n, self.per_made
        work = c * m + g * (m * made + n * m * (m - 1) * 0.5)
        last = c + g * (made + n * (m - 1))
        self.free = max(max(self.free, t0) + work, t1 + last)
        return self.free

    def one(self, t: float) -> float:
        """One token made at t (a prompt's first); when it reaches its client."""
        self.free = max(self.free, t) + self.cost
        return self.free


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
