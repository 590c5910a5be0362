from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hastune.goodput import RateGrid, search_goodput
from hastune.recipe import SLO
from hastune.runs import RunResult

SLO_ = SLO(ttft_s=1.0, tpot_s=0.1)


def fake_run(threshold: float):
    """A deployment whose P90 TTFT crosses the SLO exactly at `threshold` req/s."""
    calls = []

    def run(rate: float) -> RunResult:
        calls.append(rate)
        ttft = np.full(100, 0.5 if rate <= threshold else 2.0)
        return RunResult(rate=rate, ttft=ttft, tpot=np.full(100, 0.05))

    return run, calls


@pytest.mark.parametrize("threshold,start", [(7.3, 1.0), (0.4, 5.0), (130.0, 2.0), (1.0, 1.0)])
def test_bracket_then_bisect_finds_the_threshold(threshold, start):
    run, calls = fake_run(threshold)
    res = search_goodput(run, SLO_, start_rate=start, tolerance=0.02)
    assert res.goodput_rps <= threshold
    assert res.goodput_rps >= threshold * (1 - 0.02) - 1e-12
    assert len(calls) == len(res.probes) <= 30
    passed = [p.rate for p in res.probes if p.passed]
    failed = [p.rate for p in res.probes if not p.passed]
    assert max(passed) == res.goodput_rps and min(failed) > threshold


def test_never_passing_gives_zero():
    run, _ = fake_run(0.0)
    res = search_goodput(run, SLO_, start_rate=1.0, min_rate=0.01)
    assert res.goodput_rps == 0.0 and not res.bracketed


def test_attainment_criterion():
    slo = SLO(ttft_s=1.0, tpot_s=0.1, criterion="attainment", attainment=0.9)
    ttft = np.array([0.5] * 85 + [5.0] * 15)
    run = RunResult(rate=1.0, ttft=ttft, tpot=np.full(100, 0.05))
    assert run.attainment(slo) == pytest.approx(0.85)
    assert not run.passes(slo)
    assert run.passes(SLO(ttft_s=1.0, tpot_s=0.1, percentile=80))


def test_warmup_requests_are_not_measured():
    ttft = np.array([9.0] * 10 + [0.1] * 90)
    run = RunResult(rate=1.0, ttft=ttft, tpot=np.full(100, 0.05), warmup=10)
    assert run.percentile("ttft", 99) == pytest.approx(0.1)


def test_simulated_goodput_is_a_passing_rate_below_a_failing_one(audio_eval, epd_config):
    res = audio_eval.goodput(epd_config)
    slo = audio_eval.recipe.slo
    assert res.goodput_rps > 0
    assert audio_eval.run(epd_config, res.goodput_rps).passes(slo)
    fails = [p.rate for p in res.probes if not p.passed]
    assert fails and min(fails) <= res.goodput_rps * (1 + 2 * audio_eval.recipe.evaluator.tolerance)


def test_epd_beats_static_split_on_audio(audio_recipe, epd_config, static_config, root):
    from hastune.archs.epd_static import EPDStaticConfig
    from hastune.config import load_config
    from hastune.evaluators.sim import Evaluation

    ev = Evaluation(audio_recipe)
    tuned = load_config(root / "examples/configs/audio-epd-4-0-4.yaml")
    assert tuned.gpus == static_config.gpus == 8 and tuned.n_P == 0
    epd = ev.goodput(tuned).goodput_rps
    # the static split with its own best allocations (the top of its 63-config grid is 2-3-3);
    # each search starts at epd / 1.1 and stops early where the static split fails there (it
    # cannot win), as the tuner's incumbent does: a full search only for one that passes
    statics = [EPDStaticConfig(architecture="epd-static", n_E=e, n_P=p, n_D=d, batch=b)
               for e, p, d in ((2, 3, 3), (2, 2, 4), (1, 3, 4), (3, 2, 3)) for b in (1, 4)]
    best_static = max(ev.goodput(c, incumbent=epd / 1.1, early_stop=True).goodput_rps
                      for c in statics)
    assert epd > 1.1 * best_static
    # same allocation, shipped configs: local prefill turns idle encode GPUs into prefill
    assert ev.goodput(epd_config).goodput_rps > 1.1 * ev.goodput(static_config).goodput_rps


