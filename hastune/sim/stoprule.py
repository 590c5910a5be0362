"""When a run may stop before its last request: the stop rule (the SLOs already failed,
whatever comes next) and the windows of a probe that may be lengthened, and the watcher that
applies the rule to one run's request lists (hastune.sim.common.EventLoop checks it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hastune.runs import RunResult


@dataclass(frozen=True)
class StopRule:
    """When a run may stop early: once more than the allowed share of its measured requests
    (after the first `warmup` share) are known to miss the TTFT SLO, or the TPOT SLO, the
    percentile (or attainment) criterion fails whatever the rest of the run does. Known to
    miss: a first token later than the SLO, or none yet and older than the SLO; a TPOT over
    the SLO, or decoding still and already slower than it. The failure must also be clear —
    at least `clear` times the allowed share of the requests arrived so far miss — so that a
    run failing only by a burst's worth of requests goes on, and the evaluator can see
    whether a longer one would pass (hastune.stability: settled).

    `windows` (open loop): the run is one probe that may be lengthened — its first
    windows[0] requests are judged as soon as they have all left, by `judge` (given the
    RunResult of those requests: True when its verdict is settled); a settled window ends the
    run there, an unsettled one lets it go on to the next window (and the stop rule counts
    against that), and after the last the run ends with its last request. One run, continued,
    instead of a run of each length from the start (hastune.evaluators.sim: probe)."""

    ttft_s: float
    tpot_s: float
    quantile: float        # 0.9 for P90; the attainment share for criterion attainment
    union: bool            # attainment: a request missing either SLO counts once
    warmup: float
    clear: float = 3.0
    windows: tuple[int, ...] = ()
    judge: Callable[[RunResult], bool] | None = field(default=None, compare=False)


class Watcher:
    """Applies a StopRule to one run's request lists, every `every` arrivals, incrementally:
    a request's flags (late: its first token later than the TTFT SLO, or none yet and older;
    slow: its pace over the TPOT SLO, finished or still decoding) only ever turn on as time
    goes, and are final once its tokens are known, so each check looks only at the requests
    that arrived since the last one and those still undecided (`failed_reference` recomputes
    every request each time: the same answers, tests/sim/test_events.py)."""

    __slots__ = ("rule", "arr", "t_first", "t_last", "out", "w", "allowed", "every",
                 "seen", "open", "late", "slow", "either", "n")

    def __init__(self, rule: StopRule, arr: list[float], t_first: list[float],
                 t_last: list[float], out_tok: list[int]):
        self.rule, self.arr = rule, arr
        self.t_first, self.t_last, self.out = t_first, t_last, out_tok
        self.horizon(len(arr))

    def horizon(self, n: int) -> None:
        """Judge the run as one of its first `n` requests (counts start again)."""
        self.n = n
        self.w = int(self.rule.warmup * n)
        self.allowed = (1.0 - self.rule.quantile) * (n - self.w) + 1.0
        self.every = max(256, n // 64)
        self.seen = self.w               # requests below this index are in `open` or decided
        self.open: dict[int, int] = {}   # undecided request -> its flags so far (1 late, 2 slow)
        self.late = self.slow = self.either = 0

    def _need(self, i: int) -> float | None:
        """How many of the first i requests must miss for the run to have failed (None: too
        few have come after the warm-up to fail it)."""
        w, rule = self.w, self.rule
        if i - w <= self.allowed:
            return None
        return max(self.allowed, rule.clear * (1.0 - rule.quantile) * (i - w))

    def failed(self, i: int, t: float) -> bool:
        """Whether the requests arrived so far (i of them; at most the horizon's) already
        fail the run at time t."""
        i = min(i, self.n)
        need = self._need(i)
        if need is None:
            return False
        rule = self.rule
        arr, tf_, tl_, out_ = self.arr, self.t_first, self.t_last, self.out
        ttft_s, tpot_s = rule.ttft_s, rule.tpot_s
        opened = self.open
        for j in range(self.seen, i):
            opened[j] = 0
        self.seen = max(self.seen, i)
        late, slow, either = self.late, self.slow, self.either
        done = []
        for j, flags in opened.items():
            a, tf = arr[j], tf_[j]
            new = flags
            waiting = tf != tf
            if not new & 1 and (t if waiting else tf) - a > ttft_s:
                new |= 1
            out = out_[j]
            final_slow = out <= 1 or bool(new & 2)
            if not final_slow and not waiting:
                tl = tl_[j]
                ended = tl == tl
                if ((tl if ended else t) - tf) / max(out - 1.0, 1.0) > tpot_s:
                    new |= 2
                    final_slow = True
                elif ended:
                    final_slow = True
            if new != flags:
                late += (new & 1) > (flags & 1)
                slow += (new & 2) > (flags & 2)
                either += flags == 0
                opened[j] = new
            if final_slow and (not waiting or new & 1):
                done.append(j)
        for j in done:
            del opened[j]
        self.late, self.slow, self.either = late, slow, either
        if rule.union:
            return either > need
        return late > need or slow > need

    def failed_reference(self, i: int, t: float) -> bool:
        """`failed`, recomputed over every request (the reference the tests compare with)."""
        i = min(i, self.n)
        need = self._need(i)
        if need is None:
            return False
        w, rule = self.w, self.rule
        a = np.asarray(self.arr[w:i], dtype=float)
        tf = np.array(self.t_first[w:i], dtype=float)
        out = np.asarray(self.out[w:i], dtype=float)
        waiting = np.isnan(tf)
        late = np.where(waiting, t - a, tf - a) > rule.ttft_s
        if not rule.union and late.sum() > need:
            return True
        tl = np.array(self.t_last[w:i], dtype=float)
        steps = np.maximum(out - 1.0, 1.0)
        with np.errstate(invalid="ignore"):
            pace = np.where(np.isnan(tl), t - tf, tl - tf) / steps
        slow = (out > 1) & ~waiting & (pace > rule.tpot_s)
        if rule.union:
            return bool((late | slow).sum() > need)
        return bool(slow.sum() > need)
