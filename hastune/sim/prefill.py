"""Prefill workers: batch waiting prompts up to a token budget and run them.

A worker may share its GPU (a local prefill on an encode GPU): its speed then follows its SM
share through the profile's prefill curve, and a share change mid-batch re-times the batch
(remaining work is kept). A completion that moves earlier is re-planned (the old event is
invalidated by the version); one that moves later keeps its event, which on firing finds
`due` later than now and is pushed again — half the events of re-planning every change.
"""

from __future__ import annotations

from collections import deque

from hastune.profile import PrefillSpec, interp_curve


class PrefillWorker:
    __slots__ = ("spec", "gpu", "queue", "batch", "remaining", "rate", "share", "last_t",
                 "version", "outstanding", "sm_busy_s", "curve", "fixed", "per_tok", "per_sq",
                 "max_tokens", "batches", "_rates", "due", "planned", "kv_bytes", "kv_links")

    def __init__(self, spec: PrefillSpec, gpu: int, share: float = 1.0):
        self.spec = spec
        self.gpu = gpu
        self.fixed, self.per_tok, self.per_sq = spec.fixed_s, spec.per_token_s, spec.per_token_sq_s
        self.max_tokens = spec.max_batch_tokens
        self.curve = spec.sm_curve
        self.queue: deque[tuple[int, float]] = deque()  # (request, prefill tokens)
        self.batch: list[int] | None = None
        self.remaining = 0.0  # seconds of full-GPU work left in the running batch
        self.share = share
        self._rates: dict[float, float] = {}
        self.rate = self.rate_at(share)
        self.last_t = 0.0
        self.version = 0
        self.outstanding = 0.0  # tokens queued or running: what routing balances
        self.sm_busy_s = 0.0
        self.batches = 0
        self.due = 0.0      # when the running batch will really finish
        self.planned = 0.0  # the time of its live completion event
        # what its finished prompts send to decode: KV bytes per token over each of
        # `kv_links` links at once (a TP group's shards travel in parallel)
        self.kv_bytes = 0.0
        self.kv_links = 1

    def rate_at(self, share: float) -> float:
        """Speed relative to the whole GPU at an SM share (cached: shares repeat)."""
        r = self._rates.get(share)
        if r is None:
            r = self._rates[share] = 1.0 / interp_curve(self.curve, share)
        return r

    def start(self, t: float) -> float | None:
        """Start the next batch if idle and work waits; returns its completion time."""
        if self.batch is not None or not self.queue:
            return None
        q = self.queue
        req, tok = q.popleft()
        batch = [req]
        total, sq = tok, tok * tok
        while q and total + q[0][1] <= self.max_tokens:
            req, tok = q.popleft()
            batch.append(req)
            total += tok
            sq += tok * tok
        self.batch = batch
        self.batches += 1
        self.remaining = self.fixed + self.per_tok * total + self.per_sq * sq
        self.last_t = t
        self.version += 1
        self.due = self.planned = t + self.remaining / self.rate
        return self.due

    def finish(self, t: float) -> list[int]:
        self.sm_busy_s += self.share * (t - self.last_t)
        batch, self.batch = self.batch, None
        return batch  # type: ignore[return-value]

    def set_share(self, t: float, share: float) -> float | None:
        """Change the SM share at t; returns a completion time to schedule (with the new
        version) when the running batch now ends before its live event, else None."""
        if share == self.share:
            return None
        new_rate = self.rate_at(share)
        if self.batch is None:
            self.share, self.rate = share, new_rate
            return None
        dt = t - self.last_t
        self.remaining -= dt * self.rate
        if self.remaining < 0.0:
            self.remaining = 0.0
        self.sm_busy_s += self.share * dt
        self.share, self.rate, self.last_t = share, new_rate, t
        self.due = t + self.remaining / self.rate
        if self.due >= self.planned:
            return None  # the live event fires early and is pushed again to `due`
        self.version += 1
        self.planned = self.due
        return self.due
