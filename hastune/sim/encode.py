"""An encode GPU of an encode/prefill/decode run: its micro-batcher, the batches waiting for the
encoder, the one running, and the timer of the batcher's deadline.

The encoder runs one batch at a time on the SM share the partitioner gives it (the whole GPU
without one); its co-resident local prefill, if any, gets the rest while a batch runs and, while
the encoder idles, the whole GPU (EAServe's dynamic split) or still the rest (a fixed split,
CUDA MPS: hastune.policies.partitioner). A batch of n items with T encoder tokens (Σ T² for
attention) takes the profile's full-GPU latency × the encoder curve's slowdown at that share.
"""

from __future__ import annotations

from collections import deque

from hastune.policies.batcher import PoissonGapBatcher, TimeoutBatcher
from hastune.policies.partitioner import SMPartitioner
from hastune.profile import EncodeSpec, interp_curve
from hastune.sim.prefill import PrefillWorker


class EncodeWorker:
    """`local`: the local prefill worker sharing this GPU (None: the encoder has it alone)."""

    __slots__ = ("gpu", "batcher", "partitioner", "spec", "local", "fixed", "per_item",
                 "per_tok", "per_sq", "queue", "batch", "share", "started", "sm_busy_s",
                 "batches", "timer_at", "timer_ver", "_shares")

    def __init__(self, spec: EncodeSpec, gpu: int, batcher: PoissonGapBatcher | TimeoutBatcher,
                 partitioner: SMPartitioner | None, local: PrefillWorker | None):
        self.spec = spec
        self.gpu = gpu
        self.batcher = batcher
        self.partitioner = partitioner
        self.local = local
        self.fixed, self.per_item = spec.fixed_s, spec.per_item_s
        self.per_tok, self.per_sq = spec.per_token_s, spec.per_token_sq_s
        self.queue: deque[list[int]] = deque()  # batches the batcher released, not yet run
        self.batch: list[int] | None = None
        self.share = 1.0      # the running batch's SM share
        self.started = 0.0    # when it started
        self.sm_busy_s = 0.0  # Σ share × seconds encoding
        self.batches = 0
        self.timer_at: float | None = None  # when the live deadline timer fires (None: none)
        self.timer_ver = 0
        self._shares: dict[int, tuple[float, float]] = {}  # batch size → (share, slowdown)

    def share_for(self, n: int) -> tuple[float, float]:
        """(SM share, latency relative to the whole GPU) of an n-item batch."""
        fs = self._shares.get(n)
        if fs is None:
            part = self.partitioner
            f = 1.0 if part is None else part.encode_share(n)
            curve = self.spec.curve_for(n)
            slow = (1.0 if f >= 1.0 else interp_curve(curve, f) if curve
                    else part.slowdown_without_curve(f))  # type: ignore[union-attr]
            fs = self._shares[n] = (f, slow)
        return fs

    def start(self, t: float, enc_tok: list[float]) -> float:
        """Start the next waiting batch at t; returns its completion time (its SM share is
        then `share`)."""
        batch = self.queue.popleft()
        toks = 0.0
        sq = 0.0
        for r in batch:
            x = enc_tok[r]
            toks += x
            sq += x * x
        nb = len(batch)
        f, slow = self.share_for(nb)
        self.batch = batch
        self.share = f
        self.started = t
        self.batches += 1
        return t + (self.fixed + self.per_item * nb + self.per_tok * toks + self.per_sq * sq) * slow

    def finish(self, t: float) -> list[int]:
        """The running batch is done at t; returns it."""
        self.sm_busy_s += self.share * (t - self.started)
        batch, self.batch = self.batch, None
        return batch  # type: ignore[return-value]
