"""Deficit router: sends a share s of prefills to the remote pool, deterministically."""

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
