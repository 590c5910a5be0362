"""Rolling activation (EcoServe §3.1.2): the macro scheduler offers a request to its instances
in cyclic order, starting from the one that took the previous request. Consecutive requests
fill one instance's prefill window until a check fails there; then the next instance opens
its window, so the instances' prefill phases are staggered and one is always ready."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

M = TypeVar("M")


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


def pick_macro(macros: Sequence[M], size: Callable[[M], int]) -> M | None:
    """The macro-instance a new request joins: smooth weighted round robin over `size(m)`
    (instances, or live ones), preferring one where nobody waits (`m.queue` empty). Each
    macro-instance carries its running weight in `m.cw`. None when every size is 0."""
    total, best = 0.0, None
    for m in macros:
        w = size(m)
        if w == 0:
            continue
        total += w
        m.cw += w  # type: ignore[attr-defined]
        q: Any = m.queue  # type: ignore[attr-defined]
        if best is None or (not q and best.queue) or (  # type: ignore[attr-defined]
                bool(q) == bool(best.queue) and m.cw > best.cw):  # type: ignore[attr-defined]
            best = m
    if best is not None:
        best.cw -= total  # type: ignore[attr-defined]
    return best
