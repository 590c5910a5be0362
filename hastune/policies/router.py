"""Routers: the deficit router (a share s of prefills to the remote pool, deterministically)
and the least-in-flight router (each request to the replica with the fewest in flight)."""

from __future__ import annotations

from fractions import Fraction


class DeficitRouter:
    """acc += s per request; if acc ≥ 1: acc −= 1 and the request goes remote, else local.

    The accumulator is kept as an exact integer ratio (s is a float, i.e. a dyadic rational), so
    the remote count c_k after k requests satisfies 0 ≤ k·s − c_k < 1 exactly; a float
    accumulator drifts (ten additions of 0.1 stay below 1.0) and can break the bound."""

    __slots__ = ("s", "_num", "_den", "_acc", "remote", "local")

    def __init__(self, s: float):
        if not 0.0 <= s <= 1.0:
            raise ValueError("s must be in [0, 1]")
        self.s = s
        frac = Fraction(s)
        self._num, self._den = frac.numerator, frac.denominator
        self._acc = 0
        self.remote = 0
        self.local = 0

    def route(self) -> bool:
        """True: send this prefill to the remote pool; False: keep it local."""
        self._acc += self._num
        if self._acc >= self._den:
            self._acc -= self._den
            self.remote += 1
            return True
        self.local += 1
        return False

    @property
    def deficit(self) -> float:
        return self._acc / self._den


class LeastInFlight:
    """Sends each request to the replica with the fewest requests in flight (ties: the lowest
    index), optionally among the `live` ones only; `finish` ends a request wherever it went.

    `where` maps a request key (the engine's request id) to its replica for as long as the
    request is in flight; a caller that knows where each request went uses `pick` and `release`
    instead."""

    __slots__ = ("inflight", "where")

    def __init__(self, n: int):
        if n < 1:
            raise ValueError("a router needs at least one replica")
        self.inflight = [0] * n
        self.where: dict = {}

    def route(self, key: object, live: list[int] | None = None) -> int:
        """The replica for request `key` (now in flight there)."""
        load = self.inflight
        if live is None:
            k = load.index(min(load))  # the first of equals
        else:
            k = min(live, key=load.__getitem__)  # min keeps the first of equals
        load[k] += 1
        self.where[key] = k
        return k

    def pick(self) -> int:
        """`route` for a caller that keeps where its requests went (the simulators): the
        replica with the fewest in flight, now one more there; `release` ends them."""
        load = self.inflight
        k = load.index(min(load))  # the first of equals
        load[k] += 1
        return k

    def take(self, k: int, n: int = 1) -> None:
        """n requests sent to replica k by the caller's own choice (the gateway's pinned
        hand-off: an encode GPU's co-resident prefill); `release` ends them."""
        self.inflight[k] += n

    def release(self, k: int, n: int = 1) -> None:
        """n requests that `pick` sent to replica k left it."""
        self.inflight[k] -= n

    def finish(self, key: object) -> int | None:
        """Request `key` left its replica (finished, failed or rejected): that replica, or None
        for a key not in flight."""
        k = self.where.pop(key, None)
        if k is not None:
            self.inflight[k] -= 1
        return k
