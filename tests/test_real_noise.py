"""Noise-aware probes (hastune.goodput `repeat`, hastune.evaluators.engine.Probing.close_call):
a probe
within the noise of the SLO is run again and decided by the majority of its runs, and the
search reports a spread. Fake probe functions on generated inputs; the real engine in
test_two_real_runs_agree_within_the_spread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.evaluators.engine import Probing, RealOptions
from hastune.goodput import probe_of, repeated, search_goodput
from hastune.recipe import SLO, load_recipe
from hastune.runs import RunResult

ROOT = Path(__file__).resolve().parent.parent
SLO_ = SLO(ttft_s=1.0, tpot_s=0.1)


def run_with(rate: float, ttft: float, tpot: float = 0.001, n: int = 100) -> RunResult:
    return RunResult(rate=rate, ttft=np.full(n, ttft), tpot=np.full(n, tpot))


@settings(max_examples=200, deadline=None)
@given(outcomes=st.lists(st.tuples(st.booleans(), st.floats(0.05, 0.95)), min_size=5,
                         max_size=5),
       repeats=st.integers(1, 5))
def test_repeats_stop_when_a_majority_agrees_and_report_its_median_run(outcomes, repeats):
    """Runs are drawn until a majority of `repeats` is certain (a tie fails); the verdict is
    that majority's and the probe is the median run of its side by load."""
    ttfts = [(0.5 * x if ok else 1.0 + x) for ok, x in outcomes]  # pass iff ttft <= SLO
    drawn = iter(ttfts[1:])
    first = run_with(3.0, ttfts[0])
    run, p = repeated(lambda: run_with(3.0, next(drawn)), SLO_, [(first, probe_of(first, SLO_))],
                      repeats)
    need = repeats // 2 + 1
    n = next(i for i in range(1, 6)
             if sum(ok for ok, _ in outcomes[:i]) >= need
             or i - sum(ok for ok, _ in outcomes[:i]) > repeats - need)
    passes = sum(ok for ok, _ in outcomes[:n])
    assert p.runs == n <= max(repeats, 1) and p.runs_passed == passes
    assert p.passed == (passes >= need)
    side = sorted(t for t in ttfts[:n] if (t <= 1.0) == p.passed)
    assert p.ttft_p == side[(len(side) - 1) // 2] == run.ttft[0]
    assert p.unanimous == (passes in (0, n))


def noisy(capacity: float, band: float, seed: int, flips: bool = True):
    """A deployment that passes below `capacity` and fails above it, except within `band`
    of it, where each run's verdict is a coin (`flips`) or still the rule; `close` says
    which runs are within the band."""
    rng = np.random.default_rng(seed)
    calls: list[float] = []

    def run(rate: float) -> RunResult:
        calls.append(rate)
        near = abs(rate / capacity - 1.0) < band
        ok = bool(rng.integers(2)) if near and flips else rate <= capacity
        return run_with(rate, 0.5 if ok else 2.0)

    def close(run: RunResult, _p) -> bool:
        return abs(run.rate / capacity - 1.0) < band

    return run, close, calls


CAPACITY = st.floats(0.5, 200.0)
START = st.floats(0.5, 200.0)


@settings(max_examples=150, deadline=None)
@given(capacity=CAPACITY, start=START, tol=st.sampled_from([0.02, 0.1, 0.25]))
def test_without_a_close_call_the_search_is_unchanged(capacity, start, tol):
    """The simulator's search (no `repeat`) and a search whose probes are never close run
    the same probes to the same goodput; only the second has a spread: the bracket."""
    run, _, calls = noisy(capacity, 0.0, 0)
    plain = search_goodput(run, SLO_, start_rate=start, tolerance=tol, max_probes=40)
    never = search_goodput(run, SLO_, start_rate=start, tolerance=tol, max_probes=40,
                           repeat=lambda r, p: False)
    assert [p.rate for p in plain.probes] == [p.rate for p in never.probes]
    assert plain.goodput_rps == never.goodput_rps and plain.spread is None
    assert "spread_rps" not in plain.as_dict()
    assert all("runs" not in d for d in plain.as_dict()["probes"])
    low, high = never.spread
    g = never.goodput_rps
    if g > 0:
        assert low == g
    failing = [p.rate for p in never.probes if not p.passed]
    if never.bracketed and failing:
        assert high == min(failing)
        if g > 0:
            assert high == pytest.approx(g * (1 + tol))  # neighbours on the grid


@settings(max_examples=150, deadline=None)
@given(capacity=CAPACITY, start=START, tol=st.sampled_from([0.05, 0.1, 0.25]),
       band=st.floats(0.01, 0.4), seed=st.integers(0, 2**16), repeats=st.integers(2, 5))
def test_spread_holds_the_goodput_and_only_disputed_probes(capacity, start, tol, band, seed,
                                                           repeats):
    run, close, calls = noisy(capacity, band, seed)
    res = search_goodput(run, SLO_, start_rate=start, tolerance=tol, max_probes=12,
                         repeat=close, repeats=repeats)
    low, high = res.spread
    g = res.goodput_rps
    assert low <= g <= high
    assert len(calls) == sum(p.runs for p in res.probes)
    for p in res.probes:
        near = abs(p.rate / capacity - 1.0) < band
        assert p.runs <= repeats and (near or p.unanimous)  # outside the band: the rule
        if near and repeats >= 3:  # (of 2, a first fail decides: a tie fails)
            assert p.runs >= 2
        assert p.runs_passed * 2 > p.runs if p.passed else p.runs_passed * 2 <= p.runs
        if low < p.rate < high:
            assert not p.unanimous  # the spread is as wide as the disagreement, no wider
        d = p.as_dict(90)
        assert ("runs" in d) == (p.runs > 1)
    assert res.as_dict()["spread_rps"] == [low, high]
    if not any(p.runs_passed and not p.passed for p in res.probes):  # no pass turned fail
        assert len(res.probes) <= 12 + 2  # the bracket's ends may move by two probes more
    fails = [p for p in res.probes if not p.passed and p.rate > g]
    if g > 0 and fails and repeats >= 3:  # the bracket's ends are never a single run
        at = {p.rate: p for p in res.probes}
        assert at[g].runs >= 2 and min(fails, key=lambda p: p.rate).runs >= 2


@settings(max_examples=100, deadline=None)
@given(capacity=CAPACITY, start=START, tol=st.sampled_from([0.05, 0.1, 0.25]),
       band=st.floats(0.01, 0.4))
def test_repeats_that_agree_change_nothing_but_the_runs(capacity, start, tol, band):
    """A deployment whose close calls are decided the same way every time: the same goodput
    as without repeats, each close probe run twice, and the spread is the bracket."""
    run, close, _ = noisy(capacity, band, 0, flips=False)
    plain = search_goodput(run, SLO_, start_rate=start, tolerance=tol, max_probes=12)
    res = search_goodput(run, SLO_, start_rate=start, tolerance=tol, max_probes=12,
                         repeat=close, repeats=3)
    assert res.goodput_rps == plain.goodput_rps
    assert [p.rate for p in res.probes] == [p.rate for p in plain.probes]
    assert all(p.unanimous and p.runs in (1, 2) for p in res.probes)
    failing = [p.rate for p in res.probes if not p.passed]
    if res.goodput_rps > 0:
        assert res.spread[0] == res.goodput_rps
    if failing:
        assert res.spread[1] == min(failing)


@settings(max_examples=60, deadline=None)
@given(capacity=st.floats(2.0, 100.0), max_probes=st.integers(3, 8))
def test_an_end_that_flips_moves_the_bracket(capacity, max_probes):
    """A deployment that passes up to `capacity` on a rate's first run and only up to half
    of it afterwards (it got slower): the rerun of the bracket's ends catches it, and the
    search still ends with a passing rate, decided by a majority, below the half."""
    seen: dict[float, int] = {}

    def run(rate: float) -> RunResult:
        seen[rate] = seen.get(rate, 0) + 1
        ok = rate <= (capacity if seen[rate] == 1 else capacity / 2)
        return run_with(rate, 0.5 if ok else 2.0)

    res = search_goodput(run, SLO_, start_rate=capacity / 1.5, tolerance=0.1,
                         max_probes=max_probes, repeat=lambda r, p: False, repeats=3)
    assert 0 < res.goodput_rps <= capacity / 2
    at = {p.rate: p for p in res.probes}
    assert at[res.goodput_rps].runs >= 2 and at[res.goodput_rps].unanimous
    low, high = res.spread
    assert low <= res.goodput_rps <= high


class _Probing(Probing):
    def __init__(self, recipe, opts):
        self.recipe, self.opts = recipe, opts


@pytest.fixture(scope="module")
def probing():
    return _Probing(load_recipe(ROOT / "examples" / "reference-cpu.yaml"), RealOptions())


@settings(max_examples=60, deadline=None)
@given(n=st.integers(40, 300))
def test_close_calls_are_those_near_the_share_the_criterion_allows(probing, n):
    """n measured requests, k of them at 2× the TTFT SLO and the rest at 0.3×: the P90 is far
    from the SLO either way, so the close calls are the k near 10% of n — an interval around
    it, narrower the more requests a probe has."""
    slo = probing.recipe.slo
    close = []
    for k in range(n + 1):
        ttft = np.where(np.arange(n) < k, 2.0 * slo.ttft_s, 0.3 * slo.ttft_s)
        run = RunResult(rate=5.0, ttft=ttft, tpot=np.full(n, 0.2 * slo.tpot_s))
        close.append(probing.close_call(run, probe_of(run, slo)))
    ks = [k for k, c in enumerate(close) if c]
    assert ks and ks == list(range(ks[0], ks[-1] + 1))  # one interval …
    assert ks[0] <= 0.1 * n <= ks[-1]                   # … around the allowed share
    assert 0 not in ks and n not in ks                   # clear passes and fails are not close
    half = (ks[-1] - ks[0]) / 2 / n
    assert half <= 2.5 * (0.09 / n) ** 0.5


def test_a_p90_near_the_slo_or_a_verdict_from_the_steady_state_test_is_close(probing):
    slo = probing.recipe.slo
    from hastune.stability import Stability

    for frac, want in ((0.5, False), (0.95, True), (1.08, True), (1.5, False)):
        run = RunResult(rate=5.0, ttft=np.full(200, frac * slo.ttft_s),
                        tpot=np.full(200, 0.2 * slo.tpot_s))
        assert probing.close_call(run, probe_of(run, slo)) == want, frac
    run = RunResult(rate=5.0, ttft=np.full(200, 0.3 * slo.ttft_s),
                    tpot=np.full(200, 0.2 * slo.tpot_s))
    run.verdict = Stability(False, True, "the SLOs break in the last third of the window")
    p = probe_of(run, slo)
    assert p.slo_met and not p.passed and probing.close_call(run, p)
    run.verdict = Stability(True, True, "steady")
    assert not probing.close_call(run, probe_of(run, slo))


# --- the real engine -------------------------------------------------------------------------


def test_two_real_runs_agree_within_the_spread(tmp_path):
    """Two `hastune evaluate --evaluator real` runs of the reference epd config (ref-small on
    the engine, a 25% rate grid from 40 req/s, ≤ 3 probes; ≈ 30 s each on 2 cores): each
    spread holds its goodput, and the two overlap or touch — [low, high): low passed, high
    failed. A rate at the engine's capacity is a coin flip on a shared machine even with its
    close-call re-runs (CI once saw 44.4 req/s fail in one run and pass in the next: spreads
    [28.4, 44.4) and [44.4, 69.4)), so the runs may differ by that one grid step, never by
    more: disjoint spreads would be two different answers."""
    pytest.importorskip("torch")
    cores = len(os.sched_getaffinity(0))
    load = os.getloadavg()[0]
    if load > cores:  # not applicable here: what else runs moves the goodput between runs
        pytest.skip(f"this machine is busy (load average {load:.2f} on {cores} cores): two "
                    "runs agree within their spreads when its load is the same for both")
    rec = yaml.safe_load((ROOT / "examples" / "reference-cpu.yaml").read_text())
    rec["profile"] = str(ROOT / "profiles" / "cpu" / "ref-small-1core.yaml")
    rec["architecture"] = "epd"
    rec["evaluator"] = {"start_rate": 40.0, "tolerance": 0.25, "max_probes": 3}
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(rec))
    cfg = ROOT / "examples" / "configs" / "reference-cpu-epd.yaml"
    outs, machine = [], []
    for _ in range(2):
        before = _cpu_times()
        p = subprocess.run([sys.executable, "-m", "hastune", "evaluate", str(path), "--config",
                            str(cfg), "--evaluator", "real", "--json"], capture_output=True,
                           text=True, timeout=300, cwd=ROOT,
                           env={**os.environ, "OMP_NUM_THREADS": "1"})
        machine.append(_others_share(before, _cpu_times()))
        assert p.returncode in (0, 3), p.stderr[-2000:]
        outs.append(json.loads(p.stdout))
    for o in outs:
        low, high = o["spread_rps"]
        assert low <= o["goodput_rps"] <= high
    (la, ha), (lb, hb) = (o["spread_rps"] for o in outs)
    what = ([o["goodput_rps"] for o in outs], [o["spread_rps"] for o in outs], machine)
    if max(la, lb) > min(ha, hb) and max(max(m) for m in machine) > BUSY_SHARE:
        # not applicable: CI once saw 3.05 and 7.45 req/s (44 here) with the load average
        # under the cores at the start, a machine whose speed changed between the runs
        pytest.skip(f"the machine was not the same for both runs (share of its CPU taken by "
                    f"the hypervisor or other processes, per run: {machine}); goodputs and "
                    f"spreads {what[:2]}")
    assert max(la, lb) <= min(ha, hb), what


BUSY_SHARE = 0.15  # of the machine's CPU time, taken from the runs by steal or other processes


def _cpu_times() -> tuple[float, float, float, float]:
    """(all CPU time, steal, busy, this process's children's CPU) in seconds, now."""
    import resource

    f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = (f + [0] * 8)[:8]
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((user + nice + system + idle + iowait + irq + softirq + steal) / tick, steal / tick,
            (user + nice + system + irq + softirq) / tick, ru.ru_utime + ru.ru_stime)


def _others_share(a, b) -> tuple[float, float]:
    """Between two `_cpu_times`: the shares of the machine's CPU time that steal took and that
    processes other than the run's took (busy time less the run's own)."""
    total = max(b[0] - a[0], 1e-9)
    return (round((b[1] - a[1]) / total, 3),
            round(max(0.0, (b[2] - a[2]) - (b[3] - a[3])) / total, 3))
