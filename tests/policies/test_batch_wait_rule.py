"""TensorRT-LLM's batch waiting as a pure rule (hastune.policies.BatchWait), on generated
queues: prompts wait only beside decoding requests, only while an iteration would carry too few
tokens, never more than `iters` steps, and from the step they began."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.policies import BatchWait


@dataclass
class P:
    total: int
    done: int = 0


PROMPTS = st.lists(st.integers(1, 4000), min_size=1, max_size=6).map(lambda xs: [P(x) for x in xs])


@settings(max_examples=300, deadline=None)
@given(PROMPTS, st.integers(1, 30), st.floats(0.0, 1.0), st.integers(64, 8192),
       st.integers(0, 256), st.integers(0, 1000), st.integers(-1, 1000))
def test_prompts_wait_only_when_and_as_long_as_the_rule_says(pf, iters, ratio, budget, n, step,
                                                             since):
    since = min(since, step)
    bw = BatchWait(iters, ratio * budget)
    got = bw.since(pf, budget, n, step, since)
    room = budget - n
    carried = min(sum(p.total for p in pf), room) + n
    if n == 0 or carried >= ratio * budget:
        assert got == -1  # nothing to wait beside, or a full enough iteration: go
    elif since < 0:
        assert got == (step if iters > 0 else -1)  # they begin waiting now
    else:
        assert got == (since if step < since + iters else -1)  # at most iters steps
    started = [P(pf[0].total, 1)] + pf[1:]
    assert bw.since(started, budget, n, step, since) == -1  # a started prompt never waits
    if got >= 0:  # more prompt tokens (a fuller iteration) never make them wait longer
        more = BatchWait(iters, 0.0)
        assert more.since(pf, budget, n, step, since) == -1 or n == 0
