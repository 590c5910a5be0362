"""TensorRT-LLM's batch waiting (PyExecutor._waiting_requests), as a pure rule: while requests
decode, prompts not yet started stay out of the next iterations until the tokens an iteration
would carry (theirs, within its budget, and one per decoding request) reach `tokens`, or
`iters` iterations have passed since they began to wait. The caller keeps when the wait began
and schedules the iterations (hastune.sim.nodg.plan)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class BatchWait:
    """`iters`: the most iterations prompts wait (batch_wait_timeout_iters); `tokens`: the
    tokens an iteration must carry for them to go (batch_wait_max_tokens_ratio × budget)."""

    __slots__ = ("iters", "tokens")

    def __init__(self, iters: int, tokens: float):
        self.iters, self.tokens = iters, tokens

    def since(self, prefilling: Sequence[Any], budget: int, decoding: int, step: int,
              since: int) -> int:
        """The decode step from which the prompts `prefilling` (FIFO, each with `total` and
        `done` tokens) have been waiting, when they wait on at decode step `step` beside
        `decoding` running requests, given `since` (the step they began waiting; -1: they were
        not); -1 when they go now: nothing decodes, the first has started, the iteration
        would carry enough tokens, or they have waited `iters` iterations."""
        if decoding == 0 or prefilling[0].done > 0:
            return -1
        room = budget - decoding
        tokens = 0.0
        for p in prefilling:
            tokens += p.total - p.done
            if tokens >= room:
                break
        if (tokens if tokens < room else room) + decoding >= self.tokens:
            return -1
        if since < 0:
            since = step
        return -1 if step >= since + self.iters else since
