"""The engine's front end in a simulated run (hastune.engine_terms.FrontEnd): when the engine
sees a request its client sent, and how many requests were in flight when it was sent."""

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


def open_arrivals(reqs: RequestSet, rate: float) -> tuple[list[float], list[float] | None]:
    """Open loop: (when the engine sees each request, when its client sent it — None without
    a front end, where the two are the same). Requests reach the engine in the order sent."""
    sent = reqs.arrivals(rate).tolist()
    fe = reqs.frontend
    if fe is None or fe.off:
        return sent, None
    seen = np.maximum.accumulate(np.asarray(sent) + np.asarray(frontend_delays(reqs)))
    return seen.tolist(), sent


def in_flight_at(sent: np.ndarray, finish: np.ndarray) -> np.ndarray:
    """How many requests were in the system when each was sent (itself excluded): sent
    before it and not finished by then."""
    s = np.sort(sent)
    f = np.sort(np.where(np.isfinite(finish), finish, np.inf))
    before = np.searchsorted(s, sent, side="left")
    done = np.searchsorted(f, sent, side="right")
    return np.maximum(before - done, 0).astype(float)