def test_incumbent_stops_a_losing_search_early():
    run, calls = fake_run(5.0)
    res = search_goodput(run, SLO_, start_rate=1.0, tolerance=0.02, incumbent=8.0,
                         early_stop=True)
    full = search_goodput(fake_run(5.0)[0], SLO_, start_rate=1.0, tolerance=0.02)
    assert res.early_stopped and len(calls) < len(full.probes)
    assert calls[0] == pytest.approx(1.0)  # its own start, not the incumbent
    assert 0 < res.goodput_rps <= full.goodput_rps <= 5.0
    # a deployment that beats the incumbent gets the full search
    run, calls = fake_run(12.0)
    res = search_goodput(run, SLO_, start_rate=1.0, tolerance=0.02, incumbent=8.0,
                         early_stop=True)
    assert not res.early_stopped and res.goodput_rps >= 12.0 * 0.98


def _rule_run(threshold: float, flips: frozenset[int], grid: RateGrid, phase: str):
    """Pass/fail by rate: below `threshold`, flipped at the grid indices in `flips` (a
    pass/fail that is not monotone, as noise near capacity makes it)."""

    def run(rate: float) -> RunResult:
        ok = (rate <= threshold) != (grid.index(rate) in flips)
        return RunResult(rate=rate, ttft=np.full(100, 0.5 if ok else 2.0),
                         tpot=np.full(100, 0.05))

    return run


@settings(max_examples=300, deadline=None)
@given(threshold=st.floats(0.5, 500.0), fine_shift=st.floats(0.8, 1.25),
       start=st.floats(0.1, 1000.0), incumbent=st.floats(0.1, 1000.0),
       flips=st.frozensets(st.integers(-60, 330), max_size=6), two_phase=st.booleans())
def test_early_stop_never_changes_a_configuration_that_can_win(threshold, fine_shift, start,
                                                               incumbent, flips, two_phase):
    """Against any incumbent, on pass/fail rules that need not be monotone (and a full-length
    rule that differs from the short probes'): a search that stops early is one whose full
    search ends below the incumbent — so it could not have beaten or tied it — and its value
    is below the incumbent too; a search that does not stop early is the full search, probe
    for probe. So the best of any set of configurations, and its goodput, are the same."""
    grid = RateGrid(0.02)
    coarse = _rule_run(threshold, flips, grid, "coarse")
    fine = _rule_run(threshold * fine_shift, flips, grid, "fine") if two_phase else None
    kw = dict(start_rate=start, tolerance=0.02, confirm=fine, min_rate=1e-3)
    full = search_goodput(coarse, SLO_, **kw)
    es = search_goodput(coarse, SLO_, incumbent=incumbent, early_stop=True, **kw)
    if es.early_stopped:
        assert full.goodput_rps < incumbent, (full.goodput_rps, incumbent)
        assert es.goodput_rps < incumbent
        n = len(es.probes)
        assert [(p.rate, p.phase, p.passed) for p in es.probes] == \
            [(p.rate, p.phase, p.passed) for p in full.probes[:n]]
    else:
        assert es.goodput_rps == full.goodput_rps
        assert [(p.rate, p.phase) for p in es.probes] == [(p.rate, p.phase) for p in full.probes]


@settings(max_examples=200, deadline=None)
@given(threshold=st.floats(0.01, 5000.0), start=st.floats(0.01, 5000.0),
       incumbent=st.one_of(st.none(), st.floats(0.01, 5000.0)),
       tol=st.sampled_from([0.01, 0.02, 0.05, 0.1]))
def test_the_answer_does_not_depend_on_where_the_search_starts(threshold, start, incumbent,
                                                               tol):
    """One number per configuration: for a monotone pass/fail, the goodput is the largest grid
    rate that passes, whether the search starts at the recipe's guess or at an incumbent."""
    run, _ = fake_run(threshold)
    grid = RateGrid(tol)
    expect = grid.rate(int(np.floor(np.log(threshold) / np.log1p(tol))))
    while grid.rate(grid.index(expect) + 1) <= threshold:  # float edges of the floor above
        expect = grid.rate(grid.index(expect) + 1)
    while expect > threshold:
        expect = grid.rate(grid.index(expect) - 1)
    res = search_goodput(run, SLO_, start_rate=start, tolerance=tol, incumbent=incumbent,
                         early_stop=False, min_rate=1e-3)
    assert res.goodput_rps == pytest.approx(expect, rel=1e-12)
    res = search_goodput(run, SLO_, start_rate=incumbent or start, tolerance=tol,
                         min_rate=1e-3)
    assert res.goodput_rps == pytest.approx(expect, rel=1e-12)
    assert len({p.rate for p in res.probes}) == len(res.probes)  # no rate probed twice


def test_closed_loop_searches_whole_clients():
    run, calls = fake_run(37.5)
    res = search_goodput(run, SLO_, start_rate=3, integer=True, min_rate=1)
    assert res.goodput_rps == 37 and all(float(c).is_integer() for c in calls)
