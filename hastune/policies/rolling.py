"""Rolling activation (EcoServe §3.1.2): the macro scheduler offers a request to its instances
in cyclic order, starting from the one that took the previous request. Consecutive requests
fill one instance's prefill window until a check fails there; then the next instance opens
its window, so the instances' prefill phases are staggered and one is always ready."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar


class RollingActivation:
    """Cyclic candidate order over a changing set of members (instance ids)."""

    __slots__ = ("members", "cursor", "activations")

    def __init__(self, members: list[int] | None = None):
        self.members: list[int] = list(members or [])
        self.cursor = 0
        self.activations: list[int] = []  # the instance each time the cursor moved to a new one

    def candidates(self) -> Iterator[int]:
        """Members from the cursor on, each once."""
        m = self.members
        k = len(m)
        c = self.cursor if self.cursor < k else 0
        for i in range(k):
            yield m[(c + i) % k]

    def took(self, member: int) -> None:
        """`member` passed the checks: the next request is offered to it first."""
        i = self.members.index(member)
        if i != self.cursor or not self.activations:
            self.activations.append(member)
        self.cursor = i

    def add(self, member: int) -> None:
        self.members.append(member)

    def remove(self, member: int) -> None:
        i = self.members.index(member)
        del self.members[i]
        if i < self.cursor:
            self.cursor -= 1
        if self.cursor >= len(self.members):
            self.cursor = 0


class _Weighted(Protocol):
    cw: float   # the smooth round robin's running weight
    queue: Any  # requests waiting (empty: nobody waits)


W = TypeVar("W", bound=_Weighted)


def pick_macro(macros: Sequence[W], size: Callable[[W], int]) -> W | None:
    """The macro-instance a new request joins: smooth weighted round robin over `size(m)`
    (instances, or live ones), preferring one where nobody waits (`m.queue` empty). Each
    macro-instance carries its running weight in `m.cw`. None when every size is 0."""
    total, best = 0.0, None
    for m in macros:
        w = size(m)
        if w == 0:
            continue
        total += w
        m.cw += w
        if best is None or (not m.queue and best.queue) or (
                bool(m.queue) == bool(best.queue) and m.cw > best.cw):
            best = m
    if best is not None:
        best.cw -= total
    return best
