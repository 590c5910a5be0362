"""Rolling activation (EcoServe §3.1.2): the macro scheduler offers a request to its instances
in cyclic order, starting from the one that took the previous request. Consecutive requests
fill one instance's prefill window until a check fails there; then the next instance opens
its window, so the instances' prefill phases are staggered and one is always ready."""

from __future__ import annotations

from collections.abc import Iterator


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
