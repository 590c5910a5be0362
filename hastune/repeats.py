"""Noise-aware probes, the arithmetic: a probe within the noise of its SLO is run again at its
rate (the same requests and arrivals) and decided by the majority of its runs, and a search's
spread is read from which verdicts every run agreed on. hastune.goodput runs the probes; the
real evaluators (hastune.evaluators.engine.Probing.close_call) say which are close. Any probe
objects with
`passed`, `rate`, `repeats` and `unanimous` (hastune.goodput.Probe) do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


def majority(runs: list[tuple[R, Any]], repeats: int, again: Callable[[], tuple[R, Any]],
             load: Callable[[Any], float]) -> tuple[R, Any]:
    """The runs at one rate (`runs`, appended to from `again`) until a strict majority of
    `repeats` is certain — a tie fails: a rate that passes half the time does not meet its
    SLO. The verdict is that majority's; the probe returned is the median run of its side by
    `load`, carrying the other runs as its `repeats`."""
    need = repeats // 2 + 1
    while True:
        passes = sum(p.passed for _, p in runs)
        if passes >= need or len(runs) - passes > repeats - need:
            break
        runs.append(again())
    passed = passes >= need
    side = sorted((rp for rp in runs if rp[1].passed == passed), key=lambda rp: load(rp[1]))
    run, p = side[(len(side) - 1) // 2]
    p.repeats = [q for _, q in runs if q is not p]
    return run, p


def spread(probes: list, goodput: float, grid: Any) -> tuple[float, float]:
    """Where the goodput lies as far as these probes tell, in req/s: [low, high), from the
    highest rate at or below the goodput every run of which passed (else one grid step below
    the lowest that passed, or 0) to the lowest above it every run of which failed (else one
    step above the highest probed; the goodput when the search hit its rate limit). Without
    disagreement it is the search's bracket: the goodput and the lowest rate above it that
    failed. Two runs agree when their spreads overlap."""
    sure = [p.rate for p in probes if p.passed and p.unanimous and p.rate <= goodput]
    passed = [p.rate for p in probes if p.passed]
    if sure:
        low = max(sure)
    elif passed:
        low = grid.rate(grid.index(min(passed)) - 1)
    else:
        low = 0.0
    fails = [p.rate for p in probes if not p.passed and p.unanimous and p.rate > goodput]
    above = [p.rate for p in probes if p.rate > goodput]
    if fails:
        high = min(fails)
    elif above:
        high = grid.rate(grid.index(max(above)) + 1)
    else:
        high = goodput
    return low, max(high, goodput)
