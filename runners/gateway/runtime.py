"""EAServe's runtime over real engine servers, on an asyncio loop, with the policy objects the
simulator uses (hastune.policies; built by `epd_policies`, as hastune/sim/epd.py builds them):

- a multimodal request goes to the encode server with the fewest in flight (LeastInFlight)
  and waits in that server's Poisson-gap micro-batcher (PoissonGapBatcher: a batch leaves at
  B requests, or when no request has arrived for its gap g; the static baseline's
  TimeoutBatcher with batcher.timeout_ms); the requests of a batch are released together
  (their encode calls start in the same loop iteration);
- each prefill is routed by one deficit router for the pool (DeficitRouter(s), as the
  simulator keeps one): remote, to the prefill server with the fewest in flight, or local, to
  the co-resident prefill server of the encode GPU that encoded it (a text-only request: the
  co-resident prefill server with the fewest in flight); an encode server without one sends
  its prefills to the pool without asking the router;
- decode goes to the decode server with the fewest in flight, its stream to the client;
- admission sheds explicitly: past `max_inflight` admitted requests (429), or where the
  bundled engine's admission gate predicts a TTFT tail over the SLO (503).

The clock is the loop's (`loop.time()`), passed to the policies, which never sleep.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hastune.archs.epd import EPDConfig
from hastune.archs.epd_static import EPDStaticConfig
from hastune.policies import DeficitRouter, LeastInFlight, epd_policies, static_policies
from runners.engine.admission import AdmissionGate
from runners.gateway.config import GatewayConfig, Server
from runners.gateway.handoff import HANDOFFS, Upstream, media_items

log = logging.getLogger(__name__)


class Shed(Exception):
    """Admission refused the request: the client gets `status` and `reason`."""

    def __init__(self, status: int, kind: str, reason: str):
        super().__init__(reason)
        self.status, self.kind, self.reason = status, kind, reason


@dataclass
class Metrics:
    admitted: int = 0
    shed: Counter = field(default_factory=Counter)  # kind → count
    completed: int = 0
    failed: int = 0
    encode_batches: int = 0
    encode_batch_sizes: Counter = field(default_factory=Counter)  # size → batches
    encode_requests: int = 0
    remote_prefills: int = 0
    local_prefills: int = 0


class Runtime:
    """The policies and the state of one gateway; `start` runs a request through them up to
    its decode server's answer, which the HTTP front passes on (runners/gateway/server.py)."""

    def __init__(self, cfg: GatewayConfig, session: Any):
        self.cfg = cfg
        self.up = Upstream(session)
        self.handoff = HANDOFFS[cfg.engine]()
        n_E = len(cfg.encode)
        if cfg.batcher.timeout_ms is not None:  # the static baseline (epd-static)
            static = EPDStaticConfig(architecture="epd-static", n_E=n_E, n_P=len(cfg.prefill),
                                     n_D=len(cfg.decode), batch=cfg.B,
                                     timeout_ms=cfg.batcher.timeout_ms)
            self.policies = [static_policies(static) for _ in range(n_E)]
        else:
            epd = EPDConfig(architecture="epd", n_E=n_E, n_P=len(cfg.prefill),
                            n_D=len(cfg.decode), B=cfg.B, s=cfg.s, p=cfg.batcher.p,
                            max_gap_ms=cfg.batcher.max_gap_ms)
            self.policies = [epd_policies(epd, cfg.batcher.rate_hint) for _ in range(n_E)]
        self.router: DeficitRouter = self.policies[0].router  # one for the pool (the simulator's)
        self.encode = LeastInFlight(n_E)
        self.remote = LeastInFlight(len(cfg.prefill)) if cfg.prefill else None
        self.pairs = [e.prefill for e in cfg.encode]
        self.paired = [k for k, p in enumerate(self.pairs) if p is not None]
        self.local = LeastInFlight(n_E)  # in flight on each encode GPU's co-resident prefill
        self.decode = LeastInFlight(len(cfg.decode))
        self.timers: list[asyncio.TimerHandle | None] = [None] * n_E
        self.metrics = Metrics()
        self.inflight = 0
        self.gate = (AdmissionGate(cfg.admission.ttft_slo_s, cfg.admission.margin,
                                   cfg.admission.prior)
                     if cfg.admission.ttft_slo_s is not None else None)
        self._ids = itertools.count()

    # -- admission -------------------------------------------------------------------------
    def admit(self, now: float) -> int:
        """A number for an admitted request, or Shed."""
        adm = self.cfg.admission
        if self.inflight >= adm.max_inflight:
            self.metrics.shed["max_inflight"] += 1
            raise Shed(429, "max_inflight", f"{self.inflight} requests in flight, the most "
                       f"admission.max_inflight ({adm.max_inflight}) allows")
        n = next(self._ids)
        if self.gate is not None:
            why = self.gate.offer(n, now)
            if why is not None:
                self.metrics.shed["ttft_slo"] += 1
                raise Shed(503, "ttft_slo", why)
        self.inflight += 1
        self.metrics.admitted += 1
        return n

    def first_token(self, n: int, now: float) -> None:
        if self.gate is not None:
            self.gate.first(n, now)

    def finished(self, n: int, ok: bool) -> None:
        self.inflight -= 1
        if self.gate is not None:
            self.gate.gone(n)  # no-op once its first token was seen
        if ok:
            self.metrics.completed += 1
        else:
            self.metrics.failed += 1

    # -- encode: the Poisson-gap micro-batcher ---------------------------------------------
    def _arm(self, e: int) -> None:
        d = self.policies[e].batcher.deadline()
        t = self.timers[e]
        if t is not None:
            t.cancel()
            self.timers[e] = None
        if d is not None:
            self.timers[e] = asyncio.get_running_loop().call_at(d, self._on_timer, e)

    def _on_timer(self, e: int) -> None:
        self.timers[e] = None
        batch = self.policies[e].batcher.poll(asyncio.get_running_loop().time())
        if batch is not None:
            self._release(e, batch)
        else:  # woke a little early (the loop's clock resolution): again at the deadline
            self._arm(e)

    def _release(self, e: int, batch: list[asyncio.Future]) -> None:
        if self.timers[e] is not None:
            self.timers[e].cancel()  # type: ignore[union-attr]
            self.timers[e] = None
        m = self.metrics
        m.encode_batches += 1
        m.encode_batch_sizes[len(batch)] += 1
        m.encode_requests += len(batch)
        tag = f"{m.encode_batches}/{len(batch)}"  # batch number / size
        for waiting in batch:
            if not waiting.done():  # its client may have gone
                waiting.set_result(tag)

    # -- routing ---------------------------------------------------------------------------
    def route_prefill(self, e: int | None) -> tuple[str, int, Server]:
        """("remote" | "local", index, server) for a prefill encoded on encode server e
        (None: a text-only request); now in flight there."""
        has_local = (self.pairs[e] is not None) if e is not None else bool(self.paired)
        if self.remote is not None and (not has_local or self.router.route()):
            k = self.remote.pick()
            self.metrics.remote_prefills += 1
            return "remote", k, self.cfg.prefill[k]
        if e is None or self.pairs[e] is None:  # text only: the least loaded local prefill
            e = min(self.paired, key=self.local.inflight.__getitem__)
        self.local.take(e)
        self.metrics.local_prefills += 1
        return "local", e, self.pairs[e]  # type: ignore[return-value]

    def release_prefill(self, where: str, k: int) -> None:
        (self.remote if where == "remote" else self.local).release(k)  # type: ignore[union-attr]

    # -- one request -----------------------------------------------------------------------
    async def start(self, path: str, body: dict, rid: str) -> tuple[Any, int]:
        """Encode (multimodal requests), prefill, and open the decode: (the decode server's
        response, its index). The caller reads it and calls `end_decode`."""
        extra: dict = {}
        e = None
        if media_items(body):
            e = self.encode.pick()
            try:
                hdr = {"x-hastune-batch": await self._waited(e)}
                extra = await self.handoff.encode(self.up, self.cfg.encode[e].url, body, rid,
                                                  hdr)
            except BaseException:
                self.encode.release(e)
                raise
            if not self.handoff.calls_encoders:  # the prefill server encodes: in flight
                return await self._prefill_decode(path, body, rid, e, extra, encoding=e)
            self.encode.release(e)
        return await self._prefill_decode(path, body, rid, e, extra, encoding=None)

    async def _waited(self, e: int) -> str:
        """Wait in encode server e's batcher until its batch is released: the batch's tag
        ("number/size", sent to the encode server as x-hastune-batch)."""
        loop = asyncio.get_running_loop()
        waiting = loop.create_future()
        batch = self.policies[e].batcher.add(loop.time(), waiting)
        if batch is not None:
            self._release(e, batch)
        else:
            self._arm(e)
        try:
            return await waiting
        except asyncio.CancelledError:
            self._drop(e, waiting)
            raise

    def _drop(self, e: int, item: asyncio.Future) -> None:
        """A client gone while its request waited in the batcher: out of the batch."""
        items = self.policies[e].batcher.items
        if item in items:
            items.remove(item)
            if not items:
                self._arm(e)

    async def _prefill_decode(self, path: str, body: dict, rid: str, e: int | None,
                              extra: dict, encoding: int | None) -> tuple[Any, int]:
        where, k, server = self.route_prefill(e)
        d = self.decode.pick()
        done = False

        def prefill_done() -> None:
            nonlocal done
            if not done:
                done = True
                self.release_prefill(where, k)
                if encoding is not None:
                    self.encode.release(encoding)

        try:
            resp = await self.handoff.prefill_decode(
                self.up, path, {**body, **extra}, rid, server, self.cfg.decode[d], prefill_done)
        except BaseException:
            prefill_done()
            self.decode.release(d)
            raise
        return resp, d

    def end_decode(self, d: int) -> None:
        self.decode.release(d)

    def close(self) -> None:
        for t in self.timers:
            if t is not None:
                t.cancel()

    def snapshot(self) -> dict:
        """GET /metrics: the counters, and what is in flight on each server."""
        m, cfg = self.metrics, self.cfg
        return {
            "engine": cfg.engine, "B": cfg.B, "s": cfg.s,
            "admitted": m.admitted, "shed": dict(m.shed), "shed_total": sum(m.shed.values()),
            "completed": m.completed, "failed": m.failed, "in_flight": self.inflight,
            "encode_batches": m.encode_batches, "encode_requests": m.encode_requests,
            "encode_batch_sizes": {str(k): v for k, v in sorted(m.encode_batch_sizes.items())},
            "encode_batch_max": max(m.encode_batch_sizes, default=0),
            "remote_prefills": m.remote_prefills, "local_prefills": m.local_prefills,
            "deficit": self.router.deficit,
            # the Poisson-gap batcher's gap and λ estimate (None: the static timeout batcher)
            "encode_gap_s": [getattr(p.batcher, "gap", None) for p in self.policies],
            "encode_rate": [getattr(p.batcher, "rate", None) for p in self.policies],
            "in_flight_per_server": {
                "encode": {x.url: n for x, n in zip(cfg.encode, self.encode.inflight)},
                "local_prefill": {p.url: self.local.inflight[k]
                                  for k, p in enumerate(self.pairs) if p is not None},
                "prefill": ({x.url: n for x, n in zip(cfg.prefill, self.remote.inflight)}
                            if self.remote is not None else {}),
                "decode": {x.url: n for x, n in zip(cfg.decode, self.decode.inflight)},
            },
        }
