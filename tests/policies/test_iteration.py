"""The continuous-batching iteration scheduler (hastune.policies.IterationScheduler) that the
nodg simulator and the engine's replica workers both drive: FIFO admission under seats and
KV, chunk budgets, prefill-only batches. Request streams are generated; a small decode model
(each running request needs a few more iterations) closes the loop."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.policies import IterationScheduler, Prompt


def _drive(sched: IterationScheduler, arrivals: list[list[tuple[int, int]]]):
    """Run the scheduler iteration by iteration: `arrivals[i]` come before iteration i as
    (prompt tokens, output tokens). Checks the invariants on the way; returns the log."""
    running: list[list] = []   # [prompt, decode iterations left]
    running_kv = 0.0
    admitted, started, finished = [], [], []
    seen = 0
    i = 0
    while i < len(arrivals) or sched.waiting or sched.prefilling or running:
        assert i < 100_000
        for total, out in (arrivals[i] if i < len(arrivals) else []):
            p = Prompt(seen, total + out, total)
            seen += 1
            if not sched.add(p):
                assert p.need > sched.kv_cap
                finished.append(p.req)
        before = len(sched.prefilling)
        n = sched.admit(len(running), running_kv)
        admitted += [p.req for p in list(sched.prefilling)[before:]]
        assert n == len(sched.prefilling) - before
        # never over the seats or the KV
        assert len(running) + len(sched.prefilling) <= sched.seats
        assert running_kv + sched.reserved <= sched.kv_cap
        done_before = {id(p): p.done for p in sched.prefilling}
        chunks, tokens, sq = sched.plan(len(running))
        assert tokens == sum(c for _, c in chunks)
        assert sq == sum((p.done ** 2 - done_before[id(p)] ** 2) for p, _ in chunks)
        budget = sched.budget(len(running))
        if sched.chunked:
            assert tokens <= max(budget, 0)  # the chunk budget beside the decode batch
            # FIFO: chunks go to a prefix of the prefilling queue, all but the last whole
            assert [p for p, _ in chunks] == list(sched.prefilling)[:len(chunks)]
            assert all(p.done == p.total for p, _ in chunks[:-1])
            if chunks and chunks[-1][0].done < chunks[-1][0].total:
                assert tokens == budget  # a prompt is cut only where the budget ends
        else:
            # whole prompts, up to the budget (the first one whatever its size)
            assert all(p.done == p.total and done_before[id(p)] == 0 for p, _ in chunks)
            assert len(chunks) <= 1 or tokens <= budget
            if chunks and len(chunks) < len(sched.prefilling):
                nxt = list(sched.prefilling)[len(chunks)]
                assert tokens + nxt.total > budget
        for p, _ in chunks:
            if done_before[id(p)] == 0:
                started.append(p.req)
        # decode one step (chunked, or no prefill this iteration), then finished prompts join
        if sched.chunked or not chunks:
            for e in running:
                e[1] -= 1
            for e in [e for e in running if e[1] <= 0]:
                running.remove(e)
                running_kv -= e[0].need
                finished.append(e[0].req)
        for p in sched.pop_done():
            assert p.done == p.total
            running.append([p, p.need - p.total])
            running_kv += p.need
        i += 1
    return admitted, started, finished, seen


@st.composite
def _streams(draw):
    seats = draw(st.integers(1, 12))
    cap = draw(st.integers(40, 4000))
    chunk = draw(st.one_of(st.none(), st.integers(16, 300)))  # > seats: room for prefill
    budget = draw(st.integers(1, 500))
    arrivals = draw(st.lists(
        st.lists(st.tuples(st.integers(1, 700), st.integers(1, 30)), max_size=4), max_size=60))
    return IterationScheduler(seats, cap, chunk, budget), arrivals


@settings(max_examples=300, deadline=None)
@given(_streams())
def test_invariants_on_generated_streams(case):
    sched, arrivals = case
    admitted, started, finished, seen = _drive(sched, arrivals)
    # FIFO: admitted and started in arrival order, and every request that fits is served
    assert admitted == sorted(admitted) and started == admitted
    assert not sched.waiting and not sched.prefilling  # every admitted prompt fully scheduled
    assert sorted(finished) == list(range(seen))
    assert sched.reserved == 0


def test_fifo_admission_stops_at_the_first_request_that_does_not_fit():
    s = IterationScheduler(seats=4, kv_cap=100, chunk_tokens=64, prefill_tokens=0)
    for i, need in enumerate((60, 50, 10)):
        assert s.add(Prompt(i, need, need - 5))
    assert s.admit(running=0, running_kv=0) == 1  # 50 does not fit beside 60; 10 waits too
    assert [p.req for p in s.waiting] == [1, 2]
    assert s.admit(running=3, running_kv=0) == 0  # and no seat: 3 running + 1 prefilling
    assert not s.add(Prompt(9, 101, 90))          # can never fit: refused, not queued


def test_chunk_budget_is_what_the_decode_batch_leaves():
    s = IterationScheduler(seats=64, kv_cap=10_000, chunk_tokens=512, prefill_tokens=0)
    s.add(Prompt(0, 1500, 1400))
    s.add(Prompt(1, 60, 50))
    s.admit(0, 0)
    chunks, tokens, sq = s.plan(running=12)
    assert [(p.req, c) for p, c in chunks] == [(0, 500)] and sq == 500 ** 2
    # 900 left: one more full chunk of 500, then 400 + request 1's 50
    assert s.run_head(12, limit=5) == (1, 500, 500, True)
    assert not s.fills(12)  # 400 + 50 left: a request admitted now would get a share
    s.add(Prompt(2, 300, 200))
    s.admit(12, 0)
    assert s.fills(12)      # 400 + 50 + 200: it cannot
    chunks, tokens, _ = s.plan(running=12)
    assert [(p.req, c) for p, c in chunks] == [(0, 400), (1, 50), (2, 50)] and tokens == 500
    assert [p.req for p in s.pop_done()] == [0, 1]
    assert s.plan(running=600) == ([], 0.0, 0.0)  # no room beside the batch

def test_unchunked_batches_whole_prompts_up_to_the_budget():
    s = IterationScheduler(seats=64, kv_cap=10_000, chunk_tokens=None, prefill_tokens=1000)
    for i, L in enumerate((3000, 400, 500, 200)):
        s.add(Prompt(i, L + 10, L))
    s.admit(0, 0)
    assert [(p.req, c) for p, c in s.plan(5)[0]] == [(0, 3000)]  # alone, whatever its size
    s.pop_done()
    assert [(p.req, c) for p, c in s.plan(5)[0]] == [(1, 400), (2, 500)]
    assert s.run_head(5, 10)[0] == 0 and not s.fills(5)  # chunked prompts only


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 5000), st.integers(0, 200), st.integers(64, 1024), st.integers(0, 20))
def test_run_head_matches_planning_each_iteration(total, running, chunk, limit):
    """run_head counts exactly the iterations in which the first prompt alone takes the whole
    budget without finishing (up to the limit), and leaves it where they would."""
    a = IterationScheduler(seats=1000, kv_cap=1e9, chunk_tokens=chunk, prefill_tokens=0)
    b = IterationScheduler(seats=1000, kv_cap=1e9, chunk_tokens=chunk, prefill_tokens=0)
    for s in (a, b):
        s.add(Prompt(0, total + 1, total))
        s.add(Prompt(1, 11, 10))
        s.admit(0, 0)
    k, c, done, whole = a.run_head(running, limit)
    n = 0
    while True:
        chunks, _, _ = b.plan(running)
        if len(chunks) != 1 or chunks[0][0].done >= total:
            break
        n += 1
    assert done == 0 and k == min(n, limit) and a.prefilling[0].done == k * c
    if chunk > running:  # (no room beside the batch: no run, nothing to finish)
        assert c == chunk - running and whole == (k == n)
